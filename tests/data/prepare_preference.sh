#!/usr/bin/env bash
# `meshtrain prepare --format preference` with the SmolLM2 GGUF tokenizer (issue 32): every
# pair's two rows (2i chosen, 2i + 1 rejected) and their loss masks are checked against an
# INDEPENDENT rendering: the GGUF's own chat_template Jinja text rendered by jinja2 for the
# prompt + each response, tokenized by Hugging Face `tokenizers` (built from the GGUF's
# vocabulary and merges), the mask from the final assistant content's character span (content
# + <|im_end|>) through the tokenizer's offsets. Covers a text prompt, a multi-turn
# conversation (its earlier assistant turn is context, mask 0), a system message, responses as
# a string / an assistant message / a list of one, non-ASCII text, --system, the val split
# (whole pairs), padding and meta.json. Then `train` and `eval` on the dataset are refused
# with one message (exit 2, nothing written).
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf tokenizers jinja2

"$py" - <<'PY' || fail "writing the JSONL input"
import json
records = [
    {"prompt": "What is 2+2?", "chosen": "4", "rejected": "It is 5, I think."},
    {"messages": [{"role": "system", "content": "You answer in French."}, {"role": "user", "content": "Hello!"},
                  {"role": "assistant", "content": "Bonjour !"}, {"role": "user", "content": "Ça va ?"}],
     "chosen": {"role": "assistant", "content": "Très bien, merci."},
     "rejected": [{"role": "assistant", "content": "I am fine."}]},
    {"prompt": "Write 7 March 2024 as YYYY-MM-DD.", "chosen": "2024-03-07", "rejected": "07/03/2024"},
    {"messages": [{"role": "user", "content": "naïve café 日本語 😀?"}], "chosen": "日本語 😀 ok", "rejected": "no"},
    {"prompt": "Count to three.", "chosen": " one two  three\t", "rejected": "1 2 3"},
]
with open("pairs.jsonl", "w") as f:
    for i, r in enumerate(records):
        f.write(json.dumps(r, ensure_ascii=(i % 2 == 0)) + "\n")
    f.write("\n")  # a blank line is not a record
PY

"$MESHTRAIN_BIN" prepare --format preference --input pairs.jsonl --output pref --tokenizer "$smollm" --seq_len 96 \
  --val_fraction 0.2 >pref.log 2>&1 || { cat pref.log; fail "prepare --format preference failed"; }
cat pref.log
grep -q "pairs:   5 = train 4 + val 1, each a chosen and a rejected row of 97 tokens" pref.log ||
  fail "the summary does not count the pairs"
"$MESHTRAIN_BIN" prepare --format preference --input pairs.jsonl --output pref_sys --tokenizer "$smollm" --seq_len 96 \
  --val_fraction 0 --system "Be brief." >pref_sys.log 2>&1 || { cat pref_sys.log; fail "prepare --system failed"; }

"$py" - "$smollm" <<'PY' || fail "rows or masks differ from the independent jinja2 + tokenizers rendering"
import json, os, sys
import numpy as np, gguf, jinja2
sys.path.insert(0, os.environ["MESHTRAIN_SOURCE_DIR"] + "/tests/support")
from dataset_rows import rows
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
r = gguf.GGUFReader(sys.argv[1])
toks = r.fields["tokenizer.ggml.tokens"].contents()
merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
types = r.fields["tokenizer.ggml.token_type"].contents()
pad = int(r.fields["tokenizer.ggml.padding_token_id"].contents())
template = r.fields["tokenizer.chat_template"].contents()
tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
tk.decoder = decoders.ByteLevel()
tk.add_special_tokens([AddedToken(toks[i], special=True, normalized=False) for i, t in enumerate(types) if t in (3, 4)])
jt = jinja2.Environment().from_string(template)
R = 97

def response(v):
    return v if isinstance(v, str) else (v[0] if isinstance(v, list) else v)["content"]

