#!/usr/bin/env bash
# perf/gpu/validate.sh end to end on this CPU build, as the one device call will run it on a
# GPU (--dry-run: the same steps with the CPU build's package, a tiny model, no GPU):
# pack.sh packs this build; its self-check is then swapped for a fixture that FAILs a norm
# path and the CUDA-graph path, so the run must turn those off by their gpu.* keys
# (perf/gpu/fallback.py) in every meshtrain run after it, and still train, plan, compare the
# losses with its fp32 reference, run both PyTorch peers (Debian's torch on the CPU) and
# write the table and results.json -- with the verdict FAIL, for the paths. Under root with
# mount namespaces it runs --isolate (every system copy of a packed library hidden: the
# package is complete); otherwise it says so and runs without.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR, MESHTRAIN_BUILD_DIR,
# TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
src=$MESHTRAIN_SOURCE_DIR
d=${TEST_TMP:-/tmp/gpu_validate_dry_run}
rm -rf "$d" && mkdir -p "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }

MESHTRAIN_PACK_XZ_LEVEL=0 timeout $((300 * time_scale)) bash "$src/perf/gpu/pack.sh" --build "$MESHTRAIN_BUILD_DIR" --out "$d/pack" \
  > "$d/pack.log" 2>&1 || { cat "$d/pack.log"; fail "pack.sh failed"; }
tail -1 "$d/pack.log"

# The package with a fixture self-check: one norm path and one graph path FAIL.
mkdir -p "$d/pkg"
tar -C "$d/pkg" -xJf "$d/pack/meshtrain-gpu.tar.xz" || fail "cannot unpack the package"
cat > "$d/pkg/meshtrain-gpu/bin/selfcheck_paths" <<'SC'
#!/bin/bash
# Fixture (tests/perf/gpu_validate_dry_run.sh): what selfcheck_paths prints when two paths fail.
echo "selfcheck_paths: 3 paths on host threads (fixture), each against the path it replaces and a double reference"
echo "PASS fused_optimizer.adamw_multi (fixture)"
echo "FAIL fused_norms.residual_rmsnorm: fixture: dx 0.3 vs double"
echo "FAIL graphs.step: fixture: replay differs"
echo "selfcheck_paths: 1 of 3 paths passed, 0 not in this build (SKIP)"
exit 1
SC
chmod +x "$d/pkg/meshtrain-gpu/bin/selfcheck_paths"
tar -C "$d/pkg" -cf - meshtrain-gpu | xz -T0 -0 > "$d/fixture.tar.xz" || fail "cannot repack"
rm -rf "$d/pkg"

iso=()
if [[ $(id -u) == 0 ]] && unshare -m --propagation private true 2>/dev/null; then
  iso=(--isolate)
else
  echo "gpu_validate_dry_run: not root or no mount namespaces: without --isolate (the package's completeness is not checked)"
fi
mkdir -p "$d/tmp"
TMPDIR=$d/tmp OUT=$d/out MESHTRAIN_TEST_JOBS=2 timeout $((900 * time_scale)) bash "$src/perf/gpu/validate.sh" --dry-run "${iso[@]}" \
  --pack "$d/fixture.tar.xz" --steps 4 --work "$d/work" > "$d/validate.out" 2>&1
rc=$?
left=$(find "$d/tmp" -mindepth 1 -maxdepth 1)
[[ -z $left ]] || fail "validate.sh left temporary files behind: $(echo $left)"
log=$d/out/validate.log
[[ -f $log ]] || { tail -30 "$d/validate.out"; fail "no validate.log (exit $rc)"; }
[[ $rc == 1 ]] || { tail -40 "$log"; fail "the verdict must be FAIL (exit 1) for the failed paths, got exit $rc"; }

for k in "gpu.fused_norms=false (fused_norms.residual_rmsnorm FAIL)" "gpu.norm_form=rows (fused_norms.residual_rmsnorm FAIL)" \
         "gpu.graphs=false (graphs.step FAIL)"; do
  grep -qF "fallback: every meshtrain run below gets --$k" "$log" || fail "the log does not announce --$k"
done
runs=$(grep -c "training [a-z0-9-]*: meshtrain train .* --gpu.fused_norms=false --gpu.norm_form=rows --gpu.graphs=false" "$log")
[[ $runs == 3 ]] || fail "every training run must get the fallback keys: $runs of 3 did"
grep -q "gpu.graphs: gpu.graphs=false" "$d/work/train/gpt2-124m-mb16/train.log" ||
  fail "the run did not take gpu.graphs=false"
python3 - "$d/out/results.json" <<'PY' || fail "results.json"
import json, sys
r = json.load(open(sys.argv[1]))
def check(cond, what):
    if not cond:
        sys.exit("results.json: %s\n%s" % (what, json.dumps({k: r.get(k) for k in ("paths", "fallback", "ok")}, indent=1)))
check(r["dry_run"] is True, "a dry run")
check(r["paths"] == {"fused_optimizer.adamw_multi": "PASS", "fused_norms.residual_rmsnorm": "FAIL", "graphs.step": "FAIL"},
      "the fixture's paths")
check([f["key"] for f in r["fallback"]] == ["gpu.fused_norms=false", "gpu.norm_form=rows", "gpu.graphs=false"],
      "the fallback keys, in order")
check(all(t["exit"] in (0, 77) for t in r["tests"]) and len(r["tests"]) >= 10, "every test program passed (or needs a GPU)")
for name in ("gpt2-124m-mb16", "gpt2-124m-mb32", "smollm2-135m"):
    t = r["runs"][name]["train"]
    check(t["loss_check"]["status"] == "PASS", name + ": losses within the fp32 reference's tolerance")
    check((t.get("tokens_per_s_median") or 0) > 0, name + ": a tokens/s")
    check(t["plan"]["status"] in ("PASS", "OFF"), name + ": plan ran")
check(r["ok"] is False, "the verdict fails for the paths")
PY
grep -q "^fallback every meshtrain run below ran without the paths that did not pass" "$d/out/table.txt" ||
  fail "the table has no fallback line"
grep -q "^verdict  FAIL: a fused path failed" "$d/out/table.txt" || fail "the table's verdict names the paths"
echo "gpu_validate_dry_run: $(grep -o 'done: [A-Z]*' "$d/validate.out" | head -1) as it must; $runs runs with the fallback keys, ${iso[*]:-not isolated}"
