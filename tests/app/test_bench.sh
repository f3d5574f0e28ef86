#!/usr/bin/env bash
# `meshtrain bench` as a smoke test (issue 8): the collective benchmark checks its data, so at
# 2 and 4 ranks, on the world and on the tp groups of a 2 x 2 mesh, in fp32 and bf16, every
# result must be right (zero wrong elements, exit status 0), and the CSV/JSON files must hold
# one row per (collective, size). `bench memory` reports the bytes it copied (whole fp32
# elements), and a result file that cannot be written is refused before anything is measured.
# Nothing here is timed: performance is measured by perf/.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_BIN, MPIEXEC, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"

bin=$MESHTRAIN_BIN
mkdir -p "$TEST_TMP"
out="$TEST_TMP/stdout" err="$TEST_TMP/stderr"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

run() {  # LABEL COMMAND...: 120 s limit; sets $rc
  local label=$1
  shift
  echo "--- $label: $*"
  timeout $((120 * time_scale)) "$@" >"$out" 2>"$err"
  rc=$?
  sed 's/^/  stdout: /' "$out"
  sed 's/^/  stderr: /' "$err"
  echo "  exit status $rc"
  [[ $rc -ne 124 ]] || fail "$label: hung (killed after $((120 * time_scale)) s)"
}

# 1 KiB .. 256 KiB doubling = 9 sizes per collective.
check_comm() {  # LABEL NP DTYPE [ARGS...]
  local label=$1 np=$2 dtype=$3
  shift 3
  local csv="$TEST_TMP/$label.csv" json="$TEST_TMP/$label.json"
  rm -f "$csv" "$json"
  run "$label" $MPIEXEC -np "$np" "$bin" bench comm --min_bytes 1KiB --max_bytes 256KiB --warmup 1 --iters 2 \
    --dtype "$dtype" --csv "$csv" --json "$json" "$@"
  [[ $rc -eq 0 ]] || fail "$label: exit status $rc"
  grep -qF "# wrong results: 0" "$out" || fail "$label: no '# wrong results: 0' line"
  grep -qF "# memory copy" "$out" || fail "$label: the copy bandwidth is not printed"
  local nops
  nops=$(grep -c "bus factor" "$out")
  [[ -f $csv ]] || { fail "$label: no CSV"; return; }
  local rows
  rows=$(($(wc -l <"$csv") - 1))
  [[ $rows -eq $((nops * 9)) ]] || fail "$label: CSV has $rows rows, expected $((nops * 9))"
  # column 16 = wrong
  awk -F, 'NR > 1 && $16 != 0 { bad = 1 } END { exit bad }' "$csv" || fail "$label: a CSV row has wrong results"
  [[ $(jq '.wrong' "$json") == 0 ]] || fail "$label: JSON does not report zero wrong results"
}

check_comm comm_np2_fp32 2 fp32
check_comm comm_np4_fp32 4 fp32
check_comm comm_np4_bf16 4 bf16
check_comm comm_np4_tp_group 4 fp32 --parallel.tp=2 --group tp --ops all_reduce,all_gather
grep -qF "group tp (2 ranks; 2 such group(s) run at once)" "$out" || fail "tp group: header does not name 2 groups of 2"
check_comm comm_np4_dp_shard 4 fp32 --parallel.tp 2 --group dp_shard --ops reduce_scatter
check_comm comm_np4_in_step 4 fp32 --parallel.tp=2 --group dp_shard --ops all_reduce --in_step
grep -qF ", in step (a barrier over all ranks" "$out" || fail "in step: the header does not say so"
[[ $(jq '.in_step' "$TEST_TMP/comm_np4_in_step.json") == true ]] || fail "in step: the JSON does not record it"

run "gemm" $MPIEXEC -np 2 "$bin" bench gemm --sizes 64,32x48x16 --transpose nt --seconds 0.01 --csv "$TEST_TMP/gemm.csv"
[[ $rc -eq 0 ]] || fail "gemm: exit status $rc"
[[ $(wc -l <"$TEST_TMP/gemm.csv") -eq 3 ]] || fail "gemm: CSV must have a header and 2 rows"
grep -q "32 x 48 x 16" "$out" || fail "gemm: the MxNxK row is missing"

run "memory" $MPIEXEC -np 2 "$bin" bench memory --sizes 1MiB,4097 --seconds 0.01 --json "$TEST_TMP/memory.json"
[[ $rc -eq 0 ]] || fail "memory: exit status $rc"
grep -q '"copy_bytes_per_s_min"' "$TEST_TMP/memory.json" || fail "memory: JSON lacks copy_bytes_per_s_min"
# 4097 B copies 1024 fp32 elements: the row says what was copied.
[[ $(jq -c '[.results[].bytes]' "$TEST_TMP/memory.json") == "[1048576,4096]" ]] ||
  fail "memory: the sizes reported are $(jq -c '[.results[].bytes]' "$TEST_TMP/memory.json"), not [1048576,4096]"

