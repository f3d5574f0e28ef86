#!/usr/bin/env bash
# perf/peer/torch_gpu.py (the GPU PyTorch peer of perf/gpu/validate.sh) on the CPU: a tiny
# GPT-2 and Llama (GQA) read from the real inis with overrides train 6 steps each with
# finite losses that start near ln(vocab) (random tokens, small init); compile mode is SKIP
# (with the reason) where torch has no torch.compile and PASS where it has; bad input is
# refused with one message. Exit 77 when /usr/bin/python3 has no torch.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
py=${REFERENCE_TORCH_PYTHON:-/usr/bin/python3}
"$py" -c "import torch" 2>/dev/null || { echo "skip: $py has no torch"; exit 77; }
src=$MESHTRAIN_SOURCE_DIR
d=${TEST_TMP:-/tmp/torch_gpu_peer}
mkdir -p "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }
tiny=(--override vocab_size=300 --override d_model=32 --override n_layers=2 --override n_heads=4
      --override max_seq_len=32 --override seq_len=32 --override ffn_dim=64 --override micro_batch=2)
cd "$src"
for mode in eager compile; do
  "$py" perf/peer/torch_gpu.py --device cpu --mode "$mode" --steps 6 --warmup 2 "${tiny[@]}" \
    --run g:inputs/gpt2-124m.ini --run l:inputs/smollm2-135m.ini:n_kv_heads=2 --json "$d/$mode.json" \
    > "$d/$mode.out" 2> "$d/$mode.err" || { rc=$?; cat "$d/$mode.err" >&2; fail "$mode exited $rc"; }
done
"$py" - "$d/eager.json" "$d/compile.json" <<'PY' || fail "the peer's JSON"
import json, math, sys
import torch
e, c = (json.load(open(p)) for p in sys.argv[1:3])
def check(cond, what):
    if not cond:
        sys.exit(what)
check([r["name"] for r in e["runs"]] == ["g", "l"], "both runs, in order")
# How GQA reaches SDPA: enable_gqa where this torch has it (>= 2.5, checked on the device).
check(e["gqa"] == ("native" if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5) else "repeat"),
      "gqa %s with torch %s" % (e["gqa"], torch.__version__))
for r in e["runs"]:
    check(r["status"] == "PASS", "%s: %s" % (r["name"], r.get("reason")))
    check(len(r["losses"]) == 6 and all(math.isfinite(x) for x in r["losses"]), "6 finite losses")
    check(abs(r["losses"][0] - math.log(300)) < 0.3, "%s: first loss %.3f near ln(300)" % (r["name"], r["losses"][0]))
    check(r["tokens_per_s"] > 0 and r["median_step_s"] > 0, "tokens/s")
    check(r["peak_mem_bytes"] is None, "no CUDA memory on the CPU")
g, l = e["runs"]
# vocab padded as meshtrain pads it: 300 -> 384 (gpt2-124m.ini: vocab_pad_multiple 128), tied.
check(g["params"] == 384 * 32 + 32 * 32 + 2 * (2 * 32 + 32 * 96 + 96 + 32 * 32 + 32 + 32 * 64 + 64 + 64 * 32 + 32 + 2 * 32) + 2 * 32,
      "GPT-2 parameter count %d" % g["params"])
# Llama: 4 query / 2 kv heads of 8: wq 32x32, wkv 32x32, wo 32x32, gate+up 32x128, down 64x32, 2 norms.
check(l["params"] == 300 * 32 + 2 * (3 * 32 * 32 + 32 * 128 + 64 * 32 + 2 * 32) + 32, "Llama parameter count %d" % l["params"])
for r in c["runs"]:
    if hasattr(torch, "compile"):
        check(r["status"] == "PASS", "compile %s: %s" % (r["name"], r.get("reason")))
    else:
        check(r["status"] == "SKIP" and "torch.compile" in r["reason"], "compile SKIP with the reason, never PASS")
PY
# Bad input: one message, non-zero exit.
if "$py" perf/peer/torch_gpu.py --device cpu --mode eager --run x:inputs/gpt2-124m.ini:nope=1 > /dev/null 2> "$d/bad.err"; then
  fail "an unknown override was accepted"
fi
grep -q "unknown override 'nope=1'" "$d/bad.err" || fail "the refusal names the key: $(cat "$d/bad.err")"
if "$py" perf/peer/torch_gpu.py --device cpu --mode eager --run x:inputs/gpt2-124m.ini:n_heads=5 > /dev/null 2> "$d/bad.err"; then
  fail "d_model 768 with 5 heads was accepted"
fi
grep -q "do not divide" "$d/bad.err" || fail "the refusal says why: $(cat "$d/bad.err")"
echo "torch_gpu_peer: all checks passed"
