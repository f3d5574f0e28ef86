#!/usr/bin/env python3
"""The Hugging Face `safetensors` package as the independent reader and writer.

  exported CKPT.h5 DIR [--bf16]   DIR (from `meshtrain convert`) holds every /model tensor
                                  of CKPT.h5 (vocab rows cut to config.json's vocab_size),
                                  read with safetensors (numpy; torch for bf16), equal
                                  bitwise (bf16: equal to torch's rounding of the fp32);
                                  config.json is the family's HF format
  write-gpt2 CKPT.h5 OUT          writes OUT.safetensors the way the hub's gpt2 is stored:
                                  no "transformer." prefix, causal-mask buffers, a tied
                                  lm_head, fp16 weights; values from CKPT.h5 perturbed
  write-llama CKPT.h5 DIR         writes a sharded llama model (2 shards + index, fp32)
  imported SOURCE CKPT.h5         CKPT.h5 (meshtrain after init_from=SOURCE, lr 0) holds
                                  SOURCE's values as fp32, bitwise
"""
import json
import os
import sys

import h5py
import numpy as np
from safetensors.numpy import load_file, save_file


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def model_tensors(h5_path):
    with h5py.File(h5_path, "r") as f:
        return {k: f["model"][k][...] for k in f["model"]}, f["model"].attrs["family"].decode(), \
            int(f["model"].attrs["vocab_size"])


def read_dir(d):
    """Every tensor of an HF model dir (single file or index + shards), via safetensors."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        wm = json.load(open(index))["weight_map"]
        out = {}
        for shard in sorted(set(wm.values())):
            out.update(load_file(os.path.join(d, shard)))
        if set(out) != set(wm):
            fail("index weight_map and shard contents differ")
        return out, sorted(set(wm.values()))
    return load_file(os.path.join(d, "model.safetensors")), ["model.safetensors"]


def exported(h5_path, d, bf16):
    want, family, vocab = model_tensors(h5_path)
    cfg = json.load(open(os.path.join(d, "config.json")))
    keys = {"gpt2": ["n_embd", "n_layer", "n_head", "n_positions", "layer_norm_epsilon"],
            "llama": ["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                      "num_hidden_layers", "max_position_embeddings", "rms_norm_eps", "rope_theta"]}[family]
    missing = [k for k in keys + ["architectures", "vocab_size", "tie_word_embeddings", "torch_dtype"] if k not in cfg]
    if cfg.get("model_type") != family or missing:
        fail(f"config.json: model_type {cfg.get('model_type')}, missing keys {missing}")
    if cfg["vocab_size"] != vocab or cfg["torch_dtype"] != ("bfloat16" if bf16 else "float32"):
        fail(f"config.json: vocab_size {cfg['vocab_size']} (want {vocab}), torch_dtype {cfg['torch_dtype']}")
    if bf16:
        import torch
        from safetensors.torch import load_file as load_torch
        index = os.path.join(d, "model.safetensors.index.json")
        files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
            else ["model.safetensors"]
        got = {}
        for fname in files:
            got.update(load_torch(os.path.join(d, fname)))
    else:
        got, files = read_dir(d)
    if set(got) != set(want):
        fail(f"tensor names differ: {sorted(set(got) ^ set(want))[:5]}")
    for name, w in want.items():
        if w.ndim == 2 and w.shape[0] > vocab and is_vocab_rows(name):
            w = np.ascontiguousarray(w[:vocab])
        g = got[name]
        if tuple(g.shape) != w.shape:
            fail(f"{name}: shape {tuple(g.shape)}, expected {w.shape}")
        if bf16:
            if g.dtype != torch.bfloat16:
                fail(f"{name}: dtype {g.dtype}, expected bfloat16")
            ref = torch.from_numpy(np.ascontiguousarray(w)).to(torch.bfloat16)
            if not torch.equal(g.view(torch.int16), ref.view(torch.int16)):
                fail(f"{name}: bf16 values differ from torch's rounding of the checkpoint")
        elif g.dtype != np.float32 or not np.array_equal(g.view(np.uint32), w.view(np.uint32)):
            fail(f"{name}: fp32 values differ")
    print(f"safetensors read {len(want)} tensors from {len(files)} file(s) of {d}: equal to {h5_path}")


def is_vocab_rows(name):
    return "wte" in name or "embed_tokens" in name or name == "lm_head.weight"


def perturbed(h5_path):
    """Values different from anything meshtrain initialises (so the import is visible), with
    vocab_size embedding rows as HF stores them (meshtrain pads its rows)."""
    rng = np.random.default_rng(7)
    want, family, vocab = model_tensors(h5_path)
    out = {}
    for k, v in want.items():
        if is_vocab_rows(k):
            v = v[:vocab]
        out[k] = (v + rng.normal(0, 0.01, v.shape)).astype(np.float32)
    return out, vocab


def write_gpt2(h5_path, out):
    t, vocab = perturbed(h5_path)
    hub = {}
    for k, v in t.items():
        hub[k.removeprefix("transformer.")] = v.astype(np.float16)
    n_layer = sum(1 for k in hub if k.endswith(".ln_1.weight"))
    for i in range(n_layer):  # HF's non-parameter buffers
        hub[f"h.{i}.attn.bias"] = np.tril(np.ones((64, 64), np.float32))[None, None]
        hub[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    hub["lm_head.weight"] = hub["wte.weight"].copy()
    save_file(hub, out, metadata={"format": "pt"})
    print(f"wrote {out}: {len(hub)} tensors (fp16 weights, hub spellings)")


def write_llama(h5_path, d):
    t, vocab = perturbed(h5_path)
    os.makedirs(d, exist_ok=True)
    names = sorted(t)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    wm = {}
    for i, part in enumerate(halves):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({k: t[k] for k in part}, os.path.join(d, fname), metadata={"format": "pt"})
        wm.update({k: fname for k in part})
    total = sum(v.nbytes for v in t.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": wm},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)
    print(f"wrote {d}: {len(t)} tensors in 2 shards + index")


def imported(source, h5_path):
    got, family, vocab = model_tensors(h5_path)
    if os.path.isdir(source):
        src, _ = read_dir(source)
    else:
        src = load_file(source)
    for name, g in got.items():
        key = name if name in src else name.removeprefix("transformer.")
        s = src[key].astype(np.float32)
        if g.shape[0] > s.shape[0]:  # vocab padding rows: zero after import
            if np.any(g[s.shape[0]:] != 0):
                fail(f"{name}: the vocab padding rows are not zero")
            g = np.ascontiguousarray(g[: s.shape[0]])
        if not np.array_equal(g.view(np.uint32), s.view(np.uint32)):
            fail(f"{name}: meshtrain's weights differ from {source} ({np.sum(g != s)} elements)")
    print(f"{h5_path}: all {len(got)} weights equal the Python-written {source}")


cmd = sys.argv[1]
if cmd == "exported":
    exported(sys.argv[2], sys.argv[3], "--bf16" in sys.argv)
elif cmd == "write-gpt2":
    write_gpt2(sys.argv[2], sys.argv[3])
elif cmd == "write-llama":
    write_llama(sys.argv[2], sys.argv[3])
elif cmd == "imported":
    imported(sys.argv[2], sys.argv[3])
else:
    fail(f"unknown command {cmd}")
