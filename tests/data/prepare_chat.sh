#!/usr/bin/env bash
# `meshtrain prepare --format chat|alpaca` with the SmolLM2 GGUF tokenizer (issue 18, must-show 3):
# the rows and loss masks are checked against an INDEPENDENT rendering: the GGUF's own
# chat_template Jinja text rendered with jinja2, tokenized with Hugging Face `tokenizers`
# (built from the GGUF's vocabulary and merges), and the expected mask derived from the
# assistant contents' character spans (content + <|im_end|>) through the tokenizer's offsets.
# Covers multi-turn chats, a system message, non-ASCII text, --system, a truncated example, the
# Alpaca record's "input", the val split rule, padding and meta.json (chat_system: the system
# message of records without one).
set -uo pipefail
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf tokenizers jinja2

"$py" - <<'PY' || fail "writing the JSONL inputs"
import json
chats = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "system", "content": "You answer in French."}, {"role": "user", "content": "Hello!"},
     {"role": "assistant", "content": "Bonjour ! Ça va ?"}, {"role": "user", "content": "Et toi?"},
     {"role": "assistant", "content": "Très bien, merci.\n\nEt toi ?"}],
    [{"role": "user", "content": "Count to ten."}, {"role": "assistant", "content": " one two  three\tfour 5 6 7 8 9 10 "}],
    [{"role": "user", "content": "Write a long text."}, {"role": "assistant", "content": "word " * 200}],  # truncated
    [{"role": "user", "content": "naïve café 日本語 😀?"}, {"role": "assistant", "content": "日本語 😀 ok"}],
]
with open("chat.jsonl", "w") as f:
    for i, m in enumerate(chats):
        f.write(json.dumps({"messages": m}, ensure_ascii=(i % 2 == 0)) + "\n")
    f.write("\n")  # a blank line is not a record
alpaca = [
    {"instruction": "Add 2 and 3.", "output": "5"},
    {"instruction": "Translate to German", "input": "the cat", "output": "die Katze"},
    {"instruction": "Say hi", "input": "", "output": "Hi there!"},
    {"instruction": "Spell it", "input": None, "output": "i-t"},
]
with open("alpaca.jsonl", "w") as f:
    for r in alpaca:
        f.write(json.dumps(r) + "\n")
PY

"$MESHTRAIN_BIN" prepare --format chat --input chat.jsonl --output chat --tokenizer "$smollm" --seq_len 96 \
  --val_fraction 0.2 --pack=false >chat.log 2>&1 || { cat chat.log; fail "prepare --format chat failed"; }
cat chat.log
"$MESHTRAIN_BIN" prepare --format alpaca --input alpaca.jsonl --output alpaca --tokenizer "$smollm" --seq_len 80 \
  --val_fraction 0 --system "Be brief." --pack=false >alpaca.log 2>&1 || { cat alpaca.log; fail "prepare --format alpaca failed"; }
cat alpaca.log
grep -q "truncated: 1 example" chat.log || fail "the chat summary does not count the one truncated example"

"$py" - "$smollm" <<'PY' || fail "rows or masks differ from the independent jinja2 + tokenizers rendering"
import json, sys
import numpy as np, gguf, jinja2
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

def expected(messages, R):
    text = jt.render(messages=messages, add_generation_prompt=False)
    spans, at = [], 0
    for m in messages:  # each assistant content + its end-of-turn marker, in order
        if m["role"] != "assistant":
            continue
        piece = "<|im_start|>assistant\n" + m["content"] + "<|im_end|>"
        b = text.index(piece, at) + len("<|im_start|>assistant\n")
        spans.append((b, b + len(m["content"]) + len("<|im_end|>")))
        at = b
    enc = tk.encode(text, add_special_tokens=False)
    assert tk.decode(enc.ids, skip_special_tokens=False) == text
    mask = [int(any(s < e2 and s2 < e for s2, e2 in spans)) for s, e in enc.offsets]
    ids, mask = list(enc.ids)[:R], mask[:R]
    n = len(ids)
    return ids + [pad] * (R - n), mask + [0] * (R - n), len(enc.ids) > R

def rows(d, split, R):
    h = np.fromfile(f"{d}/{split}.bin", dtype=np.uint8, count=64)
    assert h[:8].tobytes() == b"MTTOKENS"
    t = np.fromfile(f"{d}/{split}.bin", dtype="<u2", offset=64)
    mh = np.fromfile(f"{d}/{split}.mask", dtype=np.uint8, count=64)
    assert mh[:8].tobytes() == b"MTLMASK1", mh[:8].tobytes()
    version, row = np.frombuffer(mh[8:16].tobytes(), "<u4")
    count, = np.frombuffer(mh[16:24].tobytes(), "<u8")
    assert version == 1 and row == R and count == len(t), (version, row, count, len(t))
    m = np.fromfile(f"{d}/{split}.mask", dtype=np.uint8, offset=64)
    assert len(m) == len(t) and len(t) % R == 0
    return t.reshape(-1, R).tolist(), m.reshape(-1, R).tolist()

