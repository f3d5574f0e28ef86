#!/usr/bin/env bash
# A cluster of N "hosts" on this one machine, for multi-host tests and measurements
# (issue 17). Each host is a Linux network namespace with its own hostname (a UTS
# namespace entered at launch), an `eth0` with a private address, and `lo`; the hosts'
# links meet on a bridge that lives in a namespace of its own (the "switch"), so nothing
# is added to the machine's own network namespace and all traffic stays on this machine.
# Open MPI starts across the hosts through a launch agent (plm_rsh_agent) that enters
# a host's namespace instead of ssh: TCP between hosts, shared memory inside each.
#
# Host names resolve through /etc/netns/<host>/hosts, which `ip netns exec` mounts over
# /etc/hosts inside the namespace: the machine's /etc/hosts is never touched.
#
# Names carry a random tag (mt<6 hex>-h1 ...), so that parallel clusters never collide.
# `cluster_down` (also run by the EXIT trap that `cluster_up` installs) kills what runs
# in the namespaces and removes them with their links; `cluster_up` first reaps clusters
# whose creating shell has died (a test killed by a timeout cannot run its trap).
#
# Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN), `ip` with netns support, `unshare`.
#
# Use it sourced:
#   source tests/multihost/cluster.sh
#   cluster_check || exit 77            # prints why not and returns 1 when it cannot work
#   cluster_up 2                        # sets CLUSTER_HOSTS=(mtXXXXXX-h1 mtXXXXXX-h2) ...
#   cluster_mpirun 2 -- meshtrain train ...   # 2 ranks per host, started from host 1
#   cluster_shape 1gbit 0.2ms           # optional: shape every host's link (tc tbf + netem)
#   cluster_cut 2                       # `ip link set down` on host 2's link
#   cluster_down
# or as a command (the cluster stays up until `down`; state in /run/meshtrain-cluster/TAG):
#   bash tests/multihost/cluster.sh up 4 [RATE DELAY]  -> prints TAG
#   bash tests/multihost/cluster.sh mpirun TAG RANKS_PER_HOST -- CMD ...
#   bash tests/multihost/cluster.sh down TAG

CLUSTER_STATE_ROOT=${CLUSTER_STATE_ROOT:-/run/meshtrain-cluster}
CLUSTER_SUBNET_PREFIX=10.77.0   # inside the cluster's own namespaces only
CLUSTER_TAG=""
CLUSTER_HOSTS=()
CLUSTER_SWITCH=""
CLUSTER_DIR=""

_cluster_log() { echo "[cluster] $*" >&2; }

# cluster_check: 0 when this machine can build a namespace cluster; else prints the reason.
cluster_check() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: multi-host tests need root for network namespaces (running as uid $(id -u))"
    return 1
  fi
  if ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
    echo "SKIP: multi-host tests need 'ip' (iproute2) and 'unshare' (util-linux)"
    return 1
  fi
  local probe="mtprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "SKIP: 'ip netns add' is not permitted here (no CAP_SYS_ADMIN in this container?)"
    return 1
  fi
  local ok=0
  ip netns exec "$probe" unshare --uts true 2>/dev/null || ok=1
  ip netns del "$probe" 2>/dev/null
  if ((ok)); then
    echo "SKIP: 'unshare --uts' inside a network namespace is not permitted here"
    return 1
  fi
  return 0
}

# _cluster_remove TAG: kills every process inside the cluster's namespaces, deletes them
# (which deletes their veth ends and the bridge) and the state. Idempotent.
_cluster_remove() {
  local tag=$1 ns pids
  [[ -n $tag ]] || return 0
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${tag}-"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${tag}-"); do
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "${CLUSTER_STATE_ROOT:?}/$tag"
  # Open MPI's session directories, named after each host (TMPDIR is shared by the hosts).
  rm -rf "${TMPDIR:-/tmp}/ompi.${tag}-h"*
  # /etc/netns goes only when no other cluster (or tool) still keeps a host file in it.
  if [[ -d /etc/netns ]] && [[ -z $(ls -A /etc/netns) ]]; then rmdir /etc/netns; fi
}

# Reaps clusters whose creating process no longer exists.
_cluster_reap_stale() {
  local d owner
  [[ -d $CLUSTER_STATE_ROOT ]] || return 0
  for d in "$CLUSTER_STATE_ROOT"/mt*; do
    [[ -d $d ]] || continue
    owner=$(cat "$d/owner" 2>/dev/null)
    [[ $owner == manual ]] && continue  # made by `cluster.sh up`: stays until `down`
    # No owner yet: another cluster_up is between its mkdir and writing the owner; only a
    # directory left like that for a minute is stale.
    [[ -z $owner ]] && (($(date +%s) - $(stat -c %Y "$d" 2>/dev/null || echo 0) < 60)) && continue
    if [[ -z $owner ]] || ! kill -0 "$owner" 2>/dev/null; then
      _cluster_log "removing stale cluster $(basename "$d") (owner ${owner:-?} is gone)"
      _cluster_remove "$(basename "$d")"
    fi
  done
}