def expected(messages):
    """The row and mask of a conversation whose last message is the response: only that
    message's content and its <|im_end|> are trained on."""
    text = jt.render(messages=messages, add_generation_prompt=False)
    piece = "<|im_start|>assistant\n" + messages[-1]["content"] + "<|im_end|>"
    b = text.rindex(piece) + len("<|im_start|>assistant\n")
    span = (b, b + len(messages[-1]["content"]) + len("<|im_end|>"))
    enc = tk.encode(text, add_special_tokens=False)
    assert tk.decode(enc.ids, skip_special_tokens=False) == text
    assert len(enc.ids) <= R, len(enc.ids)
    mask = [int(s < span[1] and span[0] < e) for s, e in enc.offsets]
    n = len(enc.ids)
    return list(enc.ids) + [pad] * (R - n), mask + [0] * (R - n)


ok = True
def check(name, val_fraction, system):
    global ok
    meta = json.load(open(f"{name}/meta.json"))
    records = [json.loads(l) for l in open("pairs.jsonl") if l.strip()]
    n_val = sum(int((i + 1) * val_fraction) > int(i * val_fraction) for i in range(len(records)))
    want_meta = {"data_format": "preference", "seq_len": 96, "row_tokens": R, "chat_template": "chatml",
                 "train_examples": len(records) - n_val, "val_examples": n_val,
                 "train_rows": 2 * (len(records) - n_val), "val_rows": 2 * n_val,
                 "row_layout": "pairs: row 2i is the chosen response of pair i, row 2i + 1 its rejected one"}
    for k, v in want_meta.items():
        if meta.get(k) != v:
            print(f"{name}/meta.json: {k} = {meta.get(k)!r}, want {v!r}"); ok = False
    # The system message of prompts without one: --system, else the template's default turn
    # (a prompt with it in front renders as one without).
    recorded = meta.get("chat_system")
    user = [{"role": "user", "content": "x"}]
    if system and recorded != system or not system and (
            not recorded or jt.render(messages=[{"role": "system", "content": recorded}] + user) != jt.render(messages=user)):
        ok = False; print(f"{name}/meta.json: chat_system = {recorded!r}")
    got = {s: rows(name, s, R) for s in ("train", "val")}
    at = {"train": 0, "val": 0}
    for i, rec in enumerate(records):
        split = "val" if int((i + 1) * val_fraction) > int(i * val_fraction) else "train"
        prompt = [{"role": "user", "content": rec["prompt"]}] if "prompt" in rec else rec["messages"]
        if system and prompt[0]["role"] != "system":
            prompt = [{"role": "system", "content": system}] + prompt
        for which in ("chosen", "rejected"):
            ids, mask = expected(prompt + [{"role": "assistant", "content": response(rec[which])}])
            t, m = got[split][0][at[split]], got[split][1][at[split]]
            if t != ids or m != mask:
                ok = False
                print(f"{name} record {i} {which} ({split} row {at[split]}): differs")
                print("  want", [(toks[a], b) for a, b in zip(ids, mask)])
                print("  got ", [(toks[a], b) for a, b in zip(t, m)])
            elif sum(mask) < 2:
                ok = False; print(f"{name} record {i} {which}: fewer than 2 response tokens, the check is too weak")
            at[split] += 1
    for s in at:
        if at[s] != len(got[s][0]):
            ok = False; print(f"{name}: {s} holds {len(got[s][0])} rows, expected {at[s]}")

check("pref", 0.2, None)
check("pref_sys", 0.0, "Be brief.")
print("pairs equal the jinja2 + tokenizers reference" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
PY

# Supervised training and evaluation on preference pairs are refused: exit 2, one message,
# nothing written.
weights=(train "--checkpoint.init_from=$smollm" eval "--checkpoint=$smollm")
for cmd in train eval; do
  [[ $cmd == train ]] && w=${weights[1]} || w=${weights[3]}
  timeout $((60 * time_scale)) "$MESHTRAIN_BIN" "$cmd" "$MESHTRAIN_SOURCE_DIR/inputs/finetune-demo.ini" "$w" \
    --data.dir=pref --train.seq_len=96 --output.dir="refused_$cmd" --train.steps=1 >"refused_$cmd.log" 2>&1
  rc=$?
  ((rc == 2)) && grep -q "$cmd: data.dir=pref is a preference dataset" "refused_$cmd.log" ||
    { cat "refused_$cmd.log"; fail "$cmd on a preference dataset: exit $rc, expected 2 and the refusal"; }
  [[ ! -e refused_$cmd ]] || fail "$cmd on a preference dataset wrote refused_$cmd"
done

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "PASS: prepare --format preference pairs and masks equal an independent rendering; SFT on them is refused"
