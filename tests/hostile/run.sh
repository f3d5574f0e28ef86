#!/usr/bin/env bash
# The hostile-input suite: every case of cases.txt (one line each) runs meshtrain on one bad
# input and asserts
#   - the exit status (2 for user errors, 74 for I/O errors, 75 for a signal's save);
#   - exactly one error line, holding the expected text, and no crash output (no MPI abort
#     banner, no HDF5 error stack, no uncaught exception); a signal case prints no error
#     line and one line holding the expected text;
#   - nothing written or damaged: the sha256 of every file of the earlier run's output.dir
#     and checkpoint directory ($RUN) is unchanged and no file or directory was added; the
#     case's fresh paths ($NEW) were not created (signal cases excepted: they save there);
#     the working directory stays empty; at the end, every fixture is unchanged.
# Fixtures are made once: one dataset, one 2-step run with two checkpoints, its
# safetensors export, and damaged copies (make_fixtures.py). Most cases fail before any
# training step; they run on 3 workers (HOSTILE_WORKERS), about a minute in all.
#
# cases.txt columns, separated by '|': NAME | RANKS | STATUS | EXPECTED TEXT | ARGUMENTS
#   RANKS: 1 or 2; "1:USR1" / "2:TERM" send that signal (to rank 0, or the last rank)
#          once the run has logged a step; "1:late" / "2:late": the error can only be
#          found after start-up (a bad token deep in a file), so the run may have written
#          its own records into $NEW (never into $RUN).
#   ARGUMENTS: meshtrain's arguments, expanded by bash (quotes work); leading NAME=value
#   words set environment variables of the run; variables:
#     $INI $LLAMA_INI   inputs/tiny-gpt2.ini, inputs/tiny-llama.ini
#     $DATA             the good dataset        $F    the damaged fixtures (make_fixtures.py)
#     $PREF             a good preference dataset (prepare --format preference, seq_len 96)
#     $PREF_TRAIN       train $LLAMA_INI on $PREF, rows of 96 (add --output.dir and the objective)
#     $RUN              the earlier run (output.dir, checkpoints in $RUN/checkpoints)
#     $CKPT             its newest checkpoint   $HF   its safetensors export (a directory)
#     $NEW              a path that does not exist (per case)
#     $TRAIN            train $INI --data.dir=$DATA --output.dir=$RUN --train.steps=3 --train.eval_every=0
#     $EVAL             eval $INI --data.dir=$DATA --output.dir=$RUN
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON. HOSTILE_CASES=REGEX runs only the matching case names.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
# shellcheck source=../batch/batch_lib.sh
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cases_file=${HOSTILE_CASES_FILE:-$MESHTRAIN_SOURCE_DIR/tests/hostile/cases.txt}
only=${HOSTILE_CASES:-}

INI=$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini
LLAMA_INI=$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini
DATA=$TEST_TMP/data
F=$TEST_TMP/fixtures
RUN=$TEST_TMP/run
HF=$TEST_TMP/hf
work=$TEST_TMP/cwd
mkdir -p "$work" "$TEST_TMP/logs" "$TEST_TMP/new"

# ---- fixtures -------------------------------------------------------------------------
# ~150 k tokens of deterministic text: more than the 65,536 ids TokenFile samples at open.
"$py" - "$TEST_TMP/text.txt" <<'EOF' || { echo "FAIL: writing the text"; exit 1; }
import random, sys
rng = random.Random(13)
words = ["mesh", "rank", "shard", "token", "window", "gather", "reduce", "step", "loss", "the", "a", "of"]
lines = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(2500)]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
"$MESHTRAIN_BIN" prepare --input "$TEST_TMP/text.txt" --output "$DATA" >"$TEST_TMP/logs/prepare.log" 2>&1 ||
  { cat "$TEST_TMP/logs/prepare.log"; echo "FAIL: prepare"; exit 1; }
(cd "$work" && timeout $((120 * time_scale)) "$MESHTRAIN_BIN" train "$INI" --data.dir="$DATA" --output.dir="$RUN" --train.steps=2 \
  --train.eval_every=1 --checkpoint.every=1 >"$TEST_TMP/logs/run.log" 2>&1) ||
  { cat "$TEST_TMP/logs/run.log"; echo "FAIL: the good run"; exit 1; }
CKPT=$RUN/checkpoints/step_00000002.h5
"$MESHTRAIN_BIN" convert --input "$CKPT" --output "$HF" >"$TEST_TMP/logs/convert.log" 2>&1 ||
  { cat "$TEST_TMP/logs/convert.log"; echo "FAIL: convert"; exit 1; }
