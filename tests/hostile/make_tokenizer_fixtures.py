#!/usr/bin/env python3
"""Crafts the tokenizer and model-metadata inputs of the hostile-input suite: tokenizers
whose special tokens a prepare format needs are missing, and files whose integers do not
fit the int they become (issue 28). Needs the `sentencepiece` and `gguf` packages (the
dependency cache, /opt/meshtrain-deps/python, on PYTHONPATH) and numpy.

usage: make_tokenizer_fixtures.py DATA_DIR HF_EXPORT_DIR OUT_DIR

Writes under OUT_DIR/tok: text.txt and chat.jsonl (inputs for prepare); SentencePiece
models (sp_noeos.model: no end-of-text, no BOS, no pad; sp_nobos/: no BOS piece but
tokenizer_config.json asks for one; sp_plain.model: Llama 2's <unk> <s> </s>, no other chat
marker); tokenizer.json files (noeos.json, vocab_float.json,
added_huge.json); tokenizer directories whose tokenizer_config.json is of the wrong form
(cfg_bos_number/, cfg_add_bos_text/, cfg_array/, cfg_not_json/); GGUF files (gemma_eos_huge.gguf, gpt2_noeos.gguf, layers_huge.gguf,
ffn_huge.gguf); hf_layers_huge/ and hf_embd_huge/ (the export with a config.json whose
n_layer / n_embd exceed 2^32), hf_attn_unscaled/ and hf_attn_layer_scaled/ (GPT-2 attention
variants meshtrain does not compute); ids_huge.txt (a token id of 2^32 + 1 for tokenize
--decode); d_eot_huge/ (a dataset whose meta.json eot_id exceeds 2^32).
"""
import json
import os
import shutil
import sys

import gguf
import numpy as np
import sentencepiece as spm

data_dir, hf_dir, out = sys.argv[1:4]
out = os.path.join(out, "tok")
os.makedirs(out, exist_ok=True)
BIG = 2**32 + 2


def path(*parts):
    return os.path.join(out, *parts)


words = ["mesh", "rank", "shard", "token", "window", "gather", "reduce", "step", "loss", "the", "a", "of"]
text = "\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(400)) + "\n"
open(path("text.txt"), "w").write(text)
with open(path("chat.jsonl"), "w") as f:
    for i in range(4):
        f.write(json.dumps({"messages": [{"role": "user", "content": f"say {words[i]}"},
                                         {"role": "assistant", "content": f"{words[i]} {words[i + 1]}"}]}) + "\n")

# ---- SentencePiece ------------------------------------------------------------------------


def sp_train(prefix, **kw):
    spm.SentencePieceTrainer.train(input=path("text.txt"), model_prefix=prefix, vocab_size=320, byte_fallback=True, hard_vocab_limit=False,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   minloglevel=2, num_threads=1, **kw)


sp_train(path("sp_noeos"), bos_id=-1, eos_id=-1)
sp_train(path("sp_plain"))  # <unk> <s> </s>: no chat marker but Llama 2's
os.makedirs(path("sp_nobos"), exist_ok=True)
sp_train(path("sp_nobos", "tokenizer"), bos_id=-1)
json.dump({"add_bos_token": True}, open(path("sp_nobos", "tokenizer_config.json"), "w"))

# ---- tokenizer.json -----------------------------------------------------------------------


