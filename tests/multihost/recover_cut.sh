#!/usr/bin/env bash
# Host 3 of 3 cut off mid-run (`ip link set eth0 down` in its namespace; it keeps running,
# unreachable): the supervisor relaunches on hosts 1 and 2 and the run finishes (recover_lib.sh).
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/recover_lib.sh"
recover_case cut
finish "a host cut off the network: recovered on the other 2, bitwise the run by hand"
