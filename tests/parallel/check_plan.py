"""Checks `meshtrain plan --json` files of one model at growing GPU counts (weak scaling:
the same work per GPU): each file's `chosen` is the fastest predicted candidate that fits (or a
strategy on that candidate's mesh, micro-batch and checkpointing within the tie margin of
plan/mesh_search.hpp, kStrategyTieMargin),
every candidate is a valid mesh of the world with tensor parallelism inside a node, and the
chosen step times give a weak-scaling efficiency (step time at the fewest GPUs / at the
most) of at least --min-efficiency. Exit status 1 with the reason on any failure."""
import argparse
import json
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


TIE_MARGIN = 0.05  # plan/mesh_search.hpp: kStrategyTieMargin


def same_shape(a, b):
    keys = ("dp_replicate", "dp_shard", "tp", "activation_checkpointing", "micro_batch")
    return all(a[k] == b[k] for k in keys)


def same(a, b):
    keys = ("strategy", "dp_replicate", "dp_shard", "tp", "activation_checkpointing", "micro_batch")
    return all(a[k] == b[k] for k in keys)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-efficiency", type=float, required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    chosen = {}
    for path in args.files:
        with open(path) as f:
            plan = json.load(f)
        world, rpn, usable = plan["world_size"], plan["ranks_per_node"], plan["memory_usable_bytes"]
        cands = plan["candidates"]
        if len(cands) < 2:
            fail(f"{path}: only {len(cands)} candidate(s); the planner must enumerate meshes")
        for c in cands:
            for k in ("strategy", "dp_replicate", "dp_shard", "tp", "activation_checkpointing", "micro_batch",
                      "memory_bytes", "fits", "step_s", "tokens_per_s"):
                if k not in c:
                    fail(f"{path}: a candidate lacks '{k}': {c}")
            if c["dp_replicate"] * c["dp_shard"] * c["tp"] != world:
                fail(f"{path}: candidate mesh {c} is not {world} ranks")
            if c["tp"] > rpn or rpn % c["tp"] != 0:
                fail(f"{path}: candidate {c} puts tensor parallelism across nodes of {rpn}")
            if c["fits"] != (c["memory_bytes"] <= usable):
                fail(f"{path}: candidate {c} says fits={c['fits']} but needs {c['memory_bytes']} of {usable}")
        fitting = [c for c in cands if c["fits"]]
        if not fitting:
            fail(f"{path}: no candidate fits")
        best = min(c["step_s"] for c in fitting)
        pick = plan["chosen"]
        if pick is None:
            fail(f"{path}: nothing chosen although {len(fitting)} candidates fit")
        fastest = [c for c in fitting if c["step_s"] == best]
        tied = pick["step_s"] <= best * (1 + TIE_MARGIN) and any(same_shape(pick, c) for c in fastest)
        if not pick["fits"] or not (pick["step_s"] == best or tied):
            fail(f"{path}: chosen {pick} is not the fastest fitting candidate ({best} s) nor a strategy tied with "
                 f"it on its mesh")
        if not any(same(pick, c) for c in cands):
            fail(f"{path}: chosen {pick} is not among the candidates")
        chosen[world] = pick
        print(f"{world:5d} GPUs: {len(cands):4d} candidates, {len(fitting):4d} fit; chosen {pick['strategy']} "
              f"{pick['dp_replicate']} x {pick['dp_shard']} x {pick['tp']}, checkpointing "
              f"{pick['activation_checkpointing']}, micro_batch {pick['micro_batch']}: {pick['step_s']:.4f} s, "
              f"{pick['memory_bytes'] / 2**30:.1f} GiB, {pick['tokens_per_s'] / world:.0f} tokens/s per GPU")
    lo, hi = min(chosen), max(chosen)
    eff = chosen[lo]["step_s"] / chosen[hi]["step_s"]
    print(f"predicted weak-scaling efficiency {lo} -> {hi} GPUs: {100 * eff:.1f}%")
    if eff < args.min_efficiency:
        fail(f"efficiency {100 * eff:.1f}% is below {100 * args.min_efficiency:.0f}%")


if __name__ == "__main__":
    main()
