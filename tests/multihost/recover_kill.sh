#!/usr/bin/env bash
# Every process of host 3 of 3 killed mid-run (kill -9: its rank and Open MPI's daemon): the
# supervisor relaunches on hosts 1 and 2 and the run finishes (recover_lib.sh).
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/recover_lib.sh"
recover_case kill
finish "a host whose processes were all killed: recovered on the other 2, bitwise the run by hand"
