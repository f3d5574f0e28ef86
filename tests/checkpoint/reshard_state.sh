#!/usr/bin/env bash
# test_checkpoint_reshard on 4 ranks (exactly: it fails on any other count), then every
# checkpoint it wrote -- 5 source meshes and, for each, 7 destination meshes' re-saves of
# what they loaded, for both families: 80 files -- read with h5py and compared bit for bit
# with known values computed in Python (check_known_state.py), not by meshtrain.
set -euo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP"
# shellcheck disable=SC2086  # MPIEXEC is a command with flags
timeout $((240 * time_scale)) $MPIEXEC -n 4 "${RESHARD_BIN:?}"
[[ $(wc -l <files.txt) -eq 80 ]] || { echo "FAIL: files.txt lists $(wc -l <files.txt) checkpoints, expected 80"; exit 1; }
"$py" "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/check_known_state.py" files.txt
rm -rf reshard  # 80 files, about 110 MB
echo "reshard state: every checkpoint holds the known values"
