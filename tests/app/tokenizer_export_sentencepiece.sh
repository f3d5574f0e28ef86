#!/usr/bin/env bash
# issue 28: `convert` exports a GGUF SentencePiece ("llama") tokenizer as the files Hugging
# Face's stack loads: tokenizer.model (the ModelProto meshtrain runs, as libsentencepiece
# serialises it) and a LlamaTokenizer tokenizer_config.json. A SentencePiece BPE model
# trained here is written as a GGUF vocabulary; a tiny Llama trains 1 step on data
# tokenized with that GGUF, and the export's tokenizer.model, loaded by the `sentencepiece`
# package, encodes text like `meshtrain tokenize --tokenizer GGUF` and decodes it back; the
# config names the GGUF's special pieces.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf sentencepiece
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false
bin=$MESHTRAIN_BIN
# shellcheck source=../support/run_logged.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/run_logged.sh"

"$py" - <<'PY' || { fail "building the SentencePiece GGUF"; exit 1; }
import random, gguf, sentencepiece as spm
rng = random.Random(3)
syllables = ["me", "sh", "ra", "nk", "to", "ken", "win", "dow", "ga", "ther", "re", "du", "ce", "ste", "p", "lo", "ss"]
words = ["Grüße", "naïve", "日本"] + ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(300)]
with open("corpus.txt", "w", encoding="utf-8") as f:
    for _ in range(3000):
        f.write(" ".join(rng.choice(words) for _ in range(10)) + ".\n")
spm.SentencePieceTrainer.train(input="corpus.txt", model_prefix="sp", model_type="bpe", vocab_size=384,
                               byte_fallback=True, normalization_rule_name="identity",
                               remove_extra_whitespaces=False, character_coverage=1.0, minloglevel=2, num_threads=1)
sp = spm.SentencePieceProcessor(model_file="sp.model")
w = gguf.GGUFWriter("sp.gguf", arch="llama")
w.add_tokenizer_model("llama")
n = sp.get_piece_size()
w.add_token_list([sp.id_to_piece(i) for i in range(n)])
w.add_token_scores([sp.get_score(i) for i in range(n)])
w.add_token_types([2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in range(n)])
w.add_bos_token_id(sp.bos_id())
w.add_eos_token_id(sp.eos_id())
w.add_unk_token_id(sp.unk_id())
w.add_add_space_prefix(True)
w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PY
run prepare "$bin" prepare --input corpus.txt --output data --tokenizer sp.gguf || exit 1
run train "$bin" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini" --model.vocab_size=384 --data.dir=data \
  --output.dir=run --train.steps=1 --train.eval_every=0 || exit 1
run convert "$bin" convert --input run/checkpoints --output export || exit 1
grep -q "not exported" convert.log && fail "convert says the tokenizer is not exported: $(cat convert.log)"
[[ -f export/tokenizer.model && -f export/tokenizer_config.json ]] ||
  fail "the export lacks tokenizer.model or tokenizer_config.json: $(ls export | tr '\n' ' ')"

printf 'mesh rank gather. Grüße naïve 日本 step\n  two  spaces, tabs\there, ünknown ✓ chars and 12345.' >t.txt
run tokenize "$bin" tokenize --tokenizer sp.gguf t.txt || exit 1
"$py" - <<'PY' || fail "the exported tokenizer.model does not encode like the model's tokenizer"
import json, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file="export/tokenizer.model")
text = open("t.txt", encoding="utf-8").read()
mine = [int(x) for x in open("tokenize.log").read().split()]
ids = sp.encode(text)
# meshtrain's tokenize prints the ids of the text, BOS included when the tokenizer adds one.
body = mine[1:] if mine and mine[0] == sp.bos_id() else mine
assert ids == body, (ids, mine)
assert sp.decode(ids) == text, sp.decode(ids)
cfg = json.load(open("export/tokenizer_config.json"))
assert cfg["tokenizer_class"] == "LlamaTokenizer", cfg
assert cfg["bos_token"] == sp.id_to_piece(sp.bos_id()) and cfg["eos_token"] == sp.id_to_piece(sp.eos_id()), cfg
assert cfg["unk_token"] == sp.id_to_piece(sp.unk_id()) and cfg["add_bos_token"] is True, cfg
assert cfg["chat_template"].startswith("{% for m in messages %}"), cfg
print(f"sentencepiece {spm.__version__}: {len(ids)} ids equal to meshtrain's; config {cfg['tokenizer_class']}")
PY
exit $((failures > 0))
