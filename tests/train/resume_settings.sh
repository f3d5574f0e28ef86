#!/usr/bin/env bash
# What may change at resume (issue 28, doc/checkpoints.md "What a resume may change").
# Deterministic, no timing:
#   1. a resume that changes a setting of the run's trajectory or data order is refused
#      (exit 2, one error line naming the key, the checkpoint's value and this run's, and
#      checkpoint.init_from / checkpoint.resume=none as the ways on), on 1 and 2 ranks, for
#      train.seq_len, global_batch, seed, lr, min_lr, warmup_steps, lr_schedule, beta2,
#      weight_decay, grad_clip, precision, reduce_dtype and the dataset (another dataset;
#      the same one moved to another directory resumes); nothing in the run is touched;
#   2. bookkeeping changes resume: train.steps (with a notice), eval/log/checkpoint
#      cadence, the mesh (2 ranks -> 1 rank -> tp=2), micro_batch x grad_accum at the same
#      global batch; tokens_seen then continues;
#   3. a checkpoint without the record (attribute deleted) resumes as before, with a notice;
#   4. the suggested way on works: init_from the checkpoint, resume=none, another output.dir;
#   5. the run's config.ini: checkpoint.resume=PATH given once is written as auto with a
#      comment naming the checkpoint; rerunning it continues the run (no old step again);
#      rerunning the finished run (or with train.steps below its step) trains nothing and
#      writes nothing;
#   6. rerunning a 2-rank run's config.ini on 1 rank (and a 1-rank one on 2) warns about
#      nothing meshtrain wrote itself (grad_accum, the resolved mesh), while a grad_accum
#      the user gave next to global_batch still warns;
#   7. a run that would write its checkpoints among another run's (resume=none, or a resume
#      from a checkpoint outside checkpoint.dir) is refused (exit 2, the checkpoints named,
#      nothing touched; a resume of an older step inside the directory is not -- it deletes
#      the later steps' checkpoints -- and checkpoint.overwrite beside it only warns that it
#      does nothing), and
#      checkpoint.overwrite=true deletes them first, naming them, with overwrite = false in
#      the config.ini that reruns the new run; so is a run into an output.dir that holds the
#      record of a run whose checkpoints are in another directory (unless it continues them),
#      and checkpoint.overwrite=true replaces that record, keeping those checkpoints.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
# shellcheck source=../batch/batch_lib.sh
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(--train.eval_every=0 --train.peak_tflops=1 --checkpoint.every=2)

# mt LOG NP ARGS...: meshtrain on NP ranks; its exit status.
mt() {
  local log=$1 np=$2
  shift 2
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" "$@" >"$log" 2>&1
}
train() {
  local log=$1 np=$2
  shift 2
  mt "$log" "$np" train "$tiny" "${common[@]}" "$@"
}
snapshot() { find "$@" -type f -print0 | sort -z | xargs -0 -r sha256sum; }
last_tokens() { tail -n 1 "$1/metrics.jsonl" | "$py" -c 'import json,sys; print(int(json.load(sys.stdin)["tokens"]))'; }

"$py" - text.txt other.txt <<'PY' || fail "writing the corpora"
import random, sys
for path, seed in ((sys.argv[1], 3), (sys.argv[2], 4)):
    rng = random.Random(seed)
    words = ["mesh", "rank", "shard", "token", "window", "gather", "reduce", "step", "loss", "the", "a"]
    open(path, "w").write("\n".join(" ".join(rng.choice(words) for _ in range(10)) for _ in range(800)) + "\n")
PY
mt prep.log 1 prepare --input text.txt --output data || { cat prep.log; fail "prepare data"; }
mt prep2.log 1 prepare --input other.txt --output data_other || { cat prep2.log; fail "prepare data_other"; }

echo "--- the run: 4 steps on 2 ranks"
train a.log 2 --data.dir=data --output.dir=run --train.steps=4 || { cat a.log; fail "run"; }
[[ -f run/checkpoints/step_00000004.h5 ]] || fail "no checkpoint at step 4"

