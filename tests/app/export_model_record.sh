#!/usr/bin/env bash
# `convert` writes what the model was trained as, not what the run's settings or the
# tokenizer's files say:
#   1. config.json's max_position_embeddings is the pretrained source's context length when it
#      is longer than model.max_seq_len (a Hugging Face base's max_position_embeddings, carried
#      through a second fine-tune from the first's checkpoint; the SmolLM2 GGUF's
#      llama.context_length), and config.json / generation_config.json name the tokenizer's
#      bos/eos ids (transformers' LlamaConfig falls back to 1 and 2 without them);
#   2. a model fine-tuned on `prepare --chat_template alpaca --system TEXT` data with the SmolLM2
#      GGUF (whose own template is ChatML) exports the alpaca chat_template with TEXT as its
#      default preamble (jinja2 renders it as the training rows hold it), convert says so, and
#      `generate --chat` takes that format and that system message too;
#   3. the system message prepare used is recorded (meta.json, then the checkpoint's chat_system)
#      and is the default of `generate --chat` and of the exported ChatML template (a tiny Llama
#      with SmolLM2's vocabulary): with --system TEXT (quotes, backslash, newline, braces,
#      non-ASCII) jinja2 renders the export as the training rows hold it and generate's prompt
#      is jinja2's; with --chat_template chatml and no --system, no system turn (not SmolLM2's
#      default); a resume onto a dataset with another recorded system message but the same
#      tokens logs the change and records the new one.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf tokenizers jinja2 h5py
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false
gguf=$smollm
bin=$MESHTRAIN_BIN
run_limit=180
# shellcheck source=../support/run_logged.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/run_logged.sh"
json() {  # json FILE KEY: the value of KEY in FILE (JSON), "absent" when it has none
  "$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps(d[sys.argv[2]]) if sys.argv[2] in d else "absent")' "$1" "$2"
}

# 1a. A Hugging Face base whose config.json says 4096 positions and bos = eos = 0.
printf 'The quick brown fox jumps over the lazy dog. %.0s' {1..200} >text.txt
run prepare_text "$bin" prepare --input text.txt --output text || exit 1
tiny=("$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini" --data.dir=text --train.steps=2 --train.eval_every=0)
run l1 "$bin" train "${tiny[@]}" --output.dir=l1 || exit 1
run convert_l1 "$bin" convert --input l1/checkpoints --output l1hf || exit 1
[[ $(json l1hf/config.json max_position_embeddings) == 64 ]] ||
  fail "a model from scratch: max_position_embeddings $(json l1hf/config.json max_position_embeddings), want model.max_seq_len 64"
cp -r l1hf basehf
"$py" - <<'PY' || fail "editing basehf/config.json"
import json
c = json.load(open("basehf/config.json"))
c.update(max_position_embeddings=4096, bos_token_id=0, eos_token_id=0)
json.dump(c, open("basehf/config.json", "w"))
PY
run l2 "$bin" train "${tiny[@]}" --output.dir=l2 --checkpoint.init_from=basehf || exit 1
run convert_l2 "$bin" convert --input l2/checkpoints --output l2hf || exit 1
[[ $(json l2hf/config.json max_position_embeddings) == 4096 ]] ||
  fail "fine-tuned from a 4096-position base: max_position_embeddings $(json l2hf/config.json max_position_embeddings)"
# The byte tokenizer's end of text (256), not the base's edited 0 nor LlamaConfig's default 2.
[[ $(json l2hf/config.json eos_token_id) == 256 && $(json l2hf/generation_config.json eos_token_id) == 256 ]] ||
  fail "the byte tokenizer's eos: config.json $(json l2hf/config.json eos_token_id), generation_config.json $(json l2hf/generation_config.json eos_token_id 2>&1)"
# A resume keeps it (the run's settings still name basehf; the checkpoint's record is read).
run l2_resume "$bin" train "${tiny[@]:0:2}" --train.eval_every=0 --train.steps=3 --output.dir=l2 \
  --checkpoint.init_from=basehf || exit 1
