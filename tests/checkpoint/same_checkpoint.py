#!/usr/bin/env python3
"""same_checkpoint.py A.h5 B.h5: exit 0 when the two checkpoints hold the same state bit
for bit -- the same objects, every dataset with the same dtype, shape and bytes, every
attribute of every object (the tensors' crc32c included) equal -- except the root attribute
config_ini (the effective configuration, which names the writer's output.dir and
checkpoint.async). Prints each difference and exits 1 otherwise. Independent of meshtrain
(h5py and numpy)."""
import sys

import h5py
import numpy as np

IGNORED_ROOT_ATTRS = {"config_ini"}


def attrs(obj, root):
    return {k: obj.attrs[k] for k in obj.attrs if not (root and k in IGNORED_ROOT_ATTRS)}


def same_value(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def objects(f):
    out = {"/": f}
    f.visititems(lambda name, obj: out.__setitem__("/" + name, obj))
    return out


def main(a_path, b_path):
    diffs = []
    with h5py.File(a_path, "r") as a, h5py.File(b_path, "r") as b:
        oa, ob = objects(a), objects(b)
        for name in sorted(set(oa) ^ set(ob)):
            diffs.append(f"{name}: only in {'A' if name in oa else 'B'}")
        datasets = 0
        for name in sorted(set(oa) & set(ob)):
            x, y = oa[name], ob[name]
            if type(x) is not type(y):
                diffs.append(f"{name}: a {type(x).__name__} in A, a {type(y).__name__} in B")
                continue
            if isinstance(x, h5py.Dataset):
                datasets += 1
                if x.dtype != y.dtype or x.shape != y.shape:
                    diffs.append(f"{name}: {x.dtype}{x.shape} in A, {y.dtype}{y.shape} in B")
                elif x[()].tobytes() != y[()].tobytes():
                    diffs.append(f"{name}: the bytes differ")
            xa, ya = attrs(x, name == "/"), attrs(y, name == "/")
            for k in sorted(set(xa) ^ set(ya)):
                diffs.append(f"{name}: attribute {k} only in {'A' if k in xa else 'B'}")
            for k in sorted(set(xa) & set(ya)):
                if not same_value(xa[k], ya[k]):
                    diffs.append(f"{name}: attribute {k} is {xa[k]!r} in A, {ya[k]!r} in B")
        if datasets == 0:
            diffs.append("no datasets compared")
    for d in diffs:
        print(f"{a_path} vs {b_path}: {d}")
    if not diffs:
        print(f"{a_path} == {b_path}: {datasets} datasets and every attribute equal (config_ini aside)")
    return 1 if diffs else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: same_checkpoint.py A.h5 B.h5")
    sys.exit(main(sys.argv[1], sys.argv[2]))
