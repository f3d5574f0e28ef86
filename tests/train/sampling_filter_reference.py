#!/usr/bin/env python3
"""Reference of train::sampling_candidates (train/sampling_filter.hpp): Hugging Face
generate's warpers in its order -- TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, MinPLogitsWarper (transformers' _get_logits_processor) -- written here
in PyTorch float64 after transformers' code (transformers is not installed), on the cases
below. It writes them, with the tokens kept and their probabilities, as C++ initializers:

    sampling_filter_reference.py > tests/train/sampling_filter_cases.inc

test_sampling_filter.cpp compares meshtrain's filter with them; the ctest
sampling_filter_cases_in_sync checks that the committed file is what this script writes.

Where meshtrain decides differently from transformers, on purpose (the reference follows
meshtrain; each generated case whose result that changes says so in a comment):
  * equal values: meshtrain ranks the lower id first (greedy's argmax picks it); top-p's
    torch.sort leaves equal values in an order torch does not specify (stable on the CPU,
    which puts the lower id first in the ascending sort and drops it first);
  * top-k keeps exactly k tokens; TopKLogitsWarper keeps every token equal to the k-th.
The reference ranks by `canonical_order` instead of torch.sort; the rest is transformers'.

Every case's decisions are at least 1e-9 (relative) away from its thresholds, so the float
rounding of another summation order cannot flip them -- except the cases marked exact, whose
probabilities are sums of powers of two and meet a threshold exactly, on purpose (the
test `<=` of top-p, `<` of min-p).
"""
import sys

import numpy as np
import torch

NEG_INF = float("-inf")
MARGIN = 1e-9
SHOWN = 16  # ids and probabilities written per case (all of them for smaller nuclei)

