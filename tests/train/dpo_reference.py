#!/usr/bin/env python3
"""DPO in float64, independently of meshtrain: a Llama forward written here from the Hugging
Face definition (rotate_half RoPE, RMSNorm, SwiGLU, grouped-query attention), the base weights
of an exported model.safetensors and a PEFT adapter (base + (alpha/r) B A for the policy, the
base alone for the reference), each row's log-probability summed over the targets of the
dataset's loss mask, and the DPO formula of TRL's sigmoid loss.

  dpo_reference.py eval BASE PEFT DATASET BETA EVAL_JSON
      every train pair; meshtrain eval's loss, rewards and margins within 1e-5, accuracy exact;
      and the loss with the adapted model as its own reference (log 2) must be far from it.
  dpo_reference.py grad BASE PEFT_BEFORE PEFT_AFTER DATASET BETA METRICS_JSONL
      the one-pair dataset: the gradient read back from one AdamW step (lr 1, eps 1, no decay,
      no clip: delta = -g / (|g| + 1)) equals autograd's, and the step's logged loss the formula's.
      The step continues PEFT_BEFORE's adapters, so DPO's reference is base + PEFT_BEFORE.

  BETA "simpo:BETA:GAMMA" instead: SimPO's loss (train.objective=simpo; Meng et al. 2024, as
  TRL's CPOTrainer with loss_type="simpo"): rewards beta * logp / (counted targets of the
  row), loss -log sigmoid(rewards_chosen - rewards_rejected - gamma), no reference; eval then
  also requires the loss without the length normalization to be far from meshtrain's."""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
mode = sys.argv[1]


def config(base):
    return json.load(open(f"{base}/config.json"))


def rows(ds):
    """(inputs, targets) of every train row: targets outside the loss mask are -1."""
    meta = json.load(open(f"{ds}/meta.json"))
    R = meta["row_tokens"]
    raw = open(f"{ds}/train.bin", "rb").read()
    width = int(np.frombuffer(raw[12:16], "<u4")[0])
    tok = np.frombuffer(raw[64:], "<u2" if width == 2 else "<u4").astype(np.int64).reshape(-1, R)
    mask = np.fromfile(f"{ds}/train.mask", dtype=np.uint8, offset=64).reshape(-1, R)
    tgt = np.where(mask[:, 1:] != 0, tok[:, 1:], -1)
    return torch.tensor(tok[:, :-1]), torch.tensor(tgt)


def weights(base, peft, grad=False):
    cfg = config(base)
    W = {k: torch.tensor(v.astype(np.float64)) for k, v in load_file(f"{base}/model.safetensors").items()}
    ad = json.load(open(f"{peft}/adapter_config.json"))
    scale = ad["lora_alpha"] / ad["r"]
    A = {k[len("base_model.model."):]: torch.tensor(v.astype(np.float64), requires_grad=grad)
         for k, v in load_file(f"{peft}/adapter_model.safetensors").items()}
    return cfg, W, A, scale


def forward(cfg, W, A, scale, idx, adapters):
    """logits (B, T, V) of the Llama; with `adapters`, each adapted projection is W + scale B A."""
    C, H, KV, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    hd, eps, theta = C // H, cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    B, T = idx.shape

    def w(name):
        m = name[: -len(".weight")]
        if adapters and f"{m}.lora_A.weight" in A:
            return W[name] + scale * A[f"{m}.lora_B.weight"] @ A[f"{m}.lora_A.weight"]
        return W[name]

    def rms(x, g):
        return g * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    x = W["model.embed_tokens.weight"][idx]
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = (h @ w(p + "self_attn.q_proj.weight").t()).view(B, T, H, hd).transpose(1, 2)
        k = (h @ w(p + "self_attn.k_proj.weight").t()).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ w(p + "self_attn.v_proj.weight").t()).view(B, T, KV, hd).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        s = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(causal, float("-inf"))
        y = (F.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w(p + "self_attn.o_proj.weight").t()
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        x = x + (F.silu(h @ w(p + "mlp.gate_proj.weight").t()) * (h @ w(p + "mlp.up_proj.weight").t())) @ \
            w(p + "mlp.down_proj.weight").t()
    x = rms(x, W["model.norm.weight"])
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return x @ head.t()


def seq_logp(logits, tgt):
    """(B): sum of log p(target) over each row's counted targets (the vocabulary is the model's)."""
    lp = F.log_softmax(logits, -1)
    keep = tgt >= 0
    picked = lp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * keep).sum(-1)


def simpo(pol, lengths, beta, gamma):
    """SimPO over pairs (rows 2j chosen, 2j + 1 rejected), all in float64: length-normalized
    rewards, a target margin gamma; accuracy = the chosen reward the larger (TRL's CPOTrainer)."""
    n = lengths.clamp(min=1)
    rc, rr = beta * pol[0::2] / n[0::2], beta * pol[1::2] / n[1::2]
    return {"loss": (-F.logsigmoid(rc - rr - gamma)).mean(), "rewards/chosen": rc.mean(), "rewards/rejected": rr.mean(),
            "rewards/margins": (rc - rr).mean(), "rewards/accuracies": (rc > rr).double().mean()}


def objective(spec):
    """BETA (DPO) or simpo:BETA:GAMMA -> (is_simpo, beta, gamma)."""
    if spec.startswith("simpo:"):
        _, b, g = spec.split(":")
        return True, float(b), float(g)
    return False, float(spec), 0.0


