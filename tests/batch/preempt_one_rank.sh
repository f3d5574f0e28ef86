#!/usr/bin/env bash
# Preemption of an mpirun job through ONE rank (issue 7, "Must show" 2): `kill -USR1` to
# rank 1 only. At the next step boundary the ranks combine their flags, so every rank
# saves the same step into one checkpoint and every rank exits with 75 (kExitPreempted,
# doc/batch.md); a second run with checkpoint.resume=auto continues, and its losses and
# gradient norms are bitwise those of an uninterrupted run at every step. The resumed
# run's record (config.ini, mesh.txt, run.json with library versions, metrics.jsonl,
# summary.json with a per-rank summary) is complete.
# Per-rank exit statuses come from a wrapper that records `meshtrain`'s status.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

steps=150
# parallel.strategy given: `auto` weighs the strategies on the start-up measurement, and on a
# busy machine two runs may take different ones, equal in loss but not in the last bit of the
# gradient norm this test compares (doc/training.md).
args=(train "$tiny" --data.dir=random --parallel.strategy=no_shard --train.steps="$steps" --checkpoint.every=0
  --output.log_all_ranks=true)

# Records each rank's exit status in exit.<rank>.
cat >rank_status.sh <<'EOF'
#!/usr/bin/env bash
# Open MPI's mpirun sends SIGTERM to the other ranks as soon as one exits non-zero. Both
# ranks exit 75 within milliseconds, and without this trap the wrapper of the later one
# could die between meshtrain's exit and writing its status (it failed that way once). With
# a trap, bash runs it only after the command it waits for has finished.
trap 'true' TERM
"$@"
status=$?
echo "$status" >"exit.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}"
exit "$status"
EOF
chmod +x rank_status.sh

echo "--- uninterrupted reference: $steps steps on 2 ranks"
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --output.dir=ref >ref.log 2>&1 || { cat ref.log; fail "the reference run failed"; finish; }

echo "--- the same run, SIGUSR1 to rank 1 only"
# shellcheck disable=SC2086
$MPIEXEC -n 2 ./rank_status.sh "$MESHTRAIN_BIN" "${args[@]}" --output.dir=run >preempted.log 2>&1 &
launcher=$!
if ! wait_for_step run/metrics.jsonl 5 120 "$launcher"; then
  cat preempted.log
  fail "the run did not reach step 5"
  finish
fi
victim=$(rank_pid 1) || { fail "rank 1 not found"; finish; }
at=$(last_step run/metrics.jsonl)
kill -USR1 "$victim"
echo "sent SIGUSR1 to rank 1 (pid $victim) at step $at"
wait_pid "$launcher" 120
status=$?
echo "mpirun exit status $status"
[[ $status -eq 75 ]] || { tail -30 preempted.log; fail "mpirun exited with $status, expected 75"; }
for r in 0 1; do
  [[ $(cat "exit.$r" 2>/dev/null) == 75 ]] || fail "rank $r exited with '$(cat "exit.$r" 2>/dev/null)', expected 75"
done

# One checkpoint, of the step at which the ranks stopped, announced by rank 0 and saved by both.
stopped=$(sed -n 's/.*stopping after step \([0-9]*\) (SIGUSR1\/SIGTERM received).*/\1/p' preempted.log | head -n1)
[[ -n $stopped ]] || fail "no 'stopping after step N (SIGUSR1/SIGTERM received)' line"
stopped=${stopped:-0}
((stopped > 0 && stopped < steps)) || fail "stopped at step $stopped, expected 0 < step < $steps"
ckpt=$(printf 'step_%08d.h5' "$stopped")
saved=$(ls run/checkpoints)
echo "stopped after step $stopped; run/checkpoints: $(echo $saved)"
[[ $saved == "$ckpt"$'\n'latest || $saved == latest$'\n'"$ckpt" ]] || fail "expected exactly $ckpt and latest"
for r in 0 1; do
  grep -q "^\[rank $r\] checkpoint run/checkpoints/$ckpt:" preempted.log || fail "rank $r did not report saving $ckpt"
done
[[ $(grep -c "checkpoint run/checkpoints/step_" preempted.log) -eq 2 ]] || fail "more than one save per rank"
[[ $(h5_attr "run/checkpoints/$ckpt" step) == "$stopped" ]] || fail "$ckpt does not hold step $stopped"
[[ $(last_step run/metrics.jsonl) == "$stopped" ]] || fail "metrics.jsonl does not end at step $stopped"

echo "--- resume with checkpoint.resume=auto"
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --output.dir=run >resumed.log 2>&1 || { cat resumed.log; fail "the resumed run failed"; }
grep -q "resumed from run/checkpoints/$ckpt: step $stopped" resumed.log || fail "the resumed run did not start from $ckpt"
"$py" "$compare" ref/metrics.jsonl run/metrics.jsonl --exact --keys loss grad_norm lr --label "preempted+resumed vs uninterrupted" ||
  fail "the resumed run is not bitwise the uninterrupted one"
# The run record of the resumed run (doc/batch.md, "Run records").
"$py" - run <<'EOF' || fail "the run record is incomplete"
import json, os, sys
d = sys.argv[1]
ok = all(os.path.getsize(f"{d}/{f}") > 0 for f in ("config.ini", "mesh.txt", "run.json", "metrics.jsonl", "summary.json"))
run = json.load(open(f"{d}/run.json"))
versions = run["versions"]
ok &= all(versions.get(k) for k in ("meshtrain", "compiler", "kokkos", "mpi", "hdf5", "boost", "gemm"))
summary = json.load(open(f"{d}/summary.json"))
ranks = summary["ranks"]
ok &= [r["rank"] for r in ranks] == [0, 1]
ok &= all(r["compute_s"] > 0 and r["io_s"] > 0 and r["peak_mem_bytes"] > 0 and "comm_s" in r for r in ranks)
print("run.json versions:", ", ".join(sorted(versions)), "| summary.json ranks:",
      [{k: r[k] for k in ("rank", "compute_s", "comm_s", "io_s")} for r in ranks])
sys.exit(0 if ok else 1)
EOF
finish "SIGUSR1 to one rank: both ranks saved step $stopped and exited 75; the resumed run is bitwise the uninterrupted one"
