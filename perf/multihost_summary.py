#!/usr/bin/python3
"""Summary of a perf/multihost_sweep.sh run: `plan`'s predictions against the measured runs.

usage: multihost_summary.py OUT_DIR WARMUP

Reads OUT_DIR/meshes.txt (strategy:dp_replicate:dp_shard:tp per line), the runs
(OUT_DIR/runs/NAME-rK/metrics.jsonl, NAME-rK.load) and the plans (OUT_DIR/plans/NAME-rK.json,
whose `chosen` is the configured strategy and mesh). Per configuration: the median over
repeats of each run's median step time after WARMUP steps, and the median of the plans'
predicted step times. Writes summary.csv, summary.json, summary.md (the table, the ranking
comparison and the verdicts) and predicted.png.
"""
import csv
import glob
import json
import os
import re
import statistics
import sys

TOLERANCE = 0.20  # issue 17, must-show 3: every predicted step time within 20% of the measured


def run_medians(out, name, warmup):
    """Per repeat: (median step s, median exposed comm s, load at start)."""
    res = []
    for d in sorted(glob.glob(os.path.join(out, "runs", f"{name}-r*"))):
        if not os.path.isdir(d) or not os.path.exists(os.path.join(d, "metrics.jsonl")):
            continue
        rows = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl")) if line.strip()]
        rows = [r for r in rows if "step_time_s" in r]
        kept = [r for r in rows if r["step"] > warmup] or rows
        if not kept:
            continue
        load = None
        try:
            load = float(open(d + ".load").read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
        res.append((statistics.median(r["step_time_s"] for r in kept),
                    statistics.median(r.get("exposed_comm_s_max", 0.0) for r in kept), load))
    return res


def predictions(out, name):
    preds = []
    for f in sorted(glob.glob(os.path.join(out, "plans", f"{name}-r*.json"))):
        try:
            chosen = json.load(open(f))["chosen"]
        except (OSError, ValueError, KeyError):
            continue
        preds.append(chosen)
    return preds


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0] * len(values)
    for pos, i in enumerate(order, 1):
        r[i] = pos
    return r


