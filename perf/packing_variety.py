#!/usr/bin/env python3
"""Variety within a training step of packed rows against one example per row (issue 30).

The fine-tuning demo's dates (scripts/finetune-demo-data.sh) come in 8 written forms whose
token lengths differ; a packing rule that groups examples by length (first-fit decreasing)
also groups the forms, so a step of a few packed rows sees fewer of them than the same number
of examples drawn one per row. This counts it: steps drawn the way the sampler draws rows
(uniformly at random, with replacement), distinct date forms and distinct token lengths per
step and per row, averaged over 4000 steps. doc/data.md ("Packed rows") quotes the output.

usage: packing_variety.py TRAIN_JSONL PADDED_DIR ROWS_PER_STEP PACKED_DIR:ROWS_PER_STEP...
  TRAIN_JSONL  the demo's train.jsonl (the Alpaca records prepare read)
  PADDED_DIR   `prepare --format alpaca --seq_len 80` of it (one example per row, input order)
  PACKED_DIR   `prepare --format alpaca --seq_len N --pack` of it, with its rows per step
e.g. packing_variety.py data/train.jsonl ds80 16 ds160:8 ds512:2

Pure Python (struct), no numpy: it runs on the machine the demo runs on.
"""
import json
import random
import re
import statistics
import struct
import sys

MONTH = "January|February|March|April|May|June|July|August|September|October|November|December"
DAY = "Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"
# finetune-demo-data.sh's written() styles, most specific first.
FORMS = [rf"({DAY}), ({MONTH}) \d+, \d{{4}}", rf"({DAY}) \d+(st|nd|rd|th) ({MONTH}) \d{{4}}",
         rf"the \d+(st|nd|rd|th) of ({MONTH}), \d{{4}}", r"\d+-[A-Z][a-z]{2}-\d{4}", rf"\d{{4}}, ({MONTH}) \d+",
         rf"({MONTH}) \d+, \d{{4}}", rf"\d+ ({MONTH}) \d{{4}}", r"[A-Z][a-z]{2} \d+ \d{4}"]


def form(text):
    for i, f in enumerate(FORMS):
        if re.search(f, text):
            return i
    sys.exit(f"no date form in: {text}")


def tokens(path):  # doc/data.md, "Token file format"
    raw = open(path, "rb").read()
    (width,) = struct.unpack_from("<I", raw, 12)
    (n,) = struct.unpack_from("<Q", raw, 24)
    return struct.unpack_from(f"<{n}{'H' if width == 2 else 'I'}", raw, 64)


def segments(path):  # doc/data.md, the document-boundary file format
    raw = open(path, "rb").read()
    row, n = struct.unpack_from("<IQ", raw, 12)
    return row, struct.unpack_from(f"<{n}H", raw, 64)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    records = [json.loads(line) for line in open(sys.argv[1])]
    # prepare's example split (example_in_val, val_fraction 0.05): record i is val when
    # floor((i + 1) / 20) > floor(i / 20).
    train = [r for i, r in enumerate(records) if (i + 1) // 20 == i // 20]
    forms = [form(r["instruction"]) for r in train]
    padded = tokens(f"{sys.argv[2]}/train.bin")
    R = len(padded) // len(train)
    assert R * len(train) == len(padded), "the padded dataset is not one row per train record"
    # An example's tokens are a prefix of its padded row: index the rows by their prefixes.
    by_prefix = {}
    for j in range(len(train)):
        row = padded[j * R:(j + 1) * R]
        for n in range(2, R + 1):
            by_prefix.setdefault(row[:n], j)
    length = [None] * len(train)

    def packed_rows(d):
        row, seg = segments(f"{d}/train.docs")
        tok = tokens(f"{d}/train.bin")
        rows = []
        for i in range(0, len(seg), row):
            s, t, ex, a = seg[i:i + row], tok[i:i + row], [], 0
            for b in range(1, row + 1):
                if b == row or s[b] != s[a]:
                    j = by_prefix.get(t[a:b])  # padding matches no example's prefix
                    if j is not None:
                        ex.append(j)
                        length[j] = b - a
                    a = b
            rows.append(ex)
        assert sorted(j for r in rows for j in r) == list(range(len(train))), f"{d}: rows are not the examples"
        return rows

    packed = [(d, int(k), packed_rows(d)) for d, k in (a.rsplit(":", 1) for a in sys.argv[4:])]

    def variety(groups):
        return (f"{statistics.mean(len({forms[j] for j in g}) for g in groups):4.2f} forms, "
                f"{statistics.mean(len({length[j] for j in g}) for g in groups):5.2f} lengths, "
                f"{statistics.mean(len(g) for g in groups):5.2f} examples")

    rng = random.Random(1)
    steps = 4000
    k = int(sys.argv[3])
    print(f"train examples: {len(train)}, {len(set(length))} distinct lengths ({min(length)}..{max(length)} tokens)")
    print(f"{sys.argv[2]:>14s}: a step of {k:2d} rows: {variety([rng.choices(range(len(train)), k=k) for _ in range(steps)])}")
    for d, k, rows in packed:
        step = variety([[j for r in rng.choices(rows, k=k) for j in r] for _ in range(steps)])
        print(f"{d:>14s}: a step of {k:2d} rows: {step} | a row: {variety(rows)} | {len(rows)} rows")


if __name__ == "__main__":
    main()
