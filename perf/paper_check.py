#!/usr/bin/env python3
"""Paper check: `meshtrain plan`'s predictions for published training runs, next to what the
publications report (doc/perf.md, "Paper check: published runs against `plan`").

    perf/paper_check.py MESHTRAIN OUT_DIR

For every published configuration below it runs `meshtrain plan` twice (plan only: no
training, well under a second each):
  1. as published: model shape, GPUs, mesh, strategy, batch, and whatever the publication
     leaves open (micro-batch, checkpointing) left to the planner -> OUT/NAME.txt, NAME.json;
  2. the candidate chosen in 1. with every key fixed, for the per-term table (gemm,
     elementwise, fsdp, tp) that only the fixed form prints -> OUT/NAME.terms.txt.
Then it writes OUT/table.md (the comparison table of doc/perf.md) and OUT/commands.md (every
command line). Reported numbers are copied from the sources named in SOURCES; nothing here is
measured.

MFU convention (torchtitan's and Megatron-LM's alike, and the FLOPs `plan` itself counts):
per token 3 x forward FLOPs = 6 x (matmul parameters, LM head included, embedding lookup
excluded) + 12 x layers x d_model x seq_len (attention, not causal-halved); activation
recomputation is not counted; peak = 989 TFLOP/s (H100 SXM dense bf16, the number both use).
"""
import json
import os
import re
import subprocess
import sys

H100_PEAK = 989e12  # H100 SXM dense bf16, as torchtitan (get_peak_flops) and Megatron-LM's MFU use
A100_PEAK = 312e12  # A100 dense bf16, torchtitan's get_peak_flops

# Target clusters (assumptions, stated in doc/perf.md): achieved dense bf16 GEMM rate,
# bus bandwidth of a collective inside a node (NVLink 4: ~450 GB/s) and one GPU's share of the
# network (400 Gbit/s per GPU = 50 GB/s), achieved memory bandwidth.
TORCHTITAN_H100 = {  # Grand Teton: 96 GB HBM2e H100 at 500 W, 2.4 TB/s, 400 Gb/s RDMA per GPU
    "plan.gpus_per_node": 8,
    "plan.device_memory": "95GiB",
    "plan.gemm_tflops": 700,
    "plan.bus_gbps": "450,50",
    "plan.mem_gbps": 2000,
}
TORCHTITAN_A100 = {  # 64 A100 80 GB; the doc names no network: DGX-A100-like assumed (200 Gb/s per GPU)
    "plan.gpus_per_node": 8,
    "plan.device_memory": "80GiB",
    "plan.gemm_tflops": 250,
    "plan.bus_gbps": "230,25",
    "plan.mem_gbps": 1700,
}
MEGATRON_H100 = {  # H100 SXM 80 GB (HBM3, 3.35 TB/s); network assumed 400 Gb/s per GPU
    "plan.gpus_per_node": 8,
    "plan.device_memory": "80GiB",
    "plan.gemm_tflops": 700,
    "plan.bus_gbps": "450,50",
    "plan.mem_gbps": 2700,
}

SOURCES = {
    "tt-2412": "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md",
    "tt-asynctp": "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md",
    "tt-2408": "pytorch/torchtitan docs/performance.md @3faaa1a0d (Aug 2024)",
    "tt-2408-a100": "pytorch/torchtitan docs/performance.md @3faaa1a0d (Aug 2024), Llama 3 table",
    "mlm": "NVIDIA/Megatron-LM README.md, images/model_table.png (Jul 2024)",
}


def llama(d, layers, heads, kv, ffn, seq=8192):
    return {
        "model.family": "llama", "model.vocab_size": 128256, "model.d_model": d, "model.n_layers": layers,
        "model.n_heads": heads, "model.n_kv_heads": kv, "model.ffn_dim": ffn, "model.max_seq_len": seq,
        "model.tie_embeddings": "false", "model.rope_theta": 500000, "train.seq_len": seq,
        "train.precision": "bf16",
    }


def gpt(d, layers, heads, seq=4096):
    # Megatron-LM's weak-scaling GPTs: ffn 4 x d_model, GELU, vocabulary 131072, 4096 tokens.
    # meshtrain's gpt2 family always ties the LM head to the embedding (Megatron's do not):
    # the FLOPs are the same, the parameter memory smaller by one vocab x d_model matrix.
    return {
        "model.family": "gpt2", "model.vocab_size": 131072, "model.d_model": d, "model.n_layers": layers,
        "model.n_heads": heads, "model.max_seq_len": seq, "train.seq_len": seq, "train.precision": "bf16",
    }


LLAMA_8B = llama(4096, 32, 32, 8, 14336)
LLAMA_70B = llama(8192, 80, 64, 8, 28672)
LLAMA_405B = llama(16384, 126, 128, 8, 53248)


