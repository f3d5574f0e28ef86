#!/usr/bin/env bash
# The command line as a person meets it (issue 2, "Must show" 2 and 3):
#   * mpirun -np 4 meshtrain plan inputs/tiny-gpt2.ini --parallel.tp=2 prints the
#     1 x 2 (dp_shard) x 2 (tp) mesh with each rank's groups; without a config (the default
#     GPT-2 124M, whose 50257-token vocabulary tp=2 cannot split) it is one user error that
#     says so and names a config to use (issue 16);
#   * plan --parallel.tp=3 on 4 ranks and train --model.no_such_key=1 exit non-zero with
#     one message naming the problem, no stack dump and no hang;
#   * meshtrain --version names the libraries;
#   * plan.device_memory is plan's budget, while train takes parallel.memory_limit before
#     it and never more than the machine has.
# Every command runs under `timeout`, so a hang is a failure, not a stuck CI job.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_BIN, MPIEXEC, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"

bin=$MESHTRAIN_BIN
mkdir -p "$TEST_TMP"
out="$TEST_TMP/stdout" err="$TEST_TMP/stderr"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run LABEL COMMAND...: runs with a 60 s limit; sets $rc; shows the output.
run() {
  local label=$1
  shift
  echo "--- $label: $*"
  timeout $((60 * time_scale)) "$@" >"$out" 2>"$err"
  rc=$?
  sed 's/^/  stdout: /' "$out"
  sed 's/^/  stderr: /' "$err"
  echo "  exit status $rc"
  [[ $rc -ne 124 ]] || fail "$label: hung (killed after $((60 * time_scale)) s)"
}

# A user error: non-zero exit, exactly one "error:" line naming the problem, and none of
# the signs of a crash (stack dumps, std::terminate, MPI_Abort, signals).
expect_user_error() {
  local label=$1 must_name=$2
  [[ $rc -ne 0 ]] || fail "$label: exit status 0"
  local n
  n=$(grep -c "error:" "$err")
  [[ $n -eq 1 ]] || fail "$label: expected one error message on stderr, found $n"
  grep -qF -- "$must_name" "$err" || fail "$label: the message does not name '$must_name'"
  if grep -Eq "Backtrace|backtrace|terminate called|MPI_ABORT|Abort|Segmentation|core dumped|\*\*\* Process received signal" "$err" "$out"; then
    fail "$label: crash output on stderr/stdout"
  fi
}

# shellcheck disable=SC2086  # MPIEXEC is a command with flags
run "plan on 4 ranks with tp=2" $MPIEXEC -np 4 "$bin" plan "$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini" --parallel.tp=2
[[ $rc -eq 0 ]] || fail "plan tp=2: exit status $rc"
grep -qF "mesh: 1 (dp_replicate) x 2 (dp_shard) x 2 (tp) = 4 ranks" "$out" || fail "plan tp=2: no 2 (dp_shard) x 2 (tp) mesh line"
grep -qF "topology: 4 rank(s) on 1 node(s)" "$out" || fail "plan tp=2: no topology line"
# One row per rank: rank host replicate shard tp tp_group shard_group replicate_group.
declare -A want=(
  [0]="0 0 0 [0,1] [0,2] [0]"
  [1]="0 0 1 [0,1] [1,3] [1]"
  [2]="0 1 0 [2,3] [0,2] [2]"
  [3]="0 1 1 [2,3] [1,3] [3]"
)
for r in 0 1 2 3; do
  got=$(awk -v r="$r" '$1 == r && NF == 8 {print $3, $4, $5, $6, $7, $8}' "$out")
  [[ "$got" == "${want[$r]}" ]] || fail "plan tp=2: rank $r row is '$got', expected '${want[$r]}'"
done
[[ $(grep -c "^mesh:" "$out") -eq 1 ]] || fail "plan tp=2: the mesh must be printed once (rank 0), not per rank"

# shellcheck disable=SC2086
run "plan on 4 ranks with tp=2 and no config" $MPIEXEC -np 4 "$bin" plan --parallel.tp=2
expect_user_error "plan tp=2 without a config" "no config file was given"
grep -qF "inputs/tiny-gpt2.ini --parallel.tp=2" "$err" || fail "plan tp=2 without a config: no config suggested"
[[ $rc -eq 2 ]] || fail "plan tp=2 without a config: exit status $rc, expected 2 (user error)"