echo "--- 1. refused changes"
before=$(snapshot run)
# refuse NAME NP "KEY: OLD in the checkpoint, NEW in this run" ARGS...
refuse() {
  local name=$1 np=$2 text=$3
  shift 3
  train "r_$name.log" "$np" --output.dir=run --train.steps=6 "$@"
  local status=$?
  [[ $status == 2 ]] || { cat "r_$name.log"; fail "$name: exit $status, expected 2"; return; }
  grep -qF "$text" "r_$name.log" || { cat "r_$name.log"; fail "$name: the error does not say '$text'"; }
  grep -qF "checkpoint.init_from=run/checkpoints/step_00000004.h5 checkpoint.resume=none" "r_$name.log" ||
    { cat "r_$name.log"; fail "$name: the error does not name the way on"; }
  (($(grep -c 'error' "r_$name.log") == 1)) || { cat "r_$name.log"; fail "$name: not exactly one error line"; }
}
refuse seq_len 1 "train.seq_len: 32 in the checkpoint, 16 in this run" --data.dir=data --train.seq_len=16
refuse seq_len_np2 2 "train.seq_len: 32 in the checkpoint, 24 in this run" --data.dir=data --train.seq_len=24
refuse global_batch 1 "train.global_batch: 8 in the checkpoint, 16 in this run" --data.dir=data --train.global_batch=16
refuse no_global_batch 2 "train.global_batch: 8 in the checkpoint, 4 in this run" --data.dir=data --train.global_batch=0 --train.grad_accum=1
refuse seed 1 "train.seed: 1234 in the checkpoint, 99 in this run" --data.dir=data --train.seed=99
refuse lr 2 "train.lr: 0.001 in the checkpoint, 0.002 in this run" --data.dir=data --train.lr=2e-3
refuse min_lr 1 "train.min_lr: 0.0001 in the checkpoint, 0 in this run" --data.dir=data --train.min_lr=0
refuse warmup 1 "train.warmup_steps: 2 in the checkpoint, 5 in this run" --data.dir=data --train.warmup_steps=5
refuse schedule 1 "train.lr_schedule: cosine in the checkpoint, constant in this run" --data.dir=data --train.lr_schedule=constant
refuse beta2 1 "train.beta2: 0.95 in the checkpoint, 0.99 in this run" --data.dir=data --train.beta2=0.99
refuse weight_decay 1 "train.weight_decay: 0.1 in the checkpoint, 0 in this run" --data.dir=data --train.weight_decay=0
refuse grad_clip 2 "train.grad_clip: 1 in the checkpoint, 0.5 in this run" --data.dir=data --train.grad_clip=0.5
refuse precision 1 "train.precision: fp32 in the checkpoint, bf16 in this run" --data.dir=data --train.precision=bf16
refuse reduce_dtype 2 "parallel.reduce_dtype: fp32 in the checkpoint, bf16 in this run" --data.dir=data --parallel.reduce_dtype=bf16
refuse dataset 1 "data.dir: train.bin of" --data.dir=data_other
refuse random_data 1 "in the checkpoint, random tokens in this run" --data.dir=random
refuse two_keys 1 "train.seq_len: 32 in the checkpoint, 16 in this run; train.lr: 0.001 in the checkpoint, 0.003" --data.dir=data \
  --train.seq_len=16 --train.lr=3e-3
[[ $(snapshot run) == "$before" ]] || fail "a refused resume changed the run's files"

echo "--- 2. bookkeeping changes resume"
cp -r data data_moved
train b.log 1 --data.dir=data_moved --output.dir=run --train.steps=6 --train.log_every=2 \
  --train.micro_batch=4 --checkpoint.keep=5 || { cat b.log; fail "resume on 1 rank, moved dataset, other cadence"; }
grep -qF "resumed from run/checkpoints/step_00000004.h5: step 4, 1024 tokens seen" b.log || { cat b.log; fail "not resumed at step 4"; }
grep -qF "resuming with a changed setting: train.steps: 4 in the checkpoint, 6 in this run" b.log ||
  { cat b.log; fail "no notice of the changed train.steps"; }
[[ $(last_tokens run) == 1536 ]] || fail "tokens after step 6: $(last_tokens run), expected 1536 (6 x 8 x 32)"
train c.log 2 --data.dir=data --output.dir=run --train.steps=8 --parallel.tp=2 --train.micro_batch=1 \
  --train.activation_checkpointing=true || { cat c.log; fail "resume on tp=2, micro_batch 1"; }
grep -q "resumed from run/checkpoints/step_00000006.h5: step 6" c.log || { cat c.log; fail "not resumed at step 6"; }
[[ $(last_tokens run) == 2048 ]] || fail "tokens after step 8: $(last_tokens run), expected 2048"