def mesh(strategy, r, s, t):
    return {"parallel.strategy": strategy, "parallel.dp_replicate": r, "parallel.dp_shard": s, "parallel.tp": t}


# Each run: name, label, source key, reported tokens/s/GPU (None: derived from TFLOP/s),
# reported TFLOP/s per GPU and MFU as the source prints them (None where it does not), a note on
# what the source's run had that plan's does not, and the plan keys.
RUNS = [
    dict(name="tt_llama3_8b_fsdp8", label="Llama 3.1 8B, 8 H100, FSDP 8, lbs 2, SAC", src="tt-2412",
         tps=5762, mfu_reported="33-39% (8B, 8 or 128 GPUs)", note="eager; torch.compile: 6,667",
         keys={**LLAMA_8B, **TORCHTITAN_H100, **mesh("full_shard", 1, 8, 1), "plan.world_size": 8,
               "train.global_batch": 16, "train.micro_batch": 2, "train.activation_checkpointing": "true"}),
    dict(name="tt_llama3_8b_fsdp128", label="Llama 3.1 8B, 128 H100, FSDP 128, lbs 2, SAC", src="tt-2412",
         tps=5605, mfu_reported="33-39% (8B, 8 or 128 GPUs)", note="eager; torch.compile: 6,514",
         keys={**LLAMA_8B, **TORCHTITAN_H100, **mesh("full_shard", 1, 128, 1), "plan.world_size": 128,
               "train.global_batch": 256, "train.micro_batch": 2, "train.activation_checkpointing": "true"}),
    dict(name="tt_llama3_8b_fsdp8_tp8", label="Llama 3.1 8B, 64 H100, FSDP 8 x TP 8, lbs 12, SAC", src="tt-asynctp",
         tps=4378, mfu_reported=None, note="torch.compile, vanilla TP; async TP: 4,809",
         keys={**LLAMA_8B, **TORCHTITAN_H100, **mesh("full_shard", 1, 8, 8), "plan.world_size": 64,
               "train.global_batch": 96, "train.micro_batch": 12, "train.activation_checkpointing": "true"}),
    dict(name="tt_llama3_70b_fsdp32_tp8", label="Llama 3.1 70B, 256 H100, FSDP 32 x TP 8, lbs 16, full AC",
         src="tt-asynctp", tps=597.3, mfu_reported=None, note="torch.compile, vanilla TP; async TP: 652",
         keys={**LLAMA_70B, **TORCHTITAN_H100, **mesh("full_shard", 1, 32, 8), "plan.world_size": 256,
               "train.global_batch": 512, "train.micro_batch": 16, "train.activation_checkpointing": "true"}),
    dict(name="tt_llama3_405b_fsdp16_tp8", label="Llama 3.1 405B, 128 H100, FSDP 16 x TP 8, lbs 2, full AC",
         src="tt-2408", tps=109, mfu_reported="29.0%", note="no float8, no async TP",
         keys={**LLAMA_405B, **TORCHTITAN_H100, **mesh("full_shard", 1, 16, 8), "plan.world_size": 128,
               "train.global_batch": 32, "train.micro_batch": 2, "train.activation_checkpointing": "true"}),
    dict(name="tt_llama3_8b_a100_fsdp64", label="Llama 3 8B, 64 A100, FSDP 64, lbs 1, SAC (op)", src="tt-2408-a100",
         tps=2973, mfu_reported="58.2%", note="A100: peak 312 TFLOP/s", peak=A100_PEAK,
         keys={**LLAMA_8B, **TORCHTITAN_A100, **mesh("full_shard", 1, 64, 1), "plan.world_size": 64,
               "train.global_batch": 64, "train.micro_batch": 1, "train.activation_checkpointing": "true"}),
    dict(name="tt_llama3_70b_a100_fsdp64", label="Llama 3 70B, 64 A100, FSDP 64, lbs 1, full AC", src="tt-2408-a100",
         tps=331, mfu_reported="51.7%", note="A100: peak 312 TFLOP/s", peak=A100_PEAK,
         keys={**LLAMA_70B, **TORCHTITAN_A100, **mesh("full_shard", 1, 64, 1), "plan.world_size": 64,
               "train.global_batch": 64, "train.micro_batch": 1, "train.activation_checkpointing": "true"}),
]

