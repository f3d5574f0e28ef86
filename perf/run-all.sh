#!/usr/bin/env bash
# perf/run-all.sh: regenerates the standing benchmarks' results under perf/results/ and
# perf/README.md (bench_step ~6 min, profile ~2 min, sweep ~15 min, bench_save, bench_generate
# ~4 min, bench_eval ~1 min on a 2-core machine). Each script waits for a quiet machine first.
# MESHTRAIN=path/to/meshtrain selects the binary (default build/cpu). Not rerun here: the A/B
# comparisons against a baseline binary (bench_ab*, bench_norms, compare_binaries), the long
# or root-only studies (bench_packing, bench_prepare, bench_async_checkpoint, bench_qlora_memory,
# multihost_sweep, allreduce_ab, paper_check) and the GPU's (perf/gpu/): each has its own
# script, named with its rerun command in its section of perf/README.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/bench_step.sh"
bash "$here/profile.sh"
bash "$here/sweep.sh"
bash "$here/bench_save.sh"   # the namespace-host cases need root; without it only the one-host ones run
bash "$here/bench_generate.sh"
bash "$here/bench_eval.sh"
/usr/bin/python3 "$here/report.py"