"$py" -c 'import h5py, sys; a = h5py.File(sys.argv[1])["model"].attrs; sys.exit(int(a["source_context_length"]) != 4096)' \
  l2/checkpoints/step_00000003.h5 || fail "the resumed run's checkpoint does not record source_context_length 4096"
# ...and from that fine-tune's checkpoint again: the source's length is carried.
run l3 "$bin" train "${tiny[@]}" --output.dir=l3 --checkpoint.init_from=l2/checkpoints || exit 1
run convert_l3 "$bin" convert --input l3/checkpoints --output l3hf || exit 1
[[ $(json l3hf/config.json max_position_embeddings) == 4096 ]] ||
  fail "a fine-tune of the fine-tune: max_position_embeddings $(json l3hf/config.json max_position_embeddings)"

# 1b + 2. LoRA on the SmolLM2 GGUF with Alpaca-format data, merged.
for i in 1 2 3 4; do
  printf '{"messages": [{"role": "user", "content": "Write the number %d in words."}, {"role": "assistant", "content": "Number %d."}]}\n' "$i" "$i"
done >train.jsonl
preamble='Answer with the number in words.'
run prepare "$bin" prepare --format chat --chat_template alpaca --system "$preamble" --input train.jsonl --output data \
  --tokenizer "$gguf" --seq_len 48 --pack=false --val_fraction 0 || exit 1
run train "$bin" train "$MESHTRAIN_SOURCE_DIR/inputs/finetune-demo.ini" --checkpoint.init_from="$gguf" \
  --data.dir=data --output.dir=run --train.steps=1 --train.seq_len=48 --train.micro_batch=2 --train.global_batch=2 \
  --train.activation_checkpointing=false --model.lora_rank=4 --model.lora_targets=q,v --train.eval_every=0 || exit 1
run convert "$bin" convert --input run/checkpoints --output hf --merge_lora --dtype bf16 || exit 1
grep -q "chat_template is the alpaca format the model was trained in, not the tokenizer's own (chatml)" convert.log ||
  fail "convert does not say it replaced the tokenizer's ChatML template: $(cat convert.log)"
grep -qF "conversations without a system message get the one the data was prepared with, \"$preamble\"" convert.log ||
  fail "convert does not name the recorded system message: $(cat convert.log)"
"$py" - "$gguf" "$preamble" <<'PY' || fail "the export's config.json, generation_config.json or chat_template"
import json, sys
import gguf, jinja2, numpy as np
from tokenizers import Tokenizer
r = gguf.GGUFReader(sys.argv[1])
meta = lambda k: int(r.fields[k].contents())
ok = True
def want(what, got, expected):
    global ok
    if got != expected:
        print(f"{what}: {got!r}, want {expected!r}"); ok = False
c = json.load(open("hf/config.json"))
want("config.json max_position_embeddings", c.get("max_position_embeddings"), meta("llama.context_length"))
want("config.json bos_token_id", c.get("bos_token_id"), meta("tokenizer.ggml.bos_token_id"))
want("config.json eos_token_id", c.get("eos_token_id"), meta("tokenizer.ggml.eos_token_id"))
want("config.json pad_token_id", c.get("pad_token_id"), meta("tokenizer.ggml.padding_token_id"))
tk = Tokenizer.from_file("hf/tokenizer.json")
eot = tk.token_to_id("<|endoftext|>")
g = json.load(open("hf/generation_config.json"))
for k in ("bos_token_id", "pad_token_id"):
    want("generation_config.json " + k, g.get(k), c.get(k))
# Alpaca's responses end with the end-of-text token (prepare appends it, trained on): a stop id.
want("generation_config.json eos_token_id", g.get("eos_token_id"), [c.get("eos_token_id"), eot])
# The exported template renders a conversation as the training rows hold it.
t = json.load(open("hf/tokenizer_config.json"))["chat_template"]
env = jinja2.Environment()
messages = [{"role": "user", "content": "Write the number 1 in words."}, {"role": "assistant", "content": "Number 1."}]
text = env.from_string(t).render(messages=messages, add_generation_prompt=False)
preamble = sys.argv[2] + "\n\n"  # prepare --system: in place of Stanford's preamble
want("the chat_template's rendering", text, preamble + "### Instruction:\nWrite the number 1 in words.\n\n### Response:\nNumber 1.")
prompt = env.from_string(t).render(messages=messages[:1], add_generation_prompt=True)
want("the chat_template's prompt", prompt, preamble + "### Instruction:\nWrite the number 1 in words.\n\n### Response:\n")
row = np.fromfile("data/train.bin", dtype="<u2", offset=64)[:49].tolist()
pad = meta("tokenizer.ggml.padding_token_id")
ids = [i for i in row if i != pad]
want("train.bin's first row", tk.decode(ids, skip_special_tokens=False), text + "<|endoftext|>")
sys.exit(0 if ok else 1)
PY

