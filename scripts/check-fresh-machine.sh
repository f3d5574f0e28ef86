#!/usr/bin/env bash
# Proves that the README's commands work on a machine where nothing was installed by hand.
#
# Builds a throwaway Debian 12 root from Debian's packages alone (mmdebstrap, the minbase
# variant: essential packages and apt, what a `debian:bookworm` container has), copies this
# checkout into it (tracked and untracked-but-not-ignored files: what `git clone` of a
# commit of them would give) and runs there, as a newcomer would:
#   default:  scripts/install-deps.sh, the `cpu` configure, the build of `meshtrain`, and
#             scripts/smoke-test.sh (prepare, train 4 steps on 2 ranks, resume, eval,
#             generate, plan, one LoRA step of the SmolLM2 GGUF);
#   --tests:  scripts/run-tests.sh (the README's test command: install, build, the whole
#             CTest suite), with any arguments after `--` passed on to ctest (what .ci/run
#             runs: the suite itself is the proof that nothing was installed by hand);
#   --full:   --tests, then scripts/run-demo.sh (the README's demo).
# Then it removes the root, on every exit path (its mounts live in a private mount
# namespace, so they vanish with it; processes still running in the root are killed).
#
# What the root takes from this machine is only how the machine reaches the package
# registries: the Debian sources apt reads, apt's Acquire settings, pip's configuration and
# PIP_* variables, proxy variables, the local CA certificates (/usr/local/share/ca-certificates),
# resolv.conf, the host name; OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE where this machine sets them
# (this processor's OpenBLAS workaround); MESHTRAIN_JOBS and MESHTRAIN_TEST_JOBS where set
# (scripts/run-tests.sh's build and test parallelism); and, unless --no-cuda, /usr/local/cuda read-only
# (the CUDA toolkit every machine of this kind comes with; no Debian package provides it, and
# without it the CUDA link check is simply not built).
#
# Usage: scripts/check-fresh-machine.sh [--tests | --full] [--no-cuda] [--keep] [--dir DIR]
#                                        [-- CTEST_ARGS...]
#   --tests    the whole test suite instead of the smoke test
#   --full     the whole test suite and the demo instead of the smoke test
#   -- ARGS    (with --tests or --full) arguments for ctest, e.g. -L mpi or -R config
#   --no-cuda  do not mount /usr/local/cuda into the root
#   --keep     leave the root in place (for inspection; remove it with rm -rf --one-file-system)
#   --dir DIR  where to make the root (default ${MESHTRAIN_FRESH_DIR:-/var/tmp}); it needs
#              ~6 GB (smoke) to ~10 GB (--tests, --full)
# Needs root (chroot, mounts). Logs: one file per step in the printed log directory, which
# is kept. Exit 0 only when every step ran and passed; the last line says passed, or which
# step failed with the last lines of its log.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tests=0 full=0 cuda=1 keep=0 base=${MESHTRAIN_FRESH_DIR:-/var/tmp}
ctest_args=()
while (( $# )); do
  case $1 in
    --tests) tests=1 ;;
    --full) tests=1 full=1 ;;
    --) shift; ctest_args=("$@"); break ;;
    --no-cuda) cuda=0 ;;
    --keep) keep=1 ;;
    --dir) base=${2:?--dir needs a directory}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-fresh-machine: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
