#!/usr/bin/env bash
# issue 28: the tokenizer follows the model. One LoRA step fine-tuned from the SmolLM2 GGUF
# on data prepared with its tokenizer records that tokenizer in the checkpoint; then, with no
# --tokenizer and no run config: `eval --text` (same loss as with --tokenizer GGUF, and the
# config-less eval of a LoRA Llama checkpoint, whose window length is the checkpoint's
# train.seq_len when none is given), `generate --chat` (same reply as with
# --tokenizer GGUF), `prepare --tokenizer RUN` (the run's tokenizer hash in meta.json) and
# `convert` (tokenizer.json that the HF `tokenizers` package loads and that encodes like
# meshtrain). A --tokenizer that is not the model's (bytes; the same vocabulary with other
# merges) is exit 2 naming both; a checkpoint without a record falls back to bytes with a
# notice that its tokenizer is unknown. A Hugging Face directory whose chat template is in
# chat_template.jinja: prepare renders with it, and the export carries it in
# tokenizer_config.json.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" tokenizers h5py
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false
gguf=$smollm
bin=$MESHTRAIN_BIN
# shellcheck source=../support/run_logged.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/run_logged.sh"
refused() {  # refused NAME PATTERN CMD...: exit status 2 and PATTERN in the message
  local name=$1 pattern=$2 rc
  shift 2
  timeout $((120 * time_scale)) "$@" >"$name.log" 2>&1
  rc=$?
  [[ $rc == 2 ]] && grep -q -- "$pattern" "$name.log" || { cat "$name.log"; fail "$name: exit $rc, expected 2 and '$pattern'"; }
}
loss() { grep -o 'loss [0-9.]*' "$1.log" | tail -1 | cut -d' ' -f2; }

for i in 1 2 3 4; do
  printf '{"instruction": "Write the number %d in words.", "input": "", "output": "Number %d."}\n' "$i" "$i"
done >train.jsonl
printf 'The quick brown fox jumps over the lazy dog. Numbers 1, 2 and 3 are one, two and three. %.0s' {1..5} >text.txt
run prepare "$bin" prepare --format alpaca --input train.jsonl --output data --tokenizer "$gguf" --seq_len 48 || exit 1
run train "$bin" train "$MESHTRAIN_SOURCE_DIR/inputs/finetune-demo.ini" --checkpoint.init_from="$gguf" \
  --data.dir=data --output.dir=run --train.steps=1 --train.seq_len=48 --train.micro_batch=2 --train.global_batch=2 \
  --train.activation_checkpointing=false --model.lora_rank=4 --model.lora_targets=q,v --train.log_every=1 || exit 1

# eval --text: the checkpoint alone (no config, no --tokenizer) = its config + --tokenizer GGUF.
run eval_own "$bin" eval --checkpoint run/checkpoints --text text.txt --train.seq_len=48
run eval_given "$bin" eval run/config.ini --checkpoint run/checkpoints --text text.txt --tokenizer "$gguf"
own=$(loss eval_own) given=$(loss eval_given)
echo "eval --text: $own without --tokenizer (no config), $given with --tokenizer $gguf"
[[ -n $own && $own == "$given" ]] || fail "eval --text without --tokenizer gives $own, with the GGUF's $given"
grep -q "bpe tokenizer $gguf" eval_own.log || fail "eval --text did not use the GGUF's tokenizer: $(cat eval_own.log)"

# eval --checkpoint with no config and no train.seq_len: the window length the checkpoint
# records (48), not the default 256 (text.txt holds fewer tokens than one such window, and the
# dataset's rows are 49 tokens): the same loss as with the run's config.
run eval_noseq "$bin" eval --checkpoint run/checkpoints --text text.txt
noseq=$(loss eval_noseq)
[[ -n $noseq && $noseq == "$own" ]] || fail "eval --checkpoint without train.seq_len: loss '$noseq', with 48: $own"
grep -q "trained with train.seq_len=48; evaluating windows of that length" eval_noseq.log ||
  fail "eval does not say it took the checkpoint's train.seq_len: $(cat eval_noseq.log)"