# shellcheck disable=SC2086
run "plan on 4 ranks with tp=3" $MPIEXEC -np 4 "$bin" plan --parallel.tp=3
expect_user_error "plan tp=3" "parallel.tp=3"
[[ $rc -eq 2 ]] || fail "plan tp=3: exit status $rc, expected 2 (user error)"

run "train with an unknown key (1 rank, no mpirun)" "$bin" train --model.no_such_key=1
expect_user_error "train unknown key" "model.no_such_key"
[[ $rc -eq 2 ]] || fail "train unknown key: exit status $rc, expected 2 (user error)"

# shellcheck disable=SC2086
run "train with an unknown key on 2 ranks" $MPIEXEC -np 2 "$bin" train --model.no_such_key=1
expect_user_error "train unknown key, 2 ranks" "model.no_such_key"

run "unknown command" "$bin" trian
expect_user_error "unknown command" "did you mean 'train'"

run "version" "$bin" --version
[[ $rc -eq 0 ]] || fail "--version: exit status $rc"
for part in "meshtrain 0." "Kokkos:" "MPI:" "HDF5:" "Boost:" "GEMM:" "CUDA:"; do
  grep -qF "$part" "$out" || fail "--version: no '$part'"
done

run "plan --help" "$bin" plan --help
[[ $rc -eq 0 ]] || fail "plan --help: exit status $rc"
for key in model.d_model parallel.tp parallel.collective_timeout train.lr output.dir; do
  grep -qE -- "--$key arg \(=" "$out" || fail "plan --help: no '--$key' with its default"
done

# Every command's --help shows its defaults as a person writes them: "(=0.05)", never the
# double's 17 digits "(=0.050000000000000003)".
for cmd in train plan eval generate prepare convert tokenize bench; do
  run "$cmd --help" "$bin" $cmd --help
  [[ $rc -eq 0 ]] || fail "$cmd --help: exit status $rc"
  if grep -qE -- '\(=-?[0-9]*\.[0-9]{7,}' "$out"; then
    fail "$cmd --help prints a default with its binary rounding: $(grep -oE -- '--[a-z_.]+ arg \(=-?[0-9]*\.[0-9]{7,}[^)]*\)' "$out" | head -n 3 | tr '\n' ' ')"
  fi
done

# plan of a LoRA run: the trainable count is the adapters' (tiny-llama: 2 layers x (q: A 4x64 +
# B 64x4, v: A 4x64 + B 32x4) = 1792), their state alone in grads/optim (test_memory_accounting
# checks the bytes against the pool).
run "plan with LoRA" "$bin" plan "$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini" --model.lora_rank=4 --model.lora_alpha=8 \
  --model.lora_targets=q,v
[[ $rc -eq 0 ]] || fail "plan LoRA: exit status $rc"
grep -qF "LoRA: rank 4, alpha 8, targets q,v: 1792 trainable parameters" "$out" || fail "plan LoRA: no LoRA line with 1792 trainable parameters"

# plan.device_memory is the target's memory for `plan`; a run on this machine takes
# parallel.memory_limit before it and never plans into more memory than the machine has.
tiny=$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini
rm -rf "$TEST_TMP/mem1" "$TEST_TMP/mem2"  # new runs (an earlier run's checkpoint would be resumed)
run "plan for devices of 1000 TiB" "$bin" plan "$tiny" --plan.device_memory=1000TiB
grep -qF "memory budget: 1000.00 TiB per rank" "$out" || fail "plan: plan.device_memory is not the plan's budget"
run "train with a limit and plan.device_memory" "$bin" train "$tiny" --data.dir=random --train.steps=1 --output.dir="$TEST_TMP/mem1" \
  --parallel.memory_limit=40MiB --plan.device_memory=80GiB
[[ $rc -eq 0 ]] || fail "train with parallel.memory_limit and plan.device_memory: exit status $rc"
grep -qF "MiB per rank of 34.00 MiB usable" "$out" || fail "train: parallel.memory_limit=40MiB is not the budget beside plan.device_memory"
run "train with plan.device_memory above this machine" "$bin" train "$tiny" --data.dir=random --train.steps=1 \
  --output.dir="$TEST_TMP/mem2" --plan.device_memory=1000TiB
[[ $rc -eq 0 ]] || fail "train with plan.device_memory=1000TiB: exit status $rc"
grep -q "strategy .* GiB usable" "$out" && ! grep -qF "TiB usable" "$out" ||
  fail "train: plan.device_memory=1000TiB was taken beyond this machine's memory"

if (( failures )); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "cli: all checks passed"
