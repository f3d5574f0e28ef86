"""An independent NF4 implementation (QLoRA's code values; bitsandbytes' thresholds and
nibble order), in numpy float32, compared byte for byte with formats::nf4 (nf4_dump).

  nf4_reference.py random OUT.f32            write test weights: normal at several scales,
                                             every threshold exactly, zero blocks, extremes
  nf4_reference.py gguf FILE TENSOR OUT.f32  a real tensor of FILE, as float32 (gguf package)
  nf4_reference.py compare IN.f32 PREFIX     the reference against PREFIX.{codes,scales,
                                             scale_max,dequant}; exit 1 on any difference
"""
import sys
from fractions import Fraction

import numpy as np

BLOCK, GROUP = 64, 256
# The NF4 code values of QLoRA (bitsandbytes' create_normal_map, as float32).
CODES = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                  -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                  0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                  0.7229568362236023, 1.0], dtype=np.float32)


# bitsandbytes' dQuantizeNF4 thresholds, as its source writes them: decimal float literals
# (the double midpoints of adjacent codes, printed), which the compiler rounds straight to
# float32. Going through a Python float (double) first would round twice and move some of
# them by one ulp, so each is rounded here from its exact decimal value.
PUBLISHED = ("-0.8480964004993439", "-0.6106329262256622", "-0.4599952697753906", "-0.33967943489551544",
             "-0.23460740596055984", "-0.13791173323988914", "-0.045525018125772476", "0.03979014977812767",
             "0.1202552504837513", "0.2035212516784668", "0.2920137718319893", "0.3893125355243683",
             "0.5016634166240692", "0.6427869200706482", "0.8614784181118011")


def float32_of_decimal(text):
    """The float32 nearest to the exact decimal `text` (ties to even)."""
    exact = Fraction(text)
    f = np.float32(float(exact))
    candidates = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    def key(c):
        return (abs(Fraction(float(c)) - exact), int(np.array(c, np.float32).view(np.uint32)) & 1)
    return min(candidates, key=key)


def thresholds():
    t = np.array([float32_of_decimal(v) for v in PUBLISHED], dtype=np.float32)
    # They are the midpoints of adjacent codes to within one float32 ulp.
    c = CODES.astype(np.float64)
    mid = (c[:-1] + c[1:]) / 2
    assert np.all(np.abs(t.astype(np.float64) - mid) <= np.abs(np.spacing(t)).astype(np.float64)), "not the midpoints"
    return t


def quantize(x):
    t = thresholds()
    blocks = x.reshape(-1, BLOCK)
    absmax = np.abs(blocks).max(axis=1).astype(np.float32)
    inv = np.where(absmax > 0, np.float32(1) / np.where(absmax > 0, absmax, np.float32(1)), np.float32(0)).astype(np.float32)
    normalised = (blocks * inv[:, None]).astype(np.float32)
    codes = (normalised[..., None] > t).sum(axis=-1).astype(np.uint8).reshape(-1)  # thresholds strictly below
    packed = (codes[0::2] << 4 | codes[1::2]).astype(np.uint8)
    n_groups = (len(absmax) + GROUP - 1) // GROUP
    scale_max = np.array([absmax[g * GROUP:(g + 1) * GROUP].max() for g in range(n_groups)], dtype=np.float32)
    per = np.where(scale_max > 0, np.float32(255) / np.where(scale_max > 0, scale_max, np.float32(1)), np.float32(0))
    per_block = np.repeat(per.astype(np.float32), GROUP)[:len(absmax)]
    r = np.rint((absmax * per_block).astype(np.float32))  # round half to even
    scales = np.where(absmax > 0, np.clip(r, 1, 255), 0).astype(np.uint8)
    step = (scale_max / np.float32(255)).astype(np.float32)
    block_scale = (scales.astype(np.float32) * np.repeat(step, GROUP)[:len(absmax)]).astype(np.float32)
    dequant = (CODES[codes].reshape(-1, BLOCK) * block_scale[:, None]).astype(np.float32).reshape(-1)
    return packed, scales, scale_max, dequant, codes


def random_weights():
    rng = np.random.default_rng(20261202)
    parts = [rng.standard_normal(64 * 300).astype(np.float32) * np.float32(s) for s in (1e-3, 0.02, 1.0, 30.0)]
    # Blocks whose normalised values sit exactly on every threshold (the tie rule: lower
    # code), just above and below it, and the codes themselves; absmax 1 so x * 1/absmax = x.
    t = thresholds()
    ties = np.concatenate([t, np.nextafter(t, np.float32(2)), np.nextafter(t, np.float32(-2)), CODES]).astype(np.float32)
    ties = np.concatenate([ties, np.zeros((-len(ties)) % 63, np.float32)]).reshape(-1, 63)
    ties = np.concatenate([ties, np.ones((len(ties), 1), np.float32)], axis=1).reshape(-1)
    zeros = np.zeros(64 * 3, np.float32)
    # A group whose absmax values span 1e4x (the smallest block's scale rounds to 0 -> kept at 1).
    spread = np.concatenate([rng.standard_normal(64).astype(np.float32) * np.float32(10.0 ** (-k / 64)) for k in range(256)])
    x = np.concatenate(parts + [ties, zeros, spread]).astype(np.float32)
    return x


def main():
    mode = sys.argv[1]
    if mode == "random":
        random_weights().tofile(sys.argv[2])
    elif mode == "gguf":
        import gguf
        from gguf.quants import dequantize
        reader = gguf.GGUFReader(sys.argv[2])
        t = next(t for t in reader.tensors if t.name == sys.argv[3])
        x = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        x[: len(x) // BLOCK * BLOCK].tofile(sys.argv[4])
    elif mode == "compare":
        x = np.fromfile(sys.argv[2], dtype=np.float32)
        prefix = sys.argv[3]
        want = quantize(x)
        got = [np.fromfile(prefix + ".codes", np.uint8), np.fromfile(prefix + ".scales", np.uint8),
               np.fromfile(prefix + ".scale_max", np.float32), np.fromfile(prefix + ".dequant", np.float32)]
        bad = 0
        for name, w, g in zip(("codes", "scales", "scale_max", "dequant"), want, got):
            if w.shape != g.shape or w.tobytes() != g.tobytes():
                diff = np.flatnonzero(w.view(np.uint8) != g.view(np.uint8)) if w.shape == g.shape else []
                print(f"{prefix}.{name}: differs ({len(diff)} bytes; first at {diff[:5]})", file=sys.stderr)
                bad += 1
        codes = want[4]
        err = np.abs(want[3] - x).max() / max(np.abs(x).max(), 1e-30)
        print(f"{prefix}: {len(x)} weights, {len(np.unique(codes))} codes used, max |error| / max |w| = {err:.3g}: "
              + ("equal byte for byte" if bad == 0 else f"{bad} arrays differ"))
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
