#!/usr/bin/python3
"""Summarises a perf/bench_step.sh run: per configuration the median step time over its runs
(each run: median after warm-up), tokens/s, MFU against the SGEMM peak measured in the same
run, and the ratios meshtrain/PyTorch and full_shard/no_shard. Writes results.json and
results.md into the run directory and prints the table."""
import argparse
import glob
import json
import os
import re
import statistics
import sys

from perfutil import flops_per_token, model_of, peer_mismatch, read_jsonl


def meshtrain_run(d, warmup):
    rows = [r for r in read_jsonl(os.path.join(d, "metrics.jsonl")) if "step_time_s" in r]
    timed = rows[warmup:] if len(rows) > warmup else rows
    med = lambda k: statistics.median(r[k] for r in timed)
    tokens = rows[1]["tokens"] - rows[0]["tokens"] if len(rows) > 1 else rows[0]["tokens"]
    return {"step_s": med("step_time_s"), "tokens_per_step": tokens, "compute_s": med("compute_s_max"),
            "comm_s": med("comm_s_max"), "exposed_comm_s": med("exposed_comm_s_max"),
            "peak_mem_bytes": max(r["peak_mem_bytes"] for r in rows), "steps": len(rows),
            **load_of(d)}


def load_of(d):
    j = json.load(open(os.path.join(d, "load.json")))
    return {"load1": j["load1"], "others": j.get("others_running_before", float("nan"))}


