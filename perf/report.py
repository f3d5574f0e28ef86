#!/usr/bin/python3
"""Writes perf/README.md from the latest results under perf/results/ (bench_step, profile,
sweep, ...) and the hand-written analysis in perf/notes.md. Run by perf/run-all.sh.

A section that was written by hand from its script's results (a side-by-side comparison
read by an engineer, not a table a script prints) lives in perf/results/<dir>/SECTION.md,
heading included, and is placed here in the page's order, so regenerating the page keeps
it. The test `perf_report_in_sync` regenerates the page and requires it to equal the
committed perf/README.md: edit the sources here, then run this script."""
import json
import os
import sys

PERF = os.path.dirname(os.path.abspath(__file__))
RES = os.path.join(PERF, "results")


def load(*p):
    path = os.path.join(RES, *p)
    return json.load(open(path)) if os.path.exists(path) else None


def read(*p):
    path = os.path.join(RES, *p)
    return open(path).read() if os.path.exists(path) else None


def section(d):
    """A hand-written section, SECTION.md of results/<d>, heading included (None if absent)."""
    return read(d, "SECTION.md")


def why_off(sweep, r, term):
    """The likeliest reason a prediction is off, from the sweep's own data: the plan's GEMM
    measurement against the sweep's SGEMM ceiling at the same rank count, and the run's step
    time against the other strategies of the same mesh (which do the same compute)."""
    ceil = sweep.get("ceilings", {}).get(str(r["ranks"]), {}).get("sgemm_peak_per_rank")
    plan_gemm = r.get("plan_inputs", {}).get("gemm_gflops")
    if term == "compute" and ceil and plan_gemm and plan_gemm * 1e9 < 0.8 * ceil:
        return (f"why: `plan` measured GEMM at {plan_gemm:.0f} GFLOP/s per rank where the sweep's ceiling at "
                f"{r['ranks']} rank(s) is {ceil / 1e9:.0f}: the machine was disturbed during that plan's ~1 s "
                f"of measurement, so its inputs, not the model, are off")
    same_mesh = [o["compute_s"] for o in sweep["runs"] if o is not r and o["mode"] == r["mode"]
                 and o["ranks"] == r["ranks"] and o["tp"] == r["tp"]]
    if term == "compute" and same_mesh and r["compute_s"] > 1.15 * max(same_mesh):
        return (f"why: this run's compute ({r['compute_s']:.2f} s) is above every other strategy on the same mesh "
                f"(max {max(same_mesh):.2f} s) for the same GEMMs: the run was disturbed")
    if term == "communication" and r["ranks"] > sweep.get("machine", {}).get("cores", r["ranks"]):
        return ("why: more ranks than cores: exposed communication includes waiting for descheduled peers, "
                "which no bandwidth term models")
    return "why: not identified from the sweep's data (see the notes above)"


def cost_model_table(sweep):
    """Predicted vs measured per run, and which term is off when outside +-25%."""
    rows = ["| run | measured s | predicted s | pred/meas | measured compute s | predicted compute s (gemm + elementwise) | "
            "measured exposed comm s | predicted comm s (fsdp + tp, overlap) | verdict |",
            "|---|---|---|---|---|---|---|---|---|"]
    off = 0
    for r in sorted(sweep["runs"], key=lambda r: (r["mode"], r["ranks"], r["tp"], r["strategy"])):
        p = r.get("predicted")
        if not p:
            continue
        comp_p = p["gemm"] + p["elementwise"]
        comm_p = p["overlap"] - comp_p
        ratio = p["overlap"] / r["step_s"]
        if abs(ratio - 1) <= 0.25:
            verdict = "within 25%"
        else:
            off += 1
            d_comp = comp_p - r["compute_s"]
            d_comm = comm_p - r["exposed_comm_s"]
            term = "compute" if abs(d_comp) >= abs(d_comm) else "communication"
            verdict = (f"**{term} term off**: predicted {comp_p if term == 'compute' else comm_p:.3f} s vs measured "
                       f"{r['compute_s'] if term == 'compute' else r['exposed_comm_s']:.3f} s")
            verdict += "; " + why_off(sweep, r, term)
        rows.append(f"| {r['mode']} {r['ranks']}r tp{r['tp']} {r['strategy']} | {r['step_s']:.3f} | {p['overlap']:.3f} | "
                    f"{ratio:.2f} | {r['compute_s']:.3f} | {comp_p:.3f} ({p['gemm']:.3f} + {p['elementwise']:.3f}) | "
                    f"{r['exposed_comm_s']:.3f} | {comm_p:.3f} | {verdict} |")
    return "\n".join(rows), off


