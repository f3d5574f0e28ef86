#!/usr/bin/env bash
# checkpoint.async (issue 31): saves written by a background thread while training goes on.
#  1. Every asynchronous checkpoint equals the synchronous save of the same step bit for bit
#     (same_checkpoint.py: every dataset's bytes and every attribute, the CRC-32C checksums
#     included, config_ini aside; h5diff on /model, /optim and /train too), on 1 rank, on 2
#     ranks (full_shard) and on 2 ranks with tp=2 (pieces of many row runs); training is
#     unchanged (losses bitwise).
#  2. A mesh change on load: the 2-rank asynchronous step-4 checkpoint resumed on 1 rank
#     gives bitwise the losses of the synchronous one resumed alike (the load verifies the
#     checksums).
#  3. A failed background write (MESHTRAIN_FAULT save.background ... action=eio on rank 1):
#     exit 74 with one message, nothing of step 4 left, `latest` keeps step 2, and a resume
#     from it continues bitwise.
#  4. kill -9 during a background write (save.background ... action=kill: rank 1 SIGKILLs
#     itself after 3 of its pieces, every time): `latest` keeps step 2, only the .tmp of
#     step 4 is left, and resume=auto continues bitwise.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/fault_lib.sh"
same=$MESHTRAIN_SOURCE_DIR/tests/checkpoint/same_checkpoint.py

# run_np NP LOG ARGS...: the tiny GPT-2 on NP ranks (no fault), 8 steps, status in $status.
one=("$tiny" --data.dir=random --train.eval_every=0 --parallel.collective_timeout=5 --train.steps=8)
run_np() {
  local np=$1 log=$2
  shift 2
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  timeout -k 5 $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "${one[@]}" "$@" >"$log.log" 2>&1
  status=$?
  echo "$log: exit status $status"
}

# same_saves SYNC_DIR ASYNC_DIR: steps 2, 4, 6, 8 equal in both directories.
same_saves() {
  local s f
  for s in 2 4 6 8; do
    f=$(printf 'step_%08d.h5' "$s")
    [[ -f $1/$f && -f $2/$f ]] || { fail "$f missing in $1 or $2"; continue; }
    "$py" "$same" "$1/$f" "$2/$f" || fail "$2/$f differs from the synchronous $1/$f"
    if command -v h5diff >/dev/null; then
      local g
      for g in /model /optim /train; do
        h5diff "$1/$f" "$2/$f" "$g" "$g" >/dev/null || fail "h5diff: $g of $2/$f differs from $1/$f"
      done
    fi
  done
  latest_is "$2" step_00000008.h5
  no_tmp "$2"
}

keep=(--checkpoint.every=2 --checkpoint.keep=10)

# 1. sync vs async, 1 rank, 2 ranks, 2 ranks tp=2, and 2 ranks of a wider model (d_model 256:
#    pieces of 64 KiB-1 MiB, whose page-aligned interiors the background writes with O_DIRECT).
wide=(--model.d_model=256 --model.n_heads=4)
for mesh in "1 r1" "2 r2 --parallel.dp_shard=2 --parallel.strategy=full_shard" "2 tp2 --parallel.tp=2 --parallel.dp_shard=1" \
  "2 wide --parallel.dp_shard=2 --parallel.strategy=full_shard ${wide[*]}"; do
  read -r np tag rest <<<"$mesh"
  read -r -a par <<<"$rest"
  run_np "$np" "sync-$tag" "${par[@]}" "${keep[@]}" --output.dir="sync-$tag"
  expect_status "sync-$tag" 0
  run_np "$np" "async-$tag" "${par[@]}" "${keep[@]}" --checkpoint.async=true --output.dir="async-$tag"
  expect_status "async-$tag" 0
  grep -q "asynchronous: training held" "async-$tag.log" || fail "async-$tag: no asynchronous save was logged"
  ! grep -q "asynchronous" "sync-$tag.log" || fail "sync-$tag: a synchronous run logged an asynchronous save"
  same_saves "sync-$tag/checkpoints" "async-$tag/checkpoints"
  same_losses "sync-$tag/metrics.jsonl" "async-$tag/metrics.jsonl" 1 8
