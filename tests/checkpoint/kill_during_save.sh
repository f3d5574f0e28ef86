#!/usr/bin/env bash
# kill -9 of one rank inside a checkpoint save, every time (fault injection, not a race):
# MESHTRAIN_FAULT makes rank 1 SIGKILL itself in the step-4 save after 10 of its tensor
# datasets are written. The job dies; `latest` still names the step-2 checkpoint, the dead
# save left only its .tmp; a new run with checkpoint.resume=auto continues from step 2 to
# the end, clears the .tmp, and its losses are bitwise those of a run never interrupted.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/fault_lib.sh"

run straight "" --output.dir=straight --checkpoint.every=0 --checkpoint.save_final=false
expect_status straight 0

run killed "save.dataset:rank=1:step=4:after=10:action=kill" "${ckpt[@]}" --output.dir=run
[[ $status -ne 0 && $status -ne 124 ]] || fail "the job whose rank was killed exited $status"
fired killed save.dataset
grep -q "rank 1: MESHTRAIN_FAULT=.* fires: kill at save.dataset (step 4, pass 11)" killed.log ||
  fail "rank 1 was not killed at the 11th dataset of the step-4 save"
latest_is run/checkpoints step_00000002.h5
[[ -f run/checkpoints/step_00000004.h5.tmp ]] || fail "the killed save left no .tmp: the kill did not land inside it"
[[ ! -e run/checkpoints/step_00000004.h5 ]] || fail "the killed save was committed"

run resumed "" "${ckpt[@]}" --output.dir=run --checkpoint.resume=auto
expect_status resumed 0
grep -q "resumed from run/checkpoints/step_00000002.h5: step 2" resumed.log || fail "the resumed run did not start from step 2"
[[ $(last_step run/metrics.jsonl) -eq 8 ]] || fail "the resumed run did not reach step 8"
latest_is run/checkpoints step_00000008.h5
no_tmp run/checkpoints
same_losses straight/metrics.jsonl run/metrics.jsonl 1 8
finish "kill -9 inside a save: latest kept step 2, the resume continued bitwise"
