#!/usr/bin/env bash
# Regenerates the key list in doc/configuration.md from the program itself
# (`meshtrain train --help`), between the BEGIN/END markers. Run it after adding or
# changing a configuration key; tests/app/test_config_doc.sh fails until you do.
#
# Usage: bash scripts/gen-config-doc.sh [BUILD_DIR]   (default build/cpu)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-$root/build/cpu}/bin/meshtrain
doc=$root/doc/configuration.md
export OMP_PROC_BIND=false OMP_NUM_THREADS=1

help=$("$bin" train --help | sed -n '/^Configuration keys/,$p')
[[ -n "$help" ]] || { echo "gen-config-doc: '$bin train --help' printed no configuration keys" >&2; exit 1; }

python3 - "$doc" "$help" <<'PY'
import sys
path, help_text = sys.argv[1], sys.argv[2]
begin, end = "<!-- BEGIN generated: meshtrain train --help -->", "<!-- END generated -->"
text = open(path).read()
i, j = text.index(begin) + len(begin), text.index(end)
text = text[:i] + "\n```\n" + help_text.rstrip() + "\n```\n" + text[j:]
open(path, "w").write(text)
PY
echo "updated $doc"
