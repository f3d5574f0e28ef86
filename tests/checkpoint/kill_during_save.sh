#!/usr/bin/env bash
# kill -9 of one rank in the middle of a save: the job dies, `latest` still names the
# previous complete checkpoint (the dead save left only its .tmp), and a new run with
# checkpoint.resume=auto continues from that checkpoint to the end (and clears the .tmp).
# The model is widened (~38 MB checkpoints) so a save lasts long enough to be caught; the
# script watches for a step_*.h5.tmp and kills rank 1 while it exists. If the kill lands
# after the rename (the save won the race), it tries again.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
py=${REFERENCE_PYTHON:-/usr/bin/python3}
args=("$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini" --model.d_model=256 --model.n_layers=4 --train.steps=40
      --train.eval_every=0 --data.dir=random --checkpoint.every=2 --checkpoint.keep=2 --output.dir=run
      --parallel.dp_shard=2 --parallel.strategy=full_shard)

# The pid of world rank $2 among the descendants of the launcher $1, found by the rank
# variable the launcher puts in each process's environment (Open MPI or MPICH/Hydra).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxE "(OMPI_COMM_WORLD_RANK|PMI_RANK)=$2"; then
      echo "$p"
      return 0
    fi
    rank_pid "$p" "$2" && return 0
  done
  return 1
}

caught=0
for attempt in 1 2 3; do
  rm -rf run
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "${args[@]}" >"killed_$attempt.log" 2>&1 &
  mpirun_pid=$!
  victim=""
  for _ in $(seq 1 6000); do  # up to 60 s
    kill -0 "$mpirun_pid" 2>/dev/null || break
    tmp=$(ls run/checkpoints/step_*.h5.tmp 2>/dev/null | head -n1)
    if [[ -n $tmp && -f run/checkpoints/latest ]]; then
      victim=$(rank_pid "$mpirun_pid" 1) && kill -9 "$victim"
      break
    fi
    sleep 0.01
  done
  wait "$mpirun_pid"
  status=$?
  if [[ -z $victim ]]; then
    echo "attempt $attempt: no save was caught in flight (exit $status)"
    continue
  fi
  latest=$(cat run/checkpoints/latest)
  echo "attempt $attempt: killed rank 1 (pid $victim) while $tmp existed; mpirun exit $status; latest -> $latest"
  if [[ ! -e $tmp ]]; then
    echo "attempt $attempt: the save finished before the kill landed; trying again"
    continue
  fi
  caught=1
  break
done
if ((!caught)); then
  echo "FAIL: could not kill a rank during a save in 3 attempts" >&2
  exit 1
fi

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
[[ $status -ne 0 ]] || fail "the job whose rank was killed exited 0"
dead_step=$(basename "$tmp" .h5.tmp)
[[ $latest != "$dead_step.h5" ]] || fail "latest points to the checkpoint whose save was killed"
[[ ! -e run/checkpoints/$dead_step.h5 ]] || fail "the killed save was committed"
"$py" - "run/checkpoints/$latest" <<'EOF' || fail "latest does not name a complete, readable checkpoint"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    n = sum(1 for _ in f["model"]) + sum(1 for _ in f["optim/exp_avg"]) + sum(1 for _ in f["optim/exp_avg_sq"])
    print(f"{sys.argv[1]}: step {int(f.attrs['step'])}, {n} tensors readable")
    sys.exit(0 if n > 0 else 1)
EOF
prev_step=$((10#${latest:5:8}))

# shellcheck disable=SC2086
timeout 300 $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "${args[@]}" --checkpoint.resume=auto >resumed.log 2>&1 ||
  { cat resumed.log; fail "the resumed run failed"; }
grep -q "resumed from run/checkpoints/$latest: step $prev_step" resumed.log || fail "the resumed run did not start from $latest"
grep -q '"step": 40' run/metrics.jsonl || fail "the resumed run did not reach step 40"
[[ $(cat run/checkpoints/latest) == step_00000040.h5 ]] || fail "latest is not the final checkpoint"
ls run/checkpoints/*.tmp 2>/dev/null && fail "the dead save's temporary survived the next save"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "kill -9 during a save: previous checkpoint kept as latest, resume=auto continued from step $prev_step"
