# shellcheck shell=bash disable=SC2034,SC2154  # sets variables for its sourcer; $py is batch_lib.sh's
# tests/perf/tiny_shape.sh, sourced by the perf scripts' dry-run tests after batch_lib.sh ($py):
# one tiny GPT-2 (vocab 512, d_model 64, 1 layer, 2 heads, 32 tokens; about a second a run) for
# meshtrain and the PyTorch peer alike, so that their work is the same, and a free port for the
# peer's 2-rank DDP rendezvous instead of perf/peer/torch_gpt.py's default (another test, or a
# benchmark on the machine, may hold that).
# Sets: tiny_model (meshtrain overrides), tiny_peer (torch_gpt.py arguments), peer_port. Neither
# gives the batch: each test (or the script it runs) does.
tiny_model="--model.vocab_size=512 --model.d_model=64 --model.n_layers=1 --model.n_heads=2 --model.max_seq_len=32 --train.seq_len=32"
peer_port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tiny_peer="--vocab 512 --d_model 64 --n_layers 1 --n_heads 2 --seq_len 32 --port $peer_port"
