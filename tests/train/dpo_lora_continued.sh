#!/usr/bin/env bash
# DPO that continues the LoRA adapters of its checkpoint.init_from (the SFT -> DPO pipeline):
# the reference is the initial policy, the base *with* those adapters, not the base with the
# adapters off (doc/finetuning.md, "The reference"):
#   * a tiny Llama base, LoRA "SFT" on random tokens (the adapters move away from B = 0), then
#     DPO from that LoRA checkpoint: step 1 at lr 0 is loss log 2, rewards, margin and accuracy
#     0, in training and in its step-1 validation, on 1 rank and on 2 (dp_shard=2); the
#     reference is stored in output.dir/reference_logps.json before step 1;
#   * a resume reads the stored reference back (the checkpoints record that the run has one):
#     steps 3 and 4 are bitwise those of the uninterrupted run;
#   * DPO with fresh adapters from the plain base keeps the base with the adapters off (no file);
#   * `eval --train.objective=dpo` of the continued run's checkpoint is refused (exit 2: eval
#     computes only the base without adapters); of the SFT checkpoint it runs with a warning
#     that names what its rewards measure.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
py=${REFERENCE_PYTHON:-/usr/bin/python3}
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
run() {
  local name=$1
  shift
  local rc=0
  timeout $((120 * time_scale)) "$@" >"$name.log" 2>&1 || rc=$?
  ((rc == 0)) || { cat "$name.log"; fail "$name: exit status $rc"; return 1; }
}
bin=$MESHTRAIN_BIN
ini=$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini
# shellcheck disable=SC2206  # MPIEXEC is a command with flags
mpi2=($MPIEXEC -n 2)

# 16 pairs in the byte tokenizer's ChatML rows of 80 tokens; 4 of them for validation.
"$py" - <<'PY' || exit 1
import json, random
rng = random.Random(11)
with open("pairs.jsonl", "w") as f:
    for i in range(16):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        f.write(json.dumps({"prompt": f"{a}*{b}", "chosen": str(a * b), "rejected": str(a * b + rng.randint(1, 5))}) + "\n")
PY
run prepare "$bin" prepare --format preference --input pairs.jsonl --output prefs --chat_template chatml --seq_len 80 \
  --val_fraction 0.25 || exit 1
lora=(--model.lora_rank=4 --model.lora_alpha=8 --model.lora_targets=q,v,up)
run pre "$bin" train "$ini" --data.dir=random --model.max_seq_len=80 --train.steps=2 --output.dir=pre || exit 1
run sft "$bin" train "$ini" "${lora[@]}" --data.dir=random --model.max_seq_len=80 --checkpoint.init_from=pre/checkpoints \
  --train.steps=4 --train.lr=5e-2 --train.warmup_steps=0 --train.eval_every=0 --output.dir=sft || exit 1

dpo=(train "$ini" "${lora[@]}" --data.dir=prefs --train.objective=dpo --train.seq_len=80 --model.max_seq_len=80
  --train.micro_batch=2 --train.global_batch=8 --train.eval_batches=1)
step1=(--train.steps=1 --train.lr=0 --train.min_lr=0 --train.warmup_steps=0 --train.eval_every=1)
run dpo1 "$bin" "${dpo[@]}" "${step1[@]}" --checkpoint.init_from=sft/checkpoints --output.dir=dpo1 || exit 1
# shellcheck disable=SC2086
run dpo1_np2 "${mpi2[@]}" "$bin" "${dpo[@]}" "${step1[@]}" --checkpoint.init_from=sft/checkpoints --parallel.dp_shard=2 \
  --output.dir=dpo1_np2 || exit 1