def torch_run(d):
    r = json.load(open(os.path.join(d, "result.json")))
    return {"step_s": r["median_step_s"], "tokens_per_step": r["ranks"] * r.get("grad_accum", 1) * r["micro_batch"] * r["seq_len"],
            "steps": r["steps"], "result": r, **load_of(d)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    machine = json.load(open(os.path.join(a.out, "machine.json")))
    ceil = {}
    for n in (1, 2):
        g = json.load(open(os.path.join(a.out, "ceilings", f"gemm-{n}.json")))["results"]
        m = json.load(open(os.path.join(a.out, "ceilings", f"memory-{n}.json")))["results"][0]
        square = [r for r in g if r["m"] == r["n"] == r["k"]]
        ceil[n] = {"sgemm_peak": max(r["best_flops_min"] for r in square),
                   "gemm_shapes": {f'{r["m"]}x{r["n"]}x{r["k"]}': r["best_flops_min"] for r in g},
                   "copy": m["copy_bytes_per_s_min"]}

    # A run that cannot be read stops the summary: leaving it out would change its
    # configuration's median, or drop the configuration and read its ratio as nan.
    groups, unreadable = {}, []
    for d in sorted(glob.glob(os.path.join(a.out, "runs", "*"))):
        if not os.path.isdir(d):
            continue
        name = re.sub(r"-\d+$", "", os.path.basename(d))
        try:
            r = torch_run(d) if name.startswith("pt-") else meshtrain_run(d, a.warmup)
        except (OSError, ValueError, KeyError, IndexError) as e:
            unreadable.append(f"{d}: {type(e).__name__}: {e}")
            continue
        groups.setdefault(name, []).append(r)
    if unreadable:
        sys.exit("summarize_step: runs that cannot be read (rerun bench_step.sh, or remove them), nothing written:\n  "
                 + "\n  ".join(unreadable))

    configs = sorted(glob.glob(os.path.join(a.out, "runs", "mt-*", "config.ini")))
    flops_tok = flops_per_token(model_of(configs[0]))
    # Each PyTorch run against the meshtrain runs at its ranks ("pt-2r-ddp" against "mt-2r-*"):
    # the same model and batch.
    errors = []
    for name, runs in groups.items():
        if not name.startswith("pt-"):
            continue
        mt_prefix = "mt-" + name.split("-")[1] + "-"
        for mt_name, mt_runs in groups.items():
            if mt_name.startswith(mt_prefix):
                for r in runs:
                    for m in mt_runs:
                        e = peer_mismatch(f"{name} vs {mt_name}", r["result"], flops_tok, m["tokens_per_step"])
                        if e and e not in errors:
                            errors.append(e)
    if errors:
        sys.exit("summarize_step: the runs are not comparable, nothing written:\n  " + "\n  ".join(errors))
    res = {}
    for name, runs in groups.items():
        ranks = 1 if "-1r" in name else 2
        step = statistics.median(r["step_s"] for r in runs)
        tok = runs[0]["tokens_per_step"] / step
        res[name] = {"ranks": ranks, "threads": a.threads, "runs": len(runs), "step_s": step,
                     "step_s_runs": [r["step_s"] for r in runs], "tokens_per_s": tok,
                     "mfu": tok * flops_tok / (ceil[ranks]["sgemm_peak"] * ranks),
                     "load1_runs": [r["load1"] for r in runs], "others_running_runs": [r["others"] for r in runs]}
        for k in ("compute_s", "exposed_comm_s", "comm_s", "peak_mem_bytes"):
            if k in runs[0]:
                res[name][k] = statistics.median(r[k] for r in runs)

    def ratio(x, y):
        return res[x]["tokens_per_s"] / res[y]["tokens_per_s"] if x in res and y in res else float("nan")

    ratios = {
        "meshtrain_vs_pytorch_1rank": ratio("mt-1r-no_shard", "pt-1r"),
        "meshtrain_full_shard_vs_pytorch_ddp_2rank": ratio("mt-2r-full_shard", "pt-2r-ddp"),
        "meshtrain_no_shard_vs_pytorch_ddp_2rank": ratio("mt-2r-no_shard", "pt-2r-ddp"),
        "full_shard_vs_no_shard_2rank": ratio("mt-2r-full_shard", "mt-2r-no_shard"),
    }
    out = {"machine": machine, "ceilings": {str(k): v for k, v in ceil.items()}, "configs": res, "ratios": ratios,
           "flops_per_token": flops_tok, "warmup_steps": a.warmup}
    json.dump(out, open(os.path.join(a.out, "results.json"), "w"), indent=1)

    labels = {"mt-1r-no_shard": "meshtrain (1 rank)", "pt-1r": "PyTorch (1 rank)",
              "mt-2r-full_shard": "meshtrain full_shard", "mt-2r-no_shard": "meshtrain no_shard",
              "pt-2r-ddp": "PyTorch DDP (gloo)"}
    lines = [f"Measured {machine['date']} on {machine['cpu']} ({machine['cores']} cores), {a.threads} thread(s) per rank, "
             f"fp32, OpenBLAS kernel {machine['openblas_core'].split('|')[0].strip()} ({machine['blas_env_used']}); "
             f"1-minute load average {machine['load_at_start']:.2f} at start.",
             "",
             f"Ceilings measured in the same run: SGEMM peak {ceil[1]['sgemm_peak']/1e9:.1f} GFLOP/s per rank alone, "
             f"{ceil[2]['sgemm_peak']/1e9:.1f} GFLOP/s per rank with 2 ranks at once; copy bandwidth "
             f"{ceil[1]['copy']/1e9:.1f} GB/s alone, {ceil[2]['copy']/1e9:.1f} GB/s per rank with 2 at once.",
             "",
             "| configuration | ranks x threads | step (s) | tokens/s | MFU | compute (s) | exposed comm (s) | load1 after each run (others running before) |",
             "|---|---|---|---|---|---|---|---|"]
    for name in ("mt-1r-no_shard", "pt-1r", "mt-2r-full_shard", "mt-2r-no_shard", "pt-2r-ddp"):
        if name not in res:
            continue
        r = res[name]
        comp = f"{r['compute_s']:.3f}" if "compute_s" in r else "-"
        exp = f"{r['exposed_comm_s']:.3f}" if "exposed_comm_s" in r else "-"
        lines.append(f"| {labels[name]} | {r['ranks']} x {a.threads} | {r['step_s']:.3f} | {r['tokens_per_s']:.0f} | "
                     f"{100*r['mfu']:.1f}% | {comp} | {exp} | {', '.join(f'{x:.2f} ({o:.1f})' for x, o in zip(r['load1_runs'], r['others_running_runs']))} |")
    lines += ["", "| ratio | value | target |", "|---|---|---|",
              f"| meshtrain / PyTorch, 1 rank x {a.threads} thread | {ratios['meshtrain_vs_pytorch_1rank']:.2f} | >= 1.0 |",
              f"| meshtrain full_shard / PyTorch DDP, 2 ranks | {ratios['meshtrain_full_shard_vs_pytorch_ddp_2rank']:.2f} | >= 1.0 |",
              f"| meshtrain no_shard / PyTorch DDP, 2 ranks | {ratios['meshtrain_no_shard_vs_pytorch_ddp_2rank']:.2f} | >= 1.0 |",
              f"| full_shard / no_shard, 2 ranks | {ratios['full_shard_vs_no_shard_2rank']:.2f} | >= 0.9 |"]
    gs = ceil[1]["gemm_shapes"]
    lines += ["", "SGEMM at the model's shapes (m x n x k, 1 rank, GFLOP/s): " +
              ", ".join(f"{k} {v/1e9:.0f}" for k, v in gs.items())]
    md = "\n".join(lines) + "\n"
    open(os.path.join(a.out, "results.md"), "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
