#!/usr/bin/env bash
# scripts/smoke-test.sh on this build: the same steps check-fresh-machine.sh runs in a fresh
# root (CI's first stage), so a change that breaks one of its expected lines fails here too.
set -euo pipefail
rm -rf "$TEST_TMP"
mkdir -p "$TEST_TMP"
SMOKE_WORK=$TEST_TMP exec bash "$MESHTRAIN_SOURCE_DIR/scripts/smoke-test.sh" "$MESHTRAIN_BUILD_DIR"
