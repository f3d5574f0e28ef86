#!/usr/bin/env bash
# Two namespace hosts, two ranks each (TCP between hosts, shared memory inside): each run
# gives the same losses and gradient norms (1e-5) as the same mesh on one host.
#   hybrid_shard  dp_replicate=2 across the hosts, dp_shard=2 inside each
#   full_shard    dp_shard=4 across both hosts
#   tp=2          tensor parallelism inside a host, dp_shard=2 across the hosts
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/mh_lib.sh"
cluster_up 2 || { fail "cannot build the cluster"; finish; }

# name | the mesh line meshtrain must print | arguments
cases=(
  "hybrid|mesh 2 (dp_replicate) x 2 (dp_shard) x 1 (tp), strategy hybrid_shard|--parallel.strategy=hybrid_shard --parallel.dp_replicate=2 --parallel.dp_shard=2 --parallel.tp=1"
  "fsdp|mesh 1 (dp_replicate) x 4 (dp_shard) x 1 (tp), strategy full_shard|--parallel.strategy=full_shard --parallel.dp_replicate=1 --parallel.dp_shard=4 --parallel.tp=1"
  "tp|mesh 1 (dp_replicate) x 2 (dp_shard) x 2 (tp), strategy full_shard|--parallel.strategy=full_shard --parallel.dp_replicate=1 --parallel.dp_shard=2 --parallel.tp=2"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name expect rest <<<"$c"
  read -r -a mesh <<<"$rest"
  args=("${train_args[@]}" --train.steps=8 --checkpoint.save_final=false "${mesh[@]}")
  single_host 4 "$name-1host" "${args[@]}" || continue
  on_cluster 2 "$name-2hosts" "${args[@]}" || continue
  n=$(nodes_in_log "$name-2hosts.log")
  [[ $n == 2 ]] || fail "$name: meshtrain saw ${n:-?} node(s) across the 2 hosts, expected 2"
  [[ $(nodes_in_log "$name-1host.log") == 1 ]] || fail "$name: the single-host run did not see 1 node"
  grep -qF "$expect" "$name-2hosts.log" || fail "$name: the run did not use the $expect"
  same_losses "$name-1host" "$name-2hosts" "$name (2 hosts x 2 ranks vs 1 host x 4 ranks)"
done
finish "hybrid_shard, full_shard and tp=2 across 2 namespace hosts match the single-host runs"
