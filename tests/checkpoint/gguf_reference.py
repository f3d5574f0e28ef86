#!/usr/bin/env python3
"""An independent float64 Llama forward for a llama GGUF file (issue 18, must-show 2).

  gguf_reference.py GGUF TEXT_OUT SEQ_LEN   writes TEXT_OUT: the opening lines of the Apache
                                            2.0 licence, as many as give 2 * SEQ_LEN + 1 to
                                            3 * SEQ_LEN tokens, so the text has exactly 2
                                            windows of SEQ_LEN; prints the mean loss (nats)
                                            over those windows as JSON

Weights: gguf.quants.dequantize of every tensor (the format's reference), q/k rows put
back from llama.cpp's interleaved order, then float64 throughout: RMSNorm, rotate-half
RoPE, grouped-query causal attention, SwiGLU, tied or separate LM head, cross-entropy.
Tokens: Hugging Face `tokenizers` built from the GGUF's vocabulary and merges with
SmolLM2's pre-tokenizer (digits split, byte-level), no BOS (the file's add_bos_token is
false).
"""
import json
import sys

import numpy as np
import gguf
from gguf.quants import dequantize
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers


def field(r, key):
    return r.fields[key].contents()


def tokenizer(r):
    toks = field(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    types = field(r, "tokenizer.ggml.token_type")
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(toks[i], special=True, normalized=False)
                           for i, t in enumerate(types) if t in (3, 4)])
    return tk


def main():
    path, text_out, seq_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
    r = gguf.GGUFReader(path)
    assert not field(r, "tokenizer.ggml.add_bos_token") if "tokenizer.ggml.add_bos_token" in r.fields else True
    tk = tokenizer(r)
    text = ""
    for line in open("/usr/share/common-licenses/Apache-2.0", encoding="utf-8").read().splitlines(keepends=True):
        text += line
        n = len(tk.encode(text).ids)
        if n >= 2 * seq_len + 1:
            break
    ids = tk.encode(text).ids
    assert 2 * seq_len + 1 <= len(ids) <= 3 * seq_len, len(ids)
    open(text_out, "w", encoding="utf-8").write(text)

    tensors = {t.name: t for t in r.tensors}

    def w(name):  # float32 values of the reference dequantisation, as float64 (exact)
        t = tensors[name]
        shape = [int(x) for x in reversed(t.shape)]
        return dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)

    arch = "llama"
    C = int(field(r, f"{arch}.embedding_length"))
    L = int(field(r, f"{arch}.block_count"))
    H = int(field(r, f"{arch}.attention.head_count"))
    KV = int(field(r, f"{arch}.attention.head_count_kv"))
    eps = float(field(r, f"{arch}.attention.layer_norm_rms_epsilon"))
    theta = float(field(r, f"{arch}.rope.freq_base"))
    hd = C // H

    def unpermute(m, n_head):  # llama.cpp's converter: rows (2, hd/2) per head -> (hd/2, 2)
        return m.reshape(n_head, hd // 2, 2, -1).swapaxes(1, 2).reshape(m.shape)

    def rms(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    emb = w("token_embd.weight")
    head = w("output.weight") if "output.weight" in tensors else emb
    layers = []
    for i in range(L):
        layers.append(dict(an=w(f"blk.{i}.attn_norm.weight"), q=unpermute(w(f"blk.{i}.attn_q.weight"), H),
                           k=unpermute(w(f"blk.{i}.attn_k.weight"), KV), v=w(f"blk.{i}.attn_v.weight"),
                           o=w(f"blk.{i}.attn_output.weight"), fn=w(f"blk.{i}.ffn_norm.weight"),
                           g=w(f"blk.{i}.ffn_gate.weight"), u=w(f"blk.{i}.ffn_up.weight"),
                           d=w(f"blk.{i}.ffn_down.weight")))
    norm = w("output_norm.weight")

    T = seq_len
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x):  # (heads, T, hd), rotate-half
        half = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos + half * sin

    mask = np.triu(np.full((T, T), -np.inf), 1)
    total = 0.0
    windows = (len(ids) - 1) // seq_len
    for win in range(windows):
        x_ids = np.array(ids[win * T: win * T + T])
        y_ids = np.array(ids[win * T + 1: win * T + T + 1])
        h = emb[x_ids]
        for p in layers:
            a = rms(h, p["an"])
            q = rope((a @ p["q"].T).reshape(T, H, hd).transpose(1, 0, 2))
            k = rope((a @ p["k"].T).reshape(T, KV, hd).transpose(1, 0, 2))
            v = (a @ p["v"].T).reshape(T, KV, hd).transpose(1, 0, 2)
            k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
            s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            h = h + (s @ v).transpose(1, 0, 2).reshape(T, C) @ p["o"].T
            m = rms(h, p["fn"])
            gate = m @ p["g"].T
            h = h + ((gate / (1 + np.exp(-gate))) * (m @ p["u"].T)) @ p["d"].T
        logits = rms(h, norm) @ head.T
        mx = logits.max(-1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(logits - mx).sum(-1))
        total += float(np.sum(lse - logits[np.arange(T), y_ids]))
    print(json.dumps({"loss": total / (windows * T), "tokens": windows * T, "windows": windows, "ids": len(ids)}))


if __name__ == "__main__":
    main()
