"""Tokenizer parity: meshtrain's ids equal the reference implementations' on every file of
the corpus, and decoding gives the files back.

  tokenizer_parity.py MESHTRAIN WORKDIR GGUF FILE...

References (all from scripts/install-deps.sh): Hugging Face `tokenizers` for tokenizer.json
files and for the GGUF's vocabulary and merges, `sentencepiece` for SentencePiece models.
The tokenizers under test are built here:
  smollm2-gguf        the real SmolLM2 GGUF (tokenizer.ggml.*, pre-tokenizer `smollm`),
                      reference: an HF tokenizer made of its vocabulary and merges with
                      SmolLM2's Digits + ByteLevel pre-tokenizer
  smollm2-json        that reference saved as tokenizer.json
  llama3-style.json   the same vocabulary with Llama 3's Split regex + ByteLevel(use_regex=false)
                      and ignore_merges
  gpt2-trained.json   a GPT-2-style byte-level BPE trained here on the first files
  llama2-metaspace.json / llama2-metaspace-split.json / llama2-legacy.json
                      a BPE with byte fallback trained here, in the Metaspace forms (unsplit,
                      and split at every U+2581 with a prefix always) and the legacy
                      Prepend/Replace normalizer form of Llama 2 / Mistral files
  sp-bpe.model / sp-unigram.model
                      SentencePiece models trained here (identity normalisation, byte fallback)
  sp-bpe-nfkc.model   a SentencePiece BPE with the trainer's default normalisation (nmt_nfkc,
                      extra whitespace removed, dummy prefix): its decoding is compared with
                      the reference's decoding, not with the input
  sp-bpe-noprefix.model
                      a SentencePiece BPE without a dummy prefix
  sp-unigram-nfkc.model
                      a SentencePiece unigram model with the trainer's default normalisation
                      (T5's form): decoding compared as sp-bpe-nfkc's
  sp-unigram-nosplit.model
                      a unigram model trained with split_by_whitespace=false: pieces span
                      words, so meshtrain encodes it whole, as the reference
  sp-bpe.gguf         sp-bpe.model written as a GGUF "llama" vocabulary (tokens, scores, types)
Besides the corpus, every tokenizer encodes mixed.txt, written here: some 120 KB of words with
leading spaces, runs of spaces and newlines, tabs, digits, non-ASCII letters, CJK and an emoji.
Files over 16 KiB are tokenized by meshtrain's SentencePiece BPE and unigram models in
stretches cut between words (sentencepiece_tokenizer.cpp, plan_cuts): the corpus is cut about
155 times, so equal ids here are equal ids across those cuts. For BPE they are the ids of one
encode of the whole text; for unigram, those sentencepiece gives each stretch, which differ
from one encode of the whole text where float ties in its Viterbi fall otherwise (plan_cuts
says why): the reference (Stretched) encodes the stretches, and each file whose ids differ
from one whole encode must score no worse than it (beyond the stretches' own rounding), so a
misplaced cut, which forces a piece boundary inside a word, fails both checks.
"""
import json
import math
import os
import random
import subprocess
import sys
import time

import gguf
import sentencepiece as spm
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Regex

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")


def gguf_vocab(path):
    r = gguf.GGUFReader(path)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    types = r.fields["tokenizer.ggml.token_type"].contents()
    return toks, merges, types


def hf_from_vocab(toks, merges, types, pre, ignore_merges=False):
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges, ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(toks[i], special=True, normalized=False) for i, t in enumerate(types) if t in (3, 4)])
    return tk