def tokenizer_json(name, vocab, added=(), edit=None):
    j = {"version": "1.0", "added_tokens": list(added), "normalizer": None,
         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
         "post_processor": None, "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    if edit:
        edit(j)
    json.dump(j, open(path(name), "w"))


# GPT-2's byte-to-character table: every byte is one token, so any text encodes.
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
byte_vocab = {chr(c): i for i, c in enumerate(cs)}
tokenizer_json("noeos.json", byte_vocab)  # no <|endoftext|>, no </s>, no tokenizer_config.json
tokenizer_json("vocab_float.json", dict(byte_vocab, **{"!": 1.5}))
tokenizer_json("added_huge.json", byte_vocab,
               added=[{"id": 2**40, "content": "<|endoftext|>", "special": True, "single_word": False,
                       "lstrip": False, "rstrip": False, "normalized": False}])
# tokenizer_config.json beside a tokenizer.json with a value of the wrong type (the readers
# passed it over and used another token) or not a JSON object.
for name, cfg in (("cfg_bos_number", '{"bos_token": 5}'), ("cfg_add_bos_text", '{"add_bos_token": "yes"}'),
                  ("cfg_array", '[]'), ("cfg_not_json", '{"bos_token": ')):
    os.makedirs(path(name), exist_ok=True)
    tokenizer_json(os.path.join(name, "tokenizer.json"), byte_vocab)
    open(path(name, "tokenizer_config.json"), "w").write(cfg)

# ---- GGUF ---------------------------------------------------------------------------------


def gguf_vocab(name, model, tokens, types, kv=None, tensors=None, arch="llama"):
    w = gguf.GGUFWriter(path(name), arch=arch)
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if model == "llama":
        w.add_token_scores([0.0] * len(tokens))
    else:
        w.add_token_merges(["a b"])
        w.add_string("tokenizer.ggml.pre", "gpt2")
    for key, (kind, value) in (kv or {}).items():
        getattr(w, "add_" + kind)(key, value)
    for tname, array in (tensors or {}).items():
        w.add_tensor(tname, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Gemma's names (<pad> <eos> <bos> <unk>, then bytes); an eos_token_id past 2^32.
gemma = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "a", "b"]
gemma_types = [3, 3, 3, 2] + [6] * 256 + [1, 1, 1]
gguf_vocab("gemma_eos_huge.gguf", "llama", gemma, gemma_types,
           kv={"tokenizer.ggml.bos_token_id": ("uint32", 2), "tokenizer.ggml.eos_token_id": ("uint64", 2**32 + 1)})
# A byte-level BPE vocabulary with Gemma's names but no eos_token_id and no end-of-text token.
gguf_vocab("gpt2_noeos.gguf", "gpt2", ["<bos>", "<end>"] + [chr(c) for c in cs] + ["ab"], [3, 3] + [1] * 257)
# Llama shape metadata past 2^32 (the rest is tiny-llama's: d 64, 4 heads, 2 KV heads).
emb = np.zeros((264, 64), dtype=np.float32)


def llama_shape(name, **over):
    kv = {"llama.embedding_length": ("uint32", 64), "llama.attention.head_count": ("uint32", 4),
          "llama.attention.head_count_kv": ("uint32", 2), "llama.block_count": ("uint32", 2),
          "llama.feed_forward_length": ("uint32", 128), "llama.context_length": ("uint32", 64),
          "llama.attention.layer_norm_rms_epsilon": ("float32", 1e-5)}
    kv.update({k: ("uint64", v) for k, v in over.items()})
    w = gguf.GGUFWriter(path(name), arch="llama")
    for key, (kind, value) in kv.items():
        getattr(w, "add_" + kind)(key, value)
    w.add_tensor("token_embd.weight", emb)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


llama_shape("layers_huge.gguf", **{"llama.block_count": BIG})
llama_shape("ffn_huge.gguf", **{"llama.feed_forward_length": 2**32 + 128})

# ---- config.json, token ids, meta.json ----------------------------------------------------


def hf_variant(name, **over):
    d = path(name)
    shutil.copytree(hf_dir, d)
    c = json.load(open(os.path.join(d, "config.json")))
    c.update(over)
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)


hf_variant("hf_layers_huge", n_layer=BIG)
hf_variant("hf_embd_huge", n_embd=2**32 + 64)
hf_variant("hf_attn_unscaled", scale_attn_weights=False)
hf_variant("hf_attn_layer_scaled", scale_attn_by_inverse_layer_idx=True)
open(path("ids_huge.txt"), "w").write("104 105 4294967297\n")
shutil.copytree(data_dir, path("d_eot_huge"))
m = json.load(open(path("d_eot_huge", "meta.json")))
m["eot_id"] = 2**32 + 256
json.dump(m, open(path("d_eot_huge", "meta.json"), "w"), indent=2)
