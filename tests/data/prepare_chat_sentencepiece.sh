#!/usr/bin/env bash
# `meshtrain prepare --format chat` with SentencePiece tokenizers and Llama 2's chat template:
# a tokenizer.model directory (tokenizer_config.json with Meta's Llama-2-chat template) and
# the same model as a GGUF "llama" vocabulary. The rows and loss masks are checked against an
# INDEPENDENT rendering: the Jinja template rendered by jinja2 and tokenized by Hugging Face
# `tokenizers` as Llama 2's tokenizer.json does (BPE from the SentencePiece model as
# transformers' LlamaConverter builds it, normalizer Prepend('▁') + Replace(' ', '▁') applied
# per text segment between the added tokens <unk>, <s>, </s>: transformers' legacy=True
# behaviour, which Llama-2-chat's tokenizer.json has), mask from the tokenizer's offsets. So
# "<s>" is BOS (1) and each reply's " </s>" ends with EOS (2), trained (mask 1), never the
# text "▁ < / s >". Also: sentencepiece itself per segment gives the same ids; the llama3 and
# chatml templates, whose markers this vocabulary lacks, are refused (exit 2, nothing written).
set -uo pipefail
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf tokenizers sentencepiece jinja2

"$py" - <<'PY' || fail "building the SentencePiece model, its GGUF and the inputs"
import json, os
import gguf, sentencepiece as spm
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
          "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
          "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
          "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
          "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
          "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
          "{% endfor %}")
os.makedirs("sp", exist_ok=True)
# BPE, as Llama 2's (a unigram model is no BPE for tokenizers' converter).
spm.SentencePieceTrainer.train(input="/usr/share/common-licenses/Apache-2.0", model_prefix="sp/tokenizer",
                               model_type="bpe", vocab_size=600, byte_fallback=True, normalization_rule_name="identity",
                               remove_extra_whitespaces=False, minloglevel=2, num_threads=1)
json.dump({"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA2},
          open("sp/tokenizer_config.json", "w"))
json.dump({"template": LLAMA2}, open("template.json", "w"))
sp = spm.SentencePieceProcessor(model_file="sp/tokenizer.model")
w = gguf.GGUFWriter("sp.gguf", arch="llama")
w.add_tokenizer_model("llama")
w.add_token_list([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
w.add_token_scores([sp.get_score(i) for i in range(sp.get_piece_size())])
w.add_token_types([2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1
                   for i in range(sp.get_piece_size())])
w.add_bos_token_id(sp.bos_id())
w.add_eos_token_id(sp.eos_id())
w.add_unk_token_id(sp.unk_id())
w.add_add_space_prefix(True)
w.add_chat_template(LLAMA2)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
chats = [
    [{"role": "user", "content": "What is the License?"}, {"role": "assistant", "content": "The Apache License."}],
    [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Who is a Contributor?"},
     {"role": "assistant", "content": " Licensor and any entity. "}, {"role": "user", "content": "And a Work?"},
     {"role": "assistant", "content": "The work of authorship, café."}],
    [{"role": "user", "content": "Say <s> and </s> as text"}, {"role": "assistant", "content": "ok"}],
]
with open("chat.jsonl", "w") as f:
    for m in chats:
        f.write(json.dumps({"messages": m}) + "\n")
PY

for spec in sp sp.gguf; do
  out=ds_${spec%%.*}_${spec##*.}
  "$MESHTRAIN_BIN" prepare --format chat --input chat.jsonl --output "$out" --tokenizer "$spec" --seq_len 200 \
    --val_fraction 0 --pack=false >"$out.log" 2>&1 || { cat "$out.log"; fail "prepare --tokenizer $spec failed"; }
done

"$py" - <<'PY' || fail "rows or masks differ from the independent jinja2 + tokenizers rendering"
import json, os, sys
import numpy as np, jinja2, sentencepiece as spm
sys.path.insert(0, os.environ["MESHTRAIN_SOURCE_DIR"] + "/tests/support")
from dataset_rows import rows
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers
sp = spm.SentencePieceProcessor(model_file="sp/tokenizer.model")
n = sp.get_piece_size()
# transformers' LlamaConverter: vocab and scores of the model, merges by SentencePieceExtractor.
vocab = {sp.id_to_piece(i): i for i in range(n)}
scores = {sp.id_to_piece(i): sp.get_score(i) for i in range(n)}
merges = []
for merge, score in scores.items():
    local = [(merge[:k], merge[k:], score) for k in range(1, len(merge)) if merge[:k] in vocab and merge[k:] in vocab]
    merges += sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]]))
