#!/usr/bin/python3
"""The PyTorch peer of the perf harness: a GPT-2 of exactly meshtrain's shape, trained the
same way (fp32, AdamW with decoupled weight decay, global-norm clipping, random tokens), on
1 rank or on several with DDP over gloo. Prints one JSON object with per-step times and the
median tokens/s after warm-up.

Launch like meshtrain: `mpirun -np 2 /usr/bin/python3 perf/peer/torch_gpt.py ...` (the rank
and world size are read from Open MPI's / Slurm's / torchrun's environment; rank 0 hosts the
gloo rendezvous on --port). Pin threads with --threads (torch.set_num_threads) and
OPENBLAS_NUM_THREADS/OMP_NUM_THREADS in the environment, as for meshtrain.

Shape (defaults = inputs/bench-gpt2-23m.ini): vocab 8192, 6 layers, d_model 512, 8 heads,
ffn 4*d_model, learned positions (max_seq_len 256), LayerNorm(eps 1e-5), GELU(tanh), biases,
tied embeddings; micro-batch 4 x seq 256 per rank.
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def env_int(*names, default=None):
    for n in names:
        if n in os.environ:
            return int(os.environ[n])
    return default


class Block(nn.Module):
    # sdpa: None = the explicit masked softmax (the CPU peer, like meshtrain's host path), or
    # a function (q, k, v) -> causal attention output, all (B, H, T, hd): the GPU peer
    # (perf/peer/torch_gpu.py) passes PyTorch's fused scaled_dot_product_attention.
    def __init__(self, C, H, F_, eps, sdpa=None):
        super().__init__()
        self.H = H
        self.sdpa = sdpa
        self.ln_1 = nn.LayerNorm(C, eps=eps)
        self.c_attn = nn.Linear(C, 3 * C)  # (3C, C): q, k, v
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=eps)
        self.c_fc = nn.Linear(C, F_)
        self.mlp_proj = nn.Linear(F_, C)

    def forward(self, x, mask):
        B, T, C = x.shape  # x: (B, T, C)
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        if self.sdpa is not None:
            y = self.sdpa(q, k, v)  # (B, H, T, hd), no (T, T) scores stored
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, H, T, T)
            att = att.masked_fill(mask[:T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v  # (B, H, T, hd)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, C, L, H, F_, T, eps=1e-5, sdpa=None):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, H, F_, eps, sdpa) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=eps)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)), persistent=False)
        # GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L).
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if ("c_proj" in name or "mlp_proj" in name) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for blk in self.h:
            x = blk(x, self.mask)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()  # tied LM head, (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def flops_per_token_forward(vocab, C, L, F_, T):
    """meshtrain's ModelDims::flops_per_token_forward (src/model/model_dims.cpp)."""
    matmul = L * (4 * C * C + 2 * C * F_) + vocab * C
    return 2.0 * matmul + 2.0 * 2.0 * L * T * C


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--d_model", type=int, default=512)
    ap.add_argument("--n_layers", type=int, default=6)
    ap.add_argument("--n_heads", type=int, default=8)
    ap.add_argument("--ffn_dim", type=int, default=-1)
    ap.add_argument("--seq_len", type=int, default=256)
    ap.add_argument("--micro_batch", type=int, default=4, help="sequences per rank per step")
    ap.add_argument("--grad_accum", type=int, default=1, help="micro-batches per step (DDP no_sync on all but the last)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--grad_clip", type=float, default=1.0)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", help="also write the result here (rank 0)")
    a = ap.parse_args()
    ffn = a.ffn_dim if a.ffn_dim > 0 else 4 * a.d_model

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK", default=0)
    world = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE", default=1)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank, world_size=world)

    torch.manual_seed(a.seed)  # same initial weights on every rank (DDP also broadcasts them)
    model = GPT(a.vocab, a.d_model, a.n_layers, a.n_heads, ffn, a.seq_len)
    n_params = sum(p.numel() for p in model.parameters())
    # No decay on biases, norms and embeddings (meshtrain's default, train.decay_embeddings=false).
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("wte", "wpe"))]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith(("wte", "wpe")))]
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed + rank)

    times, losses = [], []
    for step in range(a.steps):
        tokens = torch.randint(0, a.vocab, (a.grad_accum, a.micro_batch, a.seq_len + 1), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for m in range(a.grad_accum):
            # DDP: gradient all-reduce (gloo) overlapped with the last micro-batch's backward.
            sync = contextlib.nullcontext() if (world == 1 or m == a.grad_accum - 1) else model.no_sync()
            with sync:
                loss = model(tokens[m, :, :-1], tokens[m, :, 1:]) / a.grad_accum
                loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item() * a.grad_accum)

    if world > 1:  # the slowest rank bounds every step
        import torch.distributed as dist
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times = t.tolist()
    timed = times[a.warmup:] if a.steps > a.warmup else times
    med = statistics.median(timed)
    tokens_per_step = world * a.grad_accum * a.micro_batch * a.seq_len
    out = {
        "impl": "pytorch", "torch": torch.__version__, "ranks": world, "threads_per_rank": torch.get_num_threads(),
        "parallel": "ddp-gloo" if world > 1 else "single", "params": n_params,
        "flops_per_token": 3.0 * flops_per_token_forward(a.vocab, a.d_model, a.n_layers, ffn, a.seq_len),
        "micro_batch": a.micro_batch, "grad_accum": a.grad_accum, "seq_len": a.seq_len, "steps": a.steps, "warmup": a.warmup,
        "step_times_s": times, "median_step_s": med, "tokens_per_s": tokens_per_step / med,
        "losses": losses,
    }
    if rank == 0:
        print(json.dumps(out))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f)
    if world > 1:
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
