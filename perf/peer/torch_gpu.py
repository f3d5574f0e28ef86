#!/usr/bin/env python3
"""The PyTorch peer of perf/gpu/validate.sh: the model shapes meshtrain trains there, trained
the way a PyTorch user would on one GPU, in the same run, so the ratio meshtrain / PyTorch is
measured on the same machine in the same minutes.

  torch_gpu.py --mode eager|compile --run NAME:INI[:key=value...] [--run ...] [--json FILE]

Each --run reads the model shape from a meshtrain ini ([model] and [train] micro_batch,
seq_len; `key=value` overrides either, e.g. `gpt2-124m-mb32:inputs/gpt2-124m.ini:micro_batch=32`)
and trains it for --steps steps on random tokens: bf16 autocast (fp32 master weights, as
meshtrain's bf16 precision), fused causal attention (scaled_dot_product_attention with
is_causal: flash attention on an H100/H200), fused AdamW (betas 0.9/0.95, decay 0.1 on the
matrices), global-norm clipping 1.0. --mode compile wraps the model in torch.compile.
Grouped-query attention goes to SDPA with enable_gqa where this torch takes it on the device
(checked once against repeated heads; "gqa" in the JSON: native or repeat).
GPT-2 reuses perf/peer/torch_gpt.py's model (the CPU peer) with SDPA attention; the Llama
(RMSNorm, RoPE, grouped-query attention, SwiGLU, tied embeddings) is defined here.
The vocabulary is padded as meshtrain pads it (model.vocab_pad_multiple): same LM-head GEMMs.

Prints (and writes to --json) one object: torch version, device, mode, and per run:
status PASS / FAIL (the error) / SKIP (why: no torch.compile in this torch, time budget),
tokens_per_s (median over the steps after --warmup), median_step_s, peak_mem_bytes
(torch.cuda.max_memory_allocated over that run; null on the CPU), losses, params,
flops_per_token (3 x forward, meshtrain's ModelDims::flops_per_token_forward). Exit status 0
unless a run FAILed (SKIP is not a failure: the caller reports it as SKIP).

--device cpu (validate.sh --dry-run, Debian's torch 1.13) walks the same code on a tiny shape
(give it with --override); torch 1.13 has no public SDPA (its private
_scaled_dot_product_attention is used), no fused AdamW (the plain loop is, and the JSON says
so) and no torch.compile (compile runs are SKIP).
"""
import argparse
import configparser
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, flops_per_token_forward as gpt_flops_forward  # noqa: E402


# How grouped-query attention reaches SDPA (gqa_mode): "native" passes the kv heads as they
# are with enable_gqa=True (torch >= 2.5; its flash attention takes them so, as Hugging Face's
# SDPA attention does where it can), "repeat" repeats them per query head first.
GQA = "repeat"


def causal_sdpa(q, k, v):
    """q: (B, H, T, hd), k, v: (B, Hkv, T, hd) -> (B, H, T, hd), causal."""
    if k.size(1) != q.size(1):  # grouped-query: each kv head serves H / Hkv query heads
        if GQA == "native":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        rep = q.size(1) // k.size(1)
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]  # torch 1.13