def build(work, gguf_path, train_files):
    """-> list of (name, meshtrain spec, reference encode function)."""
    out = []
    toks, merges, types = gguf_vocab(gguf_path)
    smollm = hf_from_vocab(toks, merges, types, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]))
    out.append(("smollm2-gguf", gguf_path, smollm))
    smollm.save(os.path.join(work, "smollm2.json"))
    out.append(("smollm2-json", os.path.join(work, "smollm2.json"), smollm))

    llama3 = hf_from_vocab(toks, merges, types, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), ignore_merges=True)
    llama3.save(os.path.join(work, "llama3-style.json"))
    out.append(("llama3-style", os.path.join(work, "llama3-style.json"), llama3))

    gpt2 = Tokenizer(models.BPE())
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.train(train_files, trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                show_progress=False))
    gpt2.save(os.path.join(work, "gpt2-trained.json"))
    out.append(("gpt2-trained", os.path.join(work, "gpt2-trained.json"), gpt2))

    # Llama 2 / Mistral style: BPE over U+2581-escaped text with <0xHH> byte fallback.
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    base.train(train_files, trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"],
                                                show_progress=False))
    data = json.loads(base.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    merges2 = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in data["model"]["merges"]]
    for form in ("metaspace", "metaspace-split", "legacy"):
        tk = Tokenizer(models.BPE(vocab=vocab, merges=merges2, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
        if form == "metaspace":
            tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
            tk.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="first"),
                                            decoders.ByteFallback(), decoders.Fuse()])
        elif form == "metaspace-split":
            # The older files' form (split at every U+2581, a prefix before every text): the
            # split is a literal pattern, which once failed to compile.
            tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
            tk.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="always"),
                                            decoders.ByteFallback(), decoders.Fuse()])
        else:
            tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
            tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                            decoders.Strip(" ", 1, 0)])
        path = os.path.join(work, f"llama2-{form}.json")
        tk.save(path)
        out.append((f"llama2-{form}", path, tk))

    corpus = os.path.join(work, "spm-corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for p in train_files:
            f.write(open(p, encoding="utf-8").read())
    for mtype in ("bpe", "unigram"):
        prefix = os.path.join(work, f"sp-{mtype}")
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, model_type=mtype, vocab_size=1000,
                                       byte_fallback=True, normalization_rule_name="identity",
                                       remove_extra_whitespaces=False, character_coverage=1.0,
                                       minloglevel=2, num_threads=1)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        out.append((f"sp-{mtype}", prefix + ".model", Stretched(sp, True) if mtype == "unigram" else sp))
    sp_bpe = out[-2][2]
    # (name, model type, cut by meshtrain, trainer options)
    for name, mtype, cut, options in (
            ("sp-bpe-nfkc", "bpe", True, {}),
            ("sp-bpe-noprefix", "bpe", True, {"normalization_rule_name": "identity", "remove_extra_whitespaces": False,
                                              "add_dummy_prefix": False}),
            ("sp-unigram-nfkc", "unigram", True, {}),
            ("sp-unigram-nosplit", "unigram", False, {"split_by_whitespace": False})):
        prefix = os.path.join(work, name)
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, model_type=mtype, vocab_size=1000,
                                       byte_fallback=True, character_coverage=1.0, minloglevel=2, num_threads=1,
                                       **options)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        out.append((name, prefix + ".model", Stretched(sp, False) if mtype == "unigram" and cut else sp))
    # The SentencePiece BPE model above as a GGUF "llama" vocabulary.
    sp = sp_bpe
    w = gguf.GGUFWriter(os.path.join(work, "sp-bpe.gguf"), arch="llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    w.add_token_scores([sp.get_score(i) for i in range(sp.get_piece_size())])
    w.add_token_types([1 if sp.is_unknown(i) is False and not sp.is_control(i) and not sp.is_byte(i) else
                       (2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6) for i in range(sp.get_piece_size())])
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out.append(("sp-bpe-gguf", os.path.join(work, "sp-bpe.gguf"), sp))
    return out


# Tokenizers whose decoding gives the normalised text, not the input.
NORMALISING = {"sp-bpe-nfkc", "sp-unigram-nfkc", "sp-unigram-nosplit"}

STRETCH = 1 << 14  # sentencepiece_tokenizer.cpp's kStretch


def stretches(text):
    """The text as meshtrain's SentencePiece tokenizer encodes it (sentencepiece_tokenizer.cpp,
    next_cut): a stretch ends at the first space between two ASCII letters or digits ("a b") at
    least STRETCH bytes past its start, the space starting the next stretch."""
    b = text.encode("utf-8")
    alnum = lambda x: x < 0x80 and chr(x).isalnum()
    out, pos = [], 0
    while pos < len(b):
        end = len(b)
        for c in range(max(pos + STRETCH, 1), len(b) - 1):
            if b[c] == 0x20 and alnum(b[c - 1]) and alnum(b[c + 1]):
                end = c
                break
        out.append(b[pos:end].decode("utf-8"))
        pos = end
    return out


class Stretched:
    """A SentencePiece unigram model as meshtrain encodes it: stretch by stretch (stretches()),
    those after the first with the model's dummy prefix off where it keeps whitespace (the
    space starting the stretch is its '▁'), as sentencepiece_tokenizer.cpp's plan_cuts. Its
    ids differ from one encode of the whole text only where two segmentations tie within the
    rounding of the library's float Viterbi sums (plan_cuts says why): `whole` is that encode,
    and `score` the double-precision score of a segmentation, to check the stretches' ids lose
    nothing against it."""

    def __init__(self, sp, keeps_whitespace):
        self.sp = sp
        # A later normalizer_spec (field 3) merges into the first: add_dummy_prefix (3) = 0.
        self.rest = spm.SentencePieceProcessor(model_proto=sp.serialized_model_proto() + b"\x1a\x02\x18\x00") \
            if keeps_whitespace else sp
        normal = [sp.get_score(i) for i in range(sp.get_piece_size())
                  if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) or sp.is_byte(i))]
        # A byte piece stands for an unknown character: its lattice score is unk_score
        # (unigram_model.cc's kUnkPenalty below the lowest), once per character (its first byte).
        unk_score = min(normal) - 10.0
        self.scores = [(0.0 if 0x80 <= int(sp.id_to_piece(i)[3:5], 16) < 0xC0 else unk_score) if sp.is_byte(i)
                       else sp.get_score(i) for i in range(sp.get_piece_size())]

    def encode(self, text):
        ids = []
        for k, part in enumerate(stretches(text)):
            ids += (self.sp if k == 0 else self.rest).encode(part)
        return ids

    def whole(self, text):
        return self.sp.encode(text)

    def score(self, ids):
        return math.fsum(self.scores[i] for i in ids)

    def decode(self, ids):
        return self.sp.decode(ids)


