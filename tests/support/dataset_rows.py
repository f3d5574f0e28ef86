"""The rows of a prepared instruction/chat/preference dataset, for the data tests' references.

train.bin holds uint16 ids and train.mask one byte per id, each after its 64-byte header
(doc/data.md, "Files"); a row is row_tokens (seq_len + 1) ids.
"""
import numpy as np


def rows(d, split, row_tokens):
    """(ids, mask) of `d`/`split`.bin and .mask as lists of rows of `row_tokens`."""
    t = np.fromfile(f"{d}/{split}.bin", dtype="<u2", offset=64)
    m = np.fromfile(f"{d}/{split}.mask", dtype=np.uint8, offset=64)
    assert len(m) == len(t) and len(t) % row_tokens == 0, (d, split, len(t), len(m), row_tokens)
    return t.reshape(-1, row_tokens).tolist(), m.reshape(-1, row_tokens).tolist()
