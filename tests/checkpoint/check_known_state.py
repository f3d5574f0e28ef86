#!/usr/bin/env python3
"""Checks checkpoints written by test_checkpoint_reshard with h5py against the known values
computed here from each parameter's Hugging Face name and logical (row, column) alone:
the expected values come from this file, not from meshtrain's layouts.

known value of array k (0 /model, 1 /optim/exp_avg, 2 /optim/exp_avg_sq) at logical
element (row, col) of a tensor with `cols` columns (1 for 1-D tensors), with salt s:
  h = FNV-1a 64 of the name's bytes, starting from 1469598103934665603 ^ s
  v = (h + 7919 k + row * cols + col) mod 2^23
  float32(v) * {1e-6, -1e-7, 1e-8}[k] + {0, 0, 1e-9}[k]   (float32 arithmetic)
(the definition of known_value in ckpt_test_util.hpp).

usage: check_known_state.py FILES.txt    (lines "FAMILY SALT PATH", relative to FILES.txt)
Also checks that each file holds exactly the tiny model's tensors with their full shapes
(tiny_models.py) and the progress attributes the test saved (step 3, data cursor 123).
"""
import os
import sys

import h5py
import numpy as np

from tiny_models import hf_shapes

GROUPS = ("model", "optim/exp_avg", "optim/exp_avg_sq")
SCALE = (np.float32(1e-6), np.float32(-1e-7), np.float32(1e-8))
OFFSET = (np.float32(0.0), np.float32(0.0), np.float32(1e-9))


def fnv1a(name, salt):
    h = 1469598103934665603 ^ salt
    for ch in name.encode():
        h = ((h ^ ch) * 1099511628211) % 2**64
    return h


def known(name, k, shape, salt):
    n = int(np.prod(shape))
    # row * cols + col is the row-major index; everything mod 2^23 (2^23 divides 2^64).
    v = (np.arange(n, dtype=np.int64) + (fnv1a(name, salt) + 7919 * k) % 2**23) % 2**23
    return (v.astype(np.float32) * SCALE[k] + OFFSET[k]).reshape(shape)


listing = sys.argv[1]
root = os.path.dirname(os.path.abspath(listing))
errors, checked = [], 0
for line in open(listing):
    family, salt, path = line.split()
    salt = int(salt)
    path = os.path.join(root, path)
    expected = hf_shapes(family)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        errors.append(f"{path}: cannot be read: {e}")
        continue
    with f:
        if int(f.attrs["step"]) != 3 or int(f.attrs["data_cursor"]) != 123:
            errors.append(f"{path}: step {f.attrs['step']} data_cursor {f.attrs['data_cursor']}, expected 3 and 123")
        for k, group in enumerate(GROUPS):
            names = set(f[group].keys())
            if names != set(expected):
                errors.append(f"{path} /{group}: missing {sorted(set(expected) - names)[:3]}, "
                              f"unexpected {sorted(names - set(expected))[:3]}")
            for name, shape in expected.items():
                if name not in f[group]:
                    continue
                got = f[group][name][...]
                if got.shape != shape or got.dtype != np.float32:
                    errors.append(f"{path} /{group}/{name}: {got.shape} {got.dtype}, expected {shape} float32")
                    continue
                want = known(name, k, shape, salt)
                bad = got.view(np.uint32) != want.view(np.uint32)
                if bad.any():
                    first = np.unravel_index(np.argmax(bad), shape)
                    errors.append(f"{path} /{group}/{name}: {int(bad.sum())} of {bad.size} elements differ from the "
                                  f"known values, first at {tuple(int(i) for i in first)}: {got[first]!r} "
                                  f"!= {want[first]!r}")
                checked += 1
print(f"check_known_state: {checked} tensors in {sum(1 for _ in open(listing))} files compared bit for bit "
      "with known values computed in Python")
if errors:
    print("\n".join(errors[:30]))
    print(f"{len(errors)} error(s)")
    sys.exit(1)
