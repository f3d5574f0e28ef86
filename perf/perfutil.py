"""Shared helpers of the perf/ scripts."""
import configparser
import json


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def model_of(config_ini):
    """Model dims from a run's effective config.ini (output.dir/config.ini)."""
    cp = configparser.ConfigParser(inline_comment_prefixes=("#",))
    cp.read(config_ini)
    m, t = cp["model"], cp["train"]
    d = int(m["d_model"])
    ffn = int(m["ffn_dim"])
    family = m["family"]
    if ffn <= 0:
        ffn = 4 * d if family == "gpt2" else None
    return {"family": family, "vocab": int(m["vocab_size"]), "d_model": d, "n_layers": int(m["n_layers"]),
            "n_heads": int(m["n_heads"]), "ffn": ffn, "seq_len": int(t["seq_len"])}


def flops_per_token(m):
    """Training FLOPs per token (3 x forward), as meshtrain's ModelDims::flops_per_token_forward
    for GPT-2 (attention k/v = d_model, MLP of two matmuls, LM head counted once)."""
    C, F, L, V, T = m["d_model"], m["ffn"], m["n_layers"], m["vocab"], m["seq_len"]
    matmul = L * (4 * C * C + 2 * C * F) + V * C
    return 3.0 * (2.0 * matmul + 4.0 * L * T * C)


def peer_mismatch(name, peer, flops_tok, tokens_per_step):
    """Why the PyTorch peer's result `peer` (perf/peer/torch_gpt.py's JSON) did not do the work of
    the meshtrain run it is compared with (`flops_tok` FLOP per token, `tokens_per_step` tokens
    a step), or None. Another model or another batch on one side (MODEL_ARGS given without the
    matching PEER_ARGS, say) would make a ratio of two different trainings; the summaries
    refuse it instead of printing it."""
    tokens = peer["ranks"] * peer.get("grad_accum", 1) * peer["micro_batch"] * peer["seq_len"]
    if abs(peer["flops_per_token"] - flops_tok) > 1e-9 * flops_tok:
        return (f"{name}: PyTorch trained {peer['flops_per_token']:.6g} FLOP per token, meshtrain {flops_tok:.6g} "
                "(another model shape: PEER_ARGS must match MODEL_ARGS)")
    if tokens != tokens_per_step:
        return (f"{name}: PyTorch trained {tokens} tokens a step, meshtrain {tokens_per_step} "
                "(another batch: PEER_ARGS must match MODEL_ARGS)")
    return None


def run_row(metrics_path, warmup, prefix, load):
    """One CSV row of an A/B script: PREFIX, the median step time after WARMUP steps, the
    last step's loss (repr: every bit, so equal losses compare equal) and the load."""
    import statistics
    rows = read_jsonl(metrics_path)
    kept = [r["step_time_s"] for r in rows if r["step"] > int(warmup)]
    return f"{prefix},{statistics.median(kept):.4f},{rows[-1]['loss']!r},{load}"


def peak_cols(summary_path):
    """Two CSV columns from a run's summary.json: the largest per-rank peak (ranks[].
    peak_mem_bytes, the memory pool's reserved peak) and rank 0's peak of bytes in use
    (peak_by_category.total_in_use, what plan's per-rank total predicts). A column the
    binary's summary does not have (an older baseline's: peak_by_category came with issue 33)
    is left empty, so a comparison against it still runs."""
    s = json.load(open(summary_path))
    reserved = [r["peak_mem_bytes"] for r in s.get("ranks", []) if "peak_mem_bytes" in r]
    in_use = s.get("peak_by_category", {}).get("total_in_use")
    return ",".join("" if v is None else f"{v:.0f}" for v in (max(reserved) if reserved else None, in_use))


if __name__ == "__main__":
    # perf/perfutil.py run_row METRICS.jsonl WARMUP PREFIX LOAD (perf/bench_ab.sh, perf/allreduce_ab.sh)
    # perf/perfutil.py peak_cols SUMMARY.json (perf/bench_ab.sh)
    import sys
    if len(sys.argv) == 6 and sys.argv[1] == "run_row":
        print(run_row(*sys.argv[2:]))
    elif len(sys.argv) == 3 and sys.argv[1] == "peak_cols":
        print(peak_cols(sys.argv[2]))
    else:
        sys.exit("usage: perfutil.py run_row METRICS.jsonl WARMUP PREFIX LOAD | peak_cols SUMMARY.json")
