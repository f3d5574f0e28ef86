#!/usr/bin/env bash
# The suite's hold on Open MPI's shared session directory (the CTest fixture mpi_session_dir).
#
#   mpi_session_dir.sh hold STATE     keep Open MPI's top session directory while tests run
#   mpi_session_dir.sh release STATE  let it go again
#
# Every mpirun of one user on one host makes its session directory inside one shared top
# directory, $TMPDIR/ompi.<host>.<uid>, and the mpirun that finishes last removes that top
# directory when it is empty. With many mpiruns starting and ending at once (ctest -j, the
# hostile-input test's workers) one can remove it between another's mkdir and its check of
# the directory: that mpirun then fails in orte_init ("A call to mkdir was unable to create
# the desired directory ... /tmp/ompi.<host>.<uid> ... File exists", orte_session_dir
# failed), a failure by timing that has nothing to do with the test (Open MPI issue 8510;
# seen once in hostile_inputs' fifo_metrics_np2). A directory of ours in the top directory
# keeps it from ever being empty, so it is never removed while the suite runs. (A file would
# not: an mpirun that ends deletes the files it finds there; Open MPI 4.1.4, checked.)
#
# `hold` learns the top directory from a one-rank mpirun (OMPI_MCA_orte_top_session_dir,
# which Open MPI gives its processes) and that rank itself creates the hold directory in it,
# so the top directory is never empty from then on; STATE records it for `release`. Another
# MPI than Open MPI has no such directory: then nothing is held. Environment: MPIEXEC (the
# launcher with the suite's flags).
set -euo pipefail
action=${1:?usage: mpi_session_dir.sh hold|release STATE}
state=${2:?usage: mpi_session_dir.sh hold|release STATE}
case $action in
  hold)
    mkdir -p "$(dirname "$state")"
    name="meshtrain-tests.$(hostname).$$.$(date +%s%N).hold"
    # shellcheck disable=SC2086,SC2016  # MPIEXEC is a command with flags; the rank expands $OMPI_...
    top=$($MPIEXEC -n 1 sh -c '[ -n "${OMPI_MCA_orte_top_session_dir:-}" ] || exit 0
      mkdir "$OMPI_MCA_orte_top_session_dir/$1" && echo "$OMPI_MCA_orte_top_session_dir"' sh "$name")
    if [[ -z $top ]]; then
      echo "mpi_session_dir: this MPI gives its processes no top session directory; nothing to hold"
      : >"$state"
      exit 0
    fi
    [[ -d $top/$name ]] || { echo "mpi_session_dir: $top/$name is gone after the mpirun that made it" >&2; exit 1; }
    echo "$top/$name" >"$state"
    echo "mpi_session_dir: holding $top (until mpi_session_dir_release)"
    ;;
  release)
    held=""
    [[ -f $state ]] && held=$(<"$state")  # no state: the hold never ran, or held nothing
    if [[ -n $held ]]; then
      if [[ -d $held ]]; then
        # Empty unless something wrote into our directory: that is worth a failure.
        rmdir "$held" || { echo "mpi_session_dir: cannot remove $held" >&2; exit 1; }
      else
        echo "mpi_session_dir: $held was already gone (removed by someone else while tests ran)"
      fi
      # The top directory is Open MPI's: another run on this host (another suite, a user's
      # job) may still have its session directory in it, or its last mpirun removed it
      # already. Those two outcomes are expected and silent; any other is said, and does not
      # fail the suite (leaving Open MPI's directory in place harms nothing).
      top_dir=$(dirname "$held")
      if ! why=$(rmdir "$top_dir" 2>&1); then
        case $why in
          *"not empty"*|*"No such file"*) ;;
          *) echo "mpi_session_dir: left $top_dir in place: $why" ;;
        esac
      fi
      echo "mpi_session_dir: released $top_dir"
    fi
    rm -f "$state"
    ;;
  *)
    echo "usage: mpi_session_dir.sh hold|release STATE" >&2
    exit 2
    ;;
esac
