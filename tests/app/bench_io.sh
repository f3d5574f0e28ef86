#!/usr/bin/env bash
# `meshtrain bench io` times what the config's run saves, and leaves nothing behind
# (doc/perf.md, "io"). One rank each (a plain `meshtrain` process: the signals go to it).
#  1. A fine-tune (checkpoint.init_from a tiny Llama export, a config without model
#     dimensions): the model is the one `plan` (and `train`) builds from the export, not the
#     config's default-sized one (the header's parameter count was 123698688).
#  2. checkpoint.async=true times the asynchronous save (header, a save_held row, JSON
#     save_path "async" with each save's held seconds); the default times the synchronous one.
#  3. SIGTERM, SIGHUP and SIGPIPE during a save (held at a fault point, MESHTRAIN_FAULT
#     stall, so the signal comes at a known place): the private .bench-io-* directory and the
#     directories created for it are removed, the run's own checkpoint directory is untouched,
#     and the process ends by the signal.
#  4. SIGKILL during a save (fault action kill) leaves the private directory; the next bench
#     io on this host removes it with a line saying so, and leaves the directories of another
#     host's or an older version's bench io with a warning naming them.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
bin=$MESHTRAIN_BIN

# bench LOG ARGS...: `meshtrain bench io ARGS` (2-minute limit); status in $status.
bench() {
  local log=$1
  shift
  timeout -k 5 $((120 * time_scale)) "$bin" bench io "$@" >"$log" 2>&1
  status=$?
  echo "$log: exit status $status"
  ((status == 124)) && fail "$log: hung"
}

echo "--- 1. a fine-tune's model comes from checkpoint.init_from"
"$bin" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini" --train.steps=1 --train.eval_every=0 --output.dir=pre \
  >pre.log 2>&1 || { cat pre.log; fail "the base run failed"; finish; }
"$bin" convert --input pre/checkpoints --output base >convert.log 2>&1 || { cat convert.log; fail "convert failed"; finish; }
cat >ft.ini <<EOF
[model]
family = llama
lora_rank = 4
[train]
micro_batch = 1
seq_len = 32
global_batch = 1
[data]
dir = random
[checkpoint]
init_from = base
EOF
"$bin" plan ft.ini >plan.log 2>&1 || { cat plan.log; fail "plan of the fine-tune failed"; }
planned=$(sed -n 's/.*model: llama, \([0-9]*\) parameters.*/\1/p' plan.log | head -n1)
bench ft.log ft.ini --output.dir=ft --iters 1
[[ $status -eq 0 ]] || { cat ft.log; fail "bench io of the fine-tune: exit status $status"; }
timed=$(sed -n 's/.* llama model, \([0-9]*\) parameters .*/\1/p' ft.log | head -n1)
[[ -n $planned && $timed == "$planned" ]] ||
  fail "bench io timed a model of '$timed' parameters, plan builds ${planned:-?} from checkpoint.init_from"

echo "--- 2. the save path the config runs"
bench async.log "$tiny" --output.dir=async --checkpoint.async=true --iters 2 --json async.json
[[ $status -eq 0 ]] || { cat async.log; fail "bench io, checkpoint.async=true: exit status $status"; }
grep -q "^# save path: asynchronous (checkpoint.async=true)" async.log || fail "async: the header does not name the path"
grep -Eq "^ save_held +- +[0-9.]+ " async.log || fail "async: no save_held row"
[[ $(grep -c "^save [12]: .*asynchronous: training held" async.log) -eq 2 ]] || fail "async: the saves are not asynchronous"
"$py" - async.json <<'PY' || fail "async: the JSON is wrong (above)"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["save_path"] == "async", j
assert 0 < j["save_held_seconds"] <= j["save_seconds"], j
assert all(0 < s["held_seconds"] <= s["seconds"] for s in j["saves"]), j["saves"]
PY
bench sync.log "$tiny" --output.dir=sync --iters 1 --json sync.json
[[ $status -eq 0 ]] || { cat sync.log; fail "bench io, synchronous: exit status $status"; }
grep -q "^# save path: synchronous (checkpoint.async=false)" sync.log || fail "sync: the header does not name the path"
[[ $(jq -r .save_path sync.json) == sync ]] || fail "sync: the JSON's save_path is not sync"

