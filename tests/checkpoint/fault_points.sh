#!/usr/bin/env bash
# The other fault points of a checkpoint save (MESHTRAIN_FAULT, doc/batch.md), each on a
# 2-rank run that checkpoints every 2 steps and is hit in its step-4 save:
#  1. save.before_rename, rank 1 killed: the complete .tmp is never renamed; `latest` names
#     step 2; the resume loads step 2 and finishes bitwise.
#  2. save.after_rename, rank 0 killed: step_00000004.h5 is in place but `latest` still names
#     step 2, the last committed checkpoint, which the resume loads; it finishes bitwise.
#  3. save.dataset stall of rank 1: the collective watchdog covers the HDF5 writes of the
#     save: the job ends with status 76 (peers lost) and a message naming the write and
#     rank 1; peers_lost.json names rank 1 and the step-2 checkpoint as the newest complete one.
#  4. save.dataset EIO on rank 1: one error line naming the checkpoint, exit 74, no .tmp,
#     `latest` and the step-2 checkpoint intact.
#  5. a `latest` naming the .tmp of a save: the resume refuses it (exit 2, one message).
#  6. a malformed MESHTRAIN_FAULT: exit 2, one message.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/fault_lib.sh"

run straight "" --output.dir=straight --checkpoint.every=0 --checkpoint.save_final=false
expect_status straight 0

echo "--- 1. kill before the rename"
run before "save.before_rename:rank=1:step=4" "${ckpt[@]}" --output.dir=before
[[ $status -ne 0 && $status -ne 124 ]] || fail "before: exit status $status"
fired before save.before_rename
latest_is before/checkpoints step_00000002.h5
[[ -f before/checkpoints/step_00000004.h5.tmp && ! -e before/checkpoints/step_00000004.h5 ]] ||
  fail "before: the step-4 save should have left only its .tmp"
run before_resumed "" "${ckpt[@]}" --output.dir=before --checkpoint.resume=auto
expect_status before_resumed 0
grep -q "resumed from before/checkpoints/step_00000002.h5: step 2" before_resumed.log || fail "before: did not resume from step 2"
latest_is before/checkpoints step_00000008.h5
no_tmp before/checkpoints
same_losses straight/metrics.jsonl before/metrics.jsonl 1 8

echo "--- 2. kill between the rename and latest"
run after "save.after_rename:step=4" "${ckpt[@]}" --output.dir=after
[[ $status -ne 0 && $status -ne 124 ]] || fail "after: exit status $status"
fired after save.after_rename
[[ -f after/checkpoints/step_00000004.h5 ]] || fail "after: step_00000004.h5 was not renamed into place"
latest_is after/checkpoints step_00000002.h5
run after_resumed "" "${ckpt[@]}" --output.dir=after --checkpoint.resume=auto
expect_status after_resumed 0
grep -q "resumed from after/checkpoints/step_00000002.h5: step 2" after_resumed.log ||
  fail "after: did not resume from step 2, the checkpoint latest names"
latest_is after/checkpoints step_00000008.h5
same_losses straight/metrics.jsonl after/metrics.jsonl 1 8

echo "--- 3. a rank stalls inside a save"
run stall "save.dataset:rank=1:step=4:after=5:action=stall" "${ckpt[@]}" --output.dir=stall
expect_status stall 76
fired stall save.dataset
grep "collective watchdog" stall.log
# Tensor writes are independent MPI-IO (h5::piece_dxpl): the ranks that did not stall leave
# their H5Dwrite and wait in the save's next collective of the 'checkpoint' group (the
# agreement after each tensor), so the watchdog may report either call; it must name rank 1.
grep -Eq "aborting the job: collective watchdog: (H5Dwrite|all_reduce) #[0-9]+ on the 'checkpoint' group did not complete within parallel.collective_timeout=5 s: rank\(s\) 1 did not arrive" stall.log ||
  fail "stall: no watchdog message naming the save's call on the 'checkpoint' group and rank 1"
latest_is stall/checkpoints step_00000002.h5
jq -e '(.lost[0].rank == 1) and (.newest_checkpoint_step == 2)' stall/peers_lost.json >/dev/null ||
  { cat stall/peers_lost.json; fail "stall: peers_lost.json does not name rank 1 and the step-2 checkpoint"; }

echo "--- 4. an I/O error inside a save"
run eio "save.dataset:rank=1:step=4:after=7:action=eio" "${ckpt[@]}" --output.dir=eio
expect_status eio 74
fired eio save.dataset
one_error eio "cannot write checkpoint eio/checkpoints/step_00000004.h5: input/output error"
latest_is eio/checkpoints step_00000002.h5
no_tmp eio/checkpoints
[[ ! -e eio/checkpoints/step_00000004.h5 ]] || fail "eio: the failed save was committed"

echo "--- 5. latest naming a temporary"
mkdir -p tmp_latest/checkpoints
cp before/checkpoints/step_00000008.h5 tmp_latest/checkpoints/step_00000008.h5.tmp
echo step_00000008.h5.tmp >tmp_latest/checkpoints/latest
run tmp_latest "" --output.dir=tmp_latest --checkpoint.resume=auto
expect_status tmp_latest 2
one_error tmp_latest "latest names 'step_00000008.h5.tmp', which is not a committed checkpoint .*temporary file of an unfinished save"

echo "--- 6. a malformed fault spec"
run bad_spec "save.dataset:action=explode" --output.dir=bad_spec
expect_status bad_spec 2
one_error bad_spec "MESHTRAIN_FAULT=save.dataset:action=explode: unknown action 'explode'"
finish "fault points of a save: kill before/after the rename, stall, EIO, latest on a .tmp"
