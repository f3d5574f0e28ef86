#!/usr/bin/env bash
# `meshtrain bench` with ranks started with other arguments (mpirun's MPMD syntax,
# `-n 1 A : -n 1 B`) is refused at start with one message naming the setting (exit 2 on
# every rank; doc/perf.md). Without the check, bench comm with another --max_bytes per rank
# hung forever (its collective timeout was never applied), bench gemm with other --sizes
# died of a raw MPI_ERR_TRUNCATE, another --dtype reported a correct collective as "wrong
# results", and bench io with other --iters hung until parallel.collective_timeout and left
# its private directory behind. An argument that only one part cannot parse is that part's
# error on every rank (rank 0 waited for the others forever). The same launch with both
# parts alike still runs.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

# bmpmd LOG ARGS0 -- ARGS1: rank 0 runs `meshtrain ARGS0`, rank 1 `meshtrain ARGS1`
# (batch_lib.sh's mpmd); a hang ends after 90 s (status 124), which `refused` reports.
bmpmd() {
  local log=$1 part0=()
  shift
  while [[ $1 != -- ]]; do part0+=("$1"); shift; done
  shift
  mpmd "$log" "$MESHTRAIN_BIN" "${part0[@]}" -- "$MESHTRAIN_BIN" "$@"
}

# refused LOG KEY RANK1_VALUE RANK0_VALUE: exit 2, exactly one error line, naming KEY and both
# values; no result measured before it. The log is shown once when a check fails.
refused() {
  local log=$1 key=$2 v1=$3 v0=$4 before=$failures
  [[ $status -eq 2 ]] || fail "$log: exit status $status, expected 2"
  [[ $(grep -c "error:" "$log") -eq 1 ]] || fail "$log: expected exactly one error line"
  grep -F "error: the ranks were not started with the same settings: $key is '$v1' on rank 1 (host " "$log" |
    grep -F "but '$v0' on rank 0" | grep -qF "(rank 1 differs from rank 0)" ||
    fail "$log: the error does not name $key = '$v1' on rank 1 and '$v0' on rank 0"
  grep -Eq '^ *[0-9]|^save ' "$log" && fail "$log: a result was measured before the refusal"
  ((failures == before)) || sed 's/^/    | /' "$log" | head -40
}

echo "--- bench comm, another --max_bytes on rank 1 (hung)"
comm=(bench comm --ops all_gather --iters 2 --warmup 1)
bmpmd comm.log "${comm[@]}" --max_bytes 2KiB -- "${comm[@]}" --max_bytes 4KiB
refused comm.log --max_bytes 4KiB 2KiB

echo "--- bench comm, another --dtype on rank 1 (false wrong results)"
bmpmd dtype.log "${comm[@]}" --max_bytes 4KiB -- "${comm[@]}" --max_bytes 4KiB --dtype bf16
refused dtype.log --dtype bf16 fp32

echo "--- bench comm, another collective timeout on rank 1 (a configuration key)"
bmpmd timeout.log "${comm[@]}" --max_bytes 4KiB --parallel.collective_timeout=10 -- \
  "${comm[@]}" --max_bytes 4KiB --parallel.collective_timeout=20
refused timeout.log parallel.collective_timeout 20 10

echo "--- bench comm, an argument only rank 1 cannot parse (rank 0 waited for it)"
bmpmd parse.log "${comm[@]}" --max_bytes 4KiB -- "${comm[@]}" --max_bytes 4KiB --dtype fp64
[[ $status -eq 2 ]] || { tail -20 parse.log; fail "parse.log: exit status $status, expected 2"; }
[[ $(grep -c "error:" parse.log) -eq 1 ]] || { cat parse.log; fail "parse.log: expected exactly one error line"; }
grep -qF "error: --dtype must be fp32 or bf16, got 'fp64'" parse.log || { cat parse.log; fail "parse.log: not rank 1's error"; }

echo "--- bench gemm, other --sizes on rank 1 (MPI_ERR_TRUNCATE)"
bmpmd gemm.log bench gemm --sizes 32 --seconds 0.01 -- bench gemm --sizes 32,64 --seconds 0.01
refused gemm.log --sizes 32,64 32

echo "--- bench io, other --iters on rank 1 (hung until the watchdog, directory left)"
io=(bench io "$tiny" --output.dir="$TEST_TMP/io" --parallel.collective_timeout=10)
bmpmd io.log "${io[@]}" --iters 1 -- "${io[@]}" --iters 2
refused io.log --iters 2 1
[[ -e io ]] && fail "the refused bench io left $(find io | tr '\n' ' ')"

echo "--- bench io, another checkpoint.async on rank 1"
bmpmd io_async.log "${io[@]}" --iters 1 -- "${io[@]}" --iters 1 --checkpoint.async=true
refused io_async.log checkpoint.async true false
[[ -e io ]] && fail "the refused bench io left $(find io | tr '\n' ' ')"

echo "--- both parts alike"
bmpmd alike.log "${comm[@]}" --max_bytes 4KiB -- "${comm[@]}" --max_bytes 4KiB
[[ $status -eq 0 ]] || { tail -20 alike.log; fail "bench comm with both parts alike: exit status $status"; }
grep -qF "# wrong results: 0  (all data checked)" alike.log || fail "bench comm with both parts alike: no clean result"
finish "ranks started with other bench arguments: refused at start with one message"
