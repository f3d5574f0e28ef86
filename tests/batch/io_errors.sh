#!/usr/bin/env bash
# I/O errors outside checkpoints, injected with MESHTRAIN_FAULT (doc/batch.md), and a torn
# metrics.jsonl; 2-rank runs of the tiny GPT-2:
#  1. metrics.jsonl full at step 3: one error line naming it, exit 74; the file holds whole
#     records of steps 1 and 2 only.
#  2. config.ini (the first run-record write) full: exit 74, no config.ini, no .tmp.
#  3. summary.json (the 4th record write, at the end) EIO: exit 74, no summary.json, no
#     .tmp; metrics.jsonl complete.
#  4. a torn last line in metrics.jsonl (a crash inside a write): the resumed run cuts it off
#     with a warning; every line parses and the losses match the uninterrupted run bitwise.
#  5. a rank killed or stalled inside a communicator collective: the job ends (a stall: the
#     watchdog, status 76 (peers lost), naming rank 1).
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/fault_lib.sh"

# whole_records FILE: every line of FILE is a JSON object ending in a newline; prints the steps.
whole_records() {
  "$py" - "$1" <<'PY'
import json, sys
data = open(sys.argv[1], "rb").read()
assert data.endswith(b"\n"), "the file does not end with a newline"
print(" ".join(str(json.loads(l)["step"]) for l in data.decode().splitlines()))
PY
}

echo "--- 1. metrics.jsonl: no space left"
run metrics "metrics.write:step=3:action=enospc" --output.dir=metrics
expect_status metrics 74
fired metrics metrics.write
one_error metrics "cannot write metrics/metrics.jsonl: no space left on device"
got=$(whole_records metrics/metrics.jsonl) || fail "metrics: metrics.jsonl holds a partial record"
[[ $got == "1 2" ]] || fail "metrics: records of steps '$got', expected '1 2'"
no_tmp metrics

echo "--- 2. config.ini: no space left"
run record "record.write:action=enospc" --output.dir=record
expect_status record 74
one_error record "cannot write record/config.ini: no space left on device"
[[ ! -e record/config.ini ]] || fail "record: config.ini was written"
no_tmp record

echo "--- 3. summary.json: I/O error"
run summary "record.write:after=3:action=eio" --output.dir=summary
expect_status summary 74
one_error summary "cannot write summary/summary.json: input/output error"
[[ ! -e summary/summary.json ]] || fail "summary: summary.json was written"
[[ $(whole_records summary/metrics.jsonl) == "1 2 3 4 5 6 7 8" ]] || fail "summary: metrics.jsonl is not complete"
no_tmp summary

echo "--- 4. a torn last line in metrics.jsonl"
run straight "" "${ckpt[@]}" --output.dir=torn
expect_status straight 0
cp torn/metrics.jsonl straight.jsonl
head -n 2 straight.jsonl >torn/metrics.jsonl
echo 'not a record' >>torn/metrics.jsonl  # a line damaged by hand: not JSON, no step
sed -n 3,5p straight.jsonl >>torn/metrics.jsonl
printf '{"step": 6, "loss": 5.59' >>torn/metrics.jsonl  # what a crash inside a write leaves
run resumed "" "${ckpt[@]}" --output.dir=torn --checkpoint.resume=torn/checkpoints/step_00000004.h5
expect_status resumed 0
grep -q "warning: torn/metrics.jsonl: cut off a torn last line" resumed.log || fail "torn: no warning about the torn line"
grep -q "warning: torn/metrics.jsonl: dropped 1 line(s) that are not metrics records" resumed.log ||
  fail "torn: no warning about the damaged line"
got=$(whole_records torn/metrics.jsonl) || fail "torn: metrics.jsonl does not parse"
[[ $got == "1 2 3 4 5 6 7 8" ]] || fail "torn: records of steps '$got', expected 1..8 once each"
same_losses straight.jsonl torn/metrics.jsonl 1 8

echo "--- 5. inside a communicator collective"
run coll_kill "collective:rank=1:step=3" --output.dir=coll_kill
[[ $status -ne 0 && $status -ne 124 ]] || fail "coll_kill: exit status $status"
fired coll_kill collective
run coll_stall "collective:rank=1:step=3:action=stall" --output.dir=coll_stall
expect_status coll_stall 76
fired coll_stall collective
grep -Eq "aborting the job: collective watchdog: .* rank\(s\) 1( \(idle [0-9.]+ s\))? (did not arrive|entered it but stopped progressing)" coll_stall.log ||
  fail "coll_stall: no watchdog message naming rank 1"
finish "I/O errors: exit 74 with one message, whole records only; torn lines cut; collective faults end the job"
