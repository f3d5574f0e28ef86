#!/usr/bin/env python3
"""Compares two metrics.jsonl files step by step: every listed key within a relative
tolerance (or bitwise with --exact). Prints the worst error per key."""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("reference")
ap.add_argument("candidate")
ap.add_argument("--keys", nargs="+", default=["loss"])
ap.add_argument("--rtol", type=float, default=1e-5)
ap.add_argument("--exact", action="store_true", help="require bitwise equal values")
ap.add_argument("--label", default="")
ap.add_argument("--steps", default="", help="compare only steps in [a,b] (e.g. 11,20)")
ap.add_argument("--sparse", action="store_true",
                help="the keys exist only on some steps (val_loss on evaluation steps): compare them where the "
                     "reference has them; the candidate must have them on exactly the same steps")
a = ap.parse_args()


def load(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows[r["step"]] = r
    return rows


ref, cand = load(a.reference), load(a.candidate)
steps = sorted(ref)
if a.steps:
    lo, hi = (int(x) for x in a.steps.split(","))
    steps = [s for s in steps if lo <= s <= hi]
missing = [s for s in steps if s not in cand]
if missing or not steps:
    print(f"{a.label}: steps missing from {a.candidate}: {missing or 'no steps to compare'}")
    sys.exit(1)
bad = []
for k in a.keys:
    worst = 0.0
    key_steps = steps
    if a.sparse:
        key_steps = [s for s in steps if k in ref[s]]
        extra = [s for s in steps if k in cand[s] and k not in ref[s]]
        if not key_steps:
            bad.append(f"{k}: on no step of {a.reference}")
        if extra:
            bad.append(f"{k}: on steps {extra} of {a.candidate} but not of {a.reference}")
    for s in key_steps:
        x, y = ref[s].get(k), cand[s].get(k)
        if x is None or y is None:
            bad.append(f"step {s}: {k} missing")
            continue
        if a.exact:
            if x != y:
                bad.append(f"step {s}: {k} {y!r} != {x!r}")
            continue
        err = abs(x - y) / max(abs(x), 1e-30)
        worst = max(worst, err)
        if err > a.rtol:
            bad.append(f"step {s}: {k} {y:.9g} vs {x:.9g} (rel err {err:.2e} > {a.rtol:g})")
    print(f"{a.label}: {k} worst relative error over {len(key_steps)} steps: {worst:.2e}" if not a.exact
          else f"{a.label}: {k} bitwise equal over {len(key_steps)} steps" if not bad else "")
if bad:
    print("\n".join(bad[:20]))
    sys.exit(1)
