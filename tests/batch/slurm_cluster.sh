# A private single-node Slurm cluster for tests (sourced): munged, slurmctld and slurmd on
# this machine, every file (config, munge key and socket, state, spool, logs, pid files)
# in one temporary directory, on free ports, so that it touches nothing of the machine's
# own Slurm or munge and two test runs never meet. Recipe: shared/design/ENVIRONMENT.md.
#
#   slurm_start DIR   -> 0 with SLURM_CONF exported and the node idle;
#                        1 with the reason in $slurm_why (not root, a command missing,
#                        a daemon that did not come up; the logs are printed)
#   slurm_stop DIR    cancels the jobs left, stops the daemons by their pid files, waits
#                     for them to exit. Safe to call twice and after a partial start.

slurm_why=""

slurm_log() { echo "[slurm] $*"; }

_slurm_free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_start() {
  local d=$1 c
  if [[ $(id -u) -ne 0 ]]; then
    slurm_why="not root: slurmd must run as root to start jobs (SlurmdUser=root)"
    return 1
  fi
  for c in munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
    command -v "$c" >/dev/null || { slurm_why="'$c' is not installed (apt-get install slurm-wlm munge)"; return 1; }
  done
  mkdir -p "$d"/{munge,state,spool,log} && chmod 755 "$d" "$d/munge" || { slurm_why="cannot create $d"; return 1; }
  mkdir -p -m 700 "$d/munge-key"
  # munged refuses a socket directory that is not executable for all, and a key readable
  # by others.
  head -c 1024 /dev/urandom >"$d/munge-key/munge.key" && chmod 400 "$d/munge-key/munge.key"
  munged --socket="$d/munge/sock" --key-file="$d/munge-key/munge.key" --log-file="$d/log/munged.log" \
    --pid-file="$d/munged.pid" --seed-file="$d/munge-key/seed" ||
    { cat "$d/log/munged.log" 2>/dev/null; slurm_why="munged did not start"; return 1; }

  local host cpus ctld_port slurmd_port
  host=$(hostname -s)
  cpus=$(nproc)
  ((cpus < 2)) && cpus=2  # the tests run 2 ranks; config_overrides trusts this count
  ctld_port=$(_slurm_free_port)
  slurmd_port=$(_slurm_free_port)
  while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(_slurm_free_port); done
  cat >"$d/slurm.conf" <<EOF
# Written by tests/batch/slurm_cluster.sh: one node, this machine, everything under $d.
ClusterName=meshtraintest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's restart (default 120 s).
AuthInfo=socket=$d/munge/sock,cred_expire=5
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=pmix
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$d/slurm.conf"
  slurmctld -f "$SLURM_CONF" || { slurm_why="slurmctld did not start"; _slurm_logs "$d"; return 1; }
  slurmd -f "$SLURM_CONF" || { slurm_why="slurmd did not start"; _slurm_logs "$d"; return 1; }
  local i state
  for i in $(seq 1 100); do  # up to 20 s for the node to register
    state=$(sinfo -h -o %T 2>/dev/null)
    [[ $state == idle ]] && { slurm_log "cluster up: node $host ($cpus CPUs), ports $ctld_port/$slurmd_port, $d"; return 0; }
    sleep 0.2
  done
  slurm_why="the node did not become idle (state '$state')"
  _slurm_logs "$d"
  return 1
}

_slurm_logs() {
  local f
  for f in "$1"/log/*.log; do
    [[ -f $f ]] || continue
    echo "--- $f (last lines)"
    tail -n 15 "$f"
  done
}

# _slurm_kill PIDFILE NAME: SIGTERM, then SIGKILL after 10 s.
_slurm_kill() {
  local pid i
  [[ -f $1 ]] || return 0
  pid=$(cat "$1" 2>/dev/null)
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  slurm_log "$2 (pid $pid) did not stop on SIGTERM; killing it"
  kill -9 "$pid" 2>/dev/null
}

slurm_stop() {
  local d=$1 jobs i
  [[ -f $d/slurm.conf ]] || { _slurm_kill "$d/munged.pid" munged; return 0; }
  export SLURM_CONF="$d/slurm.conf"
  if [[ -f $d/slurmctld.pid ]] && kill -0 "$(cat "$d/slurmctld.pid")" 2>/dev/null; then
    jobs=$(squeue -h -o %i 2>/dev/null)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null
      for i in $(seq 1 100); do
        [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.1
      done
    fi
  fi
  _slurm_kill "$d/slurmd.pid" slurmd
  _slurm_kill "$d/slurmctld.pid" slurmctld
  _slurm_kill "$d/munged.pid" munged
  slurm_log "stopped"
}
