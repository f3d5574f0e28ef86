#!/usr/bin/python3
"""Collects a perf/sweep.sh run into tables.

  sweep.csv     every logged step of every run (the run's configuration + metrics.jsonl keys)
  summary.csv   one row per run: median step after warm-up, tokens/s, scaling efficiency,
                MFU, time breakdown, peak memory, the plan's per-component memory, the cost
                model's predicted step time and its terms, and the PyTorch peer at the same
                ranks and batch
  comm.csv      all bench comm results
  summary.json  the above plus the ceilings, for perf/plot.py and perf/report.py
  summary.md    the results tables (markdown)
"""
import csv
import glob
import json
import os
import re
import statistics
import sys

from perfutil import flops_per_token, model_of, peer_mismatch, read_jsonl

PLAN_MEM_COLS = ["params", "grads", "optim", "gathered", "grad_buf", "activ", "comm", "total"]


def parse_plan(path):
    """Per strategy: memory by component (bytes) and the predicted terms (s) from `meshtrain plan`."""
    text = open(path).read()
    unit = 1024.0 ** 3 if "per-rank memory (GiB)" in text else 1024.0 ** 2
    out, section = {}, None
    for line in text.splitlines():
        if line.startswith("per-rank memory"):
            section = "mem"
        elif line.startswith("predicted optimizer-step time by term"):
            section = "terms"
        elif not line.strip():
            section = None
        elif section and line.startswith("  ") and not line.split()[0] == "strategy":
            tok = line.split()
            if section == "mem" and len(tok) >= 19 and tok[2] == "x":
                out.setdefault(tok[0], {})["memory"] = {k: float(v) * unit for k, v in zip(PLAN_MEM_COLS, tok[6:14])}
                out[tok[0]]["fits"] = tok[14]
            elif section == "terms" and len(tok) == 7:
                out.setdefault(tok[0], {})["terms"] = dict(zip(
                    ["gemm", "elementwise", "fsdp_comm", "tp_comm", "no_overlap", "overlap"], map(float, tok[1:])))
    m = re.search(r"cost model: GEMM ([\d.]+) GFLOP/s.*copy ([\d.]+) GB/s, bus bandwidth ([\d.]+) GB/s", text)
    inputs = {"gemm_gflops": float(m.group(1)), "copy_gbps": float(m.group(2)), "bus_gbps": float(m.group(3))} if m else {}
    return out, inputs


