#!/usr/bin/env bash
# Every checkpoint save and load is reported in metrics.jsonl (doc/checkpoints.md; issue 16,
# claim 7): with train.log_every=4 and checkpoint.every=3 the saves at steps 3, 6, 9 and 12
# each have a record carrying ckpt_save_s (before, the save at 9 was overwritten by the one
# at 12 before any record was written), and a run resumed from step 6 reports its load in
# the record of step 7.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/fault_lib.sh"

# steps_with KEY FILE: the steps whose record has KEY, space-separated.
steps_with() {
  "$py" -c 'import json, sys; print(" ".join(str(r["step"]) for r in map(json.loads, open(sys.argv[2])) if sys.argv[1] in r))' "$1" "$2"
}

STEPS=12 run saves "" --output.dir=saves --train.log_every=4 --checkpoint.every=3 --checkpoint.keep=4
expect_status saves 0
got=$(steps_with ckpt_save_s saves/metrics.jsonl)
echo "records with ckpt_save_s: $got"
[[ $got == "3 6 9 12" ]] || fail "the saves at steps 3 6 9 12 are not all reported (got: $got)"
[[ $(steps_with loss saves/metrics.jsonl) == "3 4 6 8 9 12" ]] ||
  fail "records other than the logged steps and the saves: $(steps_with loss saves/metrics.jsonl)"

STEPS=12 run loads "" --output.dir=loads --train.log_every=4 --checkpoint.every=0 --checkpoint.save_final=false \
  --checkpoint.resume=saves/checkpoints/step_00000006.h5
expect_status loads 0
got=$(steps_with ckpt_load_s loads/metrics.jsonl)
echo "records with ckpt_load_s: $got"
[[ $got == "7" ]] || fail "the load is not reported in the record of step 7 (got: $got)"
finish "every save and load has its metrics.jsonl record"
