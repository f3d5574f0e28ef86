#!/usr/bin/env bash
# prepare never reads meshtrain's own output as text (issue 28, doc/data.md "What prepare
# reads"). Deterministic:
#   1. inside an input directory, an earlier prepared dataset (meta.json, train.bin, val.bin),
#      an instruction dataset (train.mask), a run directory (config.ini, metrics.jsonl,
#      run.json, checkpoints/latest) and a directory holding a copied meshtrain meta.json
#      are skipped, each with a notice; the dataset equals the one prepared from the text
#      alone (same train.bin);
#   2. named as an input, a dataset directory, its meta.json, a run directory, its
#      config.ini and a checkpoint directory are refused (exit 2, one error line saying to
#      set data.dir);
#   3. another project's meta.json and config.ini are text like any other file.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
# shellcheck source=../batch/batch_lib.sh
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

mkdir -p corpus/docs alone
for i in 1 2 3; do
  for _ in $(seq 40); do echo "document $i: the shard holds a window of tokens, and the rank reduces it"; done \
    >"corpus/docs/d$i.txt"
done
cp corpus/docs/*.txt alone/
"$MESHTRAIN_BIN" prepare --input alone --output ref >ref.log 2>&1 || { cat ref.log; fail "prepare of the text alone"; }

echo "--- 1. skipped inside an input"
"$MESHTRAIN_BIN" prepare --input alone --output corpus/old_dataset >p0.log 2>&1 || { cat p0.log; fail "the earlier dataset"; }
for i in 1 2 3 4 5 6 7 8; do printf '{"instruction": "Say hi %d.", "output": "hi"}\n' "$i"; done >inst.jsonl
"$MESHTRAIN_BIN" prepare --format alpaca --input inst.jsonl --output corpus/old_alpaca --seq_len 256 --chat_template alpaca --val_fraction 0 >p1.log 2>&1 ||
  { cat p1.log; fail "the earlier instruction dataset"; }
# shellcheck disable=SC2086  # MPIEXEC is a command with flags
timeout $((120 * time_scale)) $MPIEXEC -n 1 "$MESHTRAIN_BIN" train "$tiny" --data.dir=random --output.dir=corpus/old_run --train.steps=2 \
  --train.eval_every=0 --train.peak_tflops=1 >t.log 2>&1 || { cat t.log; fail "the earlier run"; }
[[ -f corpus/old_run/checkpoints/latest ]] || fail "the earlier run has no checkpoints/latest"
mkdir -p corpus/copied && cp corpus/old_dataset/meta.json corpus/copied/meta.json
"$MESHTRAIN_BIN" prepare --input corpus --output out >p.log 2>&1 || { cat p.log; fail "prepare of corpus"; }
for what in "corpus/old_dataset: a dataset written by \`meshtrain prepare\`" \
            "corpus/old_alpaca: a dataset written by \`meshtrain prepare\`" \
            "corpus/old_run: a meshtrain run directory" \
            "corpus/copied: a dataset written by \`meshtrain prepare\`"; do
  grep -qF "prepare: skipping $what" p.log || { cat p.log; fail "no notice 'skipping $what'"; }
done
cmp -s out/train.bin ref/train.bin || fail "train.bin differs from the text alone's: meshtrain output was read"
cmp -s out/val.bin ref/val.bin || fail "val.bin differs from the text alone's"
! grep -qE "old_|copied|config.ini|metrics|latest" out/meta.json || { cat out/meta.json; fail "meta.json lists meshtrain output as a source"; }
# A second prepare into an output inside the input skips the first one's output too.
"$MESHTRAIN_BIN" prepare --input corpus --output corpus/new >p2.log 2>&1 || { cat p2.log; fail "prepare into corpus/new"; }
"$MESHTRAIN_BIN" prepare --input corpus --output corpus/new2 >p3.log 2>&1 || { cat p3.log; fail "prepare into corpus/new2"; }
grep -qF "prepare: skipping corpus/new: a dataset" p3.log || { cat p3.log; fail "corpus/new not skipped"; }
cmp -s corpus/new2/train.bin ref/train.bin || fail "corpus/new2/train.bin differs from the text alone's"

echo "--- 2. refused as an input"
refuse() {
  local input=$1 text=$2
  "$MESHTRAIN_BIN" prepare --input "$input" --output refused >r.log 2>&1
  local status=$?
  [[ $status == 2 ]] || { cat r.log; fail "--input $input: exit $status, expected 2"; }
  grep -qF "$text" r.log && grep -qF "set data.dir to its directory" r.log ||
    { cat r.log; fail "--input $input: the error does not say '$text'"; }
  (($(grep -c 'error' r.log) == 1)) || { cat r.log; fail "--input $input: not exactly one error line"; }
  [[ ! -e refused ]] || fail "--input $input: the output was created"
}
refuse corpus/old_dataset "input corpus/old_dataset is a dataset written by \`meshtrain prepare\`"
refuse corpus/old_dataset/meta.json "input corpus/old_dataset/meta.json is a file of"
refuse corpus/old_alpaca/train.mask "input corpus/old_alpaca/train.mask is a file of"
refuse corpus/old_run "input corpus/old_run is a meshtrain run directory"
refuse corpus/old_run/config.ini "input corpus/old_run/config.ini is a file of"
refuse corpus/old_run/checkpoints "input corpus/old_run/checkpoints is a meshtrain checkpoint directory"
refuse corpus/copied/meta.json "input corpus/copied/meta.json is a file of"

echo "--- 3. other projects' meta.json and config.ini are text"
mkdir -p project && printf '{"name": "my project", "version": 2}\n' >project/meta.json
printf '[section]\nkey = value\n' >project/config.ini
"$MESHTRAIN_BIN" prepare --input project --output out_project >q.log 2>&1 || { cat q.log; fail "prepare of project"; }
grep -q '"project/meta.json"' out_project/meta.json && grep -q '"project/config.ini"' out_project/meta.json ||
  { cat out_project/meta.json; fail "another project's meta.json or config.ini was not read"; }
! grep -q "skipping" q.log || { cat q.log; fail "another project's files were skipped"; }

finish
