#!/usr/bin/env bash
# perf/run-all.sh: regenerates every result under perf/results/ and perf/README.md
# (bench_step ~6 min, profile ~2 min, sweep ~15 min, bench_generate ~4 min, bench_eval ~1 min on a 2-core machine). Each script waits for
# a quiet machine first. MESHTRAIN=path/to/meshtrain selects the binary (default build/cpu).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/bench_step.sh"
bash "$here/profile.sh"
bash "$here/sweep.sh"
bash "$here/bench_save.sh"   # the namespace-host cases need root; without it only the one-host ones run
bash "$here/bench_generate.sh"
bash "$here/bench_eval.sh"
/usr/bin/python3 "$here/report.py"