def reference_ids(ref, text):
    if isinstance(ref, (spm.SentencePieceProcessor, Stretched)):
        return ref.encode(text)
    return ref.encode(text, add_special_tokens=False).ids


def ref_decode(ref, ids):
    if isinstance(ref, (spm.SentencePieceProcessor, Stretched)):
        return ref.decode(ids)
    return ref.decode(ids, skip_special_tokens=False)


def decode_files(meshtrain, spec, work, id_lines, expected):
    """meshtrain's decoding of each line of ids (`tokenize --decode`), as text. One process
    decodes them all (a normalising tokenizer's every file is decoded: ~58 launches were most
    of this test's time); it prints the files' texts one after another, each decoded on its
    own, so where the whole output equals the expected texts (bytes) one after another, each
    file's text is its expected one. Otherwise every file is decoded by a process of its own,
    to say which differ."""
    paths = []
    for k, line in enumerate(id_lines):
        paths.append(os.path.join(work, f"ids{k}.txt"))
        with open(paths[-1], "w") as out:
            out.write(line)
    if not paths:
        return []
    run = lambda args: subprocess.run([meshtrain, "tokenize", "--decode", "--tokenizer", spec] + args,
                                      capture_output=True).stdout
    if run(paths) == b"".join(expected):
        return [e.decode("utf-8", "replace") for e in expected]
    return [run([p]).decode("utf-8", "replace") for p in paths]


def mixed_text(path):
    """A text of about 120 KB cut 8 times by the SentencePiece tokenizers: leading spaces,
    runs of spaces and newlines, tabs, digits, non-ASCII letters, CJK and an emoji between
    English words. -> its path."""
    rng = random.Random(18)
    words = ("the of and to in is that for software license copy work may you any code this program free "
             "naïve café Grüße déjà señor Ωmega Привет 日本語 東京 🙂 —").split()
    parts = ["   \n  "]
    while sum(len(p) for p in parts) < 120_000:
        r = rng.random()
        if r < 0.08:
            parts.append(rng.choice(["\n", "\n\n", "\n\n\n  ", "\n    ", "\t", "  ", "     ", " \n "]))
        elif r < 0.16:
            parts.append(str(rng.randrange(10 ** rng.randrange(1, 9))) + rng.choice([" ", ".", ", ", "-", "%"]))
        else:
            parts.append(rng.choice(words) + " ")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(parts))
    return path