done
# The wide run's long pieces bypassed the page cache where the file system allows O_DIRECT
# (dd's oflag=direct is the same open flag); elsewhere every byte is a plain pwrite.
if dd if=/dev/zero of=direct-probe bs=4096 count=1 oflag=direct 2>/dev/null; then
  grep -Eq "asynchronous: .* [1-9][0-9]*% of the bytes with O_DIRECT" async-wide.log ||
    fail "async-wide: no bytes were written with O_DIRECT on a file system that supports it"
else
  grep -q " 0% of the bytes with O_DIRECT" async-wide.log || fail "async-wide: O_DIRECT claimed where it is refused"
fi

# 2. Resharded on load: the 2-rank step-4 checkpoints resumed on 1 rank.
for kind in sync async; do
  run_np 1 "reshard-$kind" --checkpoint.every=0 --checkpoint.save_final=false --output.dir="reshard-$kind" \
    --checkpoint.resume="$kind-r2/checkpoints/step_00000004.h5"
  expect_status "reshard-$kind" 0
  grep -q "resumed from $kind-r2/checkpoints/step_00000004.h5: step 4" "reshard-$kind.log" ||
    fail "reshard-$kind did not resume from step 4"
done
same_losses reshard-sync/metrics.jsonl reshard-async/metrics.jsonl 5 8

run straight "" --output.dir=straight --checkpoint.every=0 --checkpoint.save_final=false
expect_status straight 0

# 3. The background write fails on rank 1 in the step-4 save.
run eio "save.background:rank=1:step=4:after=2:action=eio" "${ckpt[@]}" --checkpoint.async=true --output.dir=eio
expect_status eio 74
fired eio save.background
one_error eio "cannot write checkpoint eio/checkpoints/step_00000004.h5: input/output error"
latest_is eio/checkpoints step_00000002.h5
no_tmp eio/checkpoints
[[ ! -e eio/checkpoints/step_00000004.h5 ]] || fail "eio: the failed save was committed"
run eio-resumed "" "${ckpt[@]}" --checkpoint.async=true --output.dir=eio --checkpoint.resume=auto
expect_status eio-resumed 0
grep -q "resumed from eio/checkpoints/step_00000002.h5: step 2" eio-resumed.log || fail "eio: the resume did not start from step 2"
same_losses straight/metrics.jsonl eio/metrics.jsonl 1 8
latest_is eio/checkpoints step_00000008.h5

# 4. kill -9 of rank 1 inside the step-4 background write.
run killed "save.background:rank=1:step=4:after=3:action=kill" "${ckpt[@]}" --checkpoint.async=true --output.dir=run
[[ $status -ne 0 && $status -ne 124 ]] || fail "the job whose rank was killed exited $status"
grep -q "rank 1: MESHTRAIN_FAULT=.* fires: kill at save.background (step 4, pass 4)" killed.log ||
  fail "rank 1 was not killed at its 4th piece of the step-4 background write"
latest_is run/checkpoints step_00000002.h5
[[ -f run/checkpoints/step_00000004.h5.tmp ]] || fail "the killed save left no .tmp: the kill did not land inside it"
[[ ! -e run/checkpoints/step_00000004.h5 ]] || fail "the killed save was committed"
run resumed "" "${ckpt[@]}" --checkpoint.async=true --output.dir=run --checkpoint.resume=auto
expect_status resumed 0
grep -q "resumed from run/checkpoints/step_00000002.h5: step 2" resumed.log || fail "the resumed run did not start from step 2"
[[ $(last_step run/metrics.jsonl) -eq 8 ]] || fail "the resumed run did not reach step 8"
latest_is run/checkpoints step_00000008.h5
no_tmp run/checkpoints
same_losses straight/metrics.jsonl run/metrics.jsonl 1 8
finish "asynchronous saves equal synchronous ones bit for bit; a failed or killed background write commits nothing"