# Megatron-LM's H100 weak-scaling table: (size, heads, d_model, layers, TP, PP, GPUs, batch,
# TFLOP/s per GPU, MFU). Data-parallel size 48 throughout, with the distributed optimizer
# (--overlap-param-gather): meshtrain's closest strategy is shard_grad_op. The micro-batch and
# recomputation are not published: plan chooses them.
MEGATRON = [
    ("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8, 41),
    ("7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9, 47),
    ("16B", 48, 6144, 32, 4, 1, 192, 192, 489.1, 49),
    ("32B", 56, 7168, 48, 8, 1, 384, 192, 459.6, 46),
    ("70B", 64, 8192, 84, 8, 2, 768, 384, 419.7, 42),
    ("119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5, 43),
    ("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8, 44),
    ("314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4, 48),
    ("462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9, 47),
]
for size, heads, d, layers, tp, pp, gpus, batch, tflops, mfu in MEGATRON:
    if pp == 1:
        strategy_keys = mesh("shard_grad_op", 1, gpus // tp, tp)
        label = f"GPT {size}, {gpus} H100, DP 48 x TP {tp}, batch {batch}"
        note = "distributed optimizer, TP/DP comm overlap"
    else:
        # Pipeline parallelism is not modelled: the closest mesh folds the PP stages into the
        # sharded data-parallel dimension (full_shard shards the parameters as PP splits them).
        strategy_keys = mesh("full_shard", 1, gpus // tp, tp)
        label = f"GPT {size}, {gpus} H100, DP 48 x TP {tp} x PP {pp}, batch {batch}"
        note = f"PP {pp} not modelled: plan runs full_shard 1 x {gpus // tp} x {tp}"
    RUNS.append(dict(name=f"mlm_gpt_{size.lower().replace('.', 'p')}", label=label, src="mlm", tps=None,
                     tflops=tflops, mfu_reported=f"{mfu}%", note=note, pp=pp,
                     keys={**gpt(d, layers, heads), **MEGATRON_H100, **strategy_keys, "plan.world_size": gpus,
                           "train.global_batch": batch, "train.micro_batch": 0}))


def forward_flops_per_token(k):
    """Forward FLOPs per token as plan counts them (model::ModelDims::flops_per_token_forward)."""
    C, L, V, T = k["model.d_model"], k["model.n_layers"], k["model.vocab_size"], k["train.seq_len"]
    head_dim = C // k["model.n_heads"]
    if k["model.family"] == "llama":
        kv = k["model.n_kv_heads"] * head_dim
        F = k["model.ffn_dim"]
        mlp = 3 * C * F
    else:
        kv = C
        mlp = 2 * C * 4 * C
    attn = C * C + 2 * C * kv + C * C
    matmul = L * (attn + mlp) + V * C
    return 2.0 * matmul + 4.0 * L * T * C


def command(meshtrain, keys, json_path=None):
    cmd = [meshtrain, "plan"]
    if json_path:
        cmd += ["--json", json_path]
    cmd += [f"--{k}={v}" for k, v in keys.items()]
    return cmd


def run(cmd, out_txt):
    # In OUT_DIR, so that the recorded command lines name the JSON files without a path.
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=os.path.dirname(out_txt))
    with open(out_txt, "w") as f:
        f.write("$ " + " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd)) + "\n")
        f.write(p.stdout)
    if p.returncode != 0:
        sys.exit(f"paper_check: {' '.join(cmd)} failed (exit {p.returncode}); see {out_txt}")
    return p.stdout


def configured_candidate(plan, k):
    """When nothing fits plan chooses nothing (`chosen` is null): the configured candidate,
    for its predicted time (the table marks it as not fitting)."""
    for c in sorted(plan["candidates"], key=lambda c: c["step_s"]):
        if (c["strategy"] == k["parallel.strategy"] and c["dp_shard"] == k["parallel.dp_shard"]
                and c["tp"] == k["parallel.tp"] and k["train.micro_batch"] in (0, c["micro_batch"])):
            return c
    raise SystemExit("paper_check: plan listed no candidate with the configured strategy and mesh")


def term_row(text, strategy):
    """The by-term row (gemm, elementwise, fsdp_comm, tp_comm) of `strategy` in plan's fixed-mesh output."""
    part = text.split("predicted optimizer-step time by term", 1)[1]
    for line in part.splitlines():
        f = line.split()
        if len(f) == 7 and f[0] == strategy:
            return dict(zip(["gemm_s", "elementwise_s", "fsdp_comm_s", "tp_comm_s"], map(float, f[1:5])))
    raise SystemExit(f"paper_check: no by-term row for {strategy} in plan's output")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: paper_check.py MESHTRAIN OUT_DIR")
    meshtrain, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    rows, commands = [], []
    for r in RUNS:
        k = r["keys"]
        json_path = os.path.join(out, r["name"] + ".json")
        cmd = command(meshtrain, k, r["name"] + ".json")
        run(cmd, os.path.join(out, r["name"] + ".txt"))
        commands.append((r["name"], cmd))
        with open(json_path) as f:
            plan = json.load(f)
        ch = plan["chosen"] or configured_candidate(plan, k)
        fixed = dict(k, **{"train.micro_batch": ch["micro_batch"],
                           "train.activation_checkpointing": "true" if ch["activation_checkpointing"] else "false"})
        terms = term_row(run(command(meshtrain, fixed), os.path.join(out, r["name"] + ".terms.txt")), ch["strategy"])
        gpus = k["plan.world_size"]
        flop_tok = 3.0 * forward_flops_per_token(k)
        tps_rep = r["tps"] if r["tps"] is not None else r["tflops"] * 1e12 / flop_tok
        tps_plan = ch["tokens_per_s"] / gpus
        peak = r.get("peak", H100_PEAK)
        # The fastest candidate plan considered, fitting or not: what the prediction would be
        # if meshtrain's engine needed no more memory than the published run did.
        fastest = min(plan["candidates"], key=lambda c: c["step_s"])
        rows.append(dict(
            name=r["name"], label=r["label"], source=SOURCES[r["src"]], note=r["note"], pp=r.get("pp", 1),
            reported_tps_per_gpu=tps_rep, reported_tps_derived=r["tps"] is None,
            reported_mfu=r["mfu_reported"], reported_mfu_convention=tps_rep * flop_tok / peak,
            reported_step_s=k["train.global_batch"] * k["train.seq_len"] / (tps_rep * gpus),
            plan_step_s=ch["step_s"], plan_tps_per_gpu=tps_plan, plan_mfu=tps_plan * flop_tok / peak, peak_tflops=peak / 1e12,
            fastest_step_s=fastest["step_s"], fastest_ratio=fastest["tokens_per_s"] / gpus / tps_rep,
            fastest_desc=f"mb {fastest['micro_batch']}, AC {'yes' if fastest['activation_checkpointing'] else 'no'}",
            ratio=tps_plan / tps_rep, micro_batch=ch["micro_batch"], ac=ch["activation_checkpointing"],
            fits=ch["fits"], memory_gib=ch["memory_bytes"] / 2**30, gemm_s=terms["gemm_s"],
            elementwise_s=terms["elementwise_s"], exposed_fsdp_s=ch["exposed_fsdp_s"],
            replicate_s=ch["replicate_comm_s"], tp_s=ch["tp_comm_s"], flop_per_token=flop_tok))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
    write_table(rows, os.path.join(out, "table.md"))
    with open(os.path.join(out, "commands.md"), "w") as f:
        for name, cmd in commands:
            f.write(f"{name}:\n    meshtrain plan " + " ".join(cmd[2:]) + "\n\n")
    print(open(os.path.join(out, "table.md")).read())


def write_table(rows, path):
    """Two markdown tables: the comparison, then plan's terms for each row."""
    n = {}
    with open(path, "w") as f:
        f.write("| # | configuration | source | reported tok/s/GPU | reported MFU | MFU, common convention "
                "| step s (from tok/s) | plan step s | plan tok/s/GPU | plan MFU | plan / reported |\n")
        f.write("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
        for i, r in enumerate(rows, 1):
            n.setdefault(r["source"], len(n) + 1)
            rep = f"{r['reported_tps_per_gpu']:,.0f}" + (" (from TFLOP/s)" if r["reported_tps_derived"] else "")
            fit = "" if r["fits"] else " (does not fit)"
            f.write(f"| {i} | {r['label']} ({r['note']}) | [{n[r['source']]}] | {rep} "
                    f"| {r['reported_mfu'] or 'not reported'} | {100 * r['reported_mfu_convention']:.1f}% "
                    f"| {r['reported_step_s']:.3f} "
                    f"| {r['plan_step_s']:.3f}{fit} | {r['plan_tps_per_gpu']:,.0f} | {100 * r['plan_mfu']:.1f}% "
                    f"| {r['ratio']:.2f} |\n")
        f.write("\n")
        for src, k in n.items():
            f.write(f"[{k}] {src}  \n")
        f.write("\nplan's terms (seconds per optimizer step) and choices:\n\n")
        f.write("| # | micro-batch, AC | GiB per rank | gemm | elementwise | exposed fsdp | replicate | tp "
                "| fastest candidate, fitting or not: step s (plan / reported) |\n")
        f.write("|--:|---|--:|--:|--:|--:|--:|--:|---|\n")
        for i, r in enumerate(rows, 1):
            fastest = ("same" if abs(r["fastest_step_s"] - r["plan_step_s"]) < 1e-9
                       else f"{r['fastest_desc']}: {r['fastest_step_s']:.3f} ({r['fastest_ratio']:.2f})")
            f.write(f"| {i} | {r['micro_batch']}, {'yes' if r['ac'] else 'no'} "
                    f"| {r['memory_gib']:.1f}{'' if r['fits'] else ' (no)'} | {r['gemm_s']:.3f} "
                    f"| {r['elementwise_s']:.3f} | {r['exposed_fsdp_s']:.3f} | {r['replicate_s']:.3f} "
                    f"| {r['tp_s']:.3f} | {fastest} |\n")


if __name__ == "__main__":
    main()
