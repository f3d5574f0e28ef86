#!/usr/bin/env bash
# Checkpoint checksums through the command line: a 2-rank checkpoint's `crc32c`
# attributes are the CRC-32C (computed here in plain Python) of each tensor's stored bytes;
# a byte flipped in the file -- first, middle and last byte of a weight and a moment -- is
# refused by every command that reads the tensor (train resume, train init_from, eval,
# generate, convert), exit status 2, one line naming the file and the dataset, and convert
# leaves no output; a checkpoint without checksums (deleted with h5py, as one written
# before them) loads on every path with a one-line notice.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
py=${REFERENCE_PYTHON:-/usr/bin/python3}
export PYTHONPATH="$MESHTRAIN_SOURCE_DIR/tests/checkpoint${PYTHONPATH:+:$PYTHONPATH}"
ini="$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# shellcheck disable=SC2086  # MPIEXEC is a command with flags
mt() { timeout $((120 * time_scale)) $MPIEXEC -n "$1" "$MESHTRAIN_BIN" "${@:2}"; }

mt 2 train "$ini" --train.steps=2 --train.eval_every=0 --data.dir=random --output.dir=run >run.log 2>&1 ||
  { cat run.log; echo "FAIL: training exited non-zero"; exit 1; }
good=run/checkpoints/step_00000002.h5

"$py" - "$good" <<'EOF' || fail "stored checksums are not the CRC-32C of the tensors' bytes"
import sys, h5py
from crc32c_ref import tensor_crc
f = h5py.File(sys.argv[1], "r")
assert f.attrs["checksum"].decode() == "crc32c", f.attrs["checksum"]
bad = n = 0
def visit(name, obj):
    global bad, n
    if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f":
        n += 1
        if int(obj.attrs["crc32c"]) != tensor_crc(obj):
            bad += 1
            print("mismatch:", name)
f.visititems(visit)
print(f"{n} tensors, {bad} with a wrong checksum")
sys.exit(1 if bad or n == 0 else 0)
EOF

# flip FILE DATASET WHERE: copies the good file and flips one bit of the byte at WHERE
# (first | middle | last) of DATASET, found through its file offset (the damage is in the
# file's bytes, not made through HDF5).
flip() {
  cp "$good" "$1"
  "$py" - "$@" <<'EOF'
import sys, h5py
path, ds, where = sys.argv[1:4]
with h5py.File(path, "r") as f:
    d = f[ds]
    off, n = d.id.get_offset(), d.size * 4
at = {"first": 0, "middle": (n // 8) * 4 + 3, "last": n - 1}[where]
with open(path, "r+b") as f:
    f.seek(off + at)
    b = f.read(1)[0]
    f.seek(off + at)
    f.write(bytes([b ^ 0x40]))
EOF
}

# refused NAME DATASET FILE CMD...: CMD exits 2 with one error line naming FILE, DATASET
# and the checksum.
refused() {
  local name=$1 ds=$2 file=$3
  shift 3
  "$@" >"$name.log" 2>&1
  local rc=$?
  [[ $rc == 2 ]] || { cat "$name.log"; fail "$name: exit $rc, expected 2"; return; }
  local n
  n=$(grep -c "does not match its checksum" "$name.log")
  grep -q "checkpoint $file: dataset $ds does not match its checksum" "$name.log" ||
    { cat "$name.log"; fail "$name: the message does not name $file and $ds"; }
  ((n == 1)) || { cat "$name.log"; fail "$name: $n error lines, expected 1 (rank 0)"; }
}

text=prompt.txt
printf 'the quick brown fox jumps over the lazy dog. ' >$text
weight=/model/transformer.h.1.attn.c_attn.weight
moment=/optim/exp_avg_sq/transformer.wte.weight
for where in first middle last; do
  f=w_$where.h5
  flip $f $weight $where
  refused resume_w_$where $weight $f mt 2 train "$ini" --train.steps=3 --train.eval_every=0 --data.dir=random \
    --output.dir=r_w_$where --checkpoint.resume=$f
  refused init_from_w_$where $weight $f mt 2 train "$ini" --train.steps=1 --train.eval_every=0 --data.dir=random \
    --output.dir=i_w_$where --checkpoint.init_from=$f
  refused eval_w_$where $weight $f mt 1 eval "$ini" --checkpoint $f --text $text
  refused generate_w_$where $weight $f mt 1 generate "$ini" --checkpoint $f --prompt "the" --tokens 4
  refused convert_w_$where $weight $f mt 1 convert --input $f --output hf_w_$where
  [[ ! -e hf_w_$where/model.safetensors ]] || fail "convert_w_$where: wrote a model from a damaged file"
  f=m_$where.h5
  flip $f $moment $where
  refused resume_m_$where $moment $f mt 2 train "$ini" --train.steps=3 --train.eval_every=0 --data.dir=random \
    --output.dir=r_m_$where --checkpoint.resume=$f
done

# A checkpoint written before checksums: every path loads it, saying once that it is unverified.
cp "$good" legacy.h5
"$py" - legacy.h5 <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    del f.attrs["checksum"]
    f.visititems(lambda n, o: o.attrs.__delitem__("crc32c") if "crc32c" in o.attrs else None)
EOF
legacy() {
  local name=$1
  shift
  "$@" >"$name.log" 2>&1 || { cat "$name.log"; fail "$name: a legacy checkpoint was refused"; return; }
  local n
  n=$(grep -c "checkpoint legacy.h5 has no tensor checksums" "$name.log")
  ((n == 1)) || { cat "$name.log"; fail "$name: $n notices, expected 1"; }
}
legacy legacy_resume mt 2 train "$ini" --train.steps=3 --train.eval_every=0 --data.dir=random --output.dir=l_r \
  --checkpoint.resume=legacy.h5
legacy legacy_init_from mt 2 train "$ini" --train.steps=1 --train.eval_every=0 --data.dir=random --output.dir=l_i \
  --checkpoint.init_from=legacy.h5
legacy legacy_eval mt 1 eval "$ini" --checkpoint legacy.h5 --text $text
legacy legacy_generate mt 1 generate "$ini" --checkpoint legacy.h5 --prompt "the" --tokens 4
legacy legacy_convert mt 1 convert --input legacy.h5 --output hf_legacy
# The resumed run's own checkpoint has checksums again.
"$py" -c "import h5py,sys; sys.exit(0 if 'checksum' in h5py.File('l_r/checkpoints/step_00000003.h5','r').attrs else 1)" ||
  fail "a run resumed from a legacy checkpoint saved without checksums"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "checksum checks passed"