(( tests || ${#ctest_args[@]} == 0 )) || { echo "check-fresh-machine: ctest arguments after '--' need --tests or --full" >&2; exit 2; }

log() { printf '[fresh-machine] %s\n' "$*"; }
[[ $(id -u) -eq 0 ]] || { echo "check-fresh-machine: needs root (it makes a chroot and mounts /proc, /dev, /sys)" >&2; exit 2; }

mkdir -p "$base"
fresh=$(mktemp -d "$base/meshtrain-fresh.XXXXXX")
rootfs=$fresh/root
logs=$fresh.logs
mkdir -p "$logs"
summary=()   # "step  seconds  status" lines for the table at the end

# Kills what still runs inside the root, then removes it (never crossing into a mount:
# the mounts were made in a private namespace that has ended, --one-file-system is a
# second guard).
cleanup() {
  local rc=$? pid link
  trap - EXIT INT TERM
  # A step still running (the check was interrupted): its processes outside the root too
  # (mmdebstrap, the copy), children first.
  [[ -n $step_pid ]] && kill_tree "$step_pid"
  for pid in /proc/[0-9]*; do
    link=$(readlink "$pid/root" 2>/dev/null) || continue
    [[ $link == "$rootfs" || $link == "$rootfs"/* ]] && kill -9 "${pid#/proc/}" 2>/dev/null || true
  done
  if (( keep )); then
    log "kept the root at $rootfs"
  elif [[ -d $fresh ]]; then
    local t0=$SECONDS
    rm -rf --one-file-system "$fresh" || log "could not remove $fresh completely"
    log "removed the root ($((SECONDS - t0)) s)"
  fi
  exit "$rc"
}
# kill_tree PID: SIGKILL to PID and every process below it.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill -9 "$1" 2>/dev/null || true
}
step_pid=""
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# report_failure STEP LOGFILE: the one closing line, with the log's tail and, where the log
# shows it, the reason in words (a registry that did not answer, a missing dependency).
report_failure() {
  local step=$1 file=$2 why=""
  if grep -qiE "Temporary failure resolving|Could not resolve|Failed to fetch|Connection (refused|timed out)|Network is unreachable|NewConnectionError|Max retries exceeded|ProxyError|SSLError|Could not fetch URL|No matching distribution" "$file"; then
    why=" (a package registry could not be reached: the check cannot run here, and reports no pass)"
  fi
  echo "---- last lines of $file"
  tail -n 30 "$file"
  echo "----"
  local missing
  missing=$(grep -hoE "Could NOT find [A-Za-z0-9_]+|Could not find a package configuration file provided by \"[^\"]+\"|No package '[^']+' found|fatal error: [^ ]+: No such file|ModuleNotFoundError: No module named '[^']+'|[A-Za-z0-9_.-]+: command not found|missing dependenc[a-z]*: .*" "$file" | sort -u | head -n 5 || true)
  [[ -n $missing ]] && while IFS= read -r line; do echo "missing dependency: ${line#missing dependency: }"; done <<<"$missing"
  log "FAILED at step '$step'$why; log: $file"
}

# run_step NAME CMD...: runs CMD with its output in $logs/NAME.log (and shown on stdout with
# a prefix), times it, and ends the check on failure. CMD runs in the background and the
# script waits for it: bash runs a trap only between commands, so a SIGTERM or SIGINT
# during a foreground step would wait for the step (the whole suite) to end before the
# cleanup; `wait` returns at once. (The step's SIGINT and SIGQUIT are reset to their
# defaults: bash ignores both in a background command, and the tests send them.)
run_step() {
  local name=$1 t0=$SECONDS rc=0
  shift
  log "step '$name': $*"
  ( trap - INT QUIT; "$@" ) > >(tee "$logs/$name.log" | sed -u "s/^/  $name | /") 2>&1 </dev/null &
  step_pid=$!
  wait "$step_pid" || rc=$?
  step_pid=""
  wait  # the tee
  summary+=("$(printf '  %-22s %6d s  %s' "$name" $((SECONDS - t0)) "$( ((rc == 0)) && echo ok || echo "FAILED (exit $rc)")")")
  if (( rc != 0 )); then
    print_summary
    report_failure "$name" "$logs/$name.log"
    exit 1
  fi
}
print_summary() {
  log "timings:"
  printf '%s\n' "${summary[@]}"
}

# ---- 1. the tool that makes the root ------------------------------------------------------
need_host_tool() {
  command -v mmdebstrap >/dev/null && return 0
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q && apt-get install -y -q --no-install-recommends mmdebstrap
}
run_step host-mmdebstrap need_host_tool

# ---- 2. the registry configuration of this machine ---------------------------------------
cfg=$fresh/config
mkdir -p "$cfg"
collect_config() {
  # Debian sources as apt reads them (one-line and deb822 files), without the deb-src entry
  # install-deps.sh adds (the root must show that install-deps.sh adds it itself).
  : >"$cfg/sources"
  local f n=0
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    [[ $(basename "$f") == meshtrain-* ]] && continue
    if [[ $f == *.sources ]]; then cat "$f"; echo; else grep -E '^\s*deb\s' "$f" || true; fi >>"$cfg/sources"
    n=$((n + 1))
  done
  grep -qE '^(deb |URIs:)' "$cfg/sources" || { echo "no Debian apt sources found in /etc/apt"; return 1; }
  # apt's Acquire settings (proxies, validity checks of snapshot archives, index choices).
  : >"$cfg/apt.conf"
  for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
    [[ -f $f ]] && grep -q 'Acquire' "$f" && { grep -E 'Acquire' "$f"; echo; } >>"$cfg/apt.conf"
  done
  echo "apt sources: $n file(s); apt Acquire settings: $(grep -c . "$cfg/apt.conf") line(s)"
}
run_step host-config collect_config

# ---- 3. the root ----------------------------------------------------------------------------
make_root() {
  local opts=(--variant=minbase --mode=root --format=directory --skip=cleanup/apt/lists)
  [[ -s $cfg/apt.conf ]] && opts+=(--aptopt="$cfg/apt.conf")
  mmdebstrap "${opts[@]}" bookworm "$rootfs" "$cfg/sources"
  # What a machine has beyond its packages: a name, name resolution, the local CAs, pip's
  # configuration (its files, at the same paths).
  cp -L /etc/resolv.conf "$rootfs/etc/resolv.conf"
  hostname >"$rootfs/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$(hostname)" >"$rootfs/etc/hosts"
  if [[ -d /usr/local/share/ca-certificates ]]; then
    mkdir -p "$rootfs/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$rootfs/usr/local/share/ca-certificates/"
  fi
  for f in /etc/pip.conf /etc/xdg/pip/pip.conf "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf" ${PIP_CONFIG_FILE:-}; do
    [[ -f $f ]] || continue
    mkdir -p "$rootfs$(dirname "$f")"
    cp "$f" "$rootfs$f"
  done
  du -sh --one-file-system "$rootfs" | awk '{print "root made: " $1}'
}
run_step make-root make_root

# ---- 4. the checkout ---------------------------------------------------------------------------
copy_checkout() {
  local dest=$rootfs/root/meshtrain
  mkdir -p "$dest"
  if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$repo" ls-files -z -co --exclude-standard |
      while IFS= read -r -d '' f; do [[ -e $repo/$f || -L $repo/$f ]] && printf '%s\0' "$f"; done |
      tar -C "$repo" --null -T - -cf - | tar -C "$dest" -xf -
    echo "copied $(git -C "$repo" ls-files -co --exclude-standard | wc -l) files of $(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  else
    tar -C "$repo" --exclude=./build --exclude=./runs --exclude=./data -cf - . | tar -C "$dest" -xf -
    echo "copied the directory $repo (not a git checkout)"
  fi
}
run_step copy-checkout copy_checkout

# ---- 5. the steps, inside the root ---------------------------------------------------------------
# The environment a newcomer's login shell on this machine would have: a clean one, plus the
# registry, CA and OpenBLAS settings named above.
env_args=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb LANG=C.UTF-8
          PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive)
while IFS='=' read -r k _; do
  # A local find-links folder holds wheels put on this machine by hand: not registry access.
  [[ $k == PIP_FIND_LINKS && ${!k} != *://* ]] && continue
  case $k in
    PIP_*|http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY|OPENBLAS_CORETYPE|OPENBLAS_L2_SIZE|CI|MESHTRAIN_JOBS|MESHTRAIN_TEST_JOBS)
      env_args+=("$k=${!k}") ;;
  esac
done < <(env)

printf '%s\0' "${env_args[@]}" >"$fresh/env"

# The entry into the root, run in a private mount namespace (unshare): /proc, /sys (and the
# machine's /sys/fs/cgroup), /dev (with
# its own /dev/shm), tmpfs /tmp and /run and, unless --no-cuda, /usr/local/cuda read-only, then
# the command line in the checkout under a clean environment. Arguments: ROOT ENVFILE CUDA CMD.
cat >"$fresh/enter.sh" <<'ENTER'
set -euo pipefail
rootfs=$1 envfile=$2 cuda=$3 cmd=$4
# The root a mount point of its own, as / is on a machine: `ip netns exec` (the multihost
# tests) remounts / as a slave and fails on a plain directory.
mount --bind "$rootfs" "$rootfs"
mount -t proc proc "$rootfs/proc"
mount -t sysfs sysfs "$rootfs/sys"
# The machine's cgroup hierarchy, as systemd mounts it on every Debian machine (slurmd
# refuses to start without /sys/fs/cgroup).
[[ -d /sys/fs/cgroup ]] && mount --rbind /sys/fs/cgroup "$rootfs/sys/fs/cgroup"
mount --rbind /dev "$rootfs/dev"
mount -t tmpfs -o mode=1777 tmpfs "$rootfs/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$rootfs/tmp"
mount -t tmpfs -o mode=755 tmpfs "$rootfs/run"
if (( cuda )) && [[ -d /usr/local/cuda/ ]]; then
  mkdir -p "$rootfs/usr/local/cuda"
  mount --rbind /usr/local/cuda/ "$rootfs/usr/local/cuda"
  mount -o remount,bind,ro "$rootfs/usr/local/cuda"
fi
mapfile -d '' env_args <"$envfile"
exec chroot "$rootfs" /usr/bin/env -i "${env_args[@]}" /bin/bash -c 'cd /root/meshtrain && eval "$1"' bash "$cmd"
ENTER

# in_root CMD: runs the bash command line CMD in the checkout inside the root.
in_root() { unshare --mount --propagation private -- bash "$fresh/enter.sh" "$rootfs" "$fresh/env" "$cuda" "$1"; }

if (( tests )); then
  run_step run-tests in_root "bash scripts/run-tests.sh${ctest_args[*]:+ $(printf '%q ' "${ctest_args[@]}")}"
  if (( full )); then
    run_step run-demo in_root "bash scripts/run-demo.sh"
    grep -q -- '--- sample (' "$logs/run-demo.log" ||
      { print_summary; report_failure run-demo "$logs/run-demo.log"; log "the demo printed no sample"; exit 1; }
  fi
else
  run_step install-deps in_root "bash scripts/install-deps.sh"
  run_step configure in_root "cmake --preset cpu -B build/cpu"
  run_step build in_root "cmake --build build/cpu -j$(nproc) --target meshtrain"
  run_step smoke in_root "bash scripts/smoke-test.sh build/cpu"
fi

print_summary
log "logs: $logs"
if (( full )); then what='the README test command and the demo'
elif (( tests )); then what="the README test command${ctest_args[*]:+ (ctest ${ctest_args[*]})}"
else what='install, configure, build and smoke test'; fi
log "passed: $what in a fresh Debian 12 root ($SECONDS s)"