"$py" "$MESHTRAIN_SOURCE_DIR/tests/hostile/make_fixtures.py" "$DATA" "$CKPT" "$HF/model.safetensors" "$F" \
  >"$TEST_TMP/logs/fixtures.log" 2>&1 || { cat "$TEST_TMP/logs/fixtures.log"; echo "FAIL: make_fixtures.py"; exit 1; }
# Tokenizers and model metadata (sentencepiece and gguf from the dependency cache).
PYTHONPATH="${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python${PYTHONPATH:+:$PYTHONPATH}" "$py" \
  "$MESHTRAIN_SOURCE_DIR/tests/hostile/make_tokenizer_fixtures.py" "$DATA" "$HF" "$F" >"$TEST_TMP/logs/tok_fixtures.log" 2>&1 ||
  { cat "$TEST_TMP/logs/tok_fixtures.log"; echo "FAIL: make_tokenizer_fixtures.py"; exit 1; }
PREF=$TEST_TMP/pref
"$MESHTRAIN_BIN" prepare --format preference --input "$F/p_good.jsonl" --output "$PREF" --chat_template chatml \
  --seq_len 96 >"$TEST_TMP/logs/prepare_pref.log" 2>&1 ||
  { cat "$TEST_TMP/logs/prepare_pref.log"; echo "FAIL: prepare --format preference"; exit 1; }
# Datasets of rows whose meta.json or loss mask is damaged: from the preference dataset
# (data_format) and a chat dataset (packed; every mask byte 0: no target is trained on).
CHAT=$TEST_TMP/chat
"$MESHTRAIN_BIN" prepare --format chat --input "$F/j_good_chat.jsonl" --output "$CHAT" --chat_template chatml \
  --seq_len 64 >"$TEST_TMP/logs/prepare_chat.log" 2>&1 ||
  { cat "$TEST_TMP/logs/prepare_chat.log"; echo "FAIL: prepare --format chat"; exit 1; }
"$py" - "$PREF" "$CHAT" "$F" <<'EOF' || { echo "FAIL: the row-dataset fixtures"; exit 1; }
import json, os, shutil, sys
pref, chat, out = sys.argv[1:4]
def variant(src, name, edit_meta=None, edit_dir=None):
    d = os.path.join(out, name)
    shutil.copytree(src, d)
    if edit_meta:
        m = json.load(open(os.path.join(d, "meta.json")))
        edit_meta(m)
        json.dump(m, open(os.path.join(d, "meta.json"), "w"), indent=2)
    if edit_dir:
        edit_dir(d)
variant(pref, "r_format_bogus", lambda m: m.update(data_format="bogus"))
variant(chat, "r_packed_text", lambda m: m.update(packed="yes"))
def zero_masks(d):  # every mask byte after the 64-byte header
    for split in ("train", "val"):
        f = os.path.join(d, split + ".mask")
        b = bytearray(open(f, "rb").read())
        b[64:] = bytes(len(b) - 64)
        open(f, "wb").write(bytes(b))
variant(chat, "r_mask_zero", edit_dir=zero_masks)
EOF
cp -a "$RUN" "$TEST_TMP/run.pristine"
TRAIN="train $INI --data.dir=$DATA --output.dir=$RUN --train.steps=3 --train.eval_every=0"
EVAL="eval $INI --data.dir=$DATA --output.dir=$RUN"
PREF_TRAIN="train $LLAMA_INI --data.dir=$PREF --train.seq_len=96 --model.max_seq_len=96 --train.steps=2"

# Every file with its sha256, and every directory, of the trees given.
snapshot() {
  local d
  for d in "$@"; do
    [[ -e $d ]] || continue
    find "$d" -type d | sort
    find "$d" -type f -print0 | sort -z | xargs -0 -r sha256sum
  done
}
fixtures_before=$(snapshot "$DATA" "$F" "$HF" "$PREF")
run_before=$(snapshot "$RUN")

crash_output='MPI_ABORT|MPI_Abort|mpirun noticed|mpirun has exited|prterun|terminate called|what\(\):|HDF5-DIAG|Segmentation|core dumped|bad_alloc|Traceback|unexpected error|internal error|fatal error'

