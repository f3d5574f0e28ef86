#!/usr/bin/env bash
# A real full disk (issue 13, must-show 4): a 2-rank run whose checkpoint directory is on a
# 2 MiB tmpfs. The tiny model's checkpoint takes 1.4 MiB, so the step-3 save fits and the
# step-6 save cannot (the older checkpoint is only deleted once the new one is committed).
# The run ends with exit 74 and one "no space left" message naming the directory; no .tmp
# is left, the step-3 checkpoint and `latest` are intact, and a resume from them on a larger
# disk continues bitwise (losses and gradient norms equal to an uninterrupted run's).
# Mounting needs root: otherwise the test prints SKIP and CTest reports it as skipped.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/fault_lib.sh"

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: mounting a 2 MiB tmpfs needs root; run the test as root to fill a real disk"
  exit 0
fi
mkdir -p small
if ! mount -t tmpfs -o size=2m meshtrain-disk-full small; then
  echo "SKIP: mount -t tmpfs failed although running as root (a container without CAP_SYS_ADMIN?)"
  exit 0
fi
trap 'umount small 2>/dev/null || umount -l small' EXIT

STEPS=9 run full "" --output.dir=full --checkpoint.dir=small/ckpt --checkpoint.every=3 --checkpoint.keep=1
expect_status full 74
one_error full "cannot write checkpoint small/ckpt/step_00000006.h5: no space left on device \(.* needed, .* free in small/ckpt\)"
latest_is small/ckpt step_00000003.h5
no_tmp small/ckpt
held=$(find small/ckpt -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ')
[[ $held == "latest step_00000003.h5 " ]] || fail "small/ckpt holds: $held"
[[ $(last_step full/metrics.jsonl) -eq 5 ]] || fail "metrics.jsonl should end at step 5, the last before the failed save"

cp -a small/ckpt big_ckpt
STEPS=9 run straight "" --output.dir=straight --checkpoint.every=0 --checkpoint.save_final=false
expect_status straight 0
STEPS=9 run resumed "" --output.dir=full --checkpoint.dir=big_ckpt --checkpoint.every=3 --checkpoint.resume=auto
expect_status resumed 0
grep -q "resumed from big_ckpt/step_00000003.h5: step 3" resumed.log || fail "the resume did not load the step-3 checkpoint"
latest_is big_ckpt step_00000009.h5
same_losses straight/metrics.jsonl full/metrics.jsonl 1 9
finish "a full disk: exit 74, one message, step 3 and latest intact, resumed bitwise on a larger disk"