run eval_rows "$bin" eval --checkpoint run/checkpoints --data.dir=data --split train --batches 0
run eval_rows_cfg "$bin" eval run/config.ini --checkpoint run/checkpoints --split train --batches 0
rows=$(loss eval_rows) rows_cfg=$(loss eval_rows_cfg)
[[ -n $rows && $rows == "$rows_cfg" ]] || fail "eval --checkpoint --data.dir without train.seq_len: '$rows', with the run's config: '$rows_cfg'"

# A tokenizer that is not the model's: bytes, and the model's vocabulary with two merges swapped.
refused eval_byte "is the byte tokenizer, but checkpoint .* was trained with the bpe tokenizer $gguf" \
  "$bin" eval --checkpoint run/checkpoints --text text.txt --train.seq_len=48 --tokenizer byte
refused generate_byte "was trained with the bpe tokenizer $gguf" \
  "$bin" generate --checkpoint run/checkpoints --prompt hi --tokens 2 --tokenizer byte

# generate --chat: the recorded tokenizer and its chat template, as with --tokenizer GGUF.
chat=(generate --checkpoint run/checkpoints --chat --prompt "Write the number 3 in words." --tokens 6 --temperature 0)
run chat_own "$bin" "${chat[@]}"
run chat_given "$bin" "${chat[@]}" --tokenizer "$gguf"
grep -v '^generate: ' chat_own.log >chat_own.txt
grep -v '^generate: ' chat_given.log >chat_given.txt
cmp -s chat_own.txt chat_given.txt && [[ -s chat_own.txt ]] && ! grep -q $'\xef\xbf\xbd' chat_own.txt ||
  fail "generate --chat without --tokenizer: '$(cat chat_own.txt)', with the GGUF's: '$(cat chat_given.txt)'"
# A GGUF --checkpoint brings its tokenizer to generate too (it used to fall back to bytes).
run gguf_plain "$bin" generate --checkpoint "$gguf" --prompt "The capital of France is" --tokens 3 --temperature 0
run gguf_given "$bin" generate --checkpoint "$gguf" --prompt "The capital of France is" --tokens 3 --temperature 0 \
  --tokenizer "$gguf"
[[ $(tail -1 gguf_plain.log) == "$(tail -1 gguf_given.log)" ]] || fail "generate --checkpoint GGUF: bytes used"

# prepare for an existing run: --tokenizer RUN is the tokenizer its checkpoints record.
run prepare_run "$bin" prepare --input text.txt --output data2 --tokenizer run || exit 1
"$py" - <<'PY' || fail "prepare --tokenizer run: meta.json does not record the GGUF's tokenizer"
import json
a, b = json.load(open("data/meta.json")), json.load(open("data2/meta.json"))
assert a["tokenizer_hash"] and a["tokenizer_hash"] == b["tokenizer_hash"], (a["tokenizer_hash"], b["tokenizer_hash"])
PY

# convert: the export carries tokenizer.json + tokenizer_config.json; HF tokenizers encodes
# like meshtrain (special tokens, digits, non-ASCII) and decodes back.
run convert "$bin" convert --input run/checkpoints --output export || exit 1
printf 'Hello, world! 12345 numbers\n  spaced   out <|im_start|>user\nCaf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac tabs\there.' >t2.txt
run tokenize "$bin" tokenize --tokenizer "$gguf" t2.txt || exit 1
"$py" - <<'PY' || fail "the exported tokenizer.json does not encode like the model's tokenizer"
import json, tokenizers
t = tokenizers.Tokenizer.from_file("export/tokenizer.json")
text = open("t2.txt", encoding="utf-8").read()
mine = [int(x) for x in open("tokenize.log").read().split()]
ids = t.encode(text).ids
assert ids == mine, (ids, mine)
assert t.decode(ids, skip_special_tokens=False) == text
cfg = json.load(open("export/tokenizer_config.json"))
assert cfg["eos_token"] == "<|im_end|>" and "chat_template" in cfg, cfg
print(f"HF tokenizers {tokenizers.__version__}: {len(ids)} ids equal to meshtrain's")
PY
# The same vocabulary with two merges swapped: another hash, refused naming both.
"$py" - <<'PY' || fail "writing other/tokenizer.json"
import json, os
j = json.load(open("export/tokenizer.json"))
m = j["model"]["merges"]
m[0], m[1] = m[1], m[0]
os.makedirs("other", exist_ok=True)
json.dump(j, open("other/tokenizer.json", "w"))
PY
refused eval_other "is the bpe tokenizer .*other (49152 ids, hash .*), but checkpoint .* was trained with the bpe tokenizer $gguf (49152 ids, hash" \
  "$bin" eval --checkpoint run/checkpoints --text text.txt --train.seq_len=48 --tokenizer other

