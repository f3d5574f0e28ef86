#!/usr/bin/env bash
# The [plan] keys under their old parallel.* names (issue 14): they still work, with one
# warning line on rank 0 naming the new names, and give the same plan as the new names;
# a key given under both names is one error and exit status 2.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
tiny=$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini
# shellcheck disable=SC2086
run() { local out=$1; shift; timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "$@" >"$out.out" 2>"$out.err"; rc=$?; }
note="deprecated configuration keys: parallel.world_size is now plan.world_size, parallel.gpus_per_node is now plan.gpus_per_node"

echo "--- old names: the same plan, one note"
# Every ceiling given: nothing is measured, so the two plans are deterministic and comparable
# (measured rates differ run to run and could tip the planner's pick).
ceilings=(--plan.gemm_tflops=100 --plan.mem_gbps=200 --plan.bus_gbps=100,10)
run old plan "$tiny" --parallel.world_size=16 --parallel.gpus_per_node=8 "${ceilings[@]}" --top 1
[[ $rc -eq 0 ]] || { cat old.err; fail "plan with the old names failed (exit $rc)"; }
run new plan "$tiny" --plan.world_size=16 --plan.gpus_per_node=8 "${ceilings[@]}" --top 1
[[ $rc -eq 0 ]] || { cat new.err; fail "plan with the new names failed (exit $rc)"; }
grep -q "topology: 16 rank(s) on 2 node(s)" new.out || fail "plan.world_size/gpus_per_node did not reach the plan"
diff old.out new.out >/dev/null || fail "old and new names plan differently"
[[ $(grep -cF "$note" old.err) -eq 1 ]] || { cat old.err; fail "expected the deprecation note once (rank 0) in old.err"; }
grep -q "deprecated" new.err && fail "the new names print a deprecation note"

echo "--- old name in train: the note once, the run unchanged"
run train train "$tiny" --data.dir=random --train.steps=1 --output.dir="$TEST_TMP/run" --checkpoint.save_final=false \
  --parallel.device_memory=4GiB
[[ $rc -eq 0 ]] || { tail -5 train.err; fail "train with parallel.device_memory failed (exit $rc)"; }
[[ $(grep -c "parallel.device_memory is now plan.device_memory" train.err) -eq 1 ]] ||
  { cat train.err; fail "expected the deprecation note once in train.err"; }
grep -q "^device_memory = 4GiB" run/config.ini || fail "run/config.ini does not hold plan.device_memory"

echo "--- both names: one error, exit 2"
run both plan "$tiny" --parallel.world_size=16 --plan.world_size=16
[[ $rc -eq 2 ]] || fail "both names: exit status $rc, expected 2"
grep -q "parallel.world_size and plan.world_size are both set" both.err || { cat both.err; fail "both names: no message"; }
[[ $(grep -c "error:" both.err) -eq 1 ]] || { cat both.err; fail "both names: expected one error line"; }
finish "moved plan keys"
