#!/usr/bin/env bash
# Packed rows: the trainer's `attention_fraction` (metrics.jsonl; what `mfu` counts) is the
# attention the host kernels run on the step's rows -- 128-query blocks whose keys start at the
# block's first document start (kernels/attention.hpp) -- against the whole rows'. Every example
# here has the same length, so every packed row has the same documents and any rows the sampler
# draws give the fraction Python computes from train.docs. Unpacked rows log no such field.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

"$py" - <<'PY' || { fail "writing chat.jsonl"; finish; }
import json, random
rng = random.Random(3)
with open("chat.jsonl", "w") as f:
    for _ in range(96):
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5))
        f.write(json.dumps({"messages": [{"role": "user", "content": "Repeat: " + w},
                                         {"role": "assistant", "content": w + " " + w}]}) + "\n")
PY
"$MESHTRAIN_BIN" prepare --format chat --chat_template chatml --input chat.jsonl --output packed --seq_len 383 \
  --val_fraction 0 --pack >prepare.log 2>&1 || { cat prepare.log; fail "prepare --pack failed"; finish; }
"$MESHTRAIN_BIN" prepare --format chat --chat_template chatml --input chat.jsonl --output padded --seq_len 383 \
  --val_fraction 0 --pack=false >prepare_padded.log 2>&1 || { cat prepare_padded.log; fail "prepare failed"; finish; }
model=(--model.max_seq_len=384 --train.seq_len=383 --train.micro_batch=2 --train.global_batch=2 --train.steps=2
       --train.log_every=1 --checkpoint.save_final=false)
for d in packed padded; do
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n 1 "$MESHTRAIN_BIN" train "$tiny" --data.dir=$d "${model[@]}" --output.dir=run_$d \
    >train_$d.log 2>&1 || { cat train_$d.log; fail "training on $d rows failed"; finish; }
done
"$py" - <<'PY' || fail "attention_fraction is not the attention the host kernels run"
import json, numpy as np
R, T, rows = 384, 383, 128
seg = np.frombuffer(open("packed/train.docs", "rb").read(), dtype="<u2", offset=64).reshape(-1, R)
def fraction(s):
    start = [0] * T
    for t in range(1, T):
        start[t] = t if s[t] != s[t - 1] else start[t - 1]
    computed = full = 0
    for i0 in range(0, T, rows):
        i1 = min(T, i0 + rows)
        computed += (i1 - i0) * (i1 - start[i0])
        full += (i1 - i0) * i1
    return computed / full
fr = sorted({round(fraction(s), 12) for s in seg[:-1]})  # the last row holds what is left over
docs = len(set(seg[0][:T].tolist()))
print(f"  {len(seg)} packed rows of {docs} documents; per-row fractions {fr}")
assert len(fr) == 1 and fr[0] < 0.9, fr
want = fr[0]
last = fraction(seg[-1])
got = [json.loads(l).get("attention_fraction") for l in open("run_packed/metrics.jsonl")]
print(f"  metrics.jsonl attention_fraction: {got} (want {want}, or with the last row {last})")
for g in got:
    ok = [abs(g - (a + b) / 2) < 1e-12 for a in (want, last) for b in (want, last)]
    assert g is not None and any(ok), (g, want, last)
assert all("attention_fraction" not in json.loads(l) for l in open("run_padded/metrics.jsonl"))
PY
finish
