#!/usr/bin/python3
"""PNG plots of a perf/sweep.sh run (reads OUT/summary.json and OUT/comm.csv from perf/collect.py):

  throughput.png   tokens/s and scaling efficiency vs ranks, per strategy and tp (strong, weak)
  memory.png       per-rank memory by component (the plan's model) with the measured peak
  breakdown.png    step time split into compute / exposed communication / I/O
  busbw.png        bus bandwidth vs message size per collective, with the copy-bandwidth ceiling
  predicted.png    predicted vs measured step time (cost model), with the +-25% band
"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STRATS = ["no_shard", "shard_grad_op", "full_shard"]
COLORS = {"no_shard": "tab:blue", "shard_grad_op": "tab:orange", "full_shard": "tab:green"}


def label(r):
    return f"{r['ranks']}r tp{r['tp']}\n{r['strategy'].replace('shard_grad_op', 'sgo').replace('full_shard', 'full').replace('no_shard', 'none')}"


def throughput(s, out):
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for col, mode in enumerate(("strong", "weak")):
        ax, ax_e = axes[0][col], axes[1][col]
        rs = [r for r in s["runs"] if r["mode"] == mode]
        base = [r for r in rs if r["ranks"] == 1]
        for strat in STRATS:
            for tp, ls in ((1, "-"), (2, "--")):
                # a run with data-parallel degree 1 belongs to every strategy's line (they coincide)
                pts = sorted([r for r in rs if r["tp"] == tp and (r["strategy"] == strat or r["dp"] == 1)],
                             key=lambda r: r["ranks"])
                if len(pts) < 2:
                    continue
                x = [r["ranks"] for r in pts]
                ax.plot(x, [r["tokens_per_s"] for r in pts], ls, marker="o", color=COLORS[strat],
                        label=f"{strat} tp{tp}")
                ax_e.plot(x, [r.get("efficiency", float("nan")) for r in pts], ls, marker="o", color=COLORS[strat],
                          label=f"{strat} tp{tp}")
        peers = sorted([(p["ranks"], p["tokens_per_s"]) for k, p in s["peers"].items() if k.startswith(mode)])
        if peers:
            ax.plot([p[0] for p in peers], [p[1] for p in peers], ":", marker="s", color="black", label="PyTorch DDP")
            if base:
                b = [p for p in peers if p[0] == 1]
                if b:
                    ax_e.plot([p[0] for p in peers], [p[1] / (b[0][1] * p[0]) for p in peers], ":", marker="s",
                              color="black", label="PyTorch DDP")
        cores = s["machine"]["cores"]
        if base:
            xs = [1, 2, 4]
            ax.plot(xs, [base[0]["tokens_per_s"] * min(x, cores) for x in xs], color="grey", alpha=0.4, lw=6,
                    label=f"linear up to {cores} cores")
            ax_e.plot(xs, [min(x, cores) / x for x in xs], color="grey", alpha=0.4, lw=6, label="core-limited ideal")
        ax.set_title(f"{mode} scaling: tokens/s")
        ax.set_xlabel("ranks (1 thread each)")
        ax.set_ylabel("tokens/s")
        ax.set_xticks([1, 2, 4])
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        ax_e.set_title(f"{mode} scaling efficiency = tok/s(N) / (N x tok/s(1))")
        ax_e.set_xlabel("ranks")
        ax_e.set_ylim(0, 1.2)
        ax_e.set_xticks([1, 2, 4])
        ax_e.grid(alpha=0.3)
        ax_e.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=90)
    plt.close(fig)


def memory(s, out):
    rs = sorted([r for r in s["runs"] if r["mode"] == "weak" and r.get("plan_memory")],
                key=lambda r: (r["ranks"], r["tp"], STRATS.index(r["strategy"])))
    if not rs:
        return
    comps = ["params", "grads", "optim", "gathered", "grad_buf", "activ", "comm"]
    fig, ax = plt.subplots(figsize=(12, 5))
    x = range(len(rs))
    bottom = [0.0] * len(rs)
    for c in comps:
        v = [r["plan_memory"].get(c, 0) / 2**20 for r in rs]
        ax.bar(x, v, bottom=bottom, label=c)
        bottom = [b + y for b, y in zip(bottom, v)]
    ax.plot(list(x), [r["peak_mem_bytes"] / 2**20 for r in rs], "k_", markersize=22, mew=2,
            label="measured peak (allocator)")
    ax.set_xticks(list(x))
    ax.set_xticklabels([label(r) for r in rs], fontsize=8)
    ax.set_ylabel("MiB per rank")
    ax.set_title("per-rank memory by component (weak scaling runs; bars: plan's model, line: measured peak)")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "memory.png"), dpi=90)
    plt.close(fig)


def breakdown(s, out):
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    for ax, mode in zip(axes, ("strong", "weak")):
        rs = sorted([r for r in s["runs"] if r["mode"] == mode],
                    key=lambda r: (r["ranks"], r["tp"], STRATS.index(r["strategy"])))
        x = range(len(rs))
        comp = [r["compute_s"] for r in rs]
        exp = [r["exposed_comm_s"] for r in rs]
        io = [r["io_s"] for r in rs]
        ax.bar(x, comp, label="compute")
        ax.bar(x, exp, bottom=comp, label="exposed communication")
        ax.bar(x, io, bottom=[a + b for a, b in zip(comp, exp)], label="I/O")
        ax.set_xticks(list(x))
        ax.set_xticklabels([label(r) for r in rs], fontsize=7)
        ax.set_ylabel("seconds per optimizer step (slowest rank)")
        ax.set_title(f"{mode} scaling: step time breakdown")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "breakdown.png"), dpi=90)
    plt.close(fig)


def busbw(out_dir, out):
    path = os.path.join(out_dir, "comm.csv")
    if not os.path.exists(path):
        return
    rows = list(csv.DictReader(open(path)))
    files = sorted({r["file"] for r in rows})
    fig, axes = plt.subplots(1, len(files), figsize=(5.5 * len(files), 4.5), squeeze=False)
    for ax, f in zip(axes[0], files):
        rs = [r for r in rows if r["file"] == f]
        for op in ("all_gather", "reduce_scatter", "all_reduce", "broadcast"):
            pts = [r for r in rs if r["op"] == op]
            if pts:
                ax.plot([int(r["bytes"]) for r in pts], [float(r["busbw_bytes_per_s"]) / 1e9 for r in pts],
                        marker=".", label=op)
        copy = float(rs[0]["copy_bytes_per_s"]) / 1e9
        ax.axhline(copy, color="grey", ls="--", label=f"copy bandwidth {copy:.1f} GB/s (r+w)")
        ax.axhline(copy / 2, color="grey", ls=":", label=f"memcpy rate {copy / 2:.1f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes, full buffer)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"{rs[0]['group']} group of {rs[0]['group_ranks']} ({rs[0]['world_ranks']} ranks, mesh {rs[0]['mesh']})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "busbw.png"), dpi=90)
    plt.close(fig)


def predicted(s, out):
    rs = [r for r in s["runs"] if r.get("predicted_step_s")]
    if not rs:
        return
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for mode, m in (("strong", "o"), ("weak", "^")):
        for strat in STRATS:
            pts = [r for r in rs if r["mode"] == mode and r["strategy"] == strat]
            if pts:
                ax.scatter([r["step_s"] for r in pts], [r["predicted_step_s"] for r in pts], marker=m,
                           color=COLORS[strat], label=f"{mode} {strat}")
                for r in pts:
                    ax.annotate(f"{r['ranks']}r/tp{r['tp']}", (r["step_s"], r["predicted_step_s"]), fontsize=6)
    hi = max(max(r["step_s"] for r in rs), max(r["predicted_step_s"] for r in rs)) * 1.1
    ax.plot([0, hi], [0, hi], "k-", lw=1, label="predicted = measured")
    ax.fill_between([0, hi], [0, 0.75 * hi], [0, 1.25 * hi], color="grey", alpha=0.2, label="+-25%")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s, meshtrain plan)")
    ax.set_title("cost model: predicted vs measured")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "predicted.png"), dpi=90)
    plt.close(fig)


def main():
    out_dir = sys.argv[1]
    s = json.load(open(os.path.join(out_dir, "summary.json")))
    out = os.path.join(out_dir, "plots")
    os.makedirs(out, exist_ok=True)
    throughput(s, out)
    memory(s, out)
    breakdown(s, out)
    busbw(out_dir, out)
    predicted(s, out)
    print("plots in", out, ":", ", ".join(sorted(os.listdir(out))))


if __name__ == "__main__":
    main()