# A Hugging Face directory with its chat template in chat_template.jinja, none in the config
# (transformers 4.47 and later write it there, and read it before the config's): prepare's
# auto template is the file's (the rows equal those of the GGUF's template), and the model
# fine-tuned on them exports that template inline in tokenizer_config.json, the only place
# every transformers version reads, without the file.
"$py" - <<'PY' || fail "writing side/"
import json, os, shutil
os.makedirs("side", exist_ok=True)
shutil.copy("export/tokenizer.json", "side/tokenizer.json")
cfg = json.load(open("export/tokenizer_config.json"))
open("side/chat_template.jinja", "w", encoding="utf-8").write(cfg.pop("chat_template"))
json.dump(cfg, open("side/tokenizer_config.json", "w"))
PY
run prepare_side "$bin" prepare --format alpaca --input train.jsonl --output data_side --tokenizer side --seq_len 48 || exit 1
cmp -s data/train.bin data_side/train.bin && cmp -s data/train.mask data_side/train.mask ||
  fail "prepare with chat_template.jinja: other rows than with the GGUF's template"
run train_side "$bin" train "$MESHTRAIN_SOURCE_DIR/inputs/finetune-demo.ini" --checkpoint.init_from="$gguf" \
  --data.dir=data_side --output.dir=run_side --train.steps=1 --train.seq_len=48 --train.micro_batch=2 \
  --train.global_batch=2 --train.activation_checkpointing=false --model.lora_rank=4 --model.lora_targets=q,v || exit 1
run convert_side "$bin" convert --input run_side/checkpoints --output export_side || exit 1
"$py" - <<'PY' || fail "the export of a model trained with chat_template.jinja"
import json, os
want = open("side/chat_template.jinja", encoding="utf-8").read()
got = json.load(open("export_side/tokenizer_config.json")).get("chat_template")
assert got == want, f"the exported chat_template is {got!r:.80}, not the directory's chat_template.jinja"
assert not os.path.exists("export_side/chat_template.jinja")
print("chat_template.jinja: prepare rendered with it; the export carries it inline")
PY

# Fine-tuning further from the run's checkpoint directory (as the weights loader reads it:
# its newest checkpoint) brings the recorded tokenizer, so a byte-tokenized dataset is
# refused as it is with the checkpoint file named.
run prepare_bytes "$bin" prepare --format alpaca --input train.jsonl --output data_bytes --tokenizer byte --chat_template alpaca --seq_len 256 || exit 1
for from in run/checkpoints run/checkpoints/step_00000001.h5; do
  refused "init_from_${from//\//_}" "was tokenized with a byte tokenizer but .* uses a bpe tokenizer" \
    "$bin" train "$MESHTRAIN_SOURCE_DIR/inputs/finetune-demo.ini" --checkpoint.init_from="$from" \
    --data.dir=data_bytes --output.dir="again_${from//\//_}" --train.steps=1 --train.seq_len=256 \
    --train.micro_batch=2 --train.global_batch=2 --model.lora_rank=4 --model.lora_targets=q,v
done

# A checkpoint written before tokenizers were recorded: bytes, with a notice.
cp run/checkpoints/step_00000001.h5 old.h5
"$py" -c 'import h5py, sys
with h5py.File(sys.argv[1], "a") as f:
    for k in ("tokenizer", "tokenizer_kind", "tokenizer_vocab_size", "tokenizer_hash"): del f["model"].attrs[k]' old.h5 ||
  fail "removing the tokenizer record"
run eval_old "$bin" eval --checkpoint old.h5 --text text.txt --train.seq_len=48
grep -q "the tokenizer of checkpoint old.h5 is unknown" eval_old.log && grep -q "byte tokenizer" eval_old.log ||
  fail "an old checkpoint: no notice that its tokenizer is unknown: $(cat eval_old.log)"
exit $((failures > 0))