echo "--- 3. a checkpoint without the record resumes as before, with a notice"
mkdir -p old && cp run/checkpoints/step_00000008.h5 old/
"$py" -c 'import h5py,sys; f=h5py.File(sys.argv[1],"r+"); del f.attrs["run_settings"]; f.close()' old/step_00000008.h5 ||
  fail "deleting the record"
train d.log 1 --data.dir=data --output.dir=run_old --train.steps=10 --checkpoint.resume=old/step_00000008.h5 \
  --train.lr=2e-3 || { cat d.log; fail "resume of a checkpoint without the record"; }
grep -qF "predates the record of its run settings" d.log || { cat d.log; fail "no notice for the old checkpoint"; }

echo "--- 4. the way on: init_from, resume=none, another output.dir"
train e.log 1 --data.dir=data --output.dir=run_new --train.steps=2 --train.seq_len=16 \
  --checkpoint.init_from=run/checkpoints/step_00000008.h5 --checkpoint.resume=none ||
  { cat e.log; fail "a new run from the checkpoint's weights"; }
grep -q "initial weights from run/checkpoints/step_00000008.h5" e.log || { cat e.log; fail "init_from not used"; }

echo "--- 5. config.ini records checkpoint.resume = auto and where the run started"
train f.log 1 --data.dir=data --output.dir=run_p --train.steps=10 --checkpoint.resume=run/checkpoints/step_00000006.h5 ||
  { cat f.log; fail "resume from a PATH"; }
grep -qx "resume = auto" run_p/config.ini || { cat run_p/config.ini; fail "config.ini does not hold resume = auto"; }
grep -qF "# This run resumed from run/checkpoints/step_00000006.h5 (step 6), given as checkpoint.resume=run/checkpoints/step_00000006.h5" \
  run_p/config.ini || { cat run_p/config.ini; fail "config.ini does not name the checkpoint resumed from"; }
grep -qF "outside checkpoint.dir" run_p/config.ini || fail "config.ini does not say the checkpoint is outside checkpoint.dir"
mt g.log 1 train run_p/config.ini --train.steps=12 || { cat g.log; fail "rerun of run_p/config.ini"; }
grep -q "resumed from run_p/checkpoints/step_00000010.h5: step 10" g.log || { cat g.log; fail "the rerun did not continue the run"; }
(($(wc -l <run_p/metrics.jsonl) == 6)) || { cat run_p/metrics.jsonl; fail "metrics.jsonl of run_p: not the 6 steps 7..12"; }
grep -qF "# This run resumed from run_p/checkpoints/step_00000010.h5 (step 10)." run_p/config.ini ||
  { cat run_p/config.ini; fail "the rerun's config.ini does not name its checkpoint"; }
# The finished run rerun (its config.ini, as a requeued job does), and train.steps below the
# checkpoint's step: nothing to train, and its records (summary.json above all) untouched.
before_p=$(snapshot run_p)
for steps in 12 8; do
  mt k$steps.log 1 train run_p/config.ini --train.steps=$steps || { cat k$steps.log; fail "rerun of a finished run, steps=$steps"; }
  grep -qF "nothing left to train: run_p/checkpoints/step_00000012.h5 is at step 12, train.steps=$steps; nothing was written" \
    k$steps.log || { cat k$steps.log; fail "rerun of a finished run, steps=$steps: no line saying nothing is left"; }
done
[[ $(snapshot run_p) == "$before_p" ]] || fail "a rerun with nothing left to train changed the run's files"
train h.log 1 --data.dir=data --output.dir=run_none --train.steps=2 --checkpoint.resume=none || { cat h.log; fail "resume=none"; }
grep -qx "resume = auto" run_none/config.ini && grep -qF "given as checkpoint.resume=none" run_none/config.ini ||
  { cat run_none/config.ini; fail "resume=none: config.ini"; }

echo "--- 6. a rerun of config.ini on another rank count warns about nothing meshtrain wrote"
# rerun NAME NP CONFIG ARGS...: no warning at all; resumed.
rerun() {
  local name=$1 np=$2 cfg=$3
  shift 3
  mt "w_$name.log" "$np" train "$cfg" "$@" || { cat "w_$name.log"; fail "$name: rerun failed"; return; }
  ! grep -q "warning" "w_$name.log" || { grep "warning" "w_$name.log"; fail "$name: the rerun warns"; }
  grep -q "resumed from" "w_$name.log" || { cat "w_$name.log"; fail "$name: the rerun did not resume"; }
}
train w.log 2 --data.dir=data --output.dir=run_w --train.steps=2 || { cat w.log; fail "run_w"; }
grep -q "^# grad_accum = 2 is derived from train.global_batch for this run's 2 data-parallel rank(s)" run_w/config.ini ||
  { cat run_w/config.ini; fail "config.ini does not show the derived grad_accum as a comment"; }
