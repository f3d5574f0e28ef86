# Helpers for the batch-job tests (sourced). Environment from meshtrain_add_script_test:
# MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC (a command with flags), TEST_TMP,
# REFERENCE_PYTHON (a python3 with numpy and h5py).
# The waits' limits below are scaled by time_scale (tests/support/time_limits.sh).
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"

py=${REFERENCE_PYTHON:-/usr/bin/python3}
[[ -x $py ]] || py=/usr/bin/python3
compare=$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py
tiny=$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini
# Tags this test's processes, so that rank lookups never pick up another test's ranks.
export MESHTRAIN_TEST_TAG="$TEST_TMP"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
finish() {
  if ((failures)); then
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "${1:-all checks passed}"
  exit 0
}

# mpirun_bg NP LOG ARGS...: starts `meshtrain ARGS` on NP ranks in the background; the
# launcher's pid is in $launcher. The ranks inherit MESHTRAIN_TEST_TAG (local launch).
mpirun_bg() {
  local np=$1 log=$2
  shift 2
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  $MPIEXEC -n "$np" "$MESHTRAIN_BIN" "$@" >"$log" 2>&1 &
  launcher=$!
}

# mpmd LOG PART0 -- PART1: one MPMD launch, rank 0 running `mpirun` options and arguments
# PART0, rank 1 PART1 (e.g. "$MESHTRAIN_BIN" train ... each), output in LOG; a hang ends
# after 90 s (status 124). Sets $status.
mpmd() {
  local log=$1 part0=() part1=()
  shift
  while [[ $1 != -- ]]; do part0+=("$1"); shift; done
  shift
  part1=("$@")
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  timeout -k 5 $((90 * time_scale)) $MPIEXEC -n 1 "${part0[@]}" : -n 1 "${part1[@]}" >"$log" 2>&1
  status=$?
  echo "$log: exit status $status"
}

# rank_pid RANK: the pid of this test's meshtrain process of that world rank (Open MPI
# sets OMPI_COMM_WORLD_RANK, Slurm's srun SLURM_PROCID); empty if none.
rank_pid() {
  local p env
  for p in $(pgrep -x meshtrain); do
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$p/environ") || continue
    grep -qxF "MESHTRAIN_TEST_TAG=$MESHTRAIN_TEST_TAG" <<<"$env" || continue
    if grep -qx "OMPI_COMM_WORLD_RANK=$1" <<<"$env" || grep -qx "SLURM_PROCID=$1" <<<"$env"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# last_step METRICS: the highest step in a metrics.jsonl (0 when there is none).
last_step() {
  local s
  # A line being written may be incomplete: it is skipped (fromjson?).
  s=$(jq -Rr 'fromjson? | .step // empty' "$1" 2>/dev/null | tail -n1)
  echo "${s:-0}"
}

# wait_for_step METRICS STEP SECONDS [PID]: waits until METRICS reaches STEP; fails
# (returns 1) after SECONDS (times time_scale) or when PID exits first.
wait_for_step() {
  local metrics=$1 step=$2 limit=$3 pid=${4:-}
  local end=$((SECONDS + limit * time_scale))
  while ((SECONDS < end)); do
    (($(last_step "$metrics") >= step)) && return 0
    [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null && return 1
    sleep 0.05
  done
  return 1
}

# wait_pid PID SECONDS: waits for a background job; its exit status, or 124 after SECONDS
# (times time_scale; then the job is killed).
wait_pid() {
  local pid=$1 end=$((SECONDS + $2 * time_scale))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 124
  fi
  wait "$pid"
}

# all_finite H5...: every dataset of every file is finite (h5py, independent of meshtrain).
all_finite() {
  "$py" - "$@" <<'EOF'
import sys, h5py, numpy as np
bad = 0
for path in sys.argv[1:]:
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        nonfinite = [n for n in names if not np.all(np.isfinite(f[n][()]))]
        print(f"{path}: step {int(f.attrs['step'])}, {len(names)} datasets, "
              f"optimizer_updates {int(f.attrs['optimizer_updates'])}, skipped_steps {int(f.attrs['skipped_steps'])}, "
              f"non-finite: {nonfinite or 'none'}")
        bad += len(nonfinite) + (len(names) == 0)
sys.exit(1 if bad else 0)
EOF
}

# h5_attr FILE NAME: a root attribute of a checkpoint.
h5_attr() {
  "$py" -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r").attrs[sys.argv[2]])' "$1" "$2"
}