# generate --chat: auto is the recorded alpaca format, not the GGUF's ChatML, with the recorded
# system message.
chat=(generate --checkpoint run/checkpoints --chat --prompt "Write the number 3 in words." --tokens 6 --temperature 0)
run chat_auto "$bin" "${chat[@]}"
run chat_alpaca "$bin" "${chat[@]}" --chat_template alpaca
run chat_chatml "$bin" "${chat[@]}" --chat_template chatml
grep -v '^generate: ' chat_auto.log >auto.txt
grep -v '^generate: ' chat_alpaca.log >alpaca.txt
grep -v '^generate: ' chat_chatml.log >chatml.txt
cmp -s auto.txt alpaca.txt && ! cmp -s auto.txt chatml.txt ||
  fail "generate --chat: auto '$(cat auto.txt)', alpaca '$(cat alpaca.txt)', chatml '$(cat chatml.txt)'"
grep -qF "generate: chat format alpaca, system message \"$preamble\" (recorded in the checkpoint" chat_auto.log ||
  fail "generate --chat does not say it prompts with the recorded system message: $(grep '^generate: ' chat_auto.log)"

# 3. ChatML: a tiny Llama with SmolLM2's vocabulary, one step on each dataset.
tiny49k=("$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini" --model.vocab_size=49152 --model.max_seq_len=64 --train.seq_len=63
         --train.micro_batch=1 --train.global_batch=1 --train.eval_every=0 --train.sample_tokens=0)
for i in 1 2 3; do
  printf '{"messages": [{"role": "user", "content": "Say %d."}, {"role": "assistant", "content": "%d"}]}\n' "$i" "$i"
done >nosys.jsonl
# Every record brings its own system message: --system changes the record, not the tokens.
sed 's/^{"messages": \[/{"messages": [{"role": "system", "content": "Own."}, /' nosys.jsonl >ownsys.jsonl
system=$'Answer in one word; don\'t "explain" {{ it }} %} \\ \u65e5\u672c.\nNo more.'
prep=(prepare --format chat --tokenizer "$gguf" --seq_len 63 --pack=false --val_fraction 0 --chat_template chatml)
run prep_sys "$bin" "${prep[@]}" --input nosys.jsonl --output d_sys --system "$system" || exit 1
run prep_none "$bin" "${prep[@]}" --input ownsys.jsonl --output d_none || exit 1
run prep_other "$bin" "${prep[@]}" --input ownsys.jsonl --output d_other --system "Other." || exit 1
run r_sys "$bin" train "${tiny49k[@]}" --data.dir=d_sys --output.dir=r_sys --train.steps=1 || exit 1
run convert_sys "$bin" convert --input r_sys/checkpoints --output hf_sys || exit 1
grep -q "chatml with another default system message" convert_sys.log ||
  fail "convert does not say it replaced SmolLM2's default system message: $(cat convert_sys.log)"
q=(--chat --prompt "Say 4." --tokens 1 --temperature 0)
run gen_sys "$bin" generate r_sys/config.ini "${q[@]}" || exit 1
run gen_given "$bin" generate r_sys/config.ini "${q[@]}" --system "" || exit 1
grep -q 'system message none (--system)' gen_given.log || fail "generate --system '': $(grep '^generate: ' gen_given.log)"
run r_none "$bin" train "${tiny49k[@]}" --data.dir=d_none --output.dir=r_none --train.steps=1 || exit 1
run gen_none "$bin" generate r_none/config.ini "${q[@]}" || exit 1
grep -q 'system message none (recorded in the checkpoint' gen_none.log ||
  fail "generate --chat after data without a system turn: $(grep '^generate: ' gen_none.log)"