def pair_loss(spec, pol, ref, tgt):
    is_simpo, beta, gamma = objective(spec)
    return simpo(pol, (tgt >= 0).sum(-1).double(), beta, gamma) if is_simpo else dpo(pol, ref, beta)


def dpo(pol, ref, beta):
    """TRL's sigmoid DPO over pairs (rows 2j chosen, 2j + 1 rejected), all in float64."""
    rc, rr = beta * (pol[0::2] - ref[0::2]), beta * (pol[1::2] - ref[1::2])
    z = rc - rr
    return {"loss": (-F.logsigmoid(z)).mean(), "rewards/chosen": rc.mean(), "rewards/rejected": rr.mean(),
            "rewards/margins": z.mean(), "rewards/accuracies": (z > 0).double().mean()}


def valid_vocab(cfg, logits):
    return logits[..., : cfg["vocab_size"]]


if mode == "eval":
    base, peft, ds, spec, got_path = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
    is_simpo, beta, gamma = objective(spec)
    cfg, W, A, scale = weights(base, peft)
    idx, tgt = rows(ds)
    with torch.no_grad():
        pol = seq_logp(valid_vocab(cfg, forward(cfg, W, A, scale, idx, True)), tgt)
        ref = seq_logp(valid_vocab(cfg, forward(cfg, W, A, scale, idx, False)), tgt)
    want = {k: float(v) for k, v in pair_loss(spec, pol, ref, tgt).items()}
    got = json.load(open(got_path))
    bad = []
    for k, v in want.items():
        tol = 0 if k == "rewards/accuracies" else 1e-5
        if not abs(got[k] - v) <= tol:
            bad.append(f"{k}: meshtrain {got[k]!r}, reference {v!r}")
    assert got["pairs"] == len(pol) // 2, (got["pairs"], len(pol))
    # DPO: a reference equal to the adapted model makes every margin 0 and the loss log 2: the
    # adapters must have moved the policy far enough for that to be told apart. SimPO: the
    # loss without the length normalization (every length 1) must be told apart.
    wrong = float(simpo(pol, torch.ones_like(pol), beta, gamma)["loss"] if is_simpo else dpo(pol, pol, beta)["loss"])
    if abs(wrong - want["loss"]) < 1e-3:
        bad.append(f"the check cannot tell the formula from the wrong one (loss {want['loss']} vs {wrong})")
    if abs(got["loss"] - wrong) < 1e-3:
        bad.append(f"meshtrain's loss {got['loss']} is the wrong formula's ({wrong})")
    print(f"{got_path}: {len(pol) // 2} pairs, reference {want}, meshtrain " +
          json.dumps({k: got[k] for k in want}))
    if bad:
        print("\n".join(bad))
        sys.exit(1)
elif mode == "grad":
    base, before, after, ds, spec, metrics = sys.argv[2:8]
    cfg, W, A, scale = weights(base, before, grad=True)
    _, _, A1, _ = weights(base, after)
    idx, tgt = rows(ds)
    pol = seq_logp(valid_vocab(cfg, forward(cfg, W, A, scale, idx, True)), tgt)
    with torch.no_grad():
        # The step starts from PEFT_BEFORE's adapters (checkpoint.init_from of a LoRA checkpoint
        # continues them), so DPO's reference is that initial policy, adapters on: its margins
        # are 0 and its loss log 2 (doc/finetuning.md, "The reference"). SimPO has none.
        ref = seq_logp(valid_vocab(cfg, forward(cfg, W, A, scale, idx, True)), tgt)
    loss = pair_loss(spec, pol, ref, tgt)["loss"]
    loss.backward()
    logged = json.loads(open(metrics).readline())["loss"]
    bad = []
    # meshtrain's loss is the fp32 forward's: 1e-5 as in the eval check.
    if not abs(logged - float(loss)) <= 1e-5:
        bad.append(f"step 1 loss: meshtrain {logged}, reference {float(loss)}")
    # AdamW's first step, lr 1, eps 1: delta = -g / (|g| + 1), so g = -delta / (1 - |delta|).
    # The weights are fp32: a delta is known to within the spacing of fp32 numbers at the new
    # weight, so each tensor's recovered gradient may differ from autograd's by that (its norm)
    # plus 1e-4 relative for the fp32 forward and backward -- far below a wrong coefficient
    # (a sign, a missing beta or sigmoid, a pair's rows swapped).
    worst = 0.0
    for k, a in A.items():
        d = A1[k].detach() - a.detach()
        g = -d / (1 - d.abs())
        ref_g = a.grad
        spacing = torch.tensor(np.spacing(A1[k].detach().numpy().astype(np.float32)).astype(np.float64))
        allowed = 1e-4 * float(ref_g.norm()) + 2 * float(spacing.norm())
        err = float((g - ref_g).norm())
        worst = max(worst, err / allowed)
        if err > allowed:
            bad.append(f"{k}: gradient error {err:.3e} > {allowed:.3e} (|g| {float(ref_g.norm()):.3e})")
    print(f"{metrics}: loss meshtrain {logged} reference {float(loss)}; worst gradient error {worst:.2f} of its allowance "
          f"over {len(A)} adapter tensors")
    if bad:
        print("\n".join(bad))
        sys.exit(1)
