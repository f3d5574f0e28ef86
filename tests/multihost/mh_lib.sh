# Helpers for the multi-host tests (sourced after cluster.sh). Environment from
# meshtrain_add_script_test: MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC, TEST_TMP.
# Skips (CTest's SKIP_REGULAR_EXPRESSION matches "SKIP:") when this machine cannot build
# namespace hosts: not root, or no `ip netns` / `unshare --uts`.
# shellcheck source=tests/batch/batch_lib.sh
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
# shellcheck source=tests/multihost/cluster.sh
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/cluster.sh"

if ! reason=$(cluster_check); then
  # Where the machine must run them (as root after install-deps.sh: run-tests.sh sets
  # MESHTRAIN_REQUIRE_MULTIHOST=1), a skip would report a pass that did not run.
  if [[ ${MESHTRAIN_REQUIRE_MULTIHOST:-0} == 1 ]]; then
    echo "FAIL: MESHTRAIN_REQUIRE_MULTIHOST=1, but ${reason#SKIP: }"
    exit 1
  fi
  echo "$reason"
  exit 0
fi

rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1

# The tiny model, few steps, no evaluation: each run takes seconds.
train_args=(train "$tiny" --data.dir=random --train.eval_every=0 --train.global_batch=8)

# single_host NP OUT ARGS...: `meshtrain ARGS` on NP ranks of this machine (one host,
# shared memory), log in OUT.log.
single_host() {
  local np=$1 out=$2
  shift 2
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  $MPIEXEC -n "$np" "$MESHTRAIN_BIN" "$@" --output.dir="$out" >"$out.log" 2>&1 ||
    { cat "$out.log"; fail "$out: single-host run failed"; return 1; }
}

# on_cluster PER_HOST OUT ARGS...: the same across the cluster's hosts (TCP between them).
on_cluster() {
  local per=$1 out=$2
  shift 2
  cluster_mpirun "$per" -- "$MESHTRAIN_BIN" "$@" --output.dir="$out" >"$out.log" 2>&1 ||
    { cat "$out.log"; fail "$out: multi-host run failed"; return 1; }
}

# same_losses REF CAND LABEL [STEPS]: loss and grad_norm within 1e-5 relative at every step.
same_losses() {
  python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$1/metrics.jsonl" "$2/metrics.jsonl" \
    --rtol 1e-5 --keys loss grad_norm --label "$3" ${4:+--steps "$4"} || fail "$3: losses differ from the single-host run"
}

# nodes_in_log LOG: "R rank(s) on N node(s)" from meshtrain's first line.
nodes_in_log() { sed -n 's/.* \([0-9]*\) rank(s) on \([0-9]*\) node(s).*/\2/p' "$1" | head -n1; }
