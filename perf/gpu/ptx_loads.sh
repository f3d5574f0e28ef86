#!/usr/bin/env bash
# What the row kernels (norms, cross-entropy, SwiGLU, RoPE) load and store per instruction, read from the
# PTX of a `cuda` build (no GPU needed): for each kernel instance (form, pack width K, type)
# the number of 128-bit global loads and stores (ld/st.global.v4), of 16- and 32-bit ones,
# and of local-memory accesses (register spills, or arrays the compiler could not keep in
# registers). Their packed instances (K > 1) must move row data in 128-bit units and use no
# local memory; the script fails otherwise.
#
#   perf/gpu/ptx_loads.sh [build dir, default build/cuda] [source, default src/kernels/residual_norms.cpp]
#
# Sources with such kernels: src/kernels/residual_norms.cpp, src/kernels/norms.cpp,
# src/kernels/cross_entropy_online.cpp, src/kernels/elementwise.cpp (SwiGLU),
# src/kernels/rope.cpp. It recompiles the one source with the build's own
# command plus `--keep` (through Kokkos' nvcc_wrapper) into a temporary directory; the build
# itself is not touched; PTX_KEEP=1 leaves that directory (the .ptx) in place to read.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build/cuda}
src=${2:-src/kernels/residual_norms.cpp}
[[ -f $build/build.ninja ]] || { echo "ptx_loads: no configured build in $build (cmake --preset cuda)" >&2; exit 2; }
[[ -f $src ]] || { echo "ptx_loads: no source $src" >&2; exit 2; }
obj="src/CMakeFiles/meshtrain_lib.dir/${src#src/}.o"
cmd=$(ninja -C "$build" -t commands "$obj" | tail -n1)
[[ $cmd == *nvcc_wrapper* ]] || { echo "ptx_loads: $build does not compile $src with nvcc_wrapper" >&2; exit 2; }
keep=$(mktemp -d /tmp/meshtrain-ptx.XXXXXX)
trap '[[ -n ${PTX_KEEP:-} ]] || rm -rf "$keep"' EXIT
cmd=$(sed -e 's| -MD -MT [^ ]* -MF [^ ]*||' -e "s| -o [^ ]* -c | --keep --keep-dir=$keep -o $keep/out.o -c |" <<<"$cmd")
(cd "$build" && eval "$cmd") >"$keep/log" 2>&1 || { cat "$keep/log" >&2; exit 1; }
ptx=$(ls "$keep"/*.ptx | head -n1)
python3 - "$ptx" <<'PYEOF'
import re, sys
ptx = open(sys.argv[1]).read()
types = {"f": "fp32", "d": "fp64", "N": "bf16"}  # mangled: float, double, a class type (meshtrain::bf16)
rows = []
for entry in re.split(r"\.entry ", ptx)[1:]:
    name = entry.split("(", 1)[0]
    if "column_sums" in name:  # the norms' parameter gradients: column kernels, not rows
        continue
    m = re.search(r"(layernorm|rmsnorm)_(forward|backward)_kernelILb(\d)ELi(\d+)E(\w)", name)
    if m:
        kernel, form, k, t = f"{m.group(1)}_{m.group(2)}", "Warps" if m.group(3) == "1" else "Rows", m.group(4), m.group(5)
    elif m := re.search(r"(fused_kernel|online_stats_kernel)ILi(\d+)E(\w)", name):
        kernel, form, k, t = "cross_entropy_" + m.group(1).replace("_kernel", ""), "team", m.group(2), m.group(3)
    elif m := re.search(r"(swiglu_(?:forward|backward))_packsILi(\d+)E(\w)", name):
        kernel, form, k, t = m.group(1), "pack", m.group(2), m.group(3)
    elif m := re.search(r"(swiglu_(?:forward|backward))I(\w)", name):
        kernel, form, k, t = m.group(1), "team", "1", m.group(2)
    elif m := re.search(r"rope_apply_packsILb(\d)ELi(\d+)E(\w)", name):
        kernel, form, k, t = "rope_" + ("forward" if m.group(1) == "1" else "backward"), "pack", m.group(2), m.group(3)
    elif m := re.search(r"rope_applyILb(\d)E(\w)", name):
        kernel, form, k, t = "rope_" + ("forward" if m.group(1) == "1" else "backward"), "team", "1", m.group(2)
    else:
        continue
    count = lambda pat: len(re.findall(pat, entry))
    rows.append((kernel, form, k, types.get(t, t),
                 count(r"ld\.global(?:\.nc)?\.v[24]"), count(r"st\.global\.v[24]"),
                 count(r"ld\.global(?:\.nc)?\.[bu]16"), count(r"st\.global\.[bu]16"),
                 count(r"ld\.global(?:\.nc)?\.[bfu]32"), count(r"st\.global\.[bfu]32"),
                 count(r"(?:ld|st)\.local")))
print(f"{'kernel':28s} {'form':5s} {'K':>2s} {'type':4s} | {'vec ld':>6s} {'vec st':>6s} | {'ld16':>4s} {'st16':>4s} | "
      f"{'ld32':>4s} {'st32':>4s} | {'local':>5s}")
bad = 0
for r in rows:
    print(f"{r[0]:28s} {r[1]:5s} {r[2]:>2s} {r[3]:4s} | {r[4]:6d} {r[5]:6d} | {r[6]:4d} {r[7]:4d} | {r[8]:4d} {r[9]:4d} | {r[10]:5d}")
    if r[2] == "1":
        continue
    # Packed instances: row data in 128-bit units, no local memory. The norms, SwiGLU and RoPE
    # touch no single element of a row (RoPE's fp64 instance reads its fp32 tables' two-float
    # packs as scalars, 32-bit); the cross-entropy reads the target logit and writes the target's gradient and
    # an ignored row's zeros element by element (a few scalar accesses, one row at a time),
    # and its statistics kernel only reads.
    moves = r[4] > 0 and (r[5] > 0 or r[0].endswith("online_stats")) and r[10] == 0
    scalar_ok = r[0].startswith("cross_entropy") or (r[6] == 0 and r[7] == 0)
    if not (moves and scalar_ok):
        bad += 1
if not rows:
    print("ptx_loads: no row kernels (norms, cross-entropy, SwiGLU, RoPE) in this source", file=sys.stderr)
    sys.exit(1)
print(f"{len(rows)} kernel instances; packed instances not moving rows in 128-bit units only: {bad}")
sys.exit(1 if bad else 0)
PYEOF