ok = True
def check(name, records, R, val_fraction, meta_want):
    global ok
    meta = json.load(open(f"{name}/meta.json"))
    for k, v in meta_want.items():
        if meta.get(k) != v:
            print(f"{name}/meta.json: {k} = {meta.get(k)!r}, want {v!r}"); ok = False
    train_t, train_m = rows(name, "train", R)
    val_t, val_m = rows(name, "val", R)
    it = {"train": iter(zip(train_t, train_m)), "val": iter(zip(val_t, val_m))}
    truncated = 0
    for i, msgs in enumerate(records):
        split = "val" if int((i + 1) * val_fraction) > int(i * val_fraction) else "train"
        ids, mask, trunc = expected(msgs, R)
        truncated += trunc
        got_ids, got_mask = next(it[split])
        if got_ids != ids or got_mask != mask:
            ok = False
            print(f"{name} record {i} ({split}): rows differ")
            print("  want", [(toks[a], b) for a, b in zip(ids, mask)])
            print("  got ", [(toks[a], b) for a, b in zip(got_ids, got_mask)])
        elif sum(mask) < 2:
            ok = False; print(f"{name} record {i}: fewer than 2 assistant tokens, the check is too weak")
    for split in it:
        if next(it[split], None) is not None:
            ok = False; print(f"{name}: {split} holds more rows than expected")
    if meta["truncated_examples"] != truncated:
        ok = False; print(f"{name}: truncated_examples {meta['truncated_examples']}, want {truncated}")

chats = [json.loads(l)["messages"] for l in open("chat.jsonl") if l.strip()]
check("chat", chats, 97, 0.2, {"data_format": "chat", "seq_len": 96, "row_tokens": 97, "chat_template": "chatml",
                                "train_examples": 4, "val_examples": 1, "dropped_examples": 0, "pad_id": pad})
alp = []
for l in open("alpaca.jsonl"):
    rec = json.loads(l)
    user = rec["instruction"] + ("\n\n" + rec["input"] if rec.get("input") else "")
    alp.append([{"role": "system", "content": "Be brief."}, {"role": "user", "content": user},
                {"role": "assistant", "content": rec["output"]}])
check("alpaca", alp, 81, 0.0, {"data_format": "alpaca", "row_tokens": 81, "train_examples": 4, "val_examples": 0,
                               "chat_system": "Be brief."})
# meta.json records the system message of records without one: without --system, the default
# system turn of SmolLM2's template, which renders a conversation as that message in front does.
recorded = json.load(open("chat/meta.json")).get("chat_system")
with_recorded = [{"role": "system", "content": recorded or ""}] + chats[0]
if not recorded or jt.render(messages=with_recorded) != jt.render(messages=chats[0]):
    ok = False; print(f"chat/meta.json: chat_system {recorded!r} is not the default system turn of the template")