grep -q "brought LoRA adapters, which this run continues" dpo1.log || fail "dpo1 does not say that its reference keeps the adapters"
[[ -s dpo1/reference_logps.json ]] || fail "DPO continuing LoRA adapters stored no reference"
cmp -s dpo1/reference_logps.json dpo1_np2/reference_logps.json || fail "the stored references of 1 and 2 ranks differ"
"$py" - dpo1/metrics.jsonl dpo1_np2/metrics.jsonl <<'PY' || fail "step 1 of DPO continuing LoRA adapters is not the policy against itself"
import json, math, sys
for path in sys.argv[1:]:
    s = [json.loads(l) for l in open(path)][0]
    for p in ("", "val_"):
        assert abs(s[p + "loss"] - math.log(2)) < 1e-6, (path, p, s)
        assert all(abs(s[p + k]) < 1e-9 for k in ("rewards/chosen", "rewards/rejected", "rewards/margins")), (path, p, s)
        assert s[p + "rewards/accuracies"] == 0, (path, p, s)
    print(path, "step 1:", s["loss"], s["rewards/margins"], "val:", s["val_loss"], s["val_rewards/margins"])
PY

# A resume reads the stored reference back: steps 3 and 4 bitwise those of the uninterrupted run.
long=("${dpo[@]}" --train.lr=2e-3 --train.lr_schedule=constant --train.warmup_steps=0 --train.eval_every=2
  --checkpoint.every=2 --checkpoint.init_from=sft/checkpoints)
run full "$bin" "${long[@]}" --train.steps=4 --output.dir=full || exit 1
run part_a "$bin" "${long[@]}" --train.steps=2 --output.dir=part || exit 1
run part_b "$bin" "${long[@]}" --train.steps=4 --output.dir=part || exit 1
grep -q "DPO reference: the initial adapters' log-probabilities of 24 train and 8 validation rows, read from" part_b.log ||
  fail "the resume did not read the stored reference"
cmp -s full/reference_logps.json part/reference_logps.json || fail "the two runs' stored references differ"
"$py" - full/metrics.jsonl part/metrics.jsonl <<'PY' || fail "the resumed run is not bitwise the uninterrupted one"
import json, sys
full, part = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
keys = ("loss", "grad_norm", "rewards/margins", "rewards/accuracies")
assert [r["step"] for r in part] == [1, 2, 3, 4], part
for a, b in zip(full, part):
    assert all(a[k] == b[k] for k in keys) and a.get("val_loss") == b.get("val_loss"), (a, b)
print("resume: steps 1-4 bitwise equal;", {k: full[-1][k] for k in keys})
PY

# Fresh adapters from the plain base: the base with the adapters off is the initial policy.
run fresh "$bin" "${dpo[@]}" "${step1[@]}" --checkpoint.init_from=pre/checkpoints --output.dir=fresh || exit 1
[[ ! -e fresh/reference_logps.json ]] || fail "DPO with fresh adapters stored a reference"
grep -q "DPO reference: the base with the adapters off" fresh.log || fail "fresh: the reference is not the base with the adapters off"

# eval: the continued run's reference is the stored one, which eval cannot compute.
ev=(eval "$ini" --data.dir=prefs --train.objective=dpo --train.seq_len=80 --model.max_seq_len=80 --train.micro_batch=2 --split train
  --batches 0)
"$bin" "${ev[@]}" --checkpoint full/checkpoints >eval_full.log 2>&1
rc=$?
((rc == 2)) && grep -q "comes from a DPO run that continued the LoRA adapters of its checkpoint.init_from" eval_full.log ||
  { cat eval_full.log; fail "eval --train.objective=dpo of the continued run's checkpoint: exit $rc"; }
run eval_sft "$bin" "${ev[@]}" --checkpoint sft/checkpoints  # run counts a failure
grep -q "the rewards measure what the adapters of .* (a train.objective=sft run) changed from the base" eval_sft.log ||
  fail "eval --train.objective=dpo of the SFT checkpoint does not say what its reference is"
run eval_fresh "$bin" "${ev[@]}" --checkpoint fresh/checkpoints
! grep -q "changed from the base" eval_fresh.log || fail "eval of a DPO run's own checkpoint warns about its reference"

((failures == 0)) && echo "PASS: DPO continuing LoRA adapters measures against them (stored, resumed bitwise, 1 and 2 ranks); eval refuses what it cannot compute"
exit $((failures > 0))
