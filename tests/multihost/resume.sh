#!/usr/bin/env bash
# A checkpoint saved on a 4-host mesh (full_shard, dp_shard=4, one rank per namespace host:
# every rank writes its pieces from another host) resumes on one host with another mesh
# (2 ranks): steps 4..6 of the resumed run have the losses of the uninterrupted 4-host run
# (1e-5), and the save line says the pieces came from 4 nodes.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/mh_lib.sh"
cluster_up 4 || { fail "cannot build the cluster"; finish; }

args=("${train_args[@]}" --train.steps=6 --checkpoint.every=3 --checkpoint.save_final=false)
if on_cluster 1 4hosts "${args[@]}" --parallel.strategy=full_shard --parallel.dp_shard=4; then
  grep "checkpoint .*step_00000003.h5" 4hosts.log
  [[ $(nodes_in_log 4hosts.log) == 4 ]] || fail "meshtrain did not see 4 nodes"
  grep -q "step_00000003.h5: .* from 4 rank(s) on 4 node(s)" 4hosts.log ||
    fail "the save line does not report 4 writer ranks on 4 nodes"
  ckpt=4hosts/checkpoints/step_00000003.h5
  [[ -f $ckpt ]] || fail "no checkpoint at step 3"
  if single_host 2 1host "${args[@]}" --parallel.strategy=full_shard --parallel.dp_shard=2 \
       --checkpoint.resume="$TEST_TMP/$ckpt"; then
    grep -q "resumed from .*step_00000003.h5: step 3" 1host.log || fail "the single-host run did not resume at step 3"
    same_losses 4hosts 1host "resume on 1 host x 2 ranks of a 4-host checkpoint" 4,6
  fi
fi
finish "a checkpoint written across 4 hosts resumes on one host with the same losses"