def main():
    out_dir = sys.argv[1]
    meta = json.load(open(os.path.join(out_dir, "sweep_meta.json")))
    machine = json.load(open(os.path.join(out_dir, "machine.json")))
    warmup = meta["warmup"]
    ceilings = {}
    for p in glob.glob(os.path.join(out_dir, "ceilings", "gemm-*.json")):
        n = int(re.search(r"gemm-(\d+)", p).group(1))
        g = json.load(open(p))["results"]
        mem = json.load(open(os.path.join(out_dir, "ceilings", f"memory-{n}.json")))["results"][0]
        ceilings[n] = {"sgemm_peak_per_rank": max(r["best_flops_min"] for r in g),
                       "copy_per_rank": mem["copy_bytes_per_s_min"], "copy_sum": mem["copy_bytes_per_s_sum"]}

    step_rows, runs, mismatches = [], [], []
    for d in sorted(glob.glob(os.path.join(out_dir, "runs", "*"))):
        if not os.path.isdir(d):
            continue
        cfg = json.load(open(os.path.join(d, "sweep.json")))
        rows = read_jsonl(os.path.join(d, "metrics.jsonl"))
        for r in rows:
            step_rows.append({**{k: v for k, v in cfg.items()}, "run": os.path.basename(d), **r})
        timed = [r for r in rows if "step_time_s" in r][warmup:] or rows
        med = lambda k: statistics.median(r[k] for r in timed)
        tokens_per_step = rows[1]["tokens"] - rows[0]["tokens"] if len(rows) > 1 else rows[0]["tokens"]
        summ = json.load(open(os.path.join(d, "summary.json")))
        io_s = max(r.get("io_s", 0.0) for r in summ["ranks"]) / max(1, len(rows))
        run = {**cfg, "run": os.path.basename(d), "tokens_per_step": tokens_per_step, "step_s": med("step_time_s"),
               "compute_s": med("compute_s_max"), "comm_busy_s": med("comm_s_max"),
               "exposed_comm_s": med("exposed_comm_s_max"), "io_s": io_s,
               "peak_mem_bytes": max(r["peak_mem_bytes"] for r in rows)}
        run["tokens_per_s"] = tokens_per_step / run["step_s"]
        model = model_of(os.path.join(d, "config.ini"))
        run["grad_accum"] = int(round(tokens_per_step / (cfg["micro_batch"] * model["seq_len"] * cfg["dp"])))
        ceil = ceilings.get(cfg["ranks"], ceilings.get(1))
        run["mfu"] = run["tokens_per_s"] * flops_per_token(model) / (ceil["sgemm_peak_per_rank"] * cfg["ranks"])
        plan, inputs = parse_plan(os.path.join(out_dir, "plans", f"{cfg['mode']}-{cfg['ranks']}r-tp{cfg['tp']}.txt"))
        p = plan.get(cfg["strategy"], {})
        run["plan_memory"] = p.get("memory", {})
        run["plan_inputs"] = inputs
        run["predicted"] = p.get("terms", {})
        if run["predicted"]:
            run["predicted_step_s"] = run["predicted"]["overlap"]
            run["predicted_over_measured"] = run["predicted_step_s"] / run["step_s"]
        peer = os.path.join(out_dir, "peer", f"{cfg['mode']}-{cfg['ranks']}r.json")
        if cfg["tp"] == 1 and os.path.exists(peer):
            pr = json.load(open(peer))
            e = peer_mismatch(f"peer/{os.path.basename(peer)} vs runs/{run['run']}", pr, flops_per_token(model),
                              tokens_per_step)
            if e:
                mismatches.append(e)
            run["pytorch_tokens_per_s"] = pr["tokens_per_s"]
            run["meshtrain_over_pytorch"] = run["tokens_per_s"] / pr["tokens_per_s"]
        runs.append(run)
    if mismatches:
        sys.exit("collect: meshtrain and the PyTorch peer did different work, nothing written:\n  " +
                 "\n  ".join(mismatches))

    # Scaling efficiency against the 1-rank run of the same mode: throughput(N) / (N x throughput(1)),
    # and per core (the machine has `cores` cores: more ranks than cores cannot scale further).
    cores = machine["cores"]
    for r in runs:
        base = [b for b in runs if b["mode"] == r["mode"] and b["ranks"] == 1]
        if base:
            b = base[0]["tokens_per_s"]
            r["speedup"] = r["tokens_per_s"] / b
            r["efficiency"] = r["speedup"] / r["ranks"]
            r["efficiency_per_core"] = r["speedup"] / min(r["ranks"], cores)

    peers = {}
    for p in sorted(glob.glob(os.path.join(out_dir, "peer", "*.json"))):
        pr = json.load(open(p))
        peers[os.path.basename(p)[:-5]] = {"ranks": pr["ranks"], "tokens_per_s": pr["tokens_per_s"],
                                           "median_step_s": pr["median_step_s"], "grad_accum": pr.get("grad_accum", 1)}

    comm = []
    for p in sorted(glob.glob(os.path.join(out_dir, "comm", "*.csv"))):
        with open(p) as f:
            comm += [{**row, "file": os.path.basename(p)} for row in csv.DictReader(f)]

    # ---- files -----------------------------------------------------------------------------
    keys = []
    for r in step_rows:
        keys += [k for k in r if k not in keys]
    with open(os.path.join(out_dir, "sweep.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(step_rows)
    flat_keys = ["mode", "ranks", "tp", "dp", "strategy", "micro_batch", "grad_accum", "tokens_per_step", "step_s",
                 "tokens_per_s", "speedup", "efficiency", "efficiency_per_core", "mfu", "compute_s", "comm_busy_s",
                 "exposed_comm_s", "io_s", "peak_mem_bytes", "predicted_step_s", "predicted_over_measured",
                 "pytorch_tokens_per_s", "meshtrain_over_pytorch", "load1_before", "others_running_before", "load1_after"]
    with open(os.path.join(out_dir, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(flat_keys + ["pred_" + k for k in ["gemm", "elementwise", "fsdp_comm", "tp_comm", "no_overlap"]] +
                   ["plan_mem_" + k for k in PLAN_MEM_COLS])
        for r in runs:
            w.writerow([r.get(k, "") for k in flat_keys] +
                       [r["predicted"].get(k, "") for k in ["gemm", "elementwise", "fsdp_comm", "tp_comm", "no_overlap"]] +
                       [r["plan_memory"].get(k, "") for k in PLAN_MEM_COLS])
    if comm:
        with open(os.path.join(out_dir, "comm.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(comm[0].keys()))
            w.writeheader()
            w.writerows(comm)
    json.dump({"machine": machine, "meta": meta, "ceilings": ceilings, "runs": runs, "peers": peers},
              open(os.path.join(out_dir, "summary.json"), "w"), indent=1)
    md = markdown(machine, meta, ceilings, runs, peers, comm)
    open(os.path.join(out_dir, "summary.md"), "w").write(md)
    print(md)


def fmt(v, f="{:.2f}"):
    return f.format(v) if isinstance(v, (int, float)) else "-"


def markdown(machine, meta, ceilings, runs, peers, comm):
    L_ = []
    L_.append(f"Sweep of {machine['date']}: {machine['cpu']}, {machine['cores']} cores, {machine['threads_per_rank']} "
              f"thread(s) per rank, OpenBLAS {machine['openblas_core'].split('|')[0].strip()} ({machine['blas_env_used']}); "
              f"load average {machine['load_at_start']:.2f} at start, {meta.get('load1_end', float('nan')):.2f} at the end; "
              f"wall time {meta['wall_s'] / 60:.1f} min (plus {meta.get('idle_wait_s', 0) / 60:.1f} min waiting for other users' jobs "
              f"to finish between runs; 'others running' = runnable tasks of other users when a run started). {meta['steps']} steps per run, median of the last "
              f"{meta['steps'] - meta['warmup']}.")
    L_.append("")
    L_.append("Ceilings (same run; per rank, all ranks running at once): " + "; ".join(
        f"{n} rank(s): SGEMM {c['sgemm_peak_per_rank'] / 1e9:.0f} GFLOP/s, copy {c['copy_per_rank'] / 1e9:.1f} GB/s"
        for n, c in sorted(ceilings.items())))
    for mode, what in (("strong", f"strong scaling: global batch {meta['strong_global_batch']} x 256 tokens per step"),
                       ("weak", f"weak scaling: {meta['micro_batch']} x 256 tokens per data-parallel rank per step")):
        rs = [r for r in runs if r["mode"] == mode]
        if not rs:
            continue
        L_ += ["", f"**{what}**", "",
               "| ranks | tp x dp | strategy | accum | tokens/s | speedup | eff. | eff./core | MFU | step s | compute s | "
               "exposed comm s | peak mem | predicted s | pred/meas | PyTorch tok/s | meshtrain/PyTorch | others running |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(rs, key=lambda r: (r["ranks"], r["tp"], r["strategy"])):
            L_.append(f"| {r['ranks']} | {r['tp']} x {r['dp']} | {r['strategy']} | {r['grad_accum']} | {r['tokens_per_s']:.0f} | "
                      f"{fmt(r.get('speedup'))} | {fmt(r.get('efficiency'))} | {fmt(r.get('efficiency_per_core'))} | "
                      f"{100 * r['mfu']:.1f}% | {r['step_s']:.3f} | {r['compute_s']:.3f} | {r['exposed_comm_s']:.3f} | "
                      f"{r['peak_mem_bytes'] / 2**20:.0f} MiB | {fmt(r.get('predicted_step_s'), '{:.3f}')} | "
                      f"{fmt(r.get('predicted_over_measured'))} | {fmt(r.get('pytorch_tokens_per_s'), '{:.0f}')} | "
                      f"{fmt(r.get('meshtrain_over_pytorch'))} | {fmt(r.get('others_running_before'), '{:.1f}')} |")
    big = [c for c in comm if c["op"] == "all_gather" and c["group"] == "world" and c["world_ranks"] == "2"]
    if big:
        c = max(big, key=lambda c: int(c["bytes"]))
        L_ += ["", f"all_gather of {int(c['bytes']) / 2**20:.0f} MiB at 2 ranks: bus bandwidth "
                   f"{float(c['busbw_bytes_per_s']) / 1e9:.2f} GB/s, algbw {float(c['algbw_bytes_per_s']) / 1e9:.2f} GB/s, "
                   f"next to the memory-copy bandwidth {float(c['copy_bytes_per_s']) / 1e9:.2f} GB/s per rank "
                   f"(read + write counted; a memcpy moves {float(c['copy_bytes_per_s']) / 2e9:.2f} GB/s); "
                   f"wrong results: {sum(int(x['wrong']) for x in comm)} over all {len(comm)} measurements."]
    return "\n".join(L_) + "\n"


if __name__ == "__main__":
    main()