def stretched_against_whole(ref, files, texts, wants):
    """The stretches' ids (`wants`, equal to meshtrain's) against one encode of each whole text:
    equal, or a segmentation scoring no worse than the whole encode's beyond the rounding of the
    library's float sums within a stretch (some 0.01 per stretch). -> lines to print, a failure's
    starting with FAIL."""
    out, differ, gain = [], 0, 0.0
    for f, text, want in zip(files, texts, wants):
        whole = ref.whole(text)
        if whole == want:
            continue
        differ += 1
        delta = ref.score(want) - ref.score(whole)
        gain += delta
        if delta < -0.01 * len(stretches(text)):
            out.append(f"FAIL {f}: the stretches' ids score {delta:+.4f} against one encode of the whole text")
    cuts = sum(len(stretches(t)) - 1 for t in texts)
    return [f"{cuts} cuts; the ids equal one encode of the whole text but in {differ} files, where float ties in "
            f"its Viterbi fell otherwise (the stretches' ids score {gain:+.4f} more in all)"] + out[:5]


def main():
    meshtrain, work, gguf_path = sys.argv[1:4]
    files = sys.argv[4:]
    os.makedirs(work, exist_ok=True)
    train_files = [f for f in files if "common-licenses" in f][:8] or files[:8]
    files.append(mixed_text(os.path.join(work, "mixed.txt")))
    texts = [open(f, encoding="utf-8").read() for f in files]
    failures = 0
    t0 = time.time()
    built = build(work, gguf_path, train_files)
    print(f"built the reference tokenizers in {time.time() - t0:.1f} s")
    for name, spec, ref in built:
        t0 = time.time()
        # meshtrain runs while the reference encodes (two cores).
        proc = subprocess.Popen([meshtrain, "tokenize", "--roundtrip", "--tokenizer", spec] + files,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wants = [reference_ids(ref, text) for text in texts]
        stdout, stderr = proc.communicate()
        if proc.returncode not in (0, 1):
            print(f"FAIL {name}: meshtrain tokenize exited {proc.returncode}: {stderr.strip()[-500:]}")
            failures += 1
            continue
        lines = stdout.split("\n")[:len(files)]
        bad = []
        ntok = 0
        for f, want, line in zip(files, wants, lines):
            mine = [int(x) for x in line.split()]
            ntok += len(want)
            if mine != want:
                k = next((i for i, (a, b) in enumerate(zip(mine, want)) if a != b), min(len(mine), len(want)))
                bad.append(f"{f}: first difference at token {k}: meshtrain {mine[k:k + 5]} vs reference {want[k:k + 5]}")
        rt = subprocess.CompletedProcess([], proc.returncode, stderr, "")
        lossy = [l.split(": ", 1)[1].split(" differs")[0] for l in rt.stdout.splitlines() if "MISMATCH" in l]
        roundtrip_ok = rt.returncode in (0, 1) and rt.stdout.count("roundtrip ok") + len(lossy) == len(files)
        # Where the decoded ids are not the input, the reference must lose the same bytes: Llama 2's
        # Metaspace (prepend_scheme "first") drops one leading space of a text that starts with one.
        excused = []
        refs = {f: ref_decode(ref, wants[files.index(f)]) for f in lossy}
        mine_of = decode_files(meshtrain, spec, work, [lines[files.index(f)] for f in lossy],
                               [refs[f].encode("utf-8") for f in lossy])
        for f in lossy:
            text = texts[files.index(f)]
            want = refs[f]
            mine = mine_of[lossy.index(f)]
            if mine == want and want != text and (name in NORMALISING or (text.startswith(" ") and want == text[1:])):
                excused.append(f)
            else:
                roundtrip_ok = False
                print(f"    {f}: decoded text differs from the input and from the reference's decoding")
        # A unigram model's ids (equal to the reference's: no bad) against one encode of each whole text.
        against_whole = []
        if isinstance(ref, Stretched) and not bad:
            against_whole = stretched_against_whole(ref, files, texts, wants)
        status = "ok" if not bad and roundtrip_ok and not any(l.startswith("FAIL") for l in against_whole) else "FAIL"
        print(f"{status} {name}: {len(files)} files, {ntok} tokens; ids {'equal' if not bad else 'DIFFER'}; "
              f"decode {'returns the input' if roundtrip_ok else 'DIFFERS'}"
              + ((f" except {len(excused)} files whose normalised text the reference's decoding gives too (and "
                  "meshtrain's alike)" if name in NORMALISING else
                  f" except {len(excused)} files starting with a space, whose first space the reference's decoding "
                  "drops too (and meshtrain's alike)") if excused else "") + f" [{time.time() - t0:.1f} s]")
        for b in bad[:5] + against_whole:
            print("   ", b)
        failures += status != "ok"
    print(f"{failures} tokenizer(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
