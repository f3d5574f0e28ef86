#!/usr/bin/env bash
# issue 18, must-shows 2 and 5: `meshtrain eval --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf
# --text FILE` equals an independent float64 forward (gguf_reference.py: the gguf package's
# dequantised tensors, numpy) within 1e-4 nats on 1 rank, 2 ranks (dp_shard=2) and 3 ranks
# (tp=3: 9 query and 3 key-value heads split three ways), and through a Hugging Face
# directory exported from it (init_from the GGUF, one step at lr 0, convert). The model's
# shape comes from the GGUF metadata (no model keys given); a disagreeing key is an error.
# The wall time of the 1-rank evaluation of 256 tokens is printed (not asserted).
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf tokenizers
export OPENBLAS_NUM_THREADS=1
gguf=$smollm
run() {
  local name=$1
  shift
  timeout $((300 * time_scale)) "$@" >"$name.log" 2>&1 || { local rc=$?; cat "$name.log"; fail "$name: exit status $rc"; return 1; }
}
json_loss() { "$py" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]["loss"])' "$1"; }
json_windows() { "$py" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]["windows"])' "$1"; }

seq=128
"$py" "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/gguf_reference.py" "$gguf" text.txt $seq > reference.json ||
  { fail "the float64 reference"; exit 1; }
ref=$(json_loss reference.json)
echo "float64 reference: $ref nats/token ($(cat reference.json))"
evaluate=(eval --checkpoint "$gguf" --text text.txt --train.micro_batch=1 --train.seq_len=$seq --json)
check() {  # check NAME: NAME.log's loss within 1e-4 of the reference, on 2 windows
  local loss windows
  loss=$(json_loss "$1.log") windows=$(json_windows "$1.log")
  echo "$1: $loss nats/token over $windows windows ($(grep -o 'load [0-9.]* s, eval [0-9.]* s' "$1.log"))"
  "$py" -c "import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 1e-4 else 1)" "$loss" "$ref" &&
    [[ $windows == 2 ]] || fail "$1: loss $loss over $windows windows, the float64 reference $ref over 2"
}
start=$(date +%s.%N)
run np1 "$MESHTRAIN_BIN" "${evaluate[@]}" && check np1
end=$(date +%s.%N)
echo "1 rank, 256 tokens: $("$py" -c "print(f'{$end - $start:.2f}')") s wall (the process, start to exit)"
# shellcheck disable=SC2086  # MPIEXEC is a command with flags
run np2_dp_shard2 $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${evaluate[@]}" --parallel.dp_shard=2 && check np2_dp_shard2
# shellcheck disable=SC2086
run np3_tp3 $MPIEXEC -n 3 "$MESHTRAIN_BIN" "${evaluate[@]}" --parallel.tp=3 && check np3_tp3

# Through a Hugging Face directory: weights from the GGUF, unchanged by one step at lr 0.
run import "$MESHTRAIN_BIN" train --checkpoint.init_from="$gguf" --data.dir=random --train.steps=1 --train.lr=0 \
  --train.min_lr=0 --train.micro_batch=1 --train.seq_len=16 --train.global_batch=1 --train.eval_every=0 \
  --train.peak_tflops=1 --output.dir=imported &&
  run convert "$MESHTRAIN_BIN" convert --input imported/checkpoints --output hf &&
  run hf "$MESHTRAIN_BIN" eval --checkpoint hf --tokenizer "$gguf" --text text.txt --train.micro_batch=1 \
    --train.seq_len=$seq --json && check hf

# The shape comes from the file: a model key that disagrees is one error naming both values.
"$MESHTRAIN_BIN" "${evaluate[@]}" --model.n_layers=12 > bad.log 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q "model.n_layers = 12 is given, but --checkpoint=.* describes a model with model.n_layers = 30" bad.log ||
  { cat bad.log; fail "a disagreeing model.n_layers gave status $rc"; }

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "GGUF eval: equal to the float64 reference on 1, 2 (dp_shard) and 3 (tp) ranks and through Hugging Face"