# A result file that cannot be written is refused before anything is measured: no result
# row, and the other file (good) is not written either.
mkdir -p "$TEST_TMP/a_dir"
rm -f "$TEST_TMP/early.csv"
run "json dir" $MPIEXEC -np 2 "$bin" bench comm --max_bytes 4KiB --iters 1 --csv "$TEST_TMP/early.csv" --json "$TEST_TMP/a_dir"
[[ $rc -eq 2 ]] || fail "json dir: exit status $rc, expected 2"
grep -qF -- "--json $TEST_TMP/a_dir is a directory" "$err" || fail "json dir: the message does not say so"
grep -Eq '^ +[0-9]' "$out" && fail "json dir: results were measured before the refusal"
[[ -e $TEST_TMP/early.csv ]] && fail "json dir: the CSV was written"

# bench io: the save path on the job's mesh; the saves go to a private directory that is
# removed afterwards, and the run's own checkpoint directory keeps what it held.
io_dir="$TEST_TMP/io"
rm -rf "$io_dir" && mkdir -p "$io_dir/checkpoints" && echo keep >"$io_dir/checkpoints/latest"
run "io" $MPIEXEC -np 2 "$bin" bench io "$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini" --parallel.strategy=full_shard \
  --output.dir="$io_dir" --iters 2 --json "$TEST_TMP/io.json"
[[ $rc -eq 0 ]] || fail "io: exit status $rc"
[[ $(grep -c "^save [12]: .* from 2 rank(s) on 1 node(s)" "$out") -eq 2 ]] || fail "io: expected 2 save lines from 2 ranks"
grep -Eq "^ file_system +[0-9]+ " "$out" || fail "io: no file_system ceiling row"
grep -q "^bound: file system" "$out" || fail "io: one node must be file-system bound"
# Every tensor of tiny-gpt2 as weights + 2 moments, fp32: the bytes a save must report.
params=$(sed -n 's/.* model, \([0-9]*\) parameters .*/\1/p' "$out" | head -n1)
[[ $params == 121088 ]] || fail "io: expected tiny-gpt2's 121088 parameters in the header, got '${params}'"
expect=$((3 * 4 * 121088))
python3 - "$TEST_TMP/io.json" "${expect:-0}" <<'PY' || fail "io: JSON wrong (see above)"
import json, sys
j = json.load(open(sys.argv[1])); expect = int(sys.argv[2])
assert len(j["saves"]) == 2, j
assert j["save_bytes"] == expect, (j["save_bytes"], expect)
assert all(s["writer_ranks"] == 2 and s["writer_nodes"] == 1 for s in j["saves"]), j["saves"]
assert j["file_system_bytes"] >= j["save_bytes"] and j["bound"] == "file_system", j
PY
[[ $(ls -A "$io_dir/checkpoints") == latest && $(cat "$io_dir/checkpoints/latest") == keep ]] ||
  fail "io: the checkpoint directory changed: $(ls -A "$io_dir/checkpoints" | tr '\n' ' ')"
# Into an output.dir that does not exist: nothing is left behind (it created output.dir and
# checkpoint.dir for its private directory).
run "io fresh" $MPIEXEC -np 1 "$bin" bench io "$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini" \
  --output.dir="$TEST_TMP/io_fresh/run" --iters 1
[[ $rc -eq 0 ]] || fail "io fresh: exit status $rc"
[[ ! -e $TEST_TMP/io_fresh/run ]] || fail "io fresh: left $(find "$TEST_TMP/io_fresh" | tr '\n' ' ')"

run "bad group" $MPIEXEC -np 2 "$bin" bench comm --group nope --max_bytes 4KiB
[[ $rc -eq 2 ]] || fail "bad group: exit status $rc, expected 2 (user error)"
[[ $(grep -c "error:" "$err") -eq 1 ]] || fail "bad group: expected one error message"
grep -qF -- "--group" "$err" || fail "bad group: the message does not name --group"

run "bad benchmark" $MPIEXEC -np 1 "$bin" bench disk
[[ $rc -eq 2 ]] || fail "bad benchmark: exit status $rc, expected 2"
run "io bad iters" $MPIEXEC -np 1 "$bin" bench io "$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini" --iters 0
[[ $rc -eq 2 ]] || fail "io bad iters: exit status $rc, expected 2"
grep -qF -- "--iters" "$err" || fail "io bad iters: the message does not name --iters"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "all bench checks passed"