# run_case NAME RANKS STATUS EXPECTED ARGUMENTS
run_case() {
  local name=$1 ranks=$2 status=$3 expect=$4 args=$5
  local np=${ranks%%:*} signal="" late=0
  [[ $ranks == *:* ]] && signal=${ranks#*:}
  [[ $signal == late ]] && signal="" late=1
  local NEW=$TEST_TMP/new/$name log=$TEST_TMP/logs/$name.log
  # The expected text may name the case's paths too ($NEW, $F).
  expect=${expect//'$NEW'/$NEW}
  expect=${expect//'$F'/$F}
  local -a argv envs=()
  eval "argv=($args)" || { fail "$name: cannot expand the arguments: $args"; return; }
  # Leading NAME=value words set the environment of the run (fault injection and the like).
  while ((${#argv[@]})) && [[ ${argv[0]} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do
    envs+=("${argv[0]}")
    argv=("${argv[@]:1}")
  done
  local -a cmd=("$MESHTRAIN_BIN" "${argv[@]}")
  # shellcheck disable=SC2206  # MPIEXEC is a command with flags
  ((np > 1)) && cmd=($MPIEXEC -n "$np" "${cmd[@]}")
  cmd=(env "${envs[@]}" "${cmd[@]}")
  local rc started=$SECONDS
  if [[ -z $signal ]]; then
    (cd "$work" && timeout $((120 * time_scale)) "${cmd[@]}") </dev/null >"$log" 2>&1
    rc=$?
  else
    (cd "$work" && exec timeout $((120 * time_scale)) "${cmd[@]}") </dev/null >"$log" 2>&1 &
    local launcher=$!
    if ! wait_for_step "$NEW/metrics.jsonl" 1 60 "$launcher"; then
      fail "$name: the run logged no step to signal after"
      kill "$launcher" 2>/dev/null
      wait "$launcher"
      return
    fi
    local target
    if ((np == 1)); then
      target=$(pgrep -P "$launcher" -x meshtrain || true)  # the launcher is `timeout` (exec), env exec's
    else
      target=$(rank_pid $((np - 1)) || true)
    fi
    [[ -n $target ]] || { fail "$name: no meshtrain process to signal"; kill "$launcher"; wait "$launcher"; return; }
    kill -s "$signal" "$target"
    wait "$launcher"
    rc=$?
  fi
  local problems=()
  ((rc == status)) || problems+=("exit status $rc, expected $status")
  local errors
  errors=$(grep -E '(^|\] |: )error: ' "$log" || true)
  local n_errors=0
  [[ -n $errors ]] && n_errors=$(wc -l <<<"$errors")
  if [[ -z $signal ]]; then
    ((n_errors == 1)) || problems+=("$n_errors error lines, expected exactly 1")
    grep -qF -- "$expect" <<<"$errors" || problems+=("the error line lacks: $expect")
  else
    ((n_errors == 0)) || problems+=("$n_errors error lines, expected none")
    grep -qF -- "$expect" "$log" || problems+=("the output lacks: $expect")
    [[ -f $NEW/checkpoints/latest && -f $NEW/checkpoints/$(cat "$NEW/checkpoints/latest" 2>/dev/null) ]] ||
      problems+=("no committed checkpoint after the signal")
  fi
  grep -qE "$crash_output" "$log" && problems+=("crash output: $(grep -m1 -E "$crash_output" "$log")")
  if [[ -z $signal ]] && ((!late)) && [[ -e $NEW ]]; then problems+=("created $NEW"); fi
  if [[ -e $NEW ]] && [[ -n $(find "$NEW" -name '*.tmp*') ]]; then
    problems+=("left temporary files: $(find "$NEW" -name '*.tmp*' | head -3 | tr '\n' ' ')")
  fi
  [[ -z $(ls -A "$work") ]] || problems+=("wrote into the working directory: $(ls -A "$work" | head -3 | tr '\n' ' ')")
  local run_after
  run_after=$(snapshot "$RUN")
  if [[ $run_after != "$run_before" ]]; then
    problems+=("changed the earlier run: $(diff <(echo "$run_before") <(echo "$run_after") | grep '^[<>]' | head -3 | tr '\n' ' ')")
    rm -rf "$RUN" && cp -a "$TEST_TMP/run.pristine" "$RUN"  # the next case starts from the original
  fi
  rm -rf "${work:?}"/* "${work:?}"/.[!.]* 2>/dev/null
  if ((${#problems[@]})); then
    fail "$name: $(printf '%s; ' "${problems[@]}")"
    sed 's/^/    | /' "$log" | tail -n 8 >&2
  else
    echo "ok   $name ($((SECONDS - started)) s)"
  fi
}

# ---- the cases, on $workers workers -----------------------------------------------------
# Most cases wait on process start-up (MPI, Kokkos), not on the CPU, so several run at once.
# Each worker has its own copy of the earlier run ($RUN), working directory, log and process
# tag (rank_pid finds only its own ranks); case k goes to worker k mod $workers, so the
# assignment does not depend on timing. Signal cases and cases whose error is found late
# run after the others on worker 0 alone, so that nothing else competes while they wait
# for a step.
workers=${HOSTILE_WORKERS:-3}
names=() ranks_of=() status_of=() expect_of=() args_of=()
while IFS= read -r line || [[ -n $line ]]; do
  [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
  IFS='|' read -r name ranks status expect args <<<"$line"
  trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; echo "${s%"${s##*[![:space:]]}"}"; }
  name=$(trim "$name"); ranks=$(trim "$ranks"); status=$(trim "$status"); expect=$(trim "$expect"); args=$(trim "$args")
  [[ -n $only && ! $name =~ $only ]] && continue
  names+=("$name"); ranks_of+=("$ranks"); status_of+=("$status"); expect_of+=("$expect"); args_of+=("$args")
done <"$cases_file"
total=${#names[@]}

# use_run DIR: the earlier run the next cases see (and the variables that name it).
use_run() {
  RUN=$1
  CKPT=$RUN/checkpoints/step_00000002.h5
  TRAIN="train $INI --data.dir=$DATA --output.dir=$RUN --train.steps=3 --train.eval_every=0"
  EVAL="eval $INI --data.dir=$DATA --output.dir=$RUN"
  run_before=$(snapshot "$RUN")
}

# run_worker W PASS: runs this worker's cases of the pass (quick: every case but signals and
# late ones; slow: those, worker 0 only) and writes its failure count to failures.W.PASS.
run_worker() {
  local w=$1 pass=$2 k
  failures=0
  if ((w > 0)); then
    export MESHTRAIN_TEST_TAG=$TEST_TMP/worker$w
    work=$TEST_TMP/cwd$w
    mkdir -p "$work"
    rm -rf "$TEST_TMP/run$w" && cp -a "$TEST_TMP/run.pristine" "$TEST_TMP/run$w"
    use_run "$TEST_TMP/run$w"
  fi
  for ((k = 0; k < total; k++)); do
    local slow=0
    [[ ${ranks_of[k]} == *:* ]] && slow=1
    if [[ $pass == quick ]]; then
      ((slow == 0 && k % workers == w)) || continue
    else
      ((slow == 1)) || continue
    fi
    run_case "${names[k]}" "${ranks_of[k]}" "${status_of[k]}" "${expect_of[k]}" "${args_of[k]}"
  done
  echo "$failures" >"$TEST_TMP/failures.$w.$pass"
}

use_run "$TEST_TMP/run"
for ((w = 1; w < workers; w++)); do
  run_worker "$w" quick >"$TEST_TMP/logs/worker$w.out" 2>&1 &
done
run_worker 0 quick
wait
run_worker 0 slow
failures=0
for ((w = 1; w < workers; w++)); do
  cat "$TEST_TMP/logs/worker$w.out"
  failures=$((failures + $(cat "$TEST_TMP/failures.$w.quick")))
done
for f in "$TEST_TMP/failures.0.quick" "$TEST_TMP/failures.0.slow"; do failures=$((failures + $(cat "$f"))); done

# The checks themselves can fail: a run that succeeds and writes into the earlier run must
# be reported (exit status, no error line, changed files), and the earlier run restored.
if [[ -z $only ]]; then
  before_self=$failures
  run_case self_check_detects_writes 1 2 "error" \
    "train $INI --data.dir=$DATA --output.dir=$RUN --train.steps=1 --checkpoint.resume=none --checkpoint.overwrite=true --train.eval_every=0" \
    2>"$TEST_TMP/logs/self_check.err" >/dev/null
  if ((failures == before_self + 1)) && grep -q "changed the earlier run" "$TEST_TMP/logs/self_check.err" &&
    grep -q "exit status 0, expected 2" "$TEST_TMP/logs/self_check.err"; then
    failures=$before_self
    echo "ok   the runner reports a run that writes (self-check)"
  else
    fail "self-check: a run that wrote into the earlier run was not reported: $(head -c 300 "$TEST_TMP/logs/self_check.err")"
  fi
  [[ $(snapshot "$RUN") == "$run_before" ]] || fail "self-check: the earlier run was not restored"
fi

[[ $(snapshot "$DATA" "$F" "$HF" "$PREF") == "$fixtures_before" ]] || fail "a case changed the fixtures (datasets, checkpoints, safetensors)"
if [[ -z $only ]] && ((total < 100)); then fail "only $total cases; the suite promises at least 100"; fi
finish "$total hostile-input cases passed"
