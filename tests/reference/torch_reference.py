#!/usr/bin/env python3
"""Rebuilds meshtrain's model in PyTorch from the weights reference_dump wrote and checks,
in fp32: logits, loss, every parameter gradient (relative error per tensor < 1e-5) and a
10-step AdamW loss curve (each step within 1e-5 relative) whose learning rates PyTorch's
LambdaLR computes from the schedule's settings (warmup, cosine, min_lr) -- meshtrain's
logged learning rate of every step must equal it.

The PyTorch model is written here from the Hugging Face definitions (GPT2LMHeadModel with
Conv1D weights and gelu_new; LlamaForCausalLM with rotate_half RoPE, RMSNorm, SwiGLU,
grouped-query attention), independently of meshtrain's kernels."""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(0)
d = sys.argv[1]
m = json.load(open(f"{d}/manifest.json"))
fam = m["family"]
G, T, steps = m["global_batch"], m["seq_len"], m["steps"]
C, H, KV, L = m["d_model"], m["n_heads"], m["n_kv_heads"], m["n_layers"]
hd = C // H
Vp, V = m["vocab"], m["valid_vocab"]

params = {}
for t in m["tensors"]:
    a = np.fromfile(f"{d}/params/{t['name']}.f32", dtype=np.float32).reshape(t["shape"])
    params[t["name"]] = torch.tensor(a, requires_grad=True)
tokens = torch.tensor(np.fromfile(f"{d}/tokens.i32", dtype=np.int32).reshape(steps, G, T), dtype=torch.long)
targets = torch.tensor(np.fromfile(f"{d}/targets.i32", dtype=np.int32).reshape(steps, G, T), dtype=torch.long)
P = params


def attention(q, k, v):  # (B, H, T, hd), k/v (B, KV, T, hd)
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    s = s.masked_fill(mask, float("-inf"))
    return F.softmax(s, dim=-1) @ v


def gpt2(idx):
    B = idx.shape[0]
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][:T]
    for i in range(L):
        p = lambda n: P[f"transformer.h.{i}.{n}"]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), m["norm_eps"])
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=-1)
        sh = lambda t: t.view(B, T, H, hd).transpose(1, 2)
        y = attention(sh(q), sh(k), sh(v)).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), m["norm_eps"])
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], m["norm_eps"])
    return x @ P["transformer.wte.weight"].t()


def rms(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m["norm_eps"]))


def rope(x):  # (B, h, T, hd), HF rotate_half
    inv = 1.0 / (m["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.outer(torch.arange(T).float(), inv)
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def llama(idx):
    B = idx.shape[0]
    x = P["model.embed_tokens.weight"][idx]
    for i in range(L):
        p = lambda n: P[f"model.layers.{i}.{n}"]
        h = rms(x, p("input_layernorm.weight"))
        q = (h @ p("self_attn.q_proj.weight").t()).view(B, T, H, hd).transpose(1, 2)
        k = (h @ p("self_attn.k_proj.weight").t()).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ p("self_attn.v_proj.weight").t()).view(B, T, KV, hd).transpose(1, 2)
        y = attention(rope(q), rope(k), v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("self_attn.o_proj.weight").t()
        h = rms(x, p("post_attention_layernorm.weight"))
        a = F.silu(h @ p("mlp.gate_proj.weight").t()) * (h @ p("mlp.up_proj.weight").t())
        x = x + a @ p("mlp.down_proj.weight").t()
    x = rms(x, P["model.norm.weight"])
    head = P["model.embed_tokens.weight"] if m["tied"] else P["lm_head.weight"]
    return x @ head.t()


model = gpt2 if fam == "gpt2" else llama


def loss_of(logits, tgt):
    logits = logits[..., :V]  # padded vocabulary rows are masked in meshtrain
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


failures = []


def check(what, ours, ref, tol):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    err = np.linalg.norm(ours - ref) / max(np.linalg.norm(ref), 1e-30)
    ok = err < tol
    if not ok:
        failures.append(f"{what}: relative error {err:.3e} >= {tol:g}")
    return err


# 1. logits and loss of the first batch with the initial weights.
logits = model(tokens[0])
ours_logits = np.fromfile(f"{d}/logits.f32", dtype=np.float32).reshape(G * T, V)
e_logits = check("logits", ours_logits, logits[..., :V].detach().reshape(-1, V).numpy(), 1e-5)
loss = loss_of(logits, targets[0])
curve = json.load(open(f"{d}/curve.json"))
e_loss = check("loss", [curve[0]["loss"]], [loss.item()], 1e-5)
loss.backward()
worst = 0.0
for t in m["tensors"]:
    g = np.fromfile(f"{d}/grads/{t['name']}.f32", dtype=np.float32).reshape(t["shape"])
    worst = max(worst, check(f"grad {t['name']}", g, P[t["name"]].grad.numpy(), 1e-5))
print(f"step 1: logits rel err {e_logits:.2e}, loss rel err {e_loss:.2e}, worst grad rel err {worst:.2e} "
      f"over {len(m['tensors'])} tensors (tolerance 1e-5: fp32 GEMMs summed in another order)")

# 2. ten AdamW steps from the same weights on the same batches.
for p in P.values():
    p.grad = None
decay = [P[t["name"]] for t in m["tensors"] if t["weight_decay"]]
no_decay = [P[t["name"]] for t in m["tensors"] if not t["weight_decay"]]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": m["weight_decay"]},
                         {"params": no_decay, "weight_decay": 0.0}],
                        lr=m["lr"], betas=(m["beta1"], m["beta2"]), eps=m["adam_eps"])


def lr_factor(s):
    """The schedule's definition (doc/training.md), as a multiple of train.lr at 0-based
    step s: linear warmup over W steps, then cosine from lr to min_lr over N - W steps
    (or constant). Written here from the definition: meshtrain's learning rates are only
    compared with it, never fed to PyTorch."""
    W, N, lr, min_lr = m["warmup_steps"], m["steps"], m["lr"], m["min_lr"]
    if s < W:
        return (s + 1) / W
    if m["lr_schedule"] == "constant":
        return 1.0
    progress = min(1.0, (s - W) / max(1, N - W))
    return (min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))) / lr


sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
worst_curve = 0.0
for s in range(steps):
    opt.zero_grad()
    loss = loss_of(model(tokens[s]), targets[s])
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(P.values()), m["grad_clip"]) if m["grad_clip"] > 0 else None
    torch_lr = sched.get_last_lr()[0]
    if abs(curve[s]["lr"] - torch_lr) > 1e-12 * torch_lr:
        failures.append(f"lr at step {s + 1}: meshtrain {curve[s]['lr']!r}, PyTorch's LambdaLR {torch_lr!r}")
    opt.step()
    sched.step()
    worst_curve = max(worst_curve, check(f"loss at step {s + 1}", [curve[s]["loss"]], [loss.item()], 1e-5))
    if norm is not None:
        check(f"grad norm at step {s + 1}", [curve[s]["grad_norm"]], [norm.item()], 1e-5)
print(f"{steps} AdamW steps (learning rates from LambdaLR, warmup {m['warmup_steps']}, {m['lr_schedule']}): "
      f"worst loss rel err {worst_curve:.2e}; final loss ours {curve[-1]['loss']:.6f} "
      f"torch {loss.item():.6f}")
if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"{fam}: meshtrain matches PyTorch")