def gqa_mode(device):
    """"native" when SDPA's enable_gqa runs forward and backward on this device and gives the
    repeated heads' result (bf16 on CUDA), else "repeat" (older torch, or a refusal): the peer
    never loses a run to it."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return "repeat"
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 128, 64, generator=g).to(device, dtype).requires_grad_() for h in (4, 2, 2))
    try:
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        a.float().sum().backward()
        b = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    except (TypeError, RuntimeError):
        return "repeat"
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    return "native" if torch.allclose(a.float(), b.float(), atol=tol, rtol=tol) else "repeat"


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):  # x: (B, T, C), statistics in fp32
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(T, hd, theta):
    """cos, sin: (T, hd/2) for the rotate-pairs (x[2i], x[2i+1]) form."""
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """x: (B, H, T, hd); rotates each pair (x[2i], x[2i+1]) by angle t * theta^(-2i/hd)."""
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]  # (B, H, T, hd/2)
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, T, hd/2, 2)
    return out.flatten(-2).type_as(x)


class LlamaBlock(nn.Module):
    def __init__(self, C, H, Hkv, F_, eps):
        super().__init__()
        self.H, self.Hkv, self.hd = H, Hkv, C // H
        self.attn_norm = RMSNorm(C, eps)
        self.wq = nn.Linear(C, C, bias=False)
        self.wkv = nn.Linear(C, 2 * Hkv * self.hd, bias=False)  # (2 Hkv hd, C): k, v
        self.wo = nn.Linear(C, C, bias=False)
        self.mlp_norm = RMSNorm(C, eps)
        self.w_gate_up = nn.Linear(C, 2 * F_, bias=False)  # (2F, C): gate, up
        self.w_down = nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape  # x: (B, T, C)
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.H, self.hd).transpose(1, 2)  # (B, H, T, hd)
        k, v = self.wkv(h).split(self.Hkv * self.hd, dim=2)
        k = k.view(B, T, self.Hkv, self.hd).transpose(1, 2)  # (B, Hkv, T, hd)
        v = v.view(B, T, self.Hkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = causal_sdpa(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.wo(y)
        gate, up = self.w_gate_up(self.mlp_norm(x)).chunk(2, dim=-1)  # (B, T, F) each
        return x + self.w_down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, vocab, C, L, H, Hkv, F_, T, eps, theta):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.h = nn.ModuleList([LlamaBlock(C, H, Hkv, F_, eps) for _ in range(L)])
        self.norm = RMSNorm(C, eps)
        cos, sin = rope_tables(T, C // H, theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if ("wo" in name or "w_down" in name) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        for blk in self.h:
            x = blk(x, self.cos[:T], self.sin[:T])
        logits = self.norm(x) @ self.wte.weight.t()  # tied LM head, (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def llama_flops_forward(vocab, C, L, H, Hkv, F_, T):
    """meshtrain's ModelDims::flops_per_token_forward for llama: q, k, v, o, gate, up, down and
    the LM head; attention scores and values unmasked."""
    kv = 2 * Hkv * (C // H)
    matmul = L * (C * C + C * kv + C * C + 3 * C * F_) + vocab * C
    return 2.0 * matmul + 2.0 * 2.0 * L * T * C


def read_shape(spec, overrides):
    """NAME:INI[:key=value...] -> (name, dict of the shape)."""
    parts = spec.split(":")
    if len(parts) < 2:
        raise SystemExit("torch_gpu.py: --run wants NAME:INI[:key=value...], got '%s'" % spec)
    name, ini = parts[0], parts[1]
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    if not cp.read(ini):
        raise SystemExit("torch_gpu.py: cannot read %s" % ini)
    m = cp["model"] if cp.has_section("model") else {}
    t = cp["train"] if cp.has_section("train") else {}
    s = {"family": m.get("family", "gpt2"), "vocab_size": int(m.get("vocab_size", 50257)),
         "vocab_pad_multiple": int(m.get("vocab_pad_multiple", 1)), "d_model": int(m.get("d_model", 768)),
         "n_layers": int(m.get("n_layers", 12)), "n_heads": int(m.get("n_heads", 12)),
         "n_kv_heads": int(m.get("n_kv_heads", -1)), "ffn_dim": int(m.get("ffn_dim", -1)),
         "max_seq_len": int(m.get("max_seq_len", 1024)), "norm_eps": float(m.get("norm_eps", 1e-5)),
         "rope_theta": float(m.get("rope_theta", 10000)), "tie_embeddings": m.get("tie_embeddings", "true"),
         "micro_batch": int(t.get("micro_batch", 1)), "seq_len": int(t.get("seq_len", 1024))}
    for kv in list(overrides) + parts[2:]:
        k, _, v = kv.partition("=")
        if k not in s or not v:
            raise SystemExit("torch_gpu.py: unknown override '%s' (keys: %s)" % (kv, ", ".join(s)))
        s[k] = type(s[k])(v)
    if s["tie_embeddings"] not in ("true", "1"):
        raise SystemExit("torch_gpu.py: only tied embeddings are modelled (meshtrain's validated configs tie them)")
    hkv = s["n_kv_heads"] if s["n_kv_heads"] > 0 else s["n_heads"]
    if s["d_model"] % s["n_heads"] or s["n_heads"] % hkv:
        raise SystemExit("torch_gpu.py: %s: d_model %d, %d heads, %d kv heads do not divide"
                         % (name, s["d_model"], s["n_heads"], hkv))
    if s["family"] not in ("gpt2", "llama"):
        raise SystemExit("torch_gpu.py: unknown model.family '%s'" % s["family"])
    return name, s


def build(s, device):
    pad = s["vocab_pad_multiple"]
    V = (s["vocab_size"] + pad - 1) // pad * pad  # meshtrain's padded vocabulary
    C, L, H, T = s["d_model"], s["n_layers"], s["n_heads"], s["seq_len"]
    if s["family"] == "gpt2":
        F_ = s["ffn_dim"] if s["ffn_dim"] > 0 else 4 * C
        model = GPT(V, C, L, H, F_, max(T, s["max_seq_len"]), s["norm_eps"], sdpa=causal_sdpa)
        fpt = gpt_flops_forward(V, C, L, F_, T)
    else:
        Hkv = s["n_kv_heads"] if s["n_kv_heads"] > 0 else H
        F_ = s["ffn_dim"] if s["ffn_dim"] > 0 else 4 * C
        model = Llama(V, C, L, H, Hkv, F_, max(T, s["max_seq_len"]), s["norm_eps"], s["rope_theta"])
        fpt = llama_flops_forward(V, C, L, H, Hkv, F_, T)
    return model.to(device), 3.0 * fpt


def make_adamw(model, device):
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("wte", "wpe"))]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith(("wte", "wpe")))]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    kw = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    try:  # fused: one kernel over all tensors (torch >= 2.0 on CUDA, >= 2.4 on the CPU)
        return torch.optim.AdamW(groups, fused=True, **kw), "adamw fused"
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(groups, **kw), "adamw (this torch has no fused AdamW for %s)" % device


def train_one(name, s, a, device):
    r = {"name": name, "shape": s, "mode": a.mode}
    if a.mode == "compile" and not hasattr(torch, "compile"):
        r.update(status="SKIP", reason="torch %s has no torch.compile" % torch.__version__)
        return r
    cuda = device.type == "cuda"
    torch.manual_seed(a.seed)
    model, fpt = build(s, device)
    r["params"] = sum(p.numel() for p in model.parameters())
    r["flops_per_token"] = fpt
    opt, r["optimizer"] = make_adamw(model, device)
    fwd = torch.compile(model) if a.mode == "compile" else model
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    gen = torch.Generator().manual_seed(a.seed)
    B, T = s["micro_batch"], s["seq_len"]
    times, losses = [], []
    t_run = time.perf_counter()
    for step in range(a.steps):
        tokens = torch.randint(0, s["vocab_size"], (B, T + 1), generator=gen).to(device, non_blocking=True)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = fwd(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())  # waits for the step
        times.append(time.perf_counter() - t0)
        # Past the time limit a run stops early, but only once 5 steps after the warm-up give
        # a median (a compile that alone outlasts the limit runs on; the caller's timeout rules).
        if (step + 1 < a.steps and a.deadline and time.perf_counter() - a.t0 > a.deadline
                and len(times) >= a.warmup + 5):
            r["cut_short"] = "stopped after %d of %d steps: --time-limit %g s reached" % (step + 1, a.steps, a.deadline)
            break
    timed = times[a.warmup:] if len(times) > a.warmup else []
    r["run_s"] = time.perf_counter() - t_run
    r["step_times_s"], r["losses"] = times, losses
    r["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device) if cuda else None
    if not timed:
        r.update(status="FAIL", reason="no step after the %d warm-up steps (%d ran)" % (a.warmup, len(times)))
    elif not all(math.isfinite(x) for x in losses):
        r.update(status="FAIL", reason="non-finite loss")
    else:
        r["median_step_s"] = statistics.median(timed)
        r["tokens_per_s"] = B * T / r["median_step_s"]
        r["status"] = "PASS"
    return r


def try_run(name, s, a, device):
    """train_one, an exception (an OOM, a compile error) reported as a FAIL of this run."""
    try:
        return train_one(name, s, a, device)
    except Exception as e:
        return {"name": name, "shape": s, "mode": a.mode, "status": "FAIL", "error": type(e).__name__,
                "reason": ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("eager", "compile"), required=True)
    ap.add_argument("--run", action="append", required=True, help="NAME:INI[:key=value...]")
    ap.add_argument("--override", action="append", default=[], help="key=value applied to every run")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the median (compile: the compile)")
    ap.add_argument("--time-limit", type=float, default=0,
                    help="seconds; no run starts past it (SKIP), a run past it stops after warm-up + 5 steps")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json")
    a = ap.parse_args()
    a.t0, a.deadline = time.perf_counter(), a.time_limit
    runs = [read_shape(spec, a.override) for spec in a.run]
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_gpu.py: --device cuda but torch %s sees no CUDA device" % torch.__version__)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    global GQA
    GQA = gqa_mode(device)
    out = {"impl": "pytorch", "torch": torch.__version__, "mode": a.mode, "device": str(device), "gqa": GQA,
           "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "steps": a.steps, "warmup": a.warmup, "runs": []}
    for name, s in runs:
        if a.deadline and time.perf_counter() - a.t0 > a.deadline:
            r = {"name": name, "shape": s, "mode": a.mode, "status": "SKIP",
                 "reason": "time budget (--time-limit %g s) spent before it started" % a.deadline}
        else:
            r = try_run(name, s, a, device)
            gqa = s["family"] == "llama" and 0 < s["n_kv_heads"] < s["n_heads"]
            if r["status"] == "FAIL" and "error" in r and gqa and GQA == "native":
                # enable_gqa passed the check but not this run (a compile of it, say): the
                # repeated heads instead, for the rest of the peer, said in the JSON.
                GQA = "repeat"
                out["gqa"] = "repeat (native failed in %s: %s)" % (name, r["reason"][:150])
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                r = try_run(name, s, a, device)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        out["runs"].append(r)
        if a.json:  # after every run: a peer stopped at its caller's time limit keeps what it measured
            with open(a.json, "w") as f:
                f.write(json.dumps(out) + "\n")
        print("torch_gpu %s %s: %s%s" % (a.mode, name, r["status"],
              " %.0f tokens/s" % r["tokens_per_s"] if "tokens_per_s" in r else " (%s)" % r.get("reason", "")),
              file=sys.stderr, flush=True)
    print(json.dumps(out))
    return 1 if any(r["status"] == "FAIL" for r in out["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
