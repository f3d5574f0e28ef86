# shellcheck shell=bash
# Helpers for the fault-injection tests (sourced after cd "$TEST_TMP"): 2-rank runs of the
# tiny GPT-2 with MESHTRAIN_FAULT (doc/batch.md, "Fault injection"), and checks on their
# checkpoint directories. Builds on tests/batch/batch_lib.sh (fail, finish, $py, $compare).
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"

# ${STEPS:-8} steps, fp32 on dp_shard=2; a stalled rank is caught by the watchdog after 5 s. Runs that
# checkpoint add $ckpt (every 2 steps, keep 3).
base=("$tiny" --data.dir=random --train.eval_every=0 --parallel.dp_shard=2
      --parallel.strategy=full_shard --parallel.collective_timeout=5)
# shellcheck disable=SC2034  # used by the scripts that source this file
ckpt=(--checkpoint.every=2 --checkpoint.keep=3)

# run LOG FAULT ARGS...: `meshtrain train` on 2 ranks with MESHTRAIN_FAULT=FAULT ("" = none)
# and the base arguments + ARGS; output in LOG.log, exit status in $status. A run that
# hangs is killed after 120 s (status 124), which the caller reports as a failure.
run() {
  local log=$1 spec=$2
  shift 2
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  MESHTRAIN_FAULT=$spec timeout -k 5 $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "${base[@]}" --train.steps="${STEPS:-8}" "$@" \
    >"$log.log" 2>&1
  status=$?
  echo "$log: MESHTRAIN_FAULT='$spec' -> exit status $status"
}

# expect_status LOG WANT: the last run ended with status WANT (else the log is shown).
expect_status() {
  if [[ $status -ne $2 ]]; then
    tail -n 30 "$1.log"
    fail "$1: exit status $status, expected $2"
    return 1
  fi
}

# fired LOG POINT: the log says that the fault fired at POINT.
fired() {
  grep -q "MESHTRAIN_FAULT=.* fires: .* at $2 " "$1.log" || fail "$1: the fault did not fire at $2"
}

# one_error LOG REGEX: rank 0 printed exactly one error line, and it matches REGEX; no HDF5
# error stack and no MPI_Abort.
one_error() {
  local n
  n=$(grep -c "meshtrain train: error:" "$1.log")
  [[ $n -eq 1 ]] || fail "$1: $n error lines, expected 1"
  grep "meshtrain train: error:" "$1.log" | grep -Eq "$2" || fail "$1: the error line does not match '$2'"
  ! grep -Eq "HDF5-DIAG|H5[A-Z][a-z]*\(\)|MPI_ABORT|MPI_Abort" "$1.log" || fail "$1: HDF5 error stack or MPI_Abort in the log"
}

# latest_is DIR NAME: DIR/latest names NAME and NAME is a complete, readable checkpoint (h5py).
latest_is() {
  local got
  got=$(cat "$1/latest" 2>/dev/null)
  [[ $got == "$2" ]] || { fail "$1/latest is '$got', expected $2"; return 1; }
  all_finite "$1/$2" >/dev/null || fail "$1/$2 is not a complete, finite checkpoint"
}

# no_tmp DIR: no temporary file of any kind in DIR.
no_tmp() {
  local left
  left=$(find "$1" -name '*.tmp' 2>/dev/null)
  [[ -z $left ]] || fail "temporary files left behind: $left"
}

# same_losses REF CAND FIRST LAST: loss and grad_norm bitwise equal at steps FIRST..LAST.
same_losses() {
  "$py" "$compare" "$1" "$2" --exact --keys loss grad_norm --steps "$3,$4" --label "$2 vs $1" ||
    fail "$2 differs from $1 at steps $3..$4"
}
