#!/usr/bin/env bash
# perf/gpu/validate.sh --dry-run with this CPU build's package (perf/gpu/pack.sh --build):
# every step of the GPU validation walks here -- the self-check of the fused paths (each
# path named with PASS), the test programs, the GEMM peak, a short training run -- and the
# table and results.json come out with every fused path listed (issue 33).
set -euo pipefail
src=$MESHTRAIN_SOURCE_DIR
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
bash "$src/perf/gpu/pack.sh" --build "$MESHTRAIN_BUILD_DIR" --out "$TEST_TMP/pack" > "$TEST_TMP/pack.log" 2>&1 ||
  { tail -20 "$TEST_TMP/pack.log"; echo "FAIL: pack.sh --build $MESHTRAIN_BUILD_DIR"; exit 1; }
OUT=$TEST_TMP/out timeout 1500 bash "$src/perf/gpu/validate.sh" --dry-run --pack "$TEST_TMP/pack/meshtrain-gpu.tar.xz" \
  --steps 2 --work "$TEST_TMP/work" > "$TEST_TMP/validate.log" 2>&1 ||
  { tail -40 "$TEST_TMP/validate.log"; echo "FAIL: validate.sh --dry-run"; exit 1; }
tail -30 "$TEST_TMP/validate.log"
python3 - "$TEST_TMP/out/results.json" "$TEST_TMP/out/table.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read()
want = ["fused_optimizer.adamw_multi", "fused_optimizer.grad_norm", "packed.position_embedding_backward",
        "packed.attention_document_mask"]
assert r["dry_run"] and r["ok"], f"dry run not ok: {r.get('paths')}"
assert sorted(r["paths"]) == sorted(want), f"paths {sorted(r['paths'])}, expected {want}"
assert all(v == "PASS" for v in r["paths"].values()), r["paths"]
for name in want:
    assert f"PASS {name}" in table, f"{name} not in the table"
assert "4/4 fused paths PASS" in table, table
print("validate dry run: every step walked, paths", ", ".join(want), "PASS in the table and results.json")
PY