# cluster_up N [OWNER]: creates N hosts; installs an EXIT trap that removes them (unless
# CLUSTER_NO_TRAP=1). OWNER (default this shell) is the pid whose death makes the cluster
# stale, or "manual" (never reaped). Sets CLUSTER_TAG, CLUSTER_HOSTS, CLUSTER_DIR.
cluster_up() {
  local n=$1 owner=${2:-$$} i
  ((n >= 1 && n <= 200)) || { _cluster_log "cluster_up: N must be 1..200, got '$n'"; return 2; }
  _cluster_reap_stale
  mkdir -p "$CLUSTER_STATE_ROOT"
  while :; do
    CLUSTER_TAG=mt$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    mkdir "$CLUSTER_STATE_ROOT/$CLUSTER_TAG" 2>/dev/null && break
  done
  CLUSTER_DIR=$CLUSTER_STATE_ROOT/$CLUSTER_TAG
  echo "$owner" >"$CLUSTER_DIR/owner"
  if [[ ${CLUSTER_NO_TRAP:-0} != 1 ]]; then
    trap 'cluster_down' EXIT
    trap 'cluster_down; exit 130' INT TERM
  fi
  CLUSTER_SWITCH=$CLUSTER_TAG-sw
  CLUSTER_HOSTS=()
  for ((i = 1; i <= n; i++)); do CLUSTER_HOSTS+=("$CLUSTER_TAG-h$i"); done
  echo "${CLUSTER_HOSTS[*]}" >"$CLUSTER_DIR/hosts"

  _cluster_setup "$n" || { _cluster_log "building the cluster failed; removing it"; cluster_down; return 1; }
  _cluster_write_agent
  _cluster_log "up: ${CLUSTER_HOSTS[*]} on $CLUSTER_SUBNET_PREFIX.0/24 (state $CLUSTER_DIR)"
}

_cluster_setup() {
  local n=$1 i h hosts_file
  # (`set -e` does not apply inside a function called from `||`: every step checks itself.)
  ip netns add "$CLUSTER_SWITCH" || return 1
  ip -n "$CLUSTER_SWITCH" link add br0 type bridge || return 1
  ip -n "$CLUSTER_SWITCH" link set br0 up || return 1
  hosts_file=$CLUSTER_DIR/etc-hosts
  printf '127.0.0.1 localhost\n' >"$hosts_file"
  for ((i = 1; i <= n; i++)); do printf '%s.%d %s\n' "$CLUSTER_SUBNET_PREFIX" "$i" "${CLUSTER_HOSTS[i - 1]}" >>"$hosts_file"; done
  for ((i = 1; i <= n; i++)); do
    h=${CLUSTER_HOSTS[i - 1]}
    ip netns add "$h" || return 1
    # The veth pair is created inside the switch namespace and one end is moved: no
    # interface name ever exists in the machine's own namespace.
    ip -n "$CLUSTER_SWITCH" link add "p$i" type veth peer name eth0 netns "$h" || return 1
    ip -n "$CLUSTER_SWITCH" link set "p$i" master br0 up || return 1
    ip -n "$h" link set lo up || return 1
    ip -n "$h" addr add "$CLUSTER_SUBNET_PREFIX.$i/24" dev eth0 || return 1
    ip -n "$h" link set eth0 up || return 1
    mkdir -p "/etc/netns/$h" && cp "$hosts_file" "/etc/netns/$h/hosts" || return 1
  done
}

_cluster_write_agent() {
  # Open MPI calls AGENT HOST COMMAND...; the command is a shell string for the remote side.
  cat >"$CLUSTER_DIR/agent" <<'EOF'
#!/bin/bash
host=$1; shift
exec ip netns exec "$host" unshare --uts /bin/bash -c 'hostname "$0"; eval "$*"' "$host" "$@"
EOF
  chmod +x "$CLUSTER_DIR/agent"
}

# cluster_load TAG: makes a cluster created by `cluster.sh up` current in this shell.
cluster_load() {
  CLUSTER_TAG=$1
  CLUSTER_DIR=$CLUSTER_STATE_ROOT/$CLUSTER_TAG
  [[ -f $CLUSTER_DIR/hosts ]] || { _cluster_log "no cluster $CLUSTER_TAG"; return 1; }
  read -r -a CLUSTER_HOSTS <"$CLUSTER_DIR/hosts"
  CLUSTER_SWITCH=$CLUSTER_TAG-sw
}

cluster_down() {
  [[ -n $CLUSTER_TAG ]] || return 0
  _cluster_remove "$CLUSTER_TAG"
  CLUSTER_TAG=""
  CLUSTER_HOSTS=()
}

