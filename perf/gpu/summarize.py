#!/usr/bin/env python3
"""The one table of perf/gpu/validate.sh, from the files its run left in --work.

Reads: BUILD_INFO.txt, nvidia-smi.csv, selfcheck.txt (the fused paths' PASS/FAIL lines),
fallback.txt (the gpu.* keys the runs got for the paths that did not pass),
tests/status.txt (+ each test's log), gemm_bf16.json, gemm_fp32.json, torch_gemm.txt,
train/runs.txt and per run train/<run>/{train.log,metrics.jsonl,status.txt,gpu_memory.csv},
--reference-dir/<run>.json (CPU fp32 loss curves), peers/torch_{eager,compile}.json
(perf/peer/torch_gpu.py), sanitizer_status.txt, kernel_profile_status.txt, kernel_timer.txt.
Writes the table (--table) and the same numbers as JSON (--json): "paths", "fallback"
(one {"key", "why"} per key the runs got: their numbers are of the build without those
paths), "tests",
"train" (the first run: tokens_per_s_median, mfu_median, vs_torch_eager/compile, ...),
"runs" (every run), "peers" (torch_eager / torch_compile: the first run's tokens_per_s at
the top, every run under "runs"), "sanitizer", "kernel_profile" and "ok" (every path and
test passed, every run finished with finite losses inside the reference's tolerance, and no
peer, sanitizer or profile FAILed; SKIP does not fail). Standard library only: it runs
under whatever python3 the GPU machine has.
--make-reference METRICS_JSONL --how TEXT prints a reference file from a CPU fp32 run.

Definitions (what the table prints):
  tokens/s   median over the steps after warm-up (the first max(2, steps/8) steps pay for
             first-touch allocations, cuBLAS heuristics and NCCL setup) of
             global tokens per step / step wall time (meshtrain's metrics.jsonl).
  MFU        model FLOPs per second / measured GEMM peak, model FLOPs = 3 x forward FLOPs
             (ModelDims::flops_per_token_forward: every matmul incl. the LM head, attention
             scores and values unmasked) x tokens/s; the peak is the best bf16 cuBLAS GEMM
             of `meshtrain bench gemm` in the same run (train.peak_tflops).
  ratios     meshtrain tokens/s / the peer's tokens/s for the same shape in the same run.
  loss check every step both curves have: |loss - reference| <= 1e-2 x reference.
  memory     pool: peak bytes reserved by meshtrain's device pool (every tensor of the run);
             device: highest memory.used that nvidia-smi reported while training (adds the
             CUDA context, cuBLAS/NCCL workspaces and Kokkos' own small allocations);
             peers: torch.cuda.max_memory_allocated (PyTorch's allocator-level peak, the
             counterpart of the pool's).
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fallback import selfcheck_paths  # noqa: E402  (the self-check's one reader)


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def gib(b):
    if b is None:
        return "n/a"
    return "%.2f GiB" % (b / 2**30) if b >= 2**30 else "%.1f MiB" % (b / 2**20)


def tf(x):
    """TFLOP/s with 4 significant digits (a CPU dry run measures ~0.05)."""
    return "%.4g" % x


def test_results(work):
    rows = []
    for line in read(os.path.join(work, "tests", "status.txt")).splitlines():
        name, rc = line.split()
        log = read(os.path.join(work, "tests", name + ".log"))
        ran = re.findall(r"\[==========\] (\d+) tests? from .* ran", log)
        failed = re.findall(r"^\[  FAILED  \] (\d+) tests?,", log, re.M)
        skipped = re.findall(r"^\[  SKIPPED \] (\d+) tests?,", log, re.M)
        failed = int(failed[-1]) if failed else 0
        skipped = int(skipped[-1]) if skipped else 0
        rows.append({"name": name, "exit": int(rc), "tests": int(ran[-1]) if ran else None,
                     "failed": failed, "skipped": skipped})
    return rows


def gemm(path):
    j = load_json(path)
    if not j:
        return []
    return [{"m": r["m"], "n": r["n"], "k": r["k"], "tflops": r["best_flops_min"] / 1e12} for r in j["results"]]


# A bf16 run's loss against the CPU fp32 reference of the same run (same seed, weights and
# tokens): bf16 keeps 8 bits of mantissa (unit roundoff 2^-9) in every GEMM operand and
# activation, with fp32 accumulation and fp32 master weights; the loss of a mean over 16k
# tokens is expected to move by ~1e-3 relative (an estimate: the first device run with a
# reference measures it). 1e-2 relative is the tolerance: a wrong kernel moves a loss near
# ln(vocab) by far more, or makes it diverge.
LOSS_RTOL = 1e-2


def loss_check(losses, ref_path, ref_dir):
    ref = load_json(ref_path)
    if not losses:
        return {"status": "SKIP", "detail": "the run logged no loss"}
    if not ref:
        return {"status": "SKIP", "detail": "no CPU fp32 reference %s (perf/gpu/README.md says how one is made)"
                % os.path.relpath(ref_path, os.path.dirname(ref_dir))}
    want = {int(s): l for s, l in ref["losses"]}
    both = [(s, l, want[s]) for s, l in losses if s in want]
    if not both:
        return {"status": "SKIP", "detail": "no step in common with the reference (%s)" % ref.get("how", "")}
    worst = max(abs(l - r) / max(abs(r), 1e-12) for _, l, r in both)
    ok = all(math.isfinite(l) and abs(l - r) <= LOSS_RTOL * abs(r) for _, l, r in both)
    return {"status": "PASS" if ok else "FAIL", "steps_compared": len(both), "max_rel_diff": worst,
            "rtol": LOSS_RTOL, "reference": ref.get("how", ""),
            "detail": "%d steps, max rel diff %.1e (tol %.0e)" % (len(both), worst, LOSS_RTOL)}


def status_line(path):
    """'PASS|FAIL|SKIP detail' files of validate.sh -> (status, detail); missing = not run."""
    text = read(path).strip()
    if not text:
        return "SKIP", "not run"
    st, _, detail = text.partition(" ")
    return st, detail


def peer(w, key, runs):
    """peers/torch_<mode>.json (perf/peer/torch_gpu.py) -> the results.json entry: the first
    run's numbers at the top (peers.torch_eager.tokens_per_s), every run under "runs"."""
    mode = key.split("_", 1)[1]
    j = load_json(os.path.join(w, "peers", "torch_%s.json" % mode)) or {}
    rc = read(os.path.join(w, "peers", "torch_%s.status" % mode)).strip()
    by = {r["name"]: r for r in j.get("runs", [])}
    out = {"torch": j.get("torch"), "device": j.get("device_name"), "exit": int(rc) if rc.lstrip("-").isdigit() else None,
           "gqa": j.get("gqa"), "runs": {}}
    for n in runs:
        r = by.get(n)
        if r is None:
            why = j.get("not_run") or ("the peer stopped before this run (exit %s%s)"
                                       % (rc or "?", ", validate.sh's time limit" if rc == "124" else ""))
            out["runs"][n] = {"status": "SKIP" if (j.get("not_run") or rc == "124") else "FAIL", "reason": why}
            continue
        e = {k: r.get(k) for k in ("status", "reason", "tokens_per_s", "median_step_s", "peak_mem_bytes", "params",
                                    "flops_per_token", "optimizer", "cut_short")}
        out["runs"][n] = {k: v for k, v in e.items() if v is not None}
    head = out["runs"].get(runs[0], {}) if runs else {}
    out["status"] = head.get("status", "SKIP")
    out["tokens_per_s"] = head.get("tokens_per_s")
    out["peak_mem_bytes"] = head.get("peak_mem_bytes")
    if head.get("reason"):
        out["reason"] = head["reason"]
    return out