# The same tokens with another recorded system message: a resume logs it and records the new one.
cmp -s d_none/train.bin d_other/train.bin || fail "--system changed the rows of records that have a system message"
run r_none_resume "$bin" train "${tiny49k[@]}" --data.dir=d_other --output.dir=r_none --train.steps=2 || exit 1
grep -qF 'resuming with a changed setting: data.chat_system: "" in the checkpoint, "Other." in this run' \
  r_none_resume.log || fail "the resume does not log the changed system message: $(cat r_none_resume.log)"
"$py" - "$system" <<'PY' || fail "the recorded system message, the exported ChatML template or generate's prompt"
import json, re, sys
import h5py, jinja2, jinja2.sandbox, numpy as np
from tokenizers import Tokenizer
system = sys.argv[1]
ok = True
def want(what, got, expected):
    global ok
    if got != expected:
        print(f"{what}: {got!r}, want {expected!r}"); ok = False
want("d_sys/meta.json chat_system", json.load(open("d_sys/meta.json")).get("chat_system"), system)
want("d_none/meta.json chat_system", json.load(open("d_none/meta.json")).get("chat_system"), "")
attr = lambda f: h5py.File(f)["model"].attrs["chat_system"].decode()
want("r_sys's checkpoint chat_system", attr("r_sys/checkpoints/step_00000001.h5"), system)
want("r_none's checkpoint chat_system", attr("r_none/checkpoints/step_00000001.h5"), "")
want("r_none's resumed checkpoint chat_system", attr("r_none/checkpoints/step_00000002.h5"), "Other.")
tk = Tokenizer.from_file("hf_sys/tokenizer.json")
template = json.load(open("hf_sys/tokenizer_config.json"))["chat_template"]
# jinja2 as it comes, and as transformers' apply_chat_template sets it up.
envs = {"jinja2": jinja2.Environment(),
        "HF's sandbox": jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)}
meta = json.load(open("d_sys/meta.json"))
rows = np.fromfile("d_sys/train.bin", dtype="<u2", offset=64).reshape(-1, meta["row_tokens"])
pad = int(rows[0, -1])  # SmolLM2's padding id is <|im_end|>'s: only the trailing ones are padding
unpadded = lambda row: [int(x) for x in np.trim_zeros(row.astype(np.int64) - pad, "b") + pad]
records = [json.loads(l)["messages"] for l in open("nosys.jsonl")]
for name, env in envs.items():
    t = env.from_string(template)
    for i, (messages, row) in enumerate(zip(records, rows)):
        text = t.render(messages=messages, add_generation_prompt=False)
        want(f"{name}: training row {i}", tk.decode(unpadded(row), skip_special_tokens=False), text)
    own = [{"role": "system", "content": "Own."}] + records[0]
    want(f"{name}: a conversation with its own system message",
         t.render(messages=own, add_generation_prompt=False).startswith("<|im_start|>system\nOwn.<|im_end|>\n"), True)
    prompt = t.render(messages=[{"role": "user", "content": "Say 4."}], add_generation_prompt=True)
    want(f"{name}: the prompt", prompt,
         f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nSay 4.<|im_end|>\n<|im_start|>assistant\n")
def context(log):
    return int(re.search(r"generate: (\d+)-token context", open(log).read()).group(1))
n = lambda text: len(tk.encode(text, add_special_tokens=False).ids)
bare = "<|im_start|>user\nSay 4.<|im_end|>\n<|im_start|>assistant\n"
want("generate --chat's context (the recorded system message)", context("gen_sys.log"), n(prompt))
want("generate --chat --system (empty)'s context", context("gen_given.log"), n(bare))
want("generate --chat's context after data without a system turn", context("gen_none.log"), n(bare))
want("generate's log names the recorded message",
     "system message " + json.dumps(system, ensure_ascii=False) + " (recorded in the checkpoint" in open("gen_sys.log").read(), True)
sys.exit(0 if ok else 1)
PY
exit $((failures > 0))