# cluster_exec HOST_INDEX CMD...: runs CMD as that host (its namespace and hostname).
cluster_exec() {
  local i=$1
  shift
  "$CLUSTER_DIR/agent" "${CLUSTER_HOSTS[i - 1]}" "$(printf '%q ' "$@")"
}

# cluster_mpirun RANKS_PER_HOST [MPIRUN_OPTIONS...] -- CMD...: mpirun started on host 1
# across all hosts, RANKS_PER_HOST ranks each, TCP between hosts and shared memory
# inside. Extra Open MPI options (e.g. --mca btl ...) go before `--`.
cluster_mpirun() {
  local per=$1 h hostlist="" opts=()
  shift
  while (($#)) && [[ $1 != -- ]]; do opts+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  for h in "${CLUSTER_HOSTS[@]}"; do hostlist+="${hostlist:+,}$h:$per"; done
  local np=$((per * ${#CLUSTER_HOSTS[@]}))
  # The hosts share this machine's cores, but Open MPI takes the slots of --host at their
  # word and busy-polls; with more ranks than cores a polling rank holds the core its peer
  # needs to answer, and every TCP message above the eager limit (64 KiB) then waits a
  # scheduler time slice (~7 ms measured). Yielding when idle removes that artefact.
  local mca=(--mca plm_rsh_agent "$CLUSTER_DIR/agent" --mca btl_tcp_if_include "$CLUSTER_SUBNET_PREFIX.0/24"
             --mca oob_tcp_if_include "$CLUSTER_SUBNET_PREFIX.0/24" --mca mpi_yield_when_idle 1)
  local has_btl=0 o
  for o in "${opts[@]}"; do [[ $o == btl ]] && has_btl=1; done
  ((has_btl)) || mca+=(--mca btl tcp,self,vader)
  local env_flags=() v
  for v in OMP_PROC_BIND OMP_NUM_THREADS OPENBLAS_NUM_THREADS MESHTRAIN_TEST_TAG; do
    [[ -n ${!v:-} ]] && env_flags+=(-x "$v")
  done
  cluster_exec 1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" --host "$hostlist" \
    "${mca[@]}" "${env_flags[@]}" "${opts[@]}" "$@"
}

# cluster_shape RATE DELAY: every host's egress (eth0) limited to RATE (tc tbf) with DELAY
# added (tc netem under the tbf), e.g. `cluster_shape 1gbit 0.2ms`. Inter-host traffic only:
# intra-host traffic goes through shared memory and never touches eth0. Kernels without
# sch_netem (some VMs) get the rate alone, with a warning; DELAY 0 asks for none.
# CLUSTER_TBF_BURST (default 512kb) is the token bucket's depth: at least rate / HZ.
cluster_shape() {
  local rate=$1 delay=${2:-0} h warned=0
  for h in "${CLUSTER_HOSTS[@]}"; do
    tc -n "$h" qdisc del dev eth0 root 2>/dev/null || true  # none yet: fine
    tc -n "$h" qdisc add dev eth0 root handle 1: tbf rate "$rate" burst "${CLUSTER_TBF_BURST:-512kb}" latency 50ms ||
      return 1
    if [[ $delay != 0 && $delay != 0ms ]] &&
       ! tc -n "$h" qdisc add dev eth0 parent 1:1 handle 10: netem delay "$delay" 2>/dev/null; then
      ((warned++)) || _cluster_log "WARNING: no netem qdisc on this kernel: links limited to $rate, delay $delay NOT applied"
    fi
  done
  return 0
}

# cluster_cut HOST_INDEX: takes that host's link down (the host keeps running, unreachable).
cluster_cut() { ip -n "${CLUSTER_HOSTS[$1 - 1]}" link set eth0 down; }

# As a command.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -uo pipefail
  cmd=${1:-}
  (( $# > 0 )) && shift
  case $cmd in
    check) cluster_check ;;
    up)
      cluster_check >&2 || exit 1
      CLUSTER_NO_TRAP=1 cluster_up "${1:?usage: up N [RATE DELAY]}" manual || exit 1
      if [[ -n ${2:-} ]]; then cluster_shape "$2" "${3:-0ms}" || { cluster_down; exit 1; }; fi
      echo "$CLUSTER_TAG"
      ;;
    mpirun) cluster_load "${1:?usage: mpirun TAG RANKS_PER_HOST -- CMD}" || exit 1; shift; cluster_mpirun "$@" ;;
    exec) cluster_load "${1:?usage: exec TAG HOST_INDEX CMD}" || exit 1; shift; cluster_exec "$@" ;;
    cut) cluster_load "${1:?usage: cut TAG HOST_INDEX}" || exit 1; cluster_cut "${2:?}" ;;
    down) cluster_load "${1:?usage: down TAG}" && cluster_down ;;
    *) echo "usage: cluster.sh check | up N [RATE DELAY] | mpirun TAG PER_HOST [OPTS] -- CMD | exec TAG I CMD | cut TAG I | down TAG" >&2; exit 2 ;;
  esac
fi
