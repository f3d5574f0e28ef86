#!/usr/bin/python3
"""Groups a `perf record` profile (cpu-clock samples) of one training run into kernel
categories and converts samples to CPU seconds per training step:

    profile_breakdown.py NAME PERF_DATA FREQ STEPS [--json OUT]

Categories are matched on the symbol (kernel names carry their Kokkos functor / ATen op) in
order; start-up (parameter init, imports) is reported separately and left out of the per-step
numbers. The per-step numbers include the run's share of the final evaluation forward (for
meshtrain) - a few percent of one step."""
import json
import re
import subprocess
import sys

# (category, regex on "dso symbol"), first match wins. Order matters: specific before generic.
CATEGORIES = [
    ("start-up (init, imports)", r"initial_value|meshtrain::model::init|do_lookup_x|_dl_lookup|__cos_fma|__sin_fma|__ieee754_log|\blog@@|normal_distribution|"
                                 r"_PyEval|PyObject_|_PyObject|PyDict|PyUnicode|_Py[A-Z]|Py[A-Z][a-z]+_|python3\.11"),
    ("GEMM: OpenBLAS sgemm kernel", r"sgemm_kernel"),
    ("GEMM: OpenBLAS packing/beta", r"sgemm_(on|oi|in|it|ot|tn|tc|nc|oc)copy|sgemm_beta|gemm_thread|blas_|openblas"),
    ("AdamW + grad norm", r"adamw|adam|sum_sq|sq_norm|grad_norm|_foreach|addcdiv|addcmul|lerp"),
    ("attention (scores/softmax/weighted sum)", r"softmax|attention|row_max|causal|masked_fill|baddbmm|bmm"),
    ("LayerNorm fwd/bwd", r"layernorm|layer_norm|LayerNorm|rmsnorm"),
    ("GELU fwd/bwd", r"gelu|Gelu|GELU|tanh"),
    ("cross-entropy / LM head", r"cross_entropy|log_softmax|nll_loss|logsumexp|fused_head|head_|row_sums_impl|"
                                r"finish_impl|row_max_impl"),
    ("embedding fwd/bwd", r"embedding|index_select|index_add|embed"),
    ("bias / residual / column sums", r"column_sums|add_inplace|axpy|bias|residual|sum_kernel|reduce_kernel|"
                                      r"Reduce|sum_out"),
    ("memcpy / copies / fills", r"memmove|memcpy|memset|copy_|deep_copy|[fF]ill|contiguous|transpose|clone|cat_"),
    ("elementwise (other ATen)", r"at::native|vectorized_loop|cpu_kernel|VectorizedLoop|basic_loop|BinaryOp|"
                                 r"binary_kernel|unary_kernel|mul_|div_|sqrt"),
    ("MPI / gloo", r"mpi|ompi|opal|mca_|pmix|gloo"),
    ("OS kernel", r"\[kernel|kallsyms"),
]


def short(sym):
    """The kernel's own name out of a Kokkos ParallelFor<...> or ATen template symbol."""
    m = re.search(r"meshtrain::(?:\w+::)*?(?:\(anonymous namespace\)::)?(\w+)(?:<[^()]*>)?\(", sym)
    if m and sym.startswith("Kokkos::Impl::"):
        return "kokkos:" + m.group(1)
    return sym[:70]


def main():
    name, data, freq, steps = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    out_json = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-F", "sample,dso,sym"],
                         capture_output=True, text=True).stdout
    totals, top = {}, {}
    all_samples = 0
    for line in rep.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.match(r"\s*(\d+)\s+(\S+)\s+\[.\]\s+(.*)$", line)
        if not m:
            continue
        n, dso, sym = int(m.group(1)), m.group(2), m.group(3).strip()
        all_samples += n
        key = dso + " " + sym
        cat = next((c for c, rx in CATEGORIES if re.search(rx, key)), "other")
        totals[cat] = totals.get(cat, 0) + n
        top.setdefault(cat, []).append((n, short(sym)))
    startup = totals.pop("start-up (init, imports)", 0)
    step_samples = sum(totals.values())
    rows = sorted(totals.items(), key=lambda kv: -kv[1])
    print(f"{name}: {all_samples / freq:.1f} CPU s sampled; start-up {startup / freq:.1f} s; "
          f"{step_samples / freq / steps:.3f} CPU s per step over {steps} steps")
    print(f"  {'category':42s} {'s/step':>8s} {'share':>7s}   top symbols")
    result = {"name": name, "steps": steps, "cpu_s_per_step": step_samples / freq / steps,
              "startup_s": startup / freq, "categories": []}
    for cat, n in rows:
        syms = sorted(top[cat], reverse=True)[:2]
        print(f"  {cat:42s} {n / freq / steps:8.3f} {100 * n / step_samples:6.1f}%   "
              + "; ".join(f"{s[1][:60]} ({100 * s[0] / step_samples:.1f}%)" for s in syms))
        result["categories"].append({"category": cat, "s_per_step": n / freq / steps, "share": n / step_samples,
                                     "top": [{"symbol": s[1], "share": s[0] / step_samples} for s in syms]})
    if out_json:
        json.dump(result, open(out_json, "w"), indent=1)


if __name__ == "__main__":
    main()