def profile_table(mt, pt):
    cats = []
    for prof in (mt, pt):
        for c in prof["categories"]:
            if c["category"] not in cats:
                cats.append(c["category"])
    get = lambda prof, cat: next((c for c in prof["categories"] if c["category"] == cat), None)
    rows = ["| category | meshtrain CPU s/step | share | PyTorch CPU s/step | share | meshtrain top symbols |",
            "|---|---|---|---|---|---|"]
    for cat in cats:
        a, b = get(mt, cat), get(pt, cat)
        top = "; ".join(f"`{t['symbol'][:48]}` {100 * t['share']:.1f}%" for t in (a["top"] if a else []))
        rows.append(f"| {cat} | {a['s_per_step']:.3f} | {100 * a['share']:.1f}% | " if a else f"| {cat} | - | - | ")
        rows[-1] += (f"{b['s_per_step']:.3f} | {100 * b['share']:.1f}% | " if b else "- | - | ") + top + " |"
    rows.append(f"| **total** | **{mt['cpu_s_per_step']:.3f}** | | **{pt['cpu_s_per_step']:.3f}** | | |")
    return "\n".join(rows)


def main():
    step = load("bench_step", "results.json")
    sweep = load("sweep", "summary.json")
    mt_prof, pt_prof = load("profile", "meshtrain.json"), load("profile", "pytorch.json")
    notes = open(os.path.join(PERF, "notes.md")).read() if os.path.exists(os.path.join(PERF, "notes.md")) else ""
    out = []
    out.append("""# perf: the performance harness and its latest results

Everything on this page is regenerated by one command (about 25 minutes on a 2-core machine):

```
MESHTRAIN=build/cpu/bin/meshtrain bash perf/run-all.sh
```

| script | what it measures (each in one run, with its own ceilings) |
|---|---|
| `perf/bench_step.sh` | SGEMM peak, copy bandwidth; meshtrain vs PyTorch (`perf/peer/torch_gpt.py`) tokens/s and MFU on `inputs/bench-gpt2-23m.ini` at 1 rank and at 2 ranks (full_shard, no_shard vs DDP over gloo); the ratios -> `results/bench_step/` |
| `perf/profile.sh` | `perf record` of both at 1 rank x 1 thread, grouped into kernel categories -> `results/profile/` |
| `perf/sweep.sh` | the scaling sweep: 1/2/4 ranks x full_shard/shard_grad_op/no_shard x tp 1/2, strong and weak; `meshtrain plan` prediction per configuration; PyTorch at 1/2/4 ranks; `meshtrain bench comm` -> `results/sweep/` (sweep.csv = every logged step of every run, summary.csv, comm.csv, plots/) |
| `perf/bench_save.sh` | a 37 MiB checkpoint save (`meshtrain bench io`: best of 5, file-system and network ceilings) on one host over shared memory and over TCP, and across 2 and 4 namespace hosts (needs root) -> `results/bench_save/` |
| `perf/multihost_sweep.sh` (= `perf/sweep.sh --hosts N`) | namespace hosts with tc-shaped links (default 1 Gbit/s, +0.2 ms where the kernel has netem): `bench comm` inside vs across hosts, six (strategy, mesh) training runs x 3 repeats, `plan --json` given the measured bandwidths before each run; `multihost_summary.py` ranks both and checks every prediction against +-20% -> `results/multihost_sweep/` (needs root; not run by run-all.sh) |
| `perf/allreduce_ab.sh` | on the shaped namespace cluster: no_shard and hybrid_shard runs with each libnbc all-reduce algorithm (libnbc's own binomial tree, halving-doubling as meshtrain selects it, a ring), 3 repeats in rotating order; step times and final losses -> `results/allreduce_ab/` (needs root; not run by run-all.sh) |
| `perf/bench_norms.sh` | `gpu.fused_norms` on CPU: the fused residual+LayerNorm/RMSNorm kernels against the unfused ones, timed back to back in one `bench_kernels --only=norms` process (N 8192, C 768, fp32), REPS runs, optionally beside a baseline `bench_kernels` (`BASELINE_BENCH=`), alternating order; per-run fused/unfused ratios -> `results/bench_norms/`; `SECTION=epilogues`: `gpu.epilogues`' host passes (bias + GELU, GELU backward + bias gradient on (8192, 3072)) against the kernels they replace -> `results/bench_epilogues/`; `BENCH_CPU_TIME=1` times by process CPU time (not run by run-all.sh) |
| `perf/bench_ab.sh` | two meshtrain binaries side by side (`BASELINE=` before a change, `MESHTRAIN=` after; or one binary with `BASELINE_ENV=` settings for the baseline's runs), 1 rank no_shard and 2 ranks full_shard (`CONFIGS=`) on the benchmark model (`ARGS=` overrides for both, e.g. `--train.precision=bf16`), alternating order; step-time ratio, equal final losses and each run's per-rank memory peak from summary.json -> `results/bench_ab/` (not run by run-all.sh) |
| `perf/bench_async_checkpoint.sh` | what `checkpoint.every=5` costs training on the benchmark model at 2 ranks: no checkpoint vs synchronous vs asynchronous saves (`checkpoint.async`), interleaved repetitions, summary.json's loop tokens/s; each async checkpoint compared bit for bit with the sync one -> `results/bench_async_checkpoint/` (not run by run-all.sh) |
| `perf/bench_generate.sh` | `meshtrain generate` ms per token at 512 tokens of context with and without the KV cache, GPT-2 and Llama (GQA), greedy texts checked identical -> `results/bench_generate/` |
| `perf/bench_eval.sh` | wall time of `meshtrain eval --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf --text` (256 tokens, 1 rank, process start to exit), median of 5, optionally side by side with another binary (`BASELINE=`), losses checked identical and within 1e-4 of the float64 reference -> `results/bench_eval/` |
| `perf/bench_prepare.sh` | `meshtrain prepare` of one SIZE_MB (16) MB document with the byte tokenizer, SmolLM2's BPE, and a SentencePiece BPE and unigram model trained in Llama 2's form: seconds and peak memory (max RSS), beside the reference library encoding the same text whole (Hugging Face `tokenizers`, `sentencepiece`) and an older binary (`BASELINE=`), REPS runs interleaved, token counts checked equal (the unigram model's with the reference encoding meshtrain's 16 KiB stretches, the whole encode's count beside it) -> `results/bench_prepare/` (not run by run-all.sh) |
| `perf/bench_qlora_memory.sh` | QLoRA memory (issue 32 #2): `inputs/llama-1b.ini` (1.25 B parameters, random weights), LoRA rank 16 on every projection, bf16, full_shard on 2 ranks; the memory pool's per-rank peak and the frozen all-gather bytes per step with a bf16, nf4 (and int8) base against `meshtrain plan`'s prediction -> `results/bench_qlora_memory/` (about 15 minutes; not run by run-all.sh); `MODEL=smollm2`: the same on the SmolLM2 Q4_1 GGUF with a bf16, nf4 and `gguf` (the file's own blocks) base -> `results/bench_qlora_memory_smollm2/` (about 3 minutes) |
| `perf/paper_check.sh` | no measurement: `meshtrain plan` for published torchtitan and Megatron-LM runs (H100/A100, FSDP, FSDP + TP, TP + DP) next to their reported tokens/s and MFU, a few seconds -> `results/paper_check/` (table.md; the comparison and its reading are in doc/perf.md; not run by run-all.sh) |
| `perf/plot.py`, `perf/collect.py`, `perf/report.py` | plots, tables, this page |

Rules the scripts follow: they wait for a 1-minute load average below 1.5 before measuring
(`PERF_MAX_LOAD`) and record the load during every run; threads are pinned per rank
(`OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, `torch.set_num_threads`, all = `THREADS`, default 1);
`OPENBLAS_CORETYPE`/`OPENBLAS_L2_SIZE` are unset for every command alike (`PERF_NATIVE_BLAS=0`
keeps the machine's setting); each run's number is the median step time after warm-up, each
configuration's the median over its repeats. Bus-bandwidth factors and the cost model are
derived in [doc/perf.md](../doc/perf.md). Nothing here is timed inside the test suite; the suite
runs `bench_step.sh`, `sweep.sh` (at 1 and 2 ranks) and `bench_ab.sh` end to end on a tiny shape
(`perf_bench_step_dry_run`, `perf_sweep_dry_run`, `perf_bench_ab_dry_run`), `bench_norms.sh`,
`compare_plans.sh`, `bench_eval.sh` and `bench_generate.sh` (`perf_bench_norms_dry_run`,
`perf_compare_plans_dry_run`, `perf_bench_eval_dry_run`, `perf_bench_generate_dry_run`), and
checks their tables, not their times. A script whose run fails leaves its previous results in
place: the scripts that replace their `OUT_DIR` do so only after every run and check
(`perf/common.sh`: `stage_results`, `publish_results`), the partial results of a failed run
in `OUT_DIR.partial`, and a results directory's hand-written `NOTE.md` and `SECTION.md` (the
notes and sections of this page) survive every run. `summarize_step.py` and `collect.py` refuse a PyTorch run that trained
another model or batch than the meshtrain run it is compared with (`PEER_ARGS` must match
`MODEL_ARGS`).
""")
    if step:
        out.append("## meshtrain vs PyTorch on the benchmark model (issue 3 #5, issue 4 #4)\n")
        out.append(read("bench_step", "results.md"))
    ab = read("bench_ab", "results.md")
    if ab:
        out.append("## A change against its baseline: the design work of issue 14\n")
        out.append(read("bench_ab", "NOTE.md") or "")
        out.append(ab)
    out.append(section("bench_norms"))
    out.append(section("bench_ab_epilogues"))
    out.append(section("bench_ab_fp32_grads"))
    out.append(section("bench_ab_issue33_cpu"))
    out.append(section("bench_ab_issue33_cpu_zen4"))
    out.append(section("bench_ab_row_packs_llama"))
    out.append(read("bench_ab_row_packs_llama", "results.md"))
    ab_allreduce = read("bench_ab_allreduce", "results.md")
    if ab_allreduce:
        out.append("## The MPI all-reduce's algorithm on one host (issue 17)\n")
        out.append(read("bench_ab_allreduce", "NOTE.md") or "")
        out.append(ab_allreduce)
    out.append(section("bench_packing"))
    gen = read("bench_generate", "results.md")
    if gen:
        out.append("## Generation with the KV cache (issue 18 #6)\n")
        out.append(gen)
    ev = read("bench_eval", "results.md")
    if ev:
        out.append("## Evaluating a pretrained GGUF model (issue 18 #5)\n")
        out.append(ev)
        out.append(read("bench_eval", "NOTE.md") or "")
    prep = read("bench_prepare", "results.md")
    if prep:
        out.append("## `prepare` on one large document: memory and time against the tokenizers' own libraries\n")
        out.append(read("bench_prepare", "NOTE.md") or "")
        out.append(prep)
    qlora = read("bench_qlora_memory", "results.md")
    if qlora:
        out.append("## QLoRA memory on a 1B-parameter Llama (issue 32 #2)\n")
        out.append(read("bench_qlora_memory", "NOTE.md") or "")
        out.append(qlora)
    qlora_smollm2 = read("bench_qlora_memory_smollm2", "results.md")
    if qlora_smollm2:
        out.append("## QLoRA memory on SmolLM2's GGUF: none, nf4 and the file's own blocks (issue 32)\n")
        out.append(read("bench_qlora_memory_smollm2", "NOTE.md") or "")
        out.append(qlora_smollm2)
    if mt_prof and pt_prof:
        meta = load("profile", "meta.json") or {}
        out.append("## Where a step's time goes (perf record, 1 rank x 1 thread)\n")
        out.append(f"CPU seconds per training step by kernel category, from `perf record -F {meta.get('freq', '?')}` "
                   f"over {mt_prof['steps']} steps of each (start-up excluded; PyTorch's own kernels are stripped of "
                   f"symbols in Debian's build, so its non-GEMM work shows as `other`).\n")
        out.append(profile_table(mt_prof, pt_prof) + "\n")
    if notes:
        out.append(notes)
    if sweep:
        out.append("## Scaling sweep (issue 8)\n")
        out.append(read("sweep", "summary.md"))
        out.append("![tokens/s and scaling efficiency](results/sweep/plots/throughput.png)\n")
        out.append("![time breakdown](results/sweep/plots/breakdown.png)\n")
        out.append("![memory by component](results/sweep/plots/memory.png)\n")
        out.append("### Communication benchmark\n")
        out.append("![bus bandwidth vs message size](results/sweep/plots/busbw.png)\n")
        table, off = cost_model_table(sweep)
        out.append("### Cost model: predicted vs measured\n")
        out.append(f"{off} of {sum(1 for r in sweep['runs'] if r.get('predicted'))} configurations are outside +-25%; "
                   "for those the table names the term that is off (the larger of the compute and the communication "
                   "discrepancy) and why, from the sweep's own data.\n")
        out.append(table + "\n")
        out.append("![predicted vs measured](results/sweep/plots/predicted.png)\n")
    mh = read("multihost_sweep", "summary.md")
    if mh:
        out.append("## A slow inter-node link: measured ranking vs `plan` (issue 17)\n")
        out.append(read("multihost_sweep", "NOTE.md") or "")
        setup = read("multihost_sweep", "setup.txt") or ""
        if setup:
            out.append("```\n" + setup.rstrip() + "\n```\n")
        out.append(mh)
        out.append("![measured vs predicted step time on the shaped cluster](results/multihost_sweep/predicted.png)\n")
    ab = read("allreduce_ab", "results.md")
    if ab:
        out.append("### The MPI all-reduce's algorithm on the shaped cluster (`perf/allreduce_ab.sh`)\n")
        out.append(read("allreduce_ab", "NOTE.md") or "")
        out.append(ab)
    save_table = read("bench_save", "results.md")
    if save_table:
        out.append("## Checkpoint saves across hosts (issue 17)\n")
        out.append(read("bench_save", "NOTE.md") or "")
        out.append(save_table)
    for d in ("checkpoint_checksums", "recovery", "bench_async_checkpoint"):
        out.append(section(d))
    gpu_table = read("gpu", "table.txt")
    if gpu_table:
        out.append("## GPU validation (issue 9): the table of the latest real run\n")
        out.append("Printed by `perf/gpu/validate.sh` on a GPU machine and copied to `results/gpu/` with its "
                   "`results.json`, `validate.log` and `metrics.jsonl` (see [gpu/README.md](gpu/README.md)). "
                   + (read("gpu", "NOTE.md") or "") + "\n")
        out.append("```\n" + gpu_table.rstrip() + "\n```\n")
    text = "\n".join(s.rstrip() + "\n" for s in out if s)
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(PERF, "README.md")
    open(dest, "w").write(text)
    print("wrote", dest)


if __name__ == "__main__":
    main()