def kernel_profile(w, top=15):
    """kp_reader's table of the kernel timer's .dat file -> the top kernels by time."""
    st, detail = status_line(os.path.join(w, "kernel_profile_status.txt"))
    # regions: Kokkos profiling regions (attention forward/backward wrap several kernels).
    res = {"status": st, "detail": detail, "kernels": [], "regions": []}
    lines = read(os.path.join(w, "kernel_timer.txt")).splitlines()
    section = None
    for i, line in enumerate(lines):
        if line.startswith("Regions:"):
            section = "region"
        elif line.startswith("Kernels:"):
            section = "kernel"
        elif line.startswith("Summary:"):
            section = None
        m = re.match(r"\s*\((\w+)\)\s+([\d.eE+-]+)\s+(\d+)\s+([\d.eE+-]+)\s+([\d.eE+-]+)", line)
        if section and m and i > 0 and lines[i - 1].startswith("- "):
            res["kernels" if section == "kernel" else "regions"].append(
                {"name": lines[i - 1][2:].strip(), "type": m.group(1), "time_s": float(m.group(2)),
                 "calls": int(m.group(3)), "pct_of_kernels": float(m.group(5))})
        m = re.match(r"Total Time in Kokkos kernels:\s+([\d.]+)", line.strip())
        if m:
            res["kernel_time_s"] = float(m.group(1))
    if st == "PASS" and not res["kernels"]:
        res["status"], res["detail"] = "FAIL", "kp_reader's table had no kernel rows"
    for key in ("kernels", "regions"):
        res[key].sort(key=lambda k: -k["time_s"])
        res[key] = res[key][:top]
    return res


