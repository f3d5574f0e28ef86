#!/usr/bin/env bash
# `meshtrain prepare` from the command line: the fortunes corpus (Debian package
# `fortunes`) becomes a dataset; a hard-linked file is read once; bad inputs end every rank
# with exit status 2 and exactly one error message, on 1 and 2 ranks, and leave no output
# behind.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_BIN, MPIEXEC, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"

corpus=/usr/share/games/fortunes
rm -rf "$TEST_TMP"
mkdir -p "$TEST_TMP"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run LAUNCH NAME ARGS...: runs `meshtrain prepare ARGS` (LAUNCH "" = 1 rank, "mpi" = 2 ranks).
run() {
  local launch=$1 name=$2
  shift 2
  out="$TEST_TMP/$name.out" err="$TEST_TMP/$name.err"
  if [[ $launch == mpi ]]; then
    # shellcheck disable=SC2086  # MPIEXEC is a command with flags
    timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" prepare "$@" >"$out" 2>"$err"
  else
    timeout $((120 * time_scale)) "$MESHTRAIN_BIN" prepare "$@" >"$out" 2>"$err"
  fi
  rc=$?
}

check_dataset() {
  local dir=$1 what=$2
  for f in train.bin val.bin meta.json; do
    [[ -s $dir/$f ]] || fail "$what: $dir/$f missing or empty"
  done
  [[ $(head -c 8 "$dir/train.bin") == MTTOKENS ]] || fail "$what: train.bin lacks the magic"
  if ls "$dir"/*.tmp >/dev/null 2>&1; then fail "$what: temporaries left in $dir"; fi
  [[ $(jq -r '.tokenizer' "$dir/meta.json") == byte ]] || fail "$what: meta.json lacks the tokenizer"
}

if [[ -d $corpus ]]; then
  for launch in "" mpi; do
    name="fortunes${launch:+_$launch}"
    run "$launch" "$name" --input "$corpus" --output "$TEST_TMP/$name"
    cat "$out"
    [[ $rc -eq 0 ]] || { fail "$name: exit status $rc"; cat "$err" >&2; }
    check_dataset "$TEST_TMP/$name" "$name"
    [[ $(grep -c '^prepared ' "$out") -eq 1 ]] || fail "$name: the summary is not printed exactly once"
    grep -q 'bits/token' "$out" || fail "$name: no entropy in the summary"
  done
  cmp -s "$TEST_TMP/fortunes/train.bin" "$TEST_TMP/fortunes_mpi/train.bin" ||
    fail "1 and 2 ranks wrote different train.bin"
else
  # A dependency of the project (scripts/install-deps.sh): missing, this test fails.
  fail "$corpus is not installed: run scripts/install-deps.sh (Debian package fortunes)"
fi

# A file with two hard links is one document (read once), and the second name is logged as skipped.
mkdir -p "$TEST_TMP/hard_links/sub"
printf 'one document\nwith two names\n' >"$TEST_TMP/hard_links/a.txt"
ln "$TEST_TMP/hard_links/a.txt" "$TEST_TMP/hard_links/sub/b.txt"
run "" hard_links --input "$TEST_TMP/hard_links/sub/b.txt" "$TEST_TMP/hard_links" --output "$TEST_TMP/out_hard_links"
[[ $rc -eq 0 ]] || { fail "hard_links: exit status $rc"; cat "$err" >&2; }
grep -q 'input: *1 file(s), 28 bytes' "$out" || fail "hard_links: a hard-linked file is not read once: $(grep 'input:' "$out")"
grep -qF "skipping $TEST_TMP/hard_links/sub/b.txt: the same file as $TEST_TMP/hard_links/a.txt" "$out" ||
  fail "hard_links: the second name is not logged as skipped: $(cat "$out")"

run "" help --help
[[ $rc -eq 0 ]] && grep -q -- '--val_fraction' "$out" || fail "--help: status $rc or no option list"

# Bad inputs: NAME, expected text in the message, then the arguments.
mkdir -p "$TEST_TMP/binary_only"
printf 'a\0b' >"$TEST_TMP/binary_only/blob"
touch "$TEST_TMP/a_file"
bad_cases=(
  "missing_input|does not exist|--input $TEST_TMP/no_such_dir --output $TEST_TMP/out_missing"
  "no_input|--input is required|--output $TEST_TMP/out_noinput"
  "empty_corpus|corpus is empty|--input $TEST_TMP/binary_only --output $TEST_TMP/out_empty"
  "unwritable|cannot create the output directory|--input $corpus --output $TEST_TMP/a_file/sub"
  "val_fraction|--val_fraction must be in|--input $corpus --output $TEST_TMP/out_vf --val_fraction 1.5"
  "tokenizer|neither 'byte' nor an existing file|--input $corpus --output $TEST_TMP/out_tok --tokenizer nope"
  "unknown_option|unrecognised option|--input $corpus --output $TEST_TMP/out_opt --frobnicate"
)
for launch in "" mpi; do
  for c in "${bad_cases[@]}"; do
    IFS='|' read -r name expect args <<<"$c"
    name="$name${launch:+_$launch}"
    # shellcheck disable=SC2086  # args is a word list without spaces in its words
    run "$launch" "$name" $args
    echo "--- $name: exit $rc: $(cat "$err")"
    [[ $rc -eq 2 ]] || fail "$name: exit status $rc, expected 2"
    [[ $(grep -c 'meshtrain prepare: error:' "$err") -eq 1 ]] || fail "$name: not exactly one error message"
    grep -qF -- "$expect" "$err" || fail "$name: the message lacks '$expect'"
  done
done
for d in out_missing out_noinput out_empty out_vf out_tok out_opt; do
  [[ ! -e $TEST_TMP/$d ]] || fail "a failed run left $TEST_TMP/$d"
done

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "prepare CLI: all checks passed"