grep -q "^# dp_shard = 2 was resolved for this run's 2 rank(s)" run_w/config.ini && grep -qx "dp_shard = -1" run_w/config.ini ||
  { cat run_w/config.ini; fail "config.ini does not hold dp_shard as asked, the resolved one as a comment"; }
rerun np2_to_np1 1 run_w/config.ini --train.steps=4
rerun np1_to_np2 2 run_w/config.ini --train.steps=6
# The planner's mesh (micro_batch=0: it chooses the micro-batch and the mesh) on 2 ranks.
train p.log 2 --data.dir=data --output.dir=run_plan --train.steps=2 --train.micro_batch=0 --parallel.dp_shard=-1 ||
  { cat p.log; fail "planner run"; }
grep -qx "micro_batch = 0" run_plan/config.ini || { cat run_plan/config.ini; fail "config.ini: micro_batch as asked"; }
rerun plan_np1 1 run_plan/config.ini --train.steps=4
# A grad_accum the user gave beside global_batch still warns on the rerun.
train u.log 2 --data.dir=data --output.dir=run_user --train.steps=2 --train.grad_accum=3 || { cat u.log; fail "user grad_accum"; }
grep -q "train.global_batch=8 wins over train.grad_accum=3" u.log || { cat u.log; fail "no warning for the user's grad_accum"; }
mt v.log 1 train run_user/config.ini --train.steps=4 || { cat v.log; fail "rerun of run_user"; }
grep -q "train.global_batch=8 wins over train.grad_accum=3" v.log || { cat v.log; fail "rerun: the user's grad_accum no longer warns"; }

