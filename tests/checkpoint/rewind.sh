#!/usr/bin/env bash
# A rewind (doc/checkpoints.md, "A new run where another run's checkpoints are"):
# checkpoint.resume=PATH of the run's own older step. A run saved steps 10, 20 and 30;
# copies of it are rewound to step 10 and trained to step 16, saving every 2 steps, with
# checkpoint.keep=1 and 2, synchronous and asynchronous saves. In each:
#   - the later checkpoints (steps 20 and 30: the abandoned continuation, whose
#     metrics.jsonl lines the resume drops too) are deleted at the rewind's start, named in
#     one warning;
#   - checkpoint.keep=N keeps the N newest checkpoints of this run (keep=1: 16; keep=2: 14
#     and 16) and `latest` names step 16 (before, the abandoned steps outlived them: keep=2
#     kept 16, 20 and 30, keep=1 16 and 30);
#   - the requeued run (checkpoint.resume=auto) resumes from step 16.
# And a rewind that saves nothing (train.steps=11, no save) leaves `latest` naming step 10,
# from which checkpoint.resume=auto resumes -- not the abandoned step 30.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/fault_lib.sh"

# files DIR: the directory's checkpoints and latest, space-separated.
files() { (cd "$1" && echo step_*.h5 latest); }

STEPS=30 run orig "" --output.dir=orig --checkpoint.every=10 --checkpoint.keep=3
expect_status orig 0
[[ $(files orig/checkpoints) == "step_00000010.h5 step_00000020.h5 step_00000030.h5 latest" ]] ||
  fail "the original run's checkpoints: $(files orig/checkpoints)"

for keep in 1 2; do
  for async in false true; do
    r=keep${keep}_async_$async
    cp -r orig "$r"
    STEPS=16 run "$r" "" --output.dir="$r" --checkpoint.every=2 --checkpoint.keep=$keep --checkpoint.async=$async \
      --checkpoint.resume="$r/checkpoints/step_00000010.h5"
    expect_status "$r" 0
    grep -q "resumed from $r/checkpoints/step_00000010.h5: step 10" "$r.log" || fail "$r: did not resume step 10"
    grep -qF "warning: checkpoint.resume=$r/checkpoints/step_00000010.h5 rewinds the run to step 10: deleted the 2 later checkpoints of checkpoint.dir=$r/checkpoints (step_00000020.h5 to step_00000030.h5), which the run trains again; latest names step_00000010.h5" "$r.log" ||
      fail "$r: no warning naming the deleted later checkpoints"
    want="step_00000016.h5 latest"
    ((keep == 2)) && want="step_00000014.h5 step_00000016.h5 latest"
    [[ $(files "$r/checkpoints") == "$want" ]] || fail "$r: checkpoints $(files "$r/checkpoints"), expected $want"
    latest_is "$r/checkpoints" step_00000016.h5
    [[ $(last_step "$r/metrics.jsonl") == 16 ]] || fail "$r: metrics.jsonl does not end at step 16"
    STEPS=18 run "$r-requeued" "" --output.dir="$r" --checkpoint.every=2 --checkpoint.keep=$keep \
      --checkpoint.async=$async
    expect_status "$r-requeued" 0
    grep -q "resumed from $r/checkpoints/step_00000016.h5: step 16" "$r-requeued.log" ||
      fail "$r: the requeued run did not resume step 16"
  done
done

echo "--- a rewind that saves nothing: latest names the step rewound to"
cp -r orig nosave
STEPS=11 run nosave "" --output.dir=nosave --checkpoint.every=0 --checkpoint.save_final=false \
  --checkpoint.resume=nosave/checkpoints/step_00000010.h5
expect_status nosave 0
[[ $(files nosave/checkpoints) == "step_00000010.h5 latest" ]] || fail "nosave: checkpoints $(files nosave/checkpoints)"
latest_is nosave/checkpoints step_00000010.h5
STEPS=12 run nosave-requeued "" --output.dir=nosave --checkpoint.every=0
expect_status nosave-requeued 0
grep -q "resumed from nosave/checkpoints/step_00000010.h5: step 10" nosave-requeued.log ||
  fail "nosave: checkpoint.resume=auto did not resume step 10"
finish "a rewind deletes the later checkpoints; checkpoint.keep counts this run's alone; latest follows it"
