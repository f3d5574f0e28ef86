"""GGUF interop with the format's reference package (`gguf`, PyPI).

  gguf_check.py write OUT.gguf [ALIGNMENT]   writes a file with every metadata value type,
                                             arrays of strings/ints/floats/bools, a nested
                                             array, and tensors of F32, F16, BF16, I32, Q8_0,
                                             Q4_1 and Q4_K (raw blocks) of several ranks
  gguf_check.py compare FILE DUMP.json       compares gguf_dump's JSON with gguf.GGUFReader
"""
import json
import sys

import numpy as np
import gguf
from gguf import GGUFValueType as V, GGMLQuantizationType as Q


def write(path, alignment=None):
    w = gguf.GGUFWriter(path, arch="llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -120)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -32000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 0.1)
    w.add_float64("t.f64", -1.0e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo\nwörld ☃")
    w.add_string("t.empty", "")
    w.add_array("t.strs", ["a", "", "Ġ t", "日本"])
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.floats", [0.5, -1.25, 3.0e10])
    w.add_array("t.bools", [True, False])
    w.add_array("t.empty_arr", [])
    w.add_key_value("t.nested", [[1, 2], [3]], V.ARRAY, sub_type=V.ARRAY)
    rng = np.random.default_rng(0)
    w.add_tensor("f32.3d", rng.standard_normal((2, 3, 4)).astype(np.float32))
    w.add_tensor("f16.2d", rng.standard_normal((5, 7)).astype(np.float16))
    w.add_tensor("i32.1d", np.arange(-3, 6, dtype=np.int32))
    bf16 = rng.integers(0, 2**16, size=(3, 8), dtype=np.uint16)
    w.add_tensor("bf16.2d", bf16.view(np.uint8), raw_shape=(3, 8), raw_dtype=Q.BF16)
    # Quantised tensors as raw blocks: shape is in elements, the bytes are random blocks.
    for name, qt, shape in [("q8_0", Q.Q8_0, (4, 64)), ("q4_1", Q.Q4_1, (3, 32)), ("q4_k", Q.Q4_K, (2, 256)),
                            ("q6_k.4d", Q.Q6_K, (2, 1, 2, 256))]:
        be, bb = gguf.GGML_QUANT_SIZES[qt]
        n = int(np.prod(shape)) // be * bb
        raw = rng.integers(0, 256, size=n, dtype=np.uint8).reshape(shape[:-1] + (shape[-1] // be * bb,))
        w.add_tensor(name, raw, raw_dtype=qt)  # the writer derives the element shape from the byte shape
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def compare(path, dump_path):
    got = json.load(open(dump_path))
    r = gguf.GGUFReader(path)
    errors = []
    ver = int(r.fields["GGUF.version"].contents())
    if got["version"] != ver:
        errors.append(f"version {got['version']} != {ver}")
    if got["alignment"] != r.alignment:
        errors.append(f"alignment {got['alignment']} != {r.alignment}")
    if got["data_offset"] != r.data_offset:
        errors.append(f"data offset {got['data_offset']} != {r.data_offset}")
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    if list(got["metadata"]) != keys:
        errors.append(f"keys differ: {list(got['metadata'])} vs {keys}")
    for k in keys:
        f = r.fields[k]
        g = got["metadata"].get(k)
        if g is None:
            continue
        if g["type"] != f.types[0].name:
            errors.append(f"{k}: type {g['type']} != {f.types[0].name}")
        if f.types[0] == V.ARRAY and len(f.types) > 1 and g.get("array_type") != f.types[1].name:
            errors.append(f"{k}: array type {g.get('array_type')} != {f.types[1].name}")
        ref = f.contents()
        mine = g["value"]
        if len(f.types) > 2:  # the reference's contents() flattens nested arrays
            mine = [x for sub in mine for x in sub]
        if mine != ref:
            errors.append(f"{k}: value {str(g['value'])[:80]} != {str(ref)[:80]}")
    if len(got["tensors"]) != len(r.tensors):
        errors.append(f"{len(got['tensors'])} tensors != {len(r.tensors)}")
    for g, t in zip(got["tensors"], r.tensors):
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        want = {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in reversed(t.shape)],
            "offset": int(t.data_offset) - r.data_offset,
            "nbytes": int(t.n_bytes),
            "head": raw[:32].tobytes().hex(),
            "tail": raw[-32:].tobytes().hex() if len(raw) >= 32 else raw.tobytes().hex(),
            "byte_sum": int(raw.astype(np.uint64).sum()),
        }
        for key, w in want.items():
            if g[key] != w:
                errors.append(f"tensor {t.name}: {key} {g[key]} != {w}")
    for e in errors[:20]:
        print("MISMATCH", e)
    print(f"{path}: {len(keys)} metadata keys, {len(r.tensors)} tensors compared, {len(errors)} mismatches")
    return 1 if errors else 0


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
    elif sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