def make_reference(metrics, how):
    """--make-reference: metrics.jsonl of a CPU fp32 run -> the reference file's JSON."""
    losses = []
    for line in read(metrics).splitlines():
        try:
            s = json.loads(line)
            losses.append([s["step"], s["loss"]])
        except (ValueError, KeyError):
            pass
    if not losses:
        raise SystemExit("summarize.py: %s has no losses" % metrics)
    print(json.dumps({"how": how, "precision": "fp32", "losses": losses}))


def train_run(d):
    """One training run's folder -> (model, train, steps, losses, log, ok)."""
    log = read(os.path.join(d, "train.log"))
    steps = []
    for line in read(os.path.join(d, "metrics.jsonl")).splitlines():
        try:
            steps.append(json.loads(line))
        except ValueError:
            pass
    status = read(os.path.join(d, "status.txt")).strip()
    m = re.search(r"meshtrain train: (\S+) model, (\d+) parameters \((\w+)\), (\d+) rank", log)
    model = {"family": m.group(1), "params": int(m.group(2)), "precision": m.group(3), "ranks": int(m.group(4))} if m else {}
    m = re.search(r"batch: (\d+) sequences x (\d+) tokens", log)
    if m:
        model["sequences"], model["seq_len"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"mesh (.+?), strategy (\S+)", log)
    if m:
        model["mesh"], model["strategy"] = m.group(1), m.group(2)
    m = re.search(r"measured GEMM peak: ([\d.]+) GFLOP/s", log)
    model["peak_used_tflops"] = float(m.group(1)) / 1e3 if m else None

    train = {"exit": int(status) if status.lstrip("-").isdigit() else None, "steps": len(steps)}
    losses = [(s["step"], s["loss"]) for s in steps]
    finite = bool(losses) and all(math.isfinite(l) for _, l in losses)
    if steps:
        warm = max(2, len(steps) // 8)
        body = steps[warm:] if len(steps) > warm else steps
        train["warmup_steps_excluded"] = warm if len(steps) > warm else 0
        train["tokens_per_s_median"] = statistics.median(s["tokens_per_s"] for s in body)
        train["tokens_per_s_best"] = max(s["tokens_per_s"] for s in body)
        train["step_time_s_median"] = statistics.median(s["step_time_s"] for s in body)
        train["mfu_median"] = statistics.median(s["mfu"] for s in body)
        train["pool_peak_bytes"] = max(s.get("peak_mem_bytes", 0) for s in steps)
        train["first_loss"], train["last_loss"] = losses[0][1], losses[-1][1]
        train["losses"] = losses
    # gpu.graphs: the steps replayed from a CUDA graph (metrics "cuda_graph") and the trainer's
    # one-line decision from the log ("gpu.graphs: ..."; "not in the log" from builds before it).
    train["cuda_graph_steps"] = sum(1 for s in steps if s.get("cuda_graph"))
    g = re.findall(r"gpu\.graphs: (.+)", log)
    train["graphs"] = g[-1].strip() if g else "not in the log"
    mem = []
    for line in read(os.path.join(d, "gpu_memory.csv")).splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            mem.append((int(parts[0]), int(parts[1])))
    if mem:
        train["device_used_max_bytes"] = max(u for u, _ in mem) * 2**20
        train["device_total_bytes"] = mem[0][1] * 2**20
    train["plan"] = plan_check(d, train.get("step_time_s_median"), model.get("strategy"))
    train_ok = train["exit"] == 0 and finite and len(steps) > 0
    return model, train, steps, losses, log, train_ok


PLAN_TOLERANCE = 0.15  # issue 33: `plan` within 15% of the measured step


def plan_check(d, measured_s, strategy):
    """`meshtrain plan` of the run (validate.sh plan_run: plan.json, plan_status.txt) against
    the measured median step: {"status": PASS (within 15%) | OFF (outside) | SKIP | FAIL,
    "predicted_s", "measured_s", "error" (predicted / measured - 1), "strategy", "detail"}.
    OFF is a measurement to act on (the cost model's rates), not a failed run."""
    st, detail = status_line(os.path.join(d, "plan_status.txt"))
    out = {"status": st, "detail": detail}
    if st != "PASS":
        return out
    plan = load_json(os.path.join(d, "plan.json")) or {}
    chosen = plan.get("chosen") or {}
    pred = chosen.get("step_s")
    out.update({"predicted_s": pred, "measured_s": measured_s, "strategy": chosen.get("strategy"),
                "compute_s": chosen.get("compute_s")})
    if not pred or not measured_s:
        out.update(status="SKIP", detail="no predicted or no measured step")
        return out
    if strategy and chosen.get("strategy") != strategy:
        out.update(status="FAIL", detail="plan chose %s, the run %s" % (chosen.get("strategy"), strategy))
        return out
    out["error"] = pred / measured_s - 1.0
    out["status"] = "PASS" if abs(out["error"]) <= PLAN_TOLERANCE else "OFF"
    out["detail"] = "predicted %.1f ms, measured %.1f ms: %+.1f%% (limit +-%d%%)" % (
        1e3 * pred, 1e3 * measured_s, 100 * out["error"], round(100 * PLAN_TOLERANCE))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work")
    ap.add_argument("--table")
    ap.add_argument("--json")
    ap.add_argument("--dry-run", default="0")
    ap.add_argument("--reference-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                            "..", "results", "gpu", "reference"),
                    help="<run>.json CPU fp32 loss curves (default perf/results/gpu/reference)")
    ap.add_argument("--make-reference", metavar="METRICS_JSONL", help="print a reference file from a CPU fp32 run")
    ap.add_argument("--how", default="", help="with --make-reference: how the run was made")
    a = ap.parse_args()
    if a.make_reference:
        return make_reference(a.make_reference, a.how)
    if not (a.work and a.table and a.json):
        ap.error("--work, --table and --json are required")
    w = a.work
    res = {"dry_run": a.dry_run == "1"}

    info = read(os.path.join(w, "BUILD_INFO.txt")).splitlines()
    res["build"] = info[0] if info else "unknown"
    smi = read(os.path.join(w, "nvidia-smi.csv")).splitlines()
    res["device"] = smi[1].strip() if len(smi) > 1 else ("host (dry run)" if res["dry_run"] else "unknown")
    version = read(os.path.join(w, "version.txt"))
    m = re.search(r"CUDA:\s*(.*)", version)
    res["cuda"] = m.group(1).strip() if m else ""

    tests = test_results(w)
    res["tests"] = tests
    # A dry run has no GPU: a program that needs one exits 77 (skipped), listed as such.
    tests_ok = bool(tests) and all(t["exit"] == 0 or (res["dry_run"] and t["exit"] == 77) for t in tests)
    # The fused paths: one "PASS name (...)", "SKIP name (why)" or "FAIL name: ..." line each
    # (selfcheck_paths). SKIP: the path is not in this build; a dry run (CPU build) may have
    # them, a device run may not (a CUDA build without cuDNN is not the build to measure).
    lines = selfcheck_paths(read(os.path.join(w, "selfcheck.txt")))
    paths = {name: v for name, (v, _) in lines.items()}
    path_detail = {name: detail for name, (_, detail) in lines.items()}
    res["paths"] = paths
    res["fallback"] = [dict(zip(("key", "why"), line.split("\t", 1)))
                       for line in read(os.path.join(w, "fallback.txt")).splitlines() if "\t" in line]
    sc_status = read(os.path.join(w, "selfcheck_status.txt")).strip()
    paths_ok = (bool(paths) and all(v == "PASS" or (res["dry_run"] and v == "SKIP") for v in paths.values())
                and sc_status == "0")

    bf = gemm(os.path.join(w, "gemm_bf16.json"))
    fp = gemm(os.path.join(w, "gemm_fp32.json"))
    peak = max((g["tflops"] for g in bf), default=0.0)
    res["gemm_bf16"] = bf
    res["gemm_fp32"] = fp
    res["gemm_bf16_peak_tflops"] = peak
    torch_line = read(os.path.join(w, "torch_gemm.txt")).strip().splitlines()
    res["torch_gemm"] = torch_line[-1] if torch_line else ""

    runs = [n for n in read(os.path.join(w, "train", "runs.txt")).split() if n]
    res["runs"] = {}
    train_ok = bool(runs)
    for n in runs:
        model_n, train_n, steps_n, losses_n, log_n, ok_n = train_run(os.path.join(w, "train", n))
        train_n["loss_check"] = loss_check(losses_n, os.path.join(a.reference_dir, n + ".json"), a.reference_dir)
        res["runs"][n] = {"model": model_n, "train": train_n}
        train_ok = train_ok and ok_n
    # The headline: the first run (GPT-2 124M, micro-batch 16), as results.json "train".
    first = runs[0] if runs else None
    model, train, steps, losses, log, _ = train_run(os.path.join(w, "train", first or "-"))
    if first:
        train["loss_check"] = res["runs"][first]["train"]["loss_check"]
    res["model"] = model
    res["train"] = train
    res["peers"] = {m: peer(w, m, runs) for m in ("torch_eager", "torch_compile")}
    for p in res["peers"].values():  # the peers' MFU against the same measured GEMM peak
        for r in p["runs"].values():
            if peak and r.get("tokens_per_s") and r.get("flops_per_token"):
                r["mfu"] = r["tokens_per_s"] * r["flops_per_token"] / (peak * 1e12)
    st, detail = status_line(os.path.join(w, "sanitizer_status.txt"))
    res["sanitizer"] = {"status": st, "detail": detail}
    res["kernel_profile"] = kernel_profile(w)
    loss_ok = all(r["train"]["loss_check"]["status"] != "FAIL" for r in res["runs"].values())
    peers_ok = all(p["runs"].get(n, {}).get("status") != "FAIL" for p in res["peers"].values() for n in runs)
    side_ok = res["sanitizer"]["status"] != "FAIL" and res["kernel_profile"]["status"] != "FAIL"
    # `plan` failing (or planning another strategy than the run's) fails; OFF (outside 15%) does not.
    plan_ok = all(r["train"]["plan"]["status"] != "FAIL" for r in res["runs"].values())
    res["ok"] = tests_ok and train_ok and paths_ok and loss_ok and peers_ok and side_ok and plan_ok

    # ---- the table --------------------------------------------------------------------
    L = []
    L.append("=" * 100)
    L.append("meshtrain GPU validation%s" % ("  (DRY RUN: CPU build, tiny model)" if res["dry_run"] else ""))
    L.append("  build    %s" % res["build"])
    L.append("  device   %s" % res["device"])
    if res["cuda"]:
        L.append("  cuda     %s" % res["cuda"])
    L.append("-" * 100)
    npass = sum(v == "PASS" for v in paths.values())
    L.append("paths    %d/%d fused paths PASS (selfcheck_paths: each vs the path it replaces and a double reference)%s"
             % (npass, len(paths), "" if paths else ": the self-check did not run (exit %s)" % (sc_status or "?")))
    for name, v in paths.items():
        L.append("         %s %s%s" % (v, name, "" if v == "PASS" else ": " + path_detail[name][:150]))
    if res["fallback"]:
        L.append("fallback every meshtrain run below ran without the paths that did not pass:")
        for f in res["fallback"]:
            L.append("         --%s (%s)" % (f["key"], f.get("why", "")[:120]))
    ntests = sum(t["tests"] or 0 for t in tests)
    nfail = sum(t["failed"] for t in tests)
    nskip = sum(t["skipped"] for t in tests)
    L.append("tests    %d/%d programs passed: %d tests, %d failed, %d skipped (kernels vs host references; NCCL + cuBLAS)"
             % (sum(t["exit"] == 0 for t in tests), len(tests), ntests, nfail, nskip))
    for t in tests:
        if res["dry_run"] and t["exit"] == 77:
            L.append("         SKIPPED %s (exit 77: needs a GPU; not a failure in a dry run only)" % t["name"])
        elif t["exit"] != 0:
            L.append("         FAILED %s (exit %d, %d failed)" % (t["name"], t["exit"], t["failed"]))
    backend = "host BLAS" if res["dry_run"] else "cuBLAS"
    L.append("GEMM     bf16 %s (meshtrain bench gemm, best repeat, TFLOP/s): %s -> peak %s TFLOP/s"
             % (backend, ", ".join("%dx%dx%d %s" % (g["m"], g["n"], g["k"], tf(g["tflops"])) for g in bf) or "n/a", tf(peak)))
    if fp:
        L.append("         fp32 %s: %s TFLOP/s" % (backend, ", ".join("%dx%dx%d %s" % (g["m"], g["n"], g["k"], tf(g["tflops"])) for g in fp)))
    if res["torch_gemm"]:
        L.append("         cross-check: %s" % res["torch_gemm"])
    L.append("-" * 100)
    if model.get("family"):
        L.append("model    %s, %.1f M parameters, %s, %d rank(s), %s x %s tokens per step, mesh %s, strategy %s"
                 % (model.get("family"), model.get("params", 0) / 1e6, model.get("precision"), model.get("ranks", 0),
                    model.get("sequences", "?"), model.get("seq_len", "?"), model.get("mesh", "?"), model.get("strategy", "?")))
    if steps:
        L.append("speed    tokens/s %.0f median (best %.0f), step %.1f ms median, over steps %d-%d (first %d = warm-up)"
                 % (train["tokens_per_s_median"], train["tokens_per_s_best"], 1e3 * train["step_time_s_median"],
                    steps[train["warmup_steps_excluded"]]["step"] if train["warmup_steps_excluded"] else steps[0]["step"],
                    steps[-1]["step"], train["warmup_steps_excluded"]))
        L.append("graphs   %d of %d steps replayed from a CUDA graph (gpu.graphs: %s)"
                 % (train["cuda_graph_steps"], len(steps), train["graphs"][:120]))
        pc = train.get("plan", {})
        L.append("plan     %s %s (meshtrain plan of the same run, measured on this machine)"
                 % (pc.get("status", "SKIP"), pc.get("detail", "")[:110]))
        L.append("MFU      %.1f%% of the measured bf16 GEMM peak (%s TFLOP/s used by the trainer; the FLOPs the step performs)"
                 % (100 * train["mfu_median"], tf(model.get("peak_used_tflops") or 0)))
        dev = ("%s max used (nvidia-smi) of %s" % (gib(train["device_used_max_bytes"]), gib(train["device_total_bytes"]))
               if "device_used_max_bytes" in train else "nvidia-smi n/a")
        L.append("memory   pool peak %s reserved; device %s" % (gib(train["pool_peak_bytes"]), dev))
        pick = losses if len(losses) <= 12 else [losses[int(round(i * (len(losses) - 1) / 11))] for i in range(12)]
        L.append("loss     " + "  ".join("%5d" % s for s, _ in pick) + "   (step)")
        L.append("         " + "  ".join("%5.3f" % l if abs(l) < 100 else "%5.0f" % l for _, l in pick))
        vocab = re.search(r"vocab_size = (\d+)", log)
        floor = ("; uniform random tokens: floor ln(%s) = %.3f" % (vocab.group(1), math.log(int(vocab.group(1))))
                 if vocab else "")
        L.append("         first %.4f, last %.4f%s" % (train["first_loss"], train["last_loss"], floor))
    else:
        L.append("training produced no steps (exit %s): see train.log" % train["exit"])
    L.append("-" * 100)
    # Every shape side by side: meshtrain, PyTorch eager and torch.compile from the same run.
    # mem: meshtrain's pool peak (every tensor it holds) vs torch.cuda.max_memory_allocated
    # (every tensor PyTorch's caching allocator handed out): both allocator-level peaks.
    def ktok(x):
        return "%.1fk" % (x / 1e3) if x is not None else "-"

    def peer_cell(n, key):
        r = res["peers"][key]["runs"].get(n, {})
        if r.get("status") != "PASS":
            return "%-16s" % (r.get("status", "SKIP")), None
        return "%-7s %-8s" % (ktok(r["tokens_per_s"]), gib(r.get("peak_mem_bytes")) if r.get("peak_mem_bytes") else "-"), \
            r["tokens_per_s"]

    L.append("%-16s %-22s %-16s %-16s %-13s %s" % ("shape", "meshtrain", "PyTorch eager", "torch.compile",
                                                 "meshtrain/", "loss vs CPU fp32"))
    L.append("%-16s %-7s %-5s %-8s %-7s %-8s %-7s %-8s %-6s %-6s" % ("", "tok/s", "MFU", "mem", "tok/s", "mem",
                                                                   "tok/s", "mem", "eager", "compile"))
    for n, r in res["runs"].items():
        t = r["train"]
        mine = t.get("tokens_per_s_median")
        e_cell, e_tok = peer_cell(n, "torch_eager")
        c_cell, c_tok = peer_cell(n, "torch_compile")
        ratio = lambda p: "%.2fx" % (mine / p) if (mine and p) else "-"
        t["vs_torch_eager"] = mine / e_tok if (mine and e_tok) else None
        t["vs_torch_compile"] = mine / c_tok if (mine and c_tok) else None
        lc = t["loss_check"]
        mfu = "%.1f%%" % (100 * t["mfu_median"]) if "mfu_median" in t else "-"
        L.append("%-16s %-7s %-5s %-8s %s %s %-6s %-6s %s" % (
            n[:16], ktok(mine) if mine else ("FAIL" if t["exit"] not in (0, None) else "-"), mfu,
            gib(t.get("pool_peak_bytes")) if t.get("pool_peak_bytes") else "-", e_cell, c_cell,
            ratio(e_tok), ratio(c_tok), lc["status"] + " " + lc["detail"][:60]))
    if first:
        for k in ("vs_torch_eager", "vs_torch_compile"):
            res["train"][k] = res["runs"][first]["train"].get(k)
    for key in ("torch_eager", "torch_compile"):
        p = res["peers"][key]
        notes = ["%s %s: %s" % (key, n, r["reason"][:80]) for n, r in p["runs"].items()
                 if r.get("status") != "PASS" and r.get("reason")]
        L.append("         %s: torch %s on %s%s%s" % (key, p.get("torch") or "?", p.get("device") or "?",
                                                     ", GQA %s" % p["gqa"][:60] if p.get("gqa") else "",
                                                     ("; " + "; ".join(notes[:1])) if notes else ""))
    L.append("sanitizer %s %s (compute-sanitizer --tool memcheck, 2 steps of inputs/tiny-gpt2.ini)"
             % (res["sanitizer"]["status"], res["sanitizer"]["detail"][:70]))
    kp = res["kernel_profile"]
    L.append("kernels  %s %s" % (kp["status"], kp["detail"][:90]))
    for k in kp["kernels"][:6]:
        L.append("         %8.4f s %6d calls %5.1f%%  %s" % (k["time_s"], k["calls"], k["pct_of_kernels"], k["name"][:60]))
    L.append("-" * 100)
    why = []
    if not paths_ok:
        why.append("a fused path failed" if paths else "no self-check")
    if not tests_ok:
        why.append("tests failed" if tests else "no tests ran")
    if not train_ok:
        why.append("a training run did not finish with finite losses")
    if not loss_ok:
        why.append("a loss left the CPU fp32 reference's tolerance")
    if not peers_ok:
        why.append("a PyTorch peer failed")
    if not side_ok:
        why.append("compute-sanitizer or the kernel profile failed")
    if not plan_ok:
        why.append("`meshtrain plan` of a run failed")
    L.append("verdict  %s" % ("PASS" if res["ok"] else "FAIL: " + ", ".join(why)))
    L.append("=" * 100)
    with open(a.table, "w") as f:
        f.write("\n".join(L) + "\n")
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