merges = [(a, b) for a, b, _ in sorted(merges, key=lambda x: x[2], reverse=True)]
tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                decoders.Strip(" ", 1, 0)])
tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
def raise_exception(m): raise ValueError(m)
env = jinja2.Environment()
env.globals["raise_exception"] = raise_exception
jt = env.from_string(json.load(open("template.json"))["template"])

def legacy_sp(text):
    """sentencepiece itself, per text segment between <s> / </s> (transformers' slow LlamaTokenizer, legacy)."""
    ids, rest = [], text
    while rest:
        hits = [(rest.find(t), t) for t in ("<s>", "</s>") if rest.find(t) >= 0]
        if not hits:
            return ids + sp.encode(rest)
        at, t = min(hits)
        ids += (sp.encode(rest[:at]) if at else []) + [sp.piece_to_id(t)]
        rest = rest[at + len(t):]
    return ids

def expected(messages, R):
    text = jt.render(messages=messages, bos_token="<s>", eos_token="</s>")
    spans, at = [], 0
    for m in messages:  # each stripped reply + " </s>", in order
        if m["role"] != "assistant":
            continue
        piece = " " + m["content"].strip() + " </s>"
        b = text.index(piece, at) + 1
        spans.append((b, b + len(piece) - 1))
        at = b
    enc = tk.encode(text, add_special_tokens=False)
    # (Not tk.decode: Llama 2's decoder strips only the text's first '▁', so HF decodes
    # "<s>[INST]" as "<s> [INST]"; meshtrain's decoding gives the text back, prepare checks it.)
    assert list(enc.ids) == legacy_sp(text), ("tokenizers and sentencepiece disagree", text)
    mask = [int(any(s < e2 and s2 < e for s2, e2 in spans)) for s, e in enc.offsets]
    ids, mask = list(enc.ids)[:R], mask[:R]
    return ids + [2] * (R - len(ids)), mask + [0] * (R - len(ids))


ok = True
chats = [json.loads(l)["messages"] for l in open("chat.jsonl")]
for d in ("ds_sp_sp", "ds_sp_gguf"):
    meta = json.load(open(f"{d}/meta.json"))
    if meta["chat_template"] != "llama2":
        ok = False; print(f"{d}: chat_template {meta['chat_template']}, want llama2 (from the tokenizer's template)")
    got_t, got_m = rows(d, "train", 201)
    for i, msgs in enumerate(chats):
        ids, mask = expected(msgs, 201)
        if got_t[i] != ids or got_m[i] != mask:
            ok = False
            print(f"{d} record {i}: rows differ")
            print("  want", [(sp.id_to_piece(a), b) for a, b in zip(ids, mask)])
            print("  got ", [(sp.id_to_piece(a), b) for a, b in zip(got_t[i], got_m[i])])
        n_eos = sum(1 for a, b in zip(ids, mask) if a == 2 and b == 1)
        if n_eos != sum(m["role"] == "assistant" for m in msgs):
            ok = False; print(f"{d} record {i}: {n_eos} trained EOS, want one per reply")
print("rows and masks equal the jinja2 + tokenizers reference (legacy Llama 2 tokenization)" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
PY

# Templates whose end-of-turn marker this vocabulary lacks: refused, nothing written.
for t in llama3 chatml; do
  marker='<|eot_id|>'; [[ $t == chatml ]] && marker='<|im_end|>'
  "$MESHTRAIN_BIN" prepare --format chat --chat_template "$t" --input chat.jsonl --output "refused_$t" \
    --tokenizer sp --seq_len 80 >"refused_$t.log" 2>&1
  rc=$?
  ((rc == 2)) || fail "--chat_template $t with a vocabulary without $marker: exit $rc, want 2"
  grep -qF "the $t chat template ends each assistant turn with '$marker', which the tokenizer $PWD/sp encodes as" \
    "refused_$t.log" && grep -q "encodes as [0-9]* ids, not one token.*--chat_template.*a tokenizer that has" \
    "refused_$t.log" || { cat "refused_$t.log"; fail "--chat_template $t: not the end-of-turn message"; }
  [[ ! -e refused_$t ]] || fail "--chat_template $t: the refused prepare wrote refused_$t"
done
exit $((failures > 0))
