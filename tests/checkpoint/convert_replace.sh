#!/usr/bin/env bash
# `meshtrain convert` into an existing directory (issue 28): an export is written whole
# beside --output and swapped in, so the directory holds exactly one export's files.
#   - convert step 1 (one model.safetensors), then step 2 sharded into the same directory:
#     only step 2's files remain (no stale model.safetensors that readers would prefer),
#     every file of step 2 (safetensors metadata meshtrain_step); and back again;
#   - an export from before the manifest (meshtrain_export.json) is still replaced;
#   - refused with exit 2 and nothing changed (sha256 of every file): a non-empty directory
#     that is no export, an export holding a file of the user's, a Hugging Face directory
#     whose safetensors meshtrain did not write, a file;
#   - no staging directory is left beside --output, after a success or a failure.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
# shellcheck source=../batch/batch_lib.sh
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

timeout $((120 * time_scale)) "$MESHTRAIN_BIN" train "$tiny" --data.dir=random --output.dir=run --train.steps=2 --train.eval_every=0 \
  --train.peak_tflops=1 --checkpoint.every=1 --checkpoint.keep=2 >train.log 2>&1 || { cat train.log; fail "train"; }
ck1=run/checkpoints/step_00000001.h5 ck2=run/checkpoints/step_00000002.h5

# convert LOG ARGS...: its exit status.
convert() {
  local log=$1
  shift
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  timeout $((120 * time_scale)) $MPIEXEC -n 1 "$MESHTRAIN_BIN" convert "$@" >"$log" 2>&1
}
snapshot() { find "$@" -type d | sort; find "$@" -type f -print0 | sort -z | xargs -0 -r sha256sum; }
# The steps in the safetensors metadata of every safetensors file of DIR, and DIR's files.
describe() {
  "$py" - "$1" <<'PYEOF'
import json, os, struct, sys
d = sys.argv[1]
steps = set()
for n in sorted(os.listdir(d)):
    if n.endswith(".safetensors"):
        with open(os.path.join(d, n), "rb") as f:
            (k,) = struct.unpack("<Q", f.read(8))
            steps.add(json.loads(f.read(k))["__metadata__"]["meshtrain_step"])
manifest = json.load(open(os.path.join(d, "meshtrain_export.json"))) if os.path.exists(os.path.join(d, "meshtrain_export.json")) else None
listed = sorted(manifest["files"] + ["meshtrain_export.json"]) if manifest else None
print("steps", ",".join(sorted(steps)), "files", " ".join(sorted(os.listdir(d))),
      "manifest-matches" if listed == sorted(os.listdir(d)) else "manifest-differs")
PYEOF
}
no_staging() { ! ls -a | grep -q 'meshtrain-convert\|meshtrain-old' || { ls -a; fail "$1: a staging directory is left"; }; }
# refused LOG WHAT TEXT: exit status 2 and TEXT in the one error line.
refused() {
  local status=$1 log=$2 text=$3
  [[ $status == 2 ]] || { cat "$log"; fail "$log: exit $status, expected 2"; }
  grep -qF -- "$text" "$log" || { cat "$log"; fail "$log: the message lacks '$text'"; }
}

convert c1.log --input "$ck1" --output hf || { cat c1.log; fail "convert step 1"; }
d=$(describe hf)
[[ $d == "steps 1 files config.json meshtrain_export.json model.safetensors"* && $d == *manifest-matches ]] ||
  fail "step-1 export: $d"
convert c2.log --input "$ck2" --output hf --max_shard_size=20KB || { cat c2.log; fail "convert step 2 sharded"; }
d=$(describe hf)
echo "after step 2 sharded: $d"
[[ $d == "steps 2 files "* && $d == *"model-00001-of-"* && $d == *model.safetensors.index.json* &&
   $d != *" model.safetensors "* && $d != *" model.safetensors" && $d == *manifest-matches ]] ||
  fail "the sharded step-2 export holds other files or steps: $d"
no_staging "after a replace"
convert c3.log --input "$ck1" --output hf/ || { cat c3.log; fail "convert step 1 back (unsharded)"; }
d=$(describe hf)
[[ $d == "steps 1 files config.json meshtrain_export.json model.safetensors"* && $d != *model-0000* ]] ||
  fail "step 1 again: $d"

# An export from before the manifest: replaced (its safetensors name meshtrain_version).
rm hf/meshtrain_export.json
convert c4.log --input "$ck2" --output hf || { cat c4.log; fail "replacing an export without a manifest"; }
[[ $(describe hf) == "steps 2 "* ]] || fail "the export without a manifest was not replaced: $(describe hf)"

# Refusals: nothing changed.
mkdir -p notes && echo "my notes" >notes/README.md && echo x >notes/model.safetensors
echo "a file of mine" >hf/README.md
mkdir -p downloaded && cp hf/config.json downloaded/ &&
  "$py" -c 'import json, struct; h = json.dumps({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode(); open("downloaded/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(4))'
echo "a file" >plain_file
snapshot notes hf downloaded plain_file >before.txt
convert r1.log --input "$ck1" --output notes
refused $? r1.log "--output notes is a non-empty directory that is not an earlier export (it holds 'README.md'"
convert r2.log --input "$ck1" --output hf
refused $? r2.log "it holds 'README.md', which is not a file of the export its meshtrain_export.json lists"
convert r3.log --input "$ck1" --output downloaded
refused $? r3.log "none of its safetensors files was written by meshtrain convert"
convert r4.log --input "$ck1" --output plain_file
refused $? r4.log "--output plain_file exists and is not a directory"
snapshot notes hf downloaded plain_file >after.txt
diff before.txt after.txt || fail "a refused convert changed its --output"
no_staging "after the refusals"

# A failed export (a damaged checkpoint) leaves the earlier export and no staging.
rm hf/README.md && snapshot hf >before.txt
head -c 4096 "$ck2" >damaged.h5
convert r5.log --input damaged.h5 --output hf
[[ $? == 2 ]] || { cat r5.log; fail "a damaged checkpoint did not exit 2"; }
snapshot hf >after.txt
diff before.txt after.txt || fail "a failed convert changed the earlier export"
no_staging "after a failed convert"
# A new --output under directories that do not exist: made, and not left behind on failure.
convert r6.log --input damaged.h5 --output new/deep/hf
[[ ! -e new ]] || fail "a failed convert left the parents it created"
convert c5.log --input "$ck2" --output new/deep/hf || { cat c5.log; fail "convert into new parents"; }
[[ $(describe new/deep/hf) == "steps 2 "* ]] || fail "new/deep/hf: $(describe new/deep/hf)"
finish "convert: --output holds one export's files; a directory that is not an export is refused"
