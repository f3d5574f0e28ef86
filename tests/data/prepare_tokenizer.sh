#!/usr/bin/env bash
# `meshtrain prepare --tokenizer SPEC` with real tokenizers: the SmolLM2 GGUF, a Hugging Face
# directory holding the same vocabulary as tokenizer.json (same hash as the GGUF), and a
# SentencePiece model whose tokenizer_config.json asks for BOS. train.bin holds exactly
# `meshtrain tokenize`'s ids per document (BOS first when asked, end-of-text last); meta.json
# records kind, vocabulary, special ids and hash; bad specs exit 2 with one message.
set -uo pipefail
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf tokenizers sentencepiece
mkdir corpus && cp /usr/share/common-licenses/{Apache-2.0,BSD,MPL-2.0} corpus/

# The HF directory (vocabulary and merges of the GGUF) and a SentencePiece model.
"$py" - "$smollm" <<'PY' || fail "building the reference tokenizers"
import json, os, sys
import gguf, sentencepiece as spm
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
r = gguf.GGUFReader(sys.argv[1])
toks = r.fields["tokenizer.ggml.tokens"].contents()
merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
types = r.fields["tokenizer.ggml.token_type"].contents()
tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                            pre_tokenizers.ByteLevel(add_prefix_space=False)])
tk.decoder = decoders.ByteLevel()
tk.add_special_tokens([AddedToken(toks[i], special=True, normalized=False) for i, t in enumerate(types) if t in (3, 4)])
os.makedirs("hf", exist_ok=True)
tk.save("hf/tokenizer.json")
json.dump({"eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "add_bos_token": False}, open("hf/tokenizer_config.json", "w"))
os.makedirs("sp", exist_ok=True)
spm.SentencePieceTrainer.train(input="corpus/Apache-2.0", model_prefix="sp/tokenizer", vocab_size=600,
                               byte_fallback=True, normalization_rule_name="identity",
                               remove_extra_whitespaces=False, minloglevel=2, num_threads=1)
json.dump({"add_bos_token": True}, open("sp/tokenizer_config.json", "w"))
PY

# check NAME SPEC EXPECTED_KIND: prepare, then compare train.bin with tokenize's ids.
check() {
  local name=$1 spec=$2 kind=$3
  "$MESHTRAIN_BIN" prepare --input corpus --output "ds_$name" --tokenizer "$spec" --val_fraction 0 >"$name.log" 2>&1
  local rc=$?
  ((rc == 0)) || { cat "$name.log"; fail "$name: prepare exited $rc"; return; }
  "$MESHTRAIN_BIN" tokenize --info --tokenizer "$spec" >"$name.info" 2>&1 || { fail "$name: tokenize --info"; return; }
  mapfile -t files < <("$py" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["source_files"]))' "ds_$name/meta.json")
  "$MESHTRAIN_BIN" tokenize --tokenizer "$spec" "${files[@]}" >"$name.ids" 2>&1 || { fail "$name: tokenize"; return; }
  "$py" - "ds_$name" "$name.info" "$name.ids" "$kind" <<'PY' || fail "$name: train.bin or meta.json is wrong"
import json, struct, sys
ds, info, ids, kind = sys.argv[1:5]
meta = json.load(open(f"{ds}/meta.json"))
info = json.loads(open(info).read())
raw = open(f"{ds}/train.bin", "rb").read()
assert raw[:8] == b"MTTOKENS", "bad magic"
width, vocab, count = struct.unpack_from("<IQQ", raw, 12)
got = list(struct.unpack_from("<%d%s" % (count, "H" if width == 2 else "I"), raw, 64))
want = []
for line in open(ids).read().splitlines():
    want += ([info["bos_id"]] if info["add_bos"] else []) + [int(x) for x in line.split()] + [info["eot_id"]]
ok = True
for key, value in [("tokenizer_kind", kind), ("vocab_size", info["vocab_size"]), ("tokenizer_hash", info["hash"]),
                   ("eot_id", info["eot_id"]), ("bos_id", info["bos_id"]), ("eos_id", info["eos_id"]),
                   ("pad_id", info["pad_id"]), ("add_bos", info["add_bos"])]:
    if meta[key] != value:
        print(f"meta.json {key} = {meta[key]!r}, expected {value!r}"); ok = False
if not meta["tokenizer"].startswith("/"):
    print("meta.json tokenizer is not an absolute path:", meta["tokenizer"]); ok = False
if got != want:
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    print(f"train.bin differs from the tokenize ids at token {k} ({len(got)} vs {len(want)} tokens)"); ok = False
print(f"{ds}: {len(got)} tokens, kind {meta['tokenizer_kind']}, vocab {meta['vocab_size']}, hash {meta['tokenizer_hash']}")
sys.exit(0 if ok else 1)
PY
}
check gguf "$smollm" bpe
check hf hf bpe
check sp sp/tokenizer.model sentencepiece
h1=$("$py" -c 'import json; print(json.load(open("ds_gguf/meta.json"))["tokenizer_hash"])')
h2=$("$py" -c 'import json; print(json.load(open("ds_hf/meta.json"))["tokenizer_hash"])')
[[ -n "$h1" && "$h1" == "$h2" ]] || fail "the GGUF and the tokenizer.json of the same vocabulary hash differently ($h1, $h2)"
[[ $(jq '.add_bos' ds_sp/meta.json) == true ]] || fail "the SentencePiece dataset does not record add_bos"

# Gemma's special-token names (<pad> <eos> <bos> <unk>) in a GGUF SentencePiece vocabulary:
# the ids are the metadata's (bos 2, eos 1), or found by name where it is silent; never
# SentencePiece's own look-up of "<s>" / "</s>", which found none (issue 28).
"$py" - <<'PY' || fail "writing the Gemma-style GGUF vocabularies"
import gguf
toks = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "\u2581the", "e", "t"]
types = [3, 3, 3, 2] + [6] * 256 + [1] * 4
for name, ids in (("gemma.gguf", True), ("gemma_noids.gguf", False)):
    w = gguf.GGUFWriter(name, arch="llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_scores([0.0] * len(toks))
    if ids:
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
        w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
PY
check gemma gemma.gguf sentencepiece
check gemma_noids gemma_noids.gguf sentencepiece
for ds in ds_gemma ds_gemma_noids; do
  "$py" -c 'import json, sys; m = json.load(open(sys.argv[1] + "/meta.json"))
assert (m["bos_id"], m["eos_id"], m["eot_id"], m["add_bos"]) == (2, 1, 1, True), m' "$ds" ||
    fail "$ds: the Gemma-style special ids are not bos 2, eos 1, end-of-text 1 with add_bos"
done

# Bad specs: exit status 2, one message naming the problem; no dataset written.
printf '{"model": {"type": "WordPiece", "vocab": {}}}' >wordpiece.json
"$py" -c "import gguf; w=gguf.GGUFWriter('notok.gguf', arch='llama'); w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()"
head -c 100 "$smollm" >truncated.gguf
for c in "nope|neither 'byte' nor an existing file" "wordpiece.json|model type 'WordPiece'" \
         "notok.gguf|has no tokenizer" "truncated.gguf|truncated" "corpus|neither tokenizer.json nor tokenizer.model"; do
  spec=${c%%|*} expect=${c#*|}
  "$MESHTRAIN_BIN" prepare --input corpus --output "bad_$spec" --tokenizer "$spec" >bad.log 2>&1
  rc=$?
  [[ $rc -eq 2 ]] || fail "--tokenizer $spec: exit status $rc, expected 2"
  grep -qF -- "$expect" bad.log || { cat bad.log; fail "--tokenizer $spec: the message lacks '$expect'"; }
  [[ -e "bad_$spec/meta.json" ]] && fail "--tokenizer $spec: a dataset was written"
done

# Training refuses a dataset whose tokenizer is not the one the model source brings: a tiny
# Llama exported to a Hugging Face directory with a byte-level tokenizer.json of 257 ids.
tiny=(train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini" --train.eval_every=0 --train.steps=1)
"$MESHTRAIN_BIN" "${tiny[@]}" --data.dir=random --output.dir=base >base.log 2>&1 &&
  "$MESHTRAIN_BIN" convert --input base/checkpoints --output hf_llama >convert.log 2>&1 ||
  { cat base.log convert.log; fail "training or converting the tiny model"; }
"$py" - <<'PY' || fail "writing the tiny tokenizer.json"
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
chars = pre_tokenizers.ByteLevel.alphabet()
tk = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(chars))}, merges=[]))
tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tk.decoder = decoders.ByteLevel()
tk.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
tk.save("hf_llama/tokenizer.json")
PY
"$MESHTRAIN_BIN" prepare --input corpus --output ds_byte >/dev/null 2>&1 || fail "prepare ds_byte"
"$MESHTRAIN_BIN" prepare --input corpus --output ds_match --tokenizer hf_llama >/dev/null 2>&1 || fail "prepare ds_match"
"$MESHTRAIN_BIN" "${tiny[@]}" --data.dir=ds_byte --checkpoint.init_from=hf_llama --output.dir=run_bad >bad_train.log 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "training on a byte dataset from a model with a BPE tokenizer: exit status $rc, expected 2"
grep -q "was tokenized with a byte tokenizer but model hf_llama uses a bpe tokenizer" bad_train.log ||
  { cat bad_train.log; fail "the refusal does not name both tokenizers"; }
"$MESHTRAIN_BIN" "${tiny[@]}" --data.dir=ds_match --checkpoint.init_from=hf_llama --output.dir=run_ok >ok_train.log 2>&1 ||
  { cat ok_train.log; fail "training on a dataset made with the model's own tokenizer failed"; }

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "prepare with tokenizers: all checks passed"
