#!/usr/bin/env bash
# What the norm kernels load and store per instruction, read from the PTX of a `cuda` build
# (no GPU needed): for each kernel instance (form, pack width K, type) the number of 128-bit
# global loads and stores (ld.global.v4 / st.global.v4), of 16- and 32-bit ones, and of
# local-memory accesses (register spills or arrays the compiler could not keep in registers).
# The Warps form in packs (K > 1) must show only 128-bit moves of row data and no local memory.
#
#   perf/gpu/ptx_loads.sh [build dir, default build/cuda] [source, default src/kernels/residual_norms.cpp]
#
# It recompiles the one source with the build's own command plus `--keep` (through Kokkos'
# nvcc_wrapper) into a temporary directory; the build itself is not touched.
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
trap 'rm -rf "$keep"' EXIT
cmd=$(sed -e 's| -MD -MT [^ ]* -MF [^ ]*||' -e "s| -o [^ ]* -c | --keep --keep-dir=$keep -o $keep/out.o -c |" <<<"$cmd")
(cd "$build" && eval "$cmd") >"$keep/log" 2>&1 || { cat "$keep/log" >&2; exit 1; }
ptx=$(ls "$keep"/*.ptx | head -n1)
python3 - "$ptx" <<'EOF'
import re, sys
ptx = open(sys.argv[1]).read()
types = {"f": "fp32", "d": "fp64", "N": "bf16"}  # mangled: float, double, a class type (meshtrain::bf16)
rows = []
for entry in re.split(r"\.entry ", ptx)[1:]:
    name = entry.split("(", 1)[0]
    m = re.search(r"(layernorm|rmsnorm)_(forward|backward)_kernelILb(\d)ELi(\d+)E(\w)", name)
    if not m or "column_sums" in name:  # the parameter gradients' column sums: not row kernels
        continue
    count = lambda pat: len(re.findall(pat, entry))
    rows.append((f"{m.group(1)}_{m.group(2)}", "Warps" if m.group(3) == "1" else "Rows", m.group(4),
                 types.get(m.group(5), m.group(5)),
                 count(r"ld\.global(?:\.nc)?\.v[24]"), count(r"st\.global\.v[24]"),
                 count(r"ld\.global(?:\.nc)?\.[bu]16"), count(r"st\.global\.[bu]16"),
                 count(r"ld\.global(?:\.nc)?\.[bfu]32"), count(r"st\.global\.[bfu]32"),
                 count(r"(?:ld|st)\.local")))
print(f"{'kernel':20s} {'form':5s} {'K':>2s} {'type':4s} | {'vec ld':>6s} {'vec st':>6s} | {'ld16':>4s} {'st16':>4s} | "
      f"{'ld32':>4s} {'st32':>4s} | {'local':>5s}")
bad = 0
for r in rows:
    print(f"{r[0]:20s} {r[1]:5s} {r[2]:>2s} {r[3]:4s} | {r[4]:6d} {r[5]:6d} | {r[6]:4d} {r[7]:4d} | {r[8]:4d} {r[9]:4d} | {r[10]:5d}")
    if r[2] != "1" and (r[4] == 0 or r[5] == 0 or r[6] or r[7] or r[10]):
        bad += 1
if not rows:
    print("ptx_loads: no norm kernels in this source", file=sys.stderr)
    sys.exit(1)
print(f"{len(rows)} kernel instances; packed instances not moving rows in 128-bit units only: {bad}")
sys.exit(1 if bad else 0)
EOF