def main():
    out, warmup = sys.argv[1], int(sys.argv[2])
    meshes = [m.strip() for m in open(os.path.join(out, "meshes.txt")) if m.strip()]
    rows = []
    for m in meshes:
        strat, rep, shard, tp = m.split(":")
        name = f"{strat}-{rep}x{shard}x{tp}"
        runs = run_medians(out, name, warmup)
        preds = predictions(out, name)
        if not runs or not preds:
            print(f"multihost_summary: {name}: {len(runs)} run(s), {len(preds)} plan(s); left out", file=sys.stderr)
            continue
        step = statistics.median(r[0] for r in runs)
        pred = statistics.median(p["step_s"] for p in preds)
        p0 = preds[len(preds) // 2]
        rows.append({
            "strategy": strat, "dp_replicate": int(rep), "dp_shard": int(shard), "tp": int(tp),
            "repeats": len(runs),
            "measured_step_s": step,
            "measured_step_s_min": min(r[0] for r in runs), "measured_step_s_max": max(r[0] for r in runs),
            "measured_exposed_comm_s": statistics.median(r[1] for r in runs),
            "predicted_step_s": pred,
            "predicted_step_s_min": min(p["step_s"] for p in preds),
            "predicted_step_s_max": max(p["step_s"] for p in preds),
            "predicted_compute_s": p0.get("compute_s"),
            "predicted_comm_s": (p0.get("exposed_fsdp_s", 0) + p0.get("replicate_comm_s", 0) + p0.get("tp_comm_s", 0)),
            "ratio": pred / step,
            "within": abs(pred / step - 1) <= TOLERANCE,
            "load": [r[2] for r in runs],
        })
    if not rows:
        sys.exit("multihost_summary: no configuration has both runs and plans")
    mr = ranks([r["measured_step_s"] for r in rows])
    pr = ranks([r["predicted_step_s"] for r in rows])
    for r, a, b in zip(rows, mr, pr):
        r["measured_rank"], r["predicted_rank"] = a, b
    n = len(rows)
    concordant = sum(1 for i in range(n) for j in range(i + 1, n)
                     if (rows[i]["measured_step_s"] - rows[j]["measured_step_s"]) *
                     (rows[i]["predicted_step_s"] - rows[j]["predicted_step_s"]) > 0)
    pairs = n * (n - 1) // 2
    same_order = mr == pr
    # A pair whose repeats' measured ranges overlap has no measured order to predict: the
    # repeats themselves put it either way. Those that the measurement separates are the
    # ranking the prediction is checked against.
    separated = [(i, j) for i in range(n) for j in range(i + 1, n)
                 if rows[i]["measured_step_s_max"] < rows[j]["measured_step_s_min"] or
                 rows[j]["measured_step_s_max"] < rows[i]["measured_step_s_min"]]
    separated_alike = sum(1 for i, j in separated
                          if (rows[i]["measured_step_s"] - rows[j]["measured_step_s"]) *
                          (rows[i]["predicted_step_s"] - rows[j]["predicted_step_s"]) > 0)
    # The most choices whose measured ranking is plan's (every pair among them ordered alike;
    # the issue asks for at least four): the largest such subset, by brute force (n is small).
    def alike(i, j):
        return (rows[i]["measured_step_s"] - rows[j]["measured_step_s"]) * \
               (rows[i]["predicted_step_s"] - rows[j]["predicted_step_s"]) > 0
    ranked_alike = max((s for m in range(1 << n) for s in [[i for i in range(n) if m >> i & 1]]
                        if all(alike(i, j) for a, i in enumerate(s) for j in s[a + 1:])), key=len)
    left_out = [f"{rows[i]['strategy']} {rows[i]['dp_replicate']}x{rows[i]['dp_shard']}x{rows[i]['tp']}"
                for i in range(n) if i not in ranked_alike]
    within = sum(r["within"] for r in rows)

    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        keys = [k for k in rows[0] if k != "load"]
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    setup = open(os.path.join(out, "setup.txt")).read() if os.path.exists(os.path.join(out, "setup.txt")) else ""
    bw = re.search(r"intra,inter \(GB/s[^)]*\): ([0-9.]+),([0-9.]+)", setup)
    json.dump({"configurations": rows, "same_order": same_order, "concordant_pairs": concordant, "pairs": pairs,
               "separated_pairs": len(separated), "separated_pairs_alike": separated_alike,
               "largest_set_ranked_alike": len(ranked_alike), "left_out_of_that_set": left_out,
               "within_tolerance": within, "tolerance": TOLERANCE,
               "bus_gbps": [float(bw.group(1)), float(bw.group(2))] if bw else None},
              open(os.path.join(out, "summary.json"), "w"), indent=1)

    md = ["| measured rank | predicted rank | strategy | dp_replicate x dp_shard x tp | measured step s (median; min-max) "
          "| predicted step s (median; min-max) | pred/meas | measured exposed comm s | predicted comm s | within 20% |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["measured_step_s"]):
        md.append(f"| {r['measured_rank']} | {r['predicted_rank']} | {r['strategy']} | "
                  f"{r['dp_replicate']} x {r['dp_shard']} x {r['tp']} | "
                  f"{r['measured_step_s']:.3f} ({r['measured_step_s_min']:.3f}-{r['measured_step_s_max']:.3f}) | "
                  f"{r['predicted_step_s']:.3f} ({r['predicted_step_s_min']:.3f}-{r['predicted_step_s_max']:.3f}) | "
                  f"{r['ratio']:.2f} | {r['measured_exposed_comm_s']:.3f} | {r['predicted_comm_s']:.3f} | "
                  f"{'yes' if r['within'] else '**no**'} |")
    md.append("")
    md.append(f"Ranking: {'the same order' if same_order else 'a different order'} "
              f"({concordant} of {pairs} pairs ordered alike; of the {len(separated)} pairs whose repeats' measured "
              f"ranges do not overlap, {separated_alike} ordered alike; the most choices ranked alike: "
              f"{len(ranked_alike)} of {n}{' (all but ' + ', '.join(left_out) + ')' if left_out else ''}); "
              f"{within} of {n} predictions within 20% of "
              f"the measured step time; {rows[0]['repeats']} repeat(s) per configuration.")
    open(os.path.join(out, "summary.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("multihost_summary: no matplotlib; predicted.png not drawn", file=sys.stderr)
        return
    rs = sorted(rows, key=lambda r: r["measured_step_s"])
    labels = [f"{r['strategy'].replace('shard_grad_op', 'sgo')}\n{r['dp_replicate']}x{r['dp_shard']}x{r['tp']}" for r in rs]
    x = range(len(rs))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    meas = [r["measured_step_s"] for r in rs]
    err = [[r["measured_step_s"] - r["measured_step_s_min"] for r in rs],
           [r["measured_step_s_max"] - r["measured_step_s"] for r in rs]]
    ax.bar([i - 0.2 for i in x], meas, 0.4, yerr=err, capsize=3, label="measured (median, min-max)", color="tab:blue")
    ax.bar([i + 0.2 for i in x], [r["predicted_step_s"] for r in rs], 0.4, label="plan's prediction", color="tab:orange")
    for i, m in zip(x, meas):
        ax.plot([i - 0.4, i + 0.4], [m * (1 + TOLERANCE)] * 2, "k:", lw=0.8)
        ax.plot([i - 0.4, i + 0.4], [m * (1 - TOLERANCE)] * 2, "k:", lw=0.8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("step time (s)")
    ax.set_title("shaped namespace cluster: measured vs predicted step time (dotted: +-20%)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "predicted.png"), dpi=110)


if __name__ == "__main__":
    main()
