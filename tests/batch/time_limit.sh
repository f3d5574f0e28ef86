#!/usr/bin/env bash
# train.time_limit (issue 7, "Preemption"): with a limit of L seconds and a margin of M, the
# ranks stop on their own -- no signal -- once less than M seconds plus one step are left,
# save the same step, and exit 75 before the limit; the run then resumes like after a
# preemption. (The Slurm end time feeds the same deadline: slurm_preempt.sh checks that
# meshtrain reads it.)
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

L=8 M=3
args=(train "$tiny" --data.dir=random --checkpoint.every=0 --train.log_every=10 --train.time_limit_margin=$M)
start=$SECONDS
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --train.steps=100000 --train.time_limit=$L --output.dir=run \
  >limited.log 2>&1
status=$?
elapsed=$((SECONDS - start))
grep -E "wall-clock limit|stopping after" limited.log
echo "exit status $status after $elapsed s (time_limit=$L s, margin $M s; includes start-up)"
[[ $status -eq 75 ]] || { tail -20 limited.log; fail "exit status $status, expected 75"; }
grep -q "wall-clock limit from train.time_limit=${L}s" limited.log || fail "the limit was not announced"
stopped=$(sed -n 's/.*stopping after step \([0-9]*\) (wall-clock limit ahead).*/\1/p' limited.log | head -n1)
[[ -n $stopped ]] || fail "no 'stopping after step N (wall-clock limit ahead)'"
ckpt=$(printf 'step_%08d.h5' "${stopped:-0}")
[[ $(cat run/checkpoints/latest 2>/dev/null) == "$ckpt" ]] || fail "latest is not $ckpt"
# The limit counts from the trainer's start; start-up (MPI, Kokkos, data) comes on top.
((elapsed < L + 15 * time_scale)) || fail "stopped after $elapsed s, long after the $L s limit"

# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --train.steps=$((stopped + 20)) --train.time_limit=0 \
  --output.dir=run >resumed.log 2>&1 || { tail -20 resumed.log; fail "the resumed run failed"; }
grep -q "resumed from run/checkpoints/$ckpt: step $stopped" resumed.log || fail "the run did not resume from $ckpt"
finish "train.time_limit=$L s: saved step $stopped and exited 75 after $elapsed s; resumed"