# (name, logits, temperature, top_k, top_p, min_p[, "exact"]); logits is a list, or
# ("gen", vocab, mult, add, mod, shift): logit_i = (((i * mult + add) % mod) - mod // 2) / 2**shift
# (exact in float32; vocab > mod repeats values: ties).
CASES = [
    ("one_token", [2.5], 1.0, 0, 0.5, 0.0),
    ("two_tokens_top_p_near_zero", [1.0, 0.0], 1.0, 0, 1e-6, 0.0),
    ("four_equal_top_p_half", [0.5, 0.5, 0.5, 0.5], 1.0, 0, 0.5, 0.0, "exact"),
    ("four_equal_top_p_three_quarters", [0.5, 0.5, 0.5, 0.5], 0.7, 0, 0.75, 0.0, "exact"),
    ("four_equal_top_p_small", [0.5, 0.5, 0.5, 0.5], 1.0, 0, 0.01, 0.0),
    ("tie_across_the_nucleus_boundary", [3.0, 1.0, 1.0, 1.0, 0.0, -1.0], 1.0, 0, 0.9, 0.0),
    ("tied_maximum_top_p_small", [1.0, 2.0, 2.0, 0.0], 1.0, 0, 0.1, 0.0),
    ("masked_tokens", [0.0, NEG_INF, 0.0, NEG_INF, -1.0], 1.0, 0, 0.9, 0.0),
    ("top_p_one_is_off", [0.0, -1.0, -2.0, NEG_INF], 1.0, 0, 1.0, 0.0),
    ("top_k_tie_at_k", [1.0, 1.0, 1.0, 0.0], 1.0, 2, 1.0, 0.0),
    ("top_k_then_top_p", [2.0, 1.5, 1.5, 1.0, 0.5, 0.0, -0.5], 0.8, 5, 0.6, 0.0),
    ("top_p_near_one_tiny_tail", [0.0, -1.0, -2.0, -40.0, -41.0], 1.0, 0, 1 - 1e-12, 0.0),
    ("min_p", [0.0, -0.5, -1.0, -2.0, -3.0], 1.0, 0, 1.0, 0.3),
    ("min_p_after_temperature", [0.0, -0.5, -1.0, -2.0, -3.0], 2.0, 0, 1.0, 0.3),
    ("min_p_one_keeps_ties", [1.0, 1.0, 0.0], 1.0, 0, 1.0, 1.0, "exact"),
    ("min_p_tighter_than_top_p", [0.0, -0.2, -0.4, -3.0, -3.5, -6.0], 1.0, 0, 0.99, 0.1),
    ("top_p_tighter_than_min_p", [0.0, -0.2, -0.4, -3.0, -3.5, -6.0], 1.0, 0, 0.5, 0.01),
    ("v3", ("gen", 3, 2654435761, 7, 256, 6), 1.0, 0, 0.7, 0.0),
    ("v8", ("gen", 8, 2654435761, 3, 1024, 7), 0.6, 0, 0.8, 0.0),
    ("v64_ties", ("gen", 64, 2654435761, 5, 16, 2), 1.0, 0, 0.5, 0.0),
    ("v64_ties_top_k", ("gen", 64, 2654435761, 5, 16, 2), 1.5, 20, 0.9, 0.0),
    ("v257_top_k_40", ("gen", 257, 2654435761, 11, 4096, 9), 0.8, 40, 0.9, 0.0),
    ("v257_min_p", ("gen", 257, 2654435761, 11, 4096, 9), 0.8, 0, 0.95, 0.05),
    ("v1000_ties", ("gen", 1000, 2654435761, 1, 64, 3), 1.0, 0, 0.9, 0.0),
    ("v1000_top_k_100", ("gen", 1000, 2654435761, 1, 64, 3), 0.5, 100, 0.5, 0.0),
    ("v1000_top_p_near_one", ("gen", 1000, 40503, 17, 8192, 9), 1.0, 0, 0.999999, 0.0),
    ("v50257", ("gen", 50257, 2654435761, 123, 65536, 11), 0.8, 0, 0.9, 0.0),
    ("v50257_top_k_min_p", ("gen", 50257, 2654435761, 123, 65536, 11), 1.0, 50, 0.95, 0.02),
    ("v50257_top_p_near_zero", ("gen", 50257, 2654435761, 123, 65536, 11), 1.3, 0, 1e-6, 0.0),
]