echo "--- 7. a run that does not continue checkpoint.dir's checkpoints: refused, or checkpoint.overwrite"
# The earlier run's checkpoints, as the messages name them.
mapfile -t held < <(cd run/checkpoints && ls step_*.h5)
((${#held[@]} >= 2)) || fail "run/checkpoints holds ${#held[@]} checkpoints; the section needs two or more"
span="${#held[@]} checkpoints of another run (${held[0]} to ${held[-1]})"
before=$(snapshot run)
train n.log 2 --data.dir=data --output.dir=run --train.steps=2 --checkpoint.resume=none
rc=$?
((rc == 2)) || { cat n.log; fail "resume=none over a run's checkpoints: exit status $rc, expected 2"; }
grep -qF "checkpoint.dir=run/checkpoints holds $span, and checkpoint.resume=none starts a new run there" n.log &&
  grep -qF "set checkpoint.overwrite=true to delete them first" n.log || { cat n.log; fail "resume=none: the refusal"; }
[[ $(snapshot run) == "$before" ]] || fail "the refused resume=none changed the earlier run"
# From a checkpoint outside checkpoint.dir: refused too, after that checkpoint's own checks.
mapfile -t held_p < <(cd run_p/checkpoints && ls step_*.h5)
before_p=$(snapshot run_p)
train o.log 1 --data.dir=data --output.dir=run_p --train.steps=10 --checkpoint.resume=run/checkpoints/${held[0]}
rc=$?
((rc == 2)) || { cat o.log; fail "a resume from outside over a run's checkpoints: exit status $rc, expected 2"; }
grep -qF "checkpoint.dir=run_p/checkpoints holds ${#held_p[@]} checkpoints of another run" o.log &&
  grep -qF "checkpoint.resume=run/checkpoints/${held[0]} continues a checkpoint from outside it" o.log ||
  { cat o.log; fail "a resume from outside: the refusal"; }
[[ $(snapshot run_p) == "$before_p" ]] || fail "the refused resume from outside changed the earlier run"
# A resume from inside checkpoint.dir (an older step) is the run's own: not refused, and
# checkpoint.overwrite=true beside it does nothing but say so.
train r.log 1 --data.dir=data --output.dir=run_p --train.steps=14 --checkpoint.resume=run_p/checkpoints/${held_p[0]} \
  --checkpoint.overwrite=true || { cat r.log; fail "a resume of an older step inside checkpoint.dir"; }
grep -qF "resumed from run_p/checkpoints/${held_p[0]}" r.log || { cat r.log; fail "the older step was not resumed"; }
grep -qF "warning: checkpoint.overwrite=true has no effect: checkpoint.resume=run_p/checkpoints/${held_p[0]} is this directory's own checkpoint" r.log ||
  { cat r.log; fail "overwrite beside a rewind: no warning that it does nothing"; }
! grep -q "checkpoint.overwrite: deleted" r.log || { cat r.log; fail "overwrite beside a rewind deleted checkpoints"; }
# The rewind itself deletes the later steps (checkpoint_rewind tests it further).
rewound=${held_p[0]#step_}
grep -qF "rewinds the run to step $((10#${rewound%.h5})): deleted the $((${#held_p[@]} - 1)) later checkpoints" r.log ||
  { cat r.log; fail "the rewind does not name the later checkpoints it deleted"; }
# checkpoint.overwrite=true deletes the earlier run's checkpoints (named in a warning) and
# starts over; its config.ini holds overwrite = false, so that a rerun continues this run.
train q.log 2 --data.dir=data --output.dir=run --train.steps=2 --checkpoint.resume=none --checkpoint.overwrite=true ||
  { cat q.log; fail "resume=none with checkpoint.overwrite=true"; }
grep -qF "warning: checkpoint.overwrite: deleted ${#held[@]} checkpoints of another run from run/checkpoints (${held[0]} to ${held[-1]}) and latest" q.log ||
  { cat q.log; fail "checkpoint.overwrite: no warning naming what it deleted"; }
[[ $(cd run/checkpoints && echo *) == "latest step_00000002.h5" ]] ||
  fail "run/checkpoints after checkpoint.overwrite: $(cd run/checkpoints && echo *), expected only this run's"
(($(wc -l <run/metrics.jsonl) == 2)) || { cat run/metrics.jsonl; fail "metrics.jsonl after checkpoint.overwrite: not 2 steps"; }
grep -qx "overwrite = false" run/config.ini || { cat run/config.ini; fail "config.ini does not hold overwrite = false"; }
mt s.log 1 train run/config.ini --train.steps=4 || { cat s.log; fail "rerun after checkpoint.overwrite"; }
grep -q "resumed from run/checkpoints/step_00000002.h5: step 2" s.log || { cat s.log; fail "the rerun did not continue the new run"; }
! grep -q "warning" s.log || { grep "warning" s.log; fail "the rerun warns"; }
# output.dir holding the record of a run whose checkpoints are elsewhere: a new run into it
# with another checkpoint.dir is refused with nothing touched, one that continues that run's
# checkpoints is not, and checkpoint.overwrite=true replaces the record, keeping them.
before=$(snapshot run)
train x.log 1 --data.dir=data --output.dir=run --checkpoint.dir=ck_x --train.steps=2
rc=$?
((rc == 2)) || { cat x.log; fail "a new run over output.dir's record of another run: exit status $rc, expected 2"; }
grep -qF "output.dir=run holds the record (config.ini, metrics.jsonl, summary.json) of another run, whose 2 checkpoints (step_00000002.h5 to step_00000004.h5) are in $PWD/run/checkpoints, and this run does not continue it" x.log ||
  { cat x.log; fail "a new run over output.dir's record of another run: the refusal"; }
[[ $(snapshot run) == "$before" && ! -e ck_x ]] || fail "the refused run changed output.dir or left checkpoint.dir"
train y.log 1 --data.dir=data --output.dir=run --checkpoint.dir=ck_x --train.steps=6 --checkpoint.resume=run/checkpoints ||
  { cat y.log; fail "continuing output.dir's run with its checkpoints saved to another checkpoint.dir"; }
grep -q "resumed from run/checkpoints/step_00000004.h5: step 4" y.log || { cat y.log; fail "the continued run did not resume"; }
[[ $(cd ck_x && echo *) == "latest step_00000006.h5" ]] || fail "ck_x after the continued run: $(cd ck_x && echo *)"
train z.log 1 --data.dir=data --output.dir=run --checkpoint.dir=ck_z --train.steps=2 --checkpoint.overwrite=true ||
  { cat z.log; fail "checkpoint.overwrite over output.dir's record of another run"; }
grep -qF "warning: checkpoint.overwrite: this run's record replaces, in output.dir=run, that of the run whose checkpoints are in $PWD/ck_x (they are kept)" z.log ||
  { cat z.log; fail "checkpoint.overwrite over output.dir's record: no warning"; }
[[ -f ck_x/step_00000006.h5 ]] || fail "checkpoint.overwrite deleted the checkpoints of the run whose record it replaced"

finish
