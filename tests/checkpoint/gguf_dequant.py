#!/usr/bin/env python3
"""meshtrain's GGUF dequantisation against the reference, gguf.quants.dequantize.

  write OUT.gguf              one small tensor of every supported type, written with
                              gguf.GGUFWriter: F32/F16/BF16/Q8_0/Q4_0/Q4_1 quantised from
                              random values by gguf.quants.quantize (F16 also with
                              subnormals, infinities and NaN), Q4_K and Q6_K as random blocks
                              with finite scales (the package cannot quantise them)
  compare FILE DIR NAME...    DIR/NAME.f32 (gguf_dequant_dump) equals the reference's
                              float32 values bitwise (NaN where it has NaN)
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

KINDS = ["F32", "F16", "F16_SPECIAL", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"]


def write(path):
    rng = np.random.default_rng(18)
    w = gguf.GGUFWriter(path, "llama")
    rows, cols = 3, 512
    for kind in KINDS:
        x = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        if kind == "F32":
            w.add_tensor(kind, x)
        elif kind == "F16":
            w.add_tensor(kind, x.astype(np.float16))
        elif kind == "F16_SPECIAL":
            bits = rng.integers(0, 1 << 16, size=(rows, cols), dtype=np.uint16)  # every class of half
            bits[0, :4] = [0x0001, 0x03FF, 0x7C00, 0xFC00]  # subnormals, +-inf
            w.add_tensor(kind, bits.view(np.float16))
        elif kind in ("Q4_K", "Q6_K"):
            qt = T[kind]
            block_bytes = gguf.GGML_QUANT_SIZES[qt][1]
            raw = rng.integers(0, 256, size=(rows, cols // 256, block_bytes), dtype=np.uint8)
            halves = (rng.standard_normal((rows, cols // 256, 2)) * 0.01).astype(np.float16).view(np.uint8)
            if kind == "Q4_K":
                raw[..., 0:4] = halves.reshape(rows, cols // 256, 4)  # d, dmin
            else:
                raw[..., block_bytes - 2:] = halves[..., :2]  # d
            w.add_tensor(kind, raw.reshape(rows, -1), raw_dtype=qt)
        else:
            qt = T[kind]
            w.add_tensor(kind, quantize(x, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def compare(path, out_dir, names):
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    for spec in names:
        name = spec.split(":")[0]
        t = tensors[name]
        ref = dequantize(t.data, t.tensor_type).astype(np.float32)
        cols = int(t.shape[0])  # ggml order: ne[0] is the row length
        ref = ref.reshape(-1, cols)
        got = np.fromfile(f"{out_dir}/{name}.f32", dtype=np.float32).reshape(-1, cols)
        ref = ref[: got.shape[0]]
        if got.shape != ref.shape:
            print(f"FAIL: {name}: {got.shape} values, the reference has {ref.shape}")
            return 1
        nan = np.isnan(ref)
        same = np.array_equal(np.isnan(got), nan) and np.array_equal(got[~nan].view(np.uint32),
                                                                      ref[~nan].view(np.uint32))
        if not same:
            bad = np.argwhere(~((got == ref) | (np.isnan(got) & nan)))[:3]
            print(f"FAIL: {name} ({t.tensor_type.name}): differs from gguf.quants.dequantize at {bad.tolist()}: "
                  f"{[float(got[tuple(i)]) for i in bad]} vs {[float(ref[tuple(i)]) for i in bad]}")
            return 1
        print(f"{name} ({t.tensor_type.name}, {got.shape[0]} x {cols}): bitwise equal to the reference")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
        sys.exit(0)
    sys.exit(compare(sys.argv[2], sys.argv[3], sys.argv[4:]))