# private DIR: the .bench-io-* entries of DIR, one per line.
private() { find "$1" -maxdepth 1 -name '.bench-io-*' 2>/dev/null; }

# held LOG SPEC ARGS...: starts bench io with MESHTRAIN_FAULT=SPEC in the background under
# a 2-minute `timeout` (its pid in $launcher, meshtrain's in $pid) and waits until the fault
# fires; fails after 60 s. `wait $launcher` then gives meshtrain's end (128 + signal).
held() {
  local log=$1 spec=$2
  shift 2
  MESHTRAIN_FAULT=$spec timeout -s KILL $((120 * time_scale)) "$bin" bench io "$tiny" --iters 3 "$@" >"$log" 2>&1 &
  launcher=$!
  local waited=0
  until grep -q "MESHTRAIN_FAULT=.* fires: " "$log"; do
    if ! kill -0 "$launcher" 2>/dev/null || ((waited >= 600 * time_scale)); then
      cat "$log"
      fail "$log: the fault did not fire"
      kill "$launcher" 2>/dev/null
      wait "$launcher"
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  pid=$(pgrep -P "$launcher" -x meshtrain)
  [[ -n $pid ]] || { fail "$log: no meshtrain process under $launcher"; wait "$launcher"; return 1; }
}

echo "--- 3. a signal during a save"
mkdir -p run/checkpoints && echo keep >run/checkpoints/latest
for sig in TERM HUP PIPE; do
  # Held before the second save's rename: the first save, `latest` and the .tmp are in place.
  held "sig_$sig.log" save.before_rename:after=1:action=stall --output.dir=run || continue
  [[ -n $(private run/checkpoints) ]] || fail "$sig: no private directory while the save is held"
  kill -s "$sig" "$pid"
  wait "$launcher"
  status=$?
  echo "sig_$sig.log: exit status $status"
  [[ $status -eq $((128 + $(kill -l "$sig"))) ]] || fail "$sig: exit status $status, not death by SIG$sig"
  [[ -z $(private run/checkpoints) ]] || fail "$sig: left $(private run/checkpoints | tr '\n' ' ')"
  [[ $(ls -A run/checkpoints) == latest && $(cat run/checkpoints/latest) == keep ]] ||
    fail "$sig: the run's checkpoint directory changed: $(ls -A run/checkpoints | tr '\n' ' ')"
done
# Into an output.dir that does not exist: the directories made for the private one go too.
if held fresh.log save.before_rename:after=1:action=stall --output.dir=fresh/run; then
  kill -TERM "$pid"
  wait "$launcher"
  [[ ! -e fresh/run ]] || fail "fresh: SIGTERM left $(find fresh | tr '\n' ' ')"
fi

echo "--- 4. SIGKILL during a save; the next bench io removes what it left"
MESHTRAIN_FAULT=save.before_rename:after=1:action=kill timeout -k 5 $((120 * time_scale)) "$bin" bench io "$tiny" \
  --iters 3 --output.dir=run >killed.log 2>&1
status=$?
echo "killed.log: exit status $status"
[[ $status -eq 137 ]] || { cat killed.log; fail "the killed bench io: exit status $status, expected 137"; }
left=$(private run/checkpoints)
[[ $(wc -l <<<"$left") -eq 1 && -n $left ]] || fail "SIGKILL left '$left', expected one private directory"
mkdir -p run/checkpoints/.bench-io-otherhost-1 run/checkpoints/.bench-io-12345
bench next.log "$tiny" --iters 1 --output.dir=run
[[ $status -eq 0 ]] || { cat next.log; fail "the next bench io: exit status $status"; }
grep -qF "/${left##*/}, left by an interrupted bench io (process ${left##*-} on this host is gone)" next.log ||
  { cat next.log; fail "the next bench io did not say that it removed $left"; }
[[ ! -e $left ]] || fail "the next bench io left $left"
for other in run/checkpoints/.bench-io-otherhost-1 run/checkpoints/.bench-io-12345; do
  [[ -d $other ]] || fail "the next bench io removed $other (not its host's)"
  grep -q "warning: .*/${other#run/checkpoints/} was left by a bench io on " next.log ||
    fail "the next bench io did not name $other"
done
[[ $(cat run/checkpoints/latest) == keep ]] || fail "the run's latest changed"
finish "bench io: the config's model and save path; nothing left after a signal"
