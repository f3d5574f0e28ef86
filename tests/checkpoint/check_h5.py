#!/usr/bin/env python3
"""Reads two meshtrain checkpoints with h5py (an independent reader) and checks that
  * /model, /optim/exp_avg and /optim/exp_avg_sq hold exactly the Hugging Face parameter
    names of the tiny config (spelled out here, not taken from meshtrain), each with its
    full logical shape and dtype float32;
  * the attributes describe the run (format version, step, model, mesh);
  * the candidate (written on another mesh) equals the reference: bitwise with --exact,
    else (the reduction order differs by mesh) the moments within --rtol of each tensor's
    largest magnitude and the weights within --weight_atol: AdamW's normalised update
    m / sqrt(v) turns tiny gradient differences into differences of a fraction of the
    learning rate where gradients are near zero, so the weights are compared in units of
    the step size, not of their own magnitude (biases start at 0).
usage: check_h5.py FAMILY REFERENCE.h5 CANDIDATE.h5 [--exact] [--rtol R] [--mesh DRxDSxTP]
"""
import argparse
import sys

import h5py
import numpy as np

from tiny_models import C, hf_shapes

ap = argparse.ArgumentParser()
ap.add_argument("family", choices=["gpt2", "llama"])
ap.add_argument("reference")
ap.add_argument("candidate")
ap.add_argument("--exact", action="store_true")
ap.add_argument("--rtol", type=float, default=1e-4)
ap.add_argument("--weight_atol", type=float, default=2e-5, help="2%% of the tiny configs' lr (1e-3)")
ap.add_argument("--mesh", default="", help="expected mesh of the candidate: dp_replicate x dp_shard x tp")
ap.add_argument("--step", type=int, default=-1)
a = ap.parse_args()

expected = hf_shapes(a.family)
errors = []
with h5py.File(a.reference, "r") as ref, h5py.File(a.candidate, "r") as cand:
    for f, label in ((ref, "reference"), (cand, "candidate")):
        if f.attrs["format"] != b"meshtrain-checkpoint" or int(f.attrs["format_version"]) != 1:
            errors.append(f"{label}: format attributes {f.attrs['format']!r} {f.attrs['format_version']!r}")
        if f["model"].attrs["family"].decode() != a.family or int(f["model"].attrs["d_model"]) != C:
            errors.append(f"{label}: /model attributes do not describe tiny-{a.family}")
        if a.step >= 0 and int(f.attrs["step"]) != a.step:
            errors.append(f"{label}: step {int(f.attrs['step'])}, expected {a.step}")
        if "[model]" not in f.attrs["config_ini"].decode():
            errors.append(f"{label}: config_ini lacks the [model] section")
        if f["train/rank_first_window"].shape[0] != int(f.attrs["mesh_dp_replicate"]) * int(f.attrs["mesh_dp_shard"]):
            errors.append(f"{label}: /train/rank_first_window has not one entry per data-parallel rank")
    if a.mesh:
        got = "x".join(str(int(cand.attrs[k])) for k in ("mesh_dp_replicate", "mesh_dp_shard", "mesh_tp"))
        if got != a.mesh:
            errors.append(f"candidate written on mesh {got}, expected {a.mesh}")
    for group in ("model", "optim/exp_avg", "optim/exp_avg_sq"):
        for f, label in ((ref, "reference"), (cand, "candidate")):
            names = set(f[group].keys())
            if names != set(expected):
                errors.append(f"{label} /{group}: missing {sorted(set(expected) - names)[:5]}, "
                              f"unexpected {sorted(names - set(expected))[:5]}")
        worst = 0.0
        for name, shape in expected.items():
            if name not in ref[group] or name not in cand[group]:
                continue
            x, y = ref[group][name], cand[group][name]
            if x.shape != shape or y.shape != shape or x.dtype != np.float32 or y.dtype != np.float32:
                errors.append(f"/{group}/{name}: shapes {x.shape} {y.shape} dtypes {x.dtype} {y.dtype}, "
                              f"expected {shape} float32")
                continue
            x, y = x[...], y[...]
            if a.exact:
                if not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
                    errors.append(f"/{group}/{name}: not bitwise equal ({np.sum(x != y)} elements differ)")
            elif group == "model":
                err = float(np.max(np.abs(x - y)))
                worst = max(worst, err)
                if err > a.weight_atol:
                    errors.append(f"/{group}/{name}: max abs error {err:.2e} > {a.weight_atol}")
            else:
                scale = max(float(np.max(np.abs(x))), 1e-30)
                err = float(np.max(np.abs(x - y))) / scale
                worst = max(worst, err)
                if err > a.rtol:
                    errors.append(f"/{group}/{name}: max error {err:.2e} of its largest magnitude > {a.rtol}")
        kind = "abs" if group == "model" else "relative"
        print(f"/{group}: {len(expected)} tensors " + ("bitwise equal" if a.exact else f"worst {kind} error {worst:.2e}"))
if errors:
    print("\n".join(errors[:30]))
    sys.exit(1)
print("h5py: every parameter under its Hugging Face name with its full shape; candidate matches reference")