def logits_of(spec):
    if spec[0] != "gen":
        return torch.tensor(spec, dtype=torch.float32)
    _, vocab, mult, add, mod, shift = spec
    x = [((i * mult + add) % mod) - mod // 2 for i in range(vocab)]
    return (torch.tensor(x, dtype=torch.float64) / 2**shift).to(torch.float32)


def canonical_order(logits):
    """Most likely first, equal logits by the lower id (a stable sort of the negated logits)."""
    return torch.sort(-logits, stable=True).indices


def top_p_removed(scores, top_p, ascending):
    """TopPLogitsWarper.__call__ with its sort's indices given; also the decisions' margins."""
    sorted_logits = scores[0, ascending][None]
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    # Remove tokens with cumulative top_p above the threshold (token with 0 are kept)
    sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
    # Keep at least min_tokens_to_keep (1)
    sorted_indices_to_remove[..., -1:] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(1, ascending[None], sorted_indices_to_remove)
    margins = [(c, 1 - top_p) for c in cumulative_probs[0, :-1].tolist()]
    return indices_to_remove[0], margins


def reference(logits, temperature, top_k, top_p, min_p):
    """The tokens kept (most likely first), their probabilities, the decisions' margins and
    notes on what transformers' own tie handling would keep instead."""
    vocab = logits.numel()
    order = canonical_order(logits)
    scores = logits.to(torch.float64)[None] / temperature  # TemperatureLogitsWarper
    removed = torch.zeros(vocab, dtype=torch.bool)
    margins, notes = [], []
    if top_k > 0 and top_k < vocab:
        removed[order[top_k:]] = True
        hf = scores[0] < torch.topk(scores[0], top_k)[0][-1]  # TopKLogitsWarper's own test
        if not torch.equal(hf, removed):
            notes.append(f"TopKLogitsWarper keeps {(~hf).sum().item()} tokens (every one equal to the k-th)")
        scores = scores.masked_fill(removed[None], NEG_INF)
    if top_p < 1:  # generate adds TopPLogitsWarper only below 1
        drop, m = top_p_removed(scores, top_p, order.flip(0))
        margins += m
        hf_drop, _ = top_p_removed(scores, top_p, torch.sort(scores[0], descending=False).indices)
        if not torch.equal(drop, hf_drop):
            ids = [i for i in order.tolist() if not hf_drop[i]]
            notes.append(f"top-p with torch.sort's order of equal values keeps ids {ids[:SHOWN]}")
        removed |= drop
        scores = scores.masked_fill(drop[None], NEG_INF)
    if min_p > 0:
        # MinPLogitsWarper.__call__
        probs = torch.softmax(scores, dim=-1)
        top_probs, _ = probs.max(dim=-1, keepdim=True)
        scaled_min_p = min_p * top_probs
        tokens_to_remove = probs < scaled_min_p
        tokens_to_remove[0, order[0]] = False  # min_tokens_to_keep, in the canonical ranking
        margins += [(p, scaled_min_p.item()) for p in probs[0].tolist() if p > 0]
        removed |= tokens_to_remove[0]
        scores = scores.masked_fill(tokens_to_remove, NEG_INF)
    kept = [i for i in order.tolist() if not removed[i]]
    # Every filter keeps a prefix of the ranking (what meshtrain's filter relies on).
    assert kept == order.tolist()[: len(kept)], kept
    probs = torch.softmax(scores[0], dim=-1)
    return kept, [probs[i].item() for i in kept], margins, notes


def check_margins(name, margins, exact):
    met = 0
    for value, threshold in margins:
        if value == threshold and exact:
            met += 1
            continue
        rel = abs(value - threshold) / max(abs(value), abs(threshold), 1e-300)
        assert rel > MARGIN, f"{name}: {value!r} is within {rel:.1e} of the threshold {threshold!r}: choose another case"
    assert met > 0 or not exact, f"{name}: marked exact but meets no threshold exactly"


def c_float(x):
    if x == NEG_INF:
        return "-kInf"
    s = np.format_float_positional(np.float32(x), unique=True, trim="0")
    return s + "f"


def main():
    out = [
        "// Generated by tests/train/sampling_filter_reference.py: Hugging Face's temperature, top-k,",
        "// top-p and min-p warpers (PyTorch, float64) on each case; do not edit, rerun the script.",
        "// {name, logits (explicit) | {} and the generated vocabulary {vocab, mult, add, mod, shift},",
        "//  temperature, top_k, top_p, min_p, tokens kept, the first ids kept, their probabilities}",
        "// clang-format off",
    ]
    for case in CASES:
        name, spec, temperature, top_k, top_p, min_p = case[:6]
        exact = "exact" in case[6:]
        logits = logits_of(spec)
        kept, probs, margins, notes = reference(logits, temperature, top_k, top_p, min_p)
        check_margins(name, margins, exact)
        for note in notes:
            out.append(f"// {name}: {note}")
        if spec[0] == "gen":
            given = "{}, {" + ", ".join(str(v) for v in spec[1:]) + "}"
        else:
            given = "{" + ", ".join(c_float(x) for x in logits.tolist()) + "}, {}"
        ids = ", ".join(str(i) for i in kept[:SHOWN])
        ps = ", ".join(f"{p:.17g}" for p in probs[:SHOWN])
        out.append(f'{{"{name}", {given}, {temperature!r}, {top_k}, {top_p!r}, {min_p!r}, {len(kept)}, {{{ids}}}, {{{ps}}}}},')
    out.append("// clang-format on")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