print("rows and masks equal the jinja2 + tokenizers reference" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
PY

# --chat_template alpaca renders the classic Alpaca prompt; the response ends with the
# end-of-text id, trained on (mask 1), so the model learns to stop.
"$MESHTRAIN_BIN" prepare --format alpaca --input alpaca.jsonl --output alp2 --tokenizer "$smollm" --seq_len 80 \
  --chat_template alpaca --val_fraction 0 --pack=false >alp2.log 2>&1 || { cat alp2.log; fail "prepare --chat_template alpaca failed"; }
"$py" - "$smollm" <<'PY' || fail "the Alpaca-template rows are wrong"
import json, sys
import numpy as np, gguf
r = gguf.GGUFReader(sys.argv[1])
toks = r.fields["tokenizer.ggml.tokens"].contents()
t = np.fromfile("alp2/train.bin", dtype="<u2", offset=64).reshape(-1, 81)
m = np.fromfile("alp2/train.mask", dtype=np.uint8, offset=64).reshape(-1, 81)
meta = json.load(open("alp2/meta.json"))
# No --system: no system message (Stanford's preamble), recorded as "".
ok = meta["chat_template"] == "alpaca" and meta.get("chat_system") == ""
for row, mask, out in zip(t, m, ["5", "die Katze", "Hi there!", "i-t"]):
    sel = [int(i) for i, k in zip(row, mask) if k]
    text = "".join(toks[i] for i in sel[:-1]).replace("Ġ", " ")
    ok &= text == out and sel[-1] == 0  # <|endoftext|> is id 0
    print(repr(text), toks[sel[-1]])
sys.exit(0 if ok else 1)
PY

# --pack (issue 30): the same examples, several to a row. Every segment of a packed row
# (train.docs) is exactly one example of the unpacked dataset (its tokens and mask bytes),
# each example appears once, and the rest of a row is padding with mask 0.
"$MESHTRAIN_BIN" prepare --format chat --input chat.jsonl --output chat_packed --tokenizer "$smollm" --seq_len 96 \
  --val_fraction 0.2 --pack >chat_packed.log 2>&1 || { cat chat_packed.log; fail "prepare --pack failed"; }
cat chat_packed.log
grep -q "fill before packing" chat_packed.log || fail "the --pack summary does not report the fill before packing"
# Packing is the default for chat/alpaca when examples share rows: without --pack the same
# rows as with it, and the summary says so.
"$MESHTRAIN_BIN" prepare --format chat --input chat.jsonl --output chat_default --tokenizer "$smollm" --seq_len 96 \
  --val_fraction 0.2 >chat_default.log 2>&1 || { cat chat_default.log; fail "prepare without --pack failed"; }
grep -q "packing is the default when examples share rows" chat_default.log || fail "the default's summary: $(cat chat_default.log)"
for f in train.bin train.mask train.docs val.bin val.mask val.docs; do
  cmp -s "chat_default/$f" "chat_packed/$f" || fail "the default's $f differs from --pack's"
done
"$MESHTRAIN_BIN" prepare --format chat --input chat.jsonl --output chat_badpack --tokenizer "$smollm" --seq_len 96 \
  --pack=maybe >badpack.log 2>&1
[[ $? -eq 2 ]] && grep -q "\-\-pack takes true, false or auto" badpack.log || fail "--pack=maybe is not refused: $(cat badpack.log)"
# --format text --pack: documents (a long one cut into row-sized pieces) packed, all trained on.
"$py" -c "print('short document\n' * 3)" >short.txt
"$py" -c "print('a long document line\n' * 400)" >long.txt
"$MESHTRAIN_BIN" prepare --input short.txt long.txt --output text_packed --tokenizer "$smollm" --seq_len 64 --pack \
  --val_fraction 0 >text_packed.log 2>&1 || { cat text_packed.log; fail "prepare --format text --pack failed"; }
grep -q "split: 1 document(s) longer than a row" text_packed.log || { cat text_packed.log; fail "text --pack summary"; }
"$MESHTRAIN_BIN" prepare --input short.txt --output text_nolen --pack >text_nolen.log 2>&1
[[ $? -eq 2 ]] && grep -q "needs --seq_len" text_nolen.log || fail "--format text --pack without --seq_len is not refused"
"$py" - <<'PY' || fail "text --pack rows are not the document's tokens"
import json, sys
import numpy as np
m = json.load(open("text_packed/meta.json"))
R = m["row_tokens"]
t = np.fromfile("text_packed/train.bin", dtype="<u2", offset=64).reshape(-1, R)
k = np.fromfile("text_packed/train.mask", dtype=np.uint8, offset=64).reshape(-1, R)
seg = np.frombuffer(open("text_packed/train.docs", "rb").read(), dtype="<u2", offset=64).reshape(-1, R)
ok = m["packed"] and m["data_format"] == "text" and R == 65
# Every non-padding segment ends a piece: its tokens are mask 1; the short document's piece ends with eot (0).
pieces = [t[r][seg[r] == s] for r in range(len(t)) for s in range(int(seg[r].max()) + 1) if k[r][seg[r] == s].all()]
ok &= sum(len(p) for p in pieces) == m["train_tokens"] - int((k == 0).sum())
ok &= sum(1 for p in pieces if p[-1] == 0) == 2  # two documents, each ends with end-of-text once
print("pieces", len(pieces), "rows", len(t), "ok", bool(ok))
sys.exit(0 if ok else 1)
PY
"$py" - <<'PY' || fail "packed rows are not the unpacked examples"
import json, sys
import numpy as np
R = 97
ok = True
meta = json.load(open("chat_packed/meta.json"))
ok &= meta["packed"] is True and meta["row_tokens"] == R
for split in ("train", "val"):
    t = np.fromfile(f"chat/{split}.bin", dtype="<u2", offset=64).reshape(-1, R)
    m = np.fromfile(f"chat/{split}.mask", dtype=np.uint8, offset=64).reshape(-1, R)
    pad = int(t[0, -1])
    want = []
    for row, mask in zip(t, m):
        n = R
        while n > 0 and row[n - 1] == pad and mask[n - 1] == 0:
            n -= 1
        want.append((tuple(row[:n].tolist()), tuple(mask[:n].tolist())))
    pt = np.fromfile(f"chat_packed/{split}.bin", dtype="<u2", offset=64).reshape(-1, R)
    pm = np.fromfile(f"chat_packed/{split}.mask", dtype=np.uint8, offset=64).reshape(-1, R)
    raw = open(f"chat_packed/{split}.docs", "rb").read()
    ok &= raw[:8] == b"MTLDOCS1" and int.from_bytes(raw[12:16], "little") == R
    seg = np.frombuffer(raw, dtype="<u2", offset=64).reshape(-1, R)
    got = []
    for row, mask, s in zip(pt, pm, seg):
        for k in range(int(s.max()) + 1):
            idx = np.nonzero(s == k)[0]
            piece = (tuple(row[idx].tolist()), tuple(mask[idx].tolist()))
            if all(x == pad for x in piece[0]) and not any(piece[1]):
                ok &= k == int(s.max())  # padding: only the last segment
                continue
            got.append(piece)
    ok &= sorted(got) == sorted(want) and len(pt) <= len(t)
    print(split, "examples", len(want), "packed rows", len(pt), "segments match:", sorted(got) == sorted(want))
sys.exit(0 if ok else 1)
PY

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "PASS: prepare --format chat/alpaca rows and masks equal an independent rendering"
