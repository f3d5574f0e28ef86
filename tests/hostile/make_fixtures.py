#!/usr/bin/env python3
"""Crafts the damaged inputs of the hostile-input suite from one good dataset, one good
checkpoint and one good safetensors file (all made by meshtrain itself in run.sh).

usage: make_fixtures.py DATA_DIR CHECKPOINT.h5 MODEL.safetensors OUT_DIR

Writes under OUT_DIR: d_*/ (datasets), c_*.h5 (checkpoints), s_*.safetensors and s_*/
(safetensors files and directories), and a few odd paths. Every file is a small edit of a
good one, so each case exercises exactly one defect. Needs numpy and h5py (Debian's
/usr/bin/python3); safetensors files are read and written by hand (the format is an
8-byte little-endian header length, a JSON header, then the tensor bytes), so that a
damaged header can be written at all.
"""
import json
import os
import shutil
import struct
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
from crc32c_ref import restamp  # noqa: E402

data_dir, good_ckpt, good_st, out = sys.argv[1:5]
os.makedirs(out, exist_ok=True)
HEADER = 64
SAMPLED_IDS = 65536  # data::TokenFile::kSampledIds


def path(*parts):
    return os.path.join(out, *parts)


# ---- datasets ---------------------------------------------------------------------------

def dataset(name, edit=None):
    """A copy of the good dataset as out/name, then edit(dir) on it."""
    d = path(name)
    shutil.copytree(data_dir, d)
    if edit:
        edit(d)
    return d


def patch(file, offset, data):
    with open(file, "r+b") as f:
        f.seek(offset)
        f.write(data)


def tokens_of(file):
    raw = open(file, "rb").read()
    width = struct.unpack_from("<I", raw, 12)[0]
    return raw[:HEADER], np.frombuffer(raw[HEADER:], "<u2" if width == 2 else "<u4").copy()


def write_tokens(file, header, toks):
    with open(file, "wb") as f:
        f.write(header)
        f.write(toks.tobytes())


def meta_edit(d, **kv):
    m = json.load(open(os.path.join(d, "meta.json")))
    m.update(kv)
    json.dump(m, open(os.path.join(d, "meta.json"), "w"), indent=2)


dataset("d_magic", lambda d: patch(f"{d}/train.bin", 0, b"NOTTOKEN"))
dataset("d_version", lambda d: patch(f"{d}/train.bin", 8, struct.pack("<I", 9)))
dataset("d_width", lambda d: patch(f"{d}/train.bin", 12, struct.pack("<I", 3)))
dataset("d_vocab0", lambda d: patch(f"{d}/train.bin", 16, struct.pack("<Q", 0)))
dataset("d_reserved", lambda d: patch(f"{d}/train.bin", 40, b"\x07"))
dataset("d_count_header", lambda d: patch(f"{d}/train.bin", 24, struct.pack("<Q", 1 << 60)))
dataset("d_truncated", lambda d: os.truncate(f"{d}/train.bin", os.path.getsize(f"{d}/train.bin") - 101))
dataset("d_longer", lambda d: open(f"{d}/train.bin", "ab").write(b"\0\0\0\0"))
dataset("d_header_only", lambda d: os.truncate(f"{d}/val.bin", 20))


def oov_first(d):  # an id above the vocabulary where the open-time sample looks
    h, t = tokens_of(f"{d}/train.bin")
    t[0] = 300
    write_tokens(f"{d}/train.bin", h, t)


dataset("d_oov_sampled", oov_first)


def oov_unsampled(d):
    # Every position the open-time sample skips holds an id above the vocabulary, so the
    # file opens fine and the first window read (train or eval) meets one.
    h, t = tokens_of(f"{d}/train.bin")
    n = len(t)
    assert n > SAMPLED_IDS, f"the good dataset needs more than {SAMPLED_IDS} train tokens, has {n}"
    sampled = np.zeros(n, bool)
    k = np.arange(SAMPLED_IDS, dtype=object)
    sampled[np.array(k * (n - 1) // (SAMPLED_IDS - 1), dtype=np.int64)] = True
    t[~sampled] = 299
    write_tokens(f"{d}/train.bin", h, t)


dataset("d_oov_unsampled", oov_unsampled)


def float_tokens(d):  # the ids written as float32 by a foreign tool, header says 4-byte ids
    h, t = tokens_of(f"{d}/train.bin")
    h = bytearray(h)
    h[12:16] = struct.pack("<I", 4)
    write_tokens(f"{d}/train.bin", bytes(h), t.astype("<f4"))


dataset("d_float32", float_tokens)


def wide_vocab(d):  # a consistent dataset whose vocabulary (300) exceeds the model's (264)
    for split in ("train", "val"):
        patch(f"{d}/{split}.bin", 16, struct.pack("<Q", 300))
    meta_edit(d, vocab_size=300)


dataset("d_wide_vocab", wide_vocab)
dataset("d_meta_vocab", lambda d: meta_edit(d, vocab_size=300))
dataset("d_meta_count", lambda d: meta_edit(d, train_tokens=12345))
dataset("d_meta_json", lambda d: open(f"{d}/meta.json", "w").write('{"format": "meshtrain-dataset", '))
dataset("d_meta_key", lambda d: meta_edit(d, tokenizer=7))
dataset("d_meta_negative", lambda d: meta_edit(d, train_tokens=-5))
dataset("d_meta_eot_vocab", lambda d: meta_edit(d, eot_id=300))  # the vocabulary is 257 ids
dataset("d_meta_add_bos", lambda d: meta_edit(d, add_bos="yes"))
dataset("d_no_val", lambda d: os.remove(f"{d}/val.bin"))
dataset("d_no_meta", lambda d: os.remove(f"{d}/meta.json"))


def train_is_dir(d):
    os.remove(f"{d}/train.bin")
    os.mkdir(f"{d}/train.bin")


dataset("d_train_dir", train_is_dir)


def tiny(d):  # 10 train tokens: no window of seq_len + 1 = 33
    h, t = tokens_of(f"{d}/train.bin")
    h = bytearray(h)
    h[24:32] = struct.pack("<Q", 10)
    write_tokens(f"{d}/train.bin", bytes(h), t[:10])
    meta_edit(d, train_tokens=10)


dataset("d_tiny", tiny)
os.makedirs(path("d_empty"), exist_ok=True)
open(path("not_a_dir"), "w").write("a file where a directory belongs\n")

# ---- checkpoints ------------------------------------------------------------------------


def checkpoint(name, edit=None):
    p = path(name)
    shutil.copy(good_ckpt, p)
    if edit:
        with h5py.File(p, "r+") as f:
            edit(f)
    return p


def poke(ds, value, index=0):
    # The checksum is rewritten too: these files test the non-finite check behind it (a
    # file damaged without a new checksum is refused by the checksum first).
    def edit(f):
        a = f[ds][...]
        a.reshape(-1)[index] = value
        f[ds][...] = a
        restamp(f, ds)
    return edit


def attr(key, value):
    return lambda f: f.attrs.modify(key, np.int64(value))


checkpoint("c_nan_model.h5", poke("model/transformer.wte.weight", np.nan, 1000))
checkpoint("c_inf_model.h5", poke("model/transformer.h.1.mlp.c_proj.weight", np.inf, 77))
checkpoint("c_nan_bias.h5", poke("model/transformer.ln_f.bias", np.nan, 63))
checkpoint("c_inf_exp_avg.h5", poke("optim/exp_avg/transformer.h.0.attn.c_attn.weight", -np.inf, 5))
checkpoint("c_nan_exp_avg_sq.h5", poke("optim/exp_avg_sq/transformer.wpe.weight", np.nan, 4095))
checkpoint("c_step_negative.h5", attr("step", -5))
checkpoint("c_step_huge.h5", attr("step", 1 << 40))
# The counters are uint64 attributes: -1 written through them is 2^64 - 1, a wrapped counter.
checkpoint("c_cursor_wrapped.h5", lambda f: f.attrs.modify("data_cursor", np.uint64(2**64 - 1)))
checkpoint("c_tokens_wrapped.h5", lambda f: f.attrs.modify("tokens_seen", np.uint64(2**64 - 64)))
checkpoint("c_updates_above_step.h5", attr("optimizer_updates", 9))
checkpoint("c_skipped_negative.h5", attr("skipped_steps", -1))
checkpoint("c_no_step.h5", lambda f: f.attrs.__delitem__("step"))
checkpoint("c_version.h5", attr("format_version", 99))
checkpoint("c_format_name.h5", lambda f: f.attrs.modify("format", "someone-else"))
checkpoint("c_model_attr.h5", lambda f: f["model"].attrs.modify("d_model", np.int64(128)))
checkpoint("c_model_inconsistent.h5", lambda f: f["model"].attrs.modify("n_layers", np.int64(-2)))
checkpoint("c_missing.h5", lambda f: f.__delitem__("optim/exp_avg/transformer.h.1.mlp.c_fc.weight"))


def reshape(f):
    del f["model/transformer.ln_f.weight"]
    f.create_dataset("model/transformer.ln_f.weight", data=np.zeros(65, np.float32))


checkpoint("c_shape.h5", reshape)


def retype(f):
    del f["optim/exp_avg_sq/transformer.ln_f.bias"]
    f.create_dataset("optim/exp_avg_sq/transformer.ln_f.bias", data=np.zeros(64, np.float64))


checkpoint("c_dtype.h5", retype)


def damaged_chunk(name, ds, which, **filters):
    """A copy whose dataset `ds` is rewritten chunked (16 rows a chunk) through HDF5 filters
    (a tool such as h5repack may do that to a checkpoint), then one byte of its chunk
    `which` (0 = first, -1 = last) flipped on disk: H5Dread itself fails (a Fletcher32
    checksum that does not match, or data that does not decompress) before meshtrain
    sees any value. The tensor's values and crc32c attribute are those of the good file."""
    p = checkpoint(name)
    with h5py.File(p, "r+") as f:
        a, attrs = f[ds][...], dict(f[ds].attrs)
        del f[ds]
        chunks = (min(16, a.shape[0]),) + a.shape[1:]
        d = f.create_dataset(ds, data=a, chunks=chunks, **filters)
        for k, v in attrs.items():
            d.attrs[k] = v
    with h5py.File(p, "r") as f:
        sid = f[ds].id
        info = sid.get_chunk_info(sid.get_num_chunks() - 1 if which < 0 else which)
        offset, size = info.byte_offset, info.size
    with open(p, "r+b") as f:
        f.seek(offset + size // 2)
        b = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    return p


damaged_chunk("c_fletcher_wte_first.h5", "model/transformer.wte.weight", 0, fletcher32=True)
damaged_chunk("c_fletcher_wte_last.h5", "model/transformer.wte.weight", -1, fletcher32=True)
damaged_chunk("c_fletcher_exp_avg.h5", "optim/exp_avg/transformer.h.1.mlp.c_fc.weight", -1, fletcher32=True)
damaged_chunk("c_deflate_proj.h5", "model/transformer.h.0.attn.c_proj.weight", 0, compression="gzip")
shutil.copy(good_ckpt, path("c_truncated.h5"))
os.truncate(path("c_truncated.h5"), os.path.getsize(good_ckpt) // 2)
open(path("c_garbage.h5"), "wb").write(np.random.default_rng(7).bytes(5000))
open(path("c_empty.h5"), "wb").close()
with h5py.File(path("c_foreign.h5"), "w") as f:
    f["x"] = np.arange(4)

# Checkpoint directories whose `latest` is damaged, and one with no checkpoint at all.
for name, text in [("k_latest_empty", ""), ("k_latest_dangling", "step_00000099.h5\n"),
                   ("k_latest_path", "../c_nan_model.h5\n")]:
    os.makedirs(path(name), exist_ok=True)
    open(path(name, "latest"), "w").write(text)
os.makedirs(path("k_none"), exist_ok=True)
# ... and whose `latest` holds more than one name: a second line, bytes after the newline, NULs
# after the name (a torn write). Each beside a good checkpoint its first line names, so that
# reading the first line alone would resume it.
for name, text in [("k_latest_lines", b"step_00000002.h5\nstep_00000001.h5\n"),
                   ("k_latest_trailing", b"step_00000002.h5\n\x00\x01garbage"),
                   ("k_latest_nul", b"step_00000002.h5\x00\x00\x00\x00")]:
    os.makedirs(path(name), exist_ok=True)
    shutil.copy(good_ckpt, path(name, "step_00000002.h5"))
    open(path(name, "latest"), "wb").write(text)

# Named pipes (FIFOs) where meshtrain reads a file by name: opening one for reading waits for
# a writer that never comes, so each must be refused before it is opened (file_io.hpp).
os.makedirs(path("k_latest_fifo"), exist_ok=True)
shutil.copy(good_ckpt, path("k_latest_fifo", "step_00000002.h5"))
os.mkfifo(path("k_latest_fifo", "latest"))
dataset("d_meta_fifo", lambda d: (os.remove(f"{d}/meta.json"), os.mkfifo(f"{d}/meta.json")))
dataset("d_train_fifo", lambda d: (os.remove(f"{d}/train.bin"), os.mkfifo(f"{d}/train.bin")))
for name in ("fifo.txt", "fifo.ini", "fifo.json", "fifo.gguf", "fifo.safetensors"):
    os.mkfifo(path(name))
# ... and where it appends: an output.dir whose metrics.jsonl is a FIFO or a directory.
os.makedirs(path("o_metrics_fifo"), exist_ok=True)
os.mkfifo(path("o_metrics_fifo", "metrics.jsonl"))
os.makedirs(path("o_metrics_dir", "metrics.jsonl"), exist_ok=True)
# prepare's --output: a directory of the user's text inside the input (data/wiki), and one
# holding another tool's dataset (nanoGPT's train.bin/val.bin: raw uint16 ids, no header;
# a meta.json that is not meshtrain's). Neither may be touched.
for name, text in (("a.txt", "alpha\n"), ("wiki/b.txt", "beta\n"), ("wiki/c.txt", "gamma\n"), ("wiki/d.txt", "delta\n")):
    os.makedirs(os.path.dirname(path("p_data", name)), exist_ok=True)
    open(path("p_data", name), "w").write(text)
os.makedirs(path("p_nanogpt"), exist_ok=True)
for name in ("train.bin", "val.bin"):
    np.arange(1000, dtype="<u2").tofile(path("p_nanogpt", name))
os.makedirs(path("p_foreign_meta"), exist_ok=True)
open(path("p_foreign_meta", "meta.json"), "w").write('{"vocab_size": 50257, "itos": {}}\n')
# A text file larger than the 1 GiB bound on files read whole (sparse: no disk space).
with open(path("big.txt"), "wb") as f:
    f.truncate((1 << 30) + 1)
os.makedirs(path("k_nan"), exist_ok=True)
shutil.copy(path("c_nan_model.h5"), path("k_nan", "step_00000002.h5"))
open(path("k_nan", "latest"), "w").write("step_00000002.h5\n")

# ---- safetensors ------------------------------------------------------------------------


def st_read(p):
    raw = open(p, "rb").read()
    n = struct.unpack_from("<Q", raw)[0]
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def st_write(p, header, body, raw_header=None):
    hb = raw_header if raw_header is not None else json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        f.write(body)


def st_tensors(header, body):
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], body[b:e])
    return out


def st_from_tensors(p, tensors, metadata=None):
    header, body, off = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        body += data
        off += len(data)
    st_write(p, header, body)


H, BODY = st_read(good_st)
T = st_tensors(H, BODY)


def st_variant(name, edit):
    t = {k: list(v) for k, v in T.items()}
    edit(t)
    st_from_tensors(path(name), {k: tuple(v) for k, v in t.items()})


def st_poke(key, value, index=0, dtype="F32"):
    def edit(t):
        a = np.frombuffer(t[key][2], "<f4").copy()
        a[index] = value
        if dtype == "F32":
            t[key][2] = a.tobytes()
        elif dtype == "BF16":
            t[key][0] = "BF16"
            t[key][2] = (a.view("<u4") >> 16).astype("<u2").tobytes()
        elif dtype == "F16":
            t[key][0] = "F16"
            t[key][2] = a.astype("<f2").tobytes()
    return edit


st_variant("s_nan.safetensors", st_poke("transformer.h.0.attn.c_attn.weight", np.nan, 11))
st_variant("s_inf.safetensors", st_poke("transformer.wpe.weight", -np.inf, 3))
st_variant("s_nan_bf16.safetensors", st_poke("transformer.h.1.ln_1.weight", np.nan, 2, "BF16"))
st_variant("s_inf_f16.safetensors", st_poke("transformer.ln_f.bias", 1e6, 0, "F16"))  # overflows F16 to inf


def st_shape(t):
    dtype, shape, data = t["transformer.wpe.weight"]
    t["transformer.wpe.weight"] = [dtype, [32, 128], data]


st_variant("s_shape.safetensors", st_shape)


def st_int(t):
    dtype, shape, data = t["transformer.ln_f.weight"]
    t["transformer.ln_f.weight"] = ["I32", shape, data]


st_variant("s_int_dtype.safetensors", st_int)
st_variant("s_missing.safetensors", lambda t: t.pop("transformer.h.1.attn.c_proj.bias"))


def st_extra(t):
    t["transformer.h.7.mlp.c_fc.weight"] = ["F32", [2, 2], b"\0" * 16]


st_variant("s_extra.safetensors", st_extra)
st_write(path("s_bad_json.safetensors"), None, BODY, raw_header=b'{"transformer.wte.weight": {"dtype": "F32",')
st_write(path("s_not_object.safetensors"), None, BODY, raw_header=b'[1, 2, 3]')
st_write(path("s_bad_utf8.safetensors"), None, BODY, raw_header=b'{"\xff\xfe": {"dtype": "F32", "shape": [1], '
         b'"data_offsets": [0, 4]}}')
with open(path("s_header_len.safetensors"), "wb") as f:  # header length past the end of the file
    f.write(struct.pack("<Q", 1 << 40))
    f.write(b"{}")
open(path("s_short.safetensors"), "wb").write(b"\x05\x00")
shutil.copy(good_st, path("s_truncated.safetensors"))
os.truncate(path("s_truncated.safetensors"), os.path.getsize(good_st) - 1000)
open(path("s_trailing.safetensors"), "wb").write(open(good_st, "rb").read() + b"\0" * 8)


def st_overlap(p):
    h = json.loads(json.dumps(H))
    h["transformer.wpe.weight"]["data_offsets"] = [0, 16384]
    st_write(p, h, BODY)


st_overlap(path("s_overlap.safetensors"))


def st_offsets_past(p):
    h = json.loads(json.dumps(H))
    b, e = h["transformer.ln_f.bias"]["data_offsets"]
    h["transformer.ln_f.bias"]["data_offsets"] = [b, e + 4]
    st_write(p, h, BODY)


st_offsets_past(path("s_offsets_shape.safetensors"))
open(path("s_garbage.safetensors"), "wb").write(np.random.default_rng(3).bytes(3000))
# Directories: none of the expected files; an index that is not JSON; an index naming a
# shard that is missing; a sharded model whose shard holds a NaN.
os.makedirs(path("s_dir_empty"), exist_ok=True)
os.makedirs(path("s_dir_bad_index"), exist_ok=True)
open(path("s_dir_bad_index", "model.safetensors.index.json"), "w").write("{not json")
os.makedirs(path("s_dir_missing_shard"), exist_ok=True)
json.dump({"weight_map": {k: "model-00002-of-00002.safetensors" for k in T}},
          open(path("s_dir_missing_shard", "model.safetensors.index.json"), "w"))
os.makedirs(path("s_dir_nan_shard"), exist_ok=True)
names = sorted(T)
half = len(names) // 2
shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
for shard, keys in shards.items():
    part = {k: T[k] for k in keys}
    if "transformer.h.1.mlp.c_fc.weight" in part:
        dtype, shape, data = part["transformer.h.1.mlp.c_fc.weight"]
        a = np.frombuffer(data, "<f4").copy()
        a[-1] = np.nan
        part["transformer.h.1.mlp.c_fc.weight"] = (dtype, shape, a.tobytes())
    st_from_tensors(path("s_dir_nan_shard", shard), part)
json.dump({"weight_map": {k: s for s, ks in shards.items() for k in ks}},
          open(path("s_dir_nan_shard", "model.safetensors.index.json"), "w"))

# ---- config files -----------------------------------------------------------------------
open(path("bad_line.ini"), "w").write("[train]\nthis line has no equals sign\n")
open(path("unknown_key.ini"), "w").write("[train]\nstepz = 3\n")
open(path("unknown_section.ini"), "w").write("[trian]\nsteps = 3\n")
open(path("nan_lr.ini"), "w").write("[train]\nlr = nan\n")
open(path("twice.ini"), "w").write("[train]\nsteps = 3\nsteps = 4\n")
open(path("binary.ini"), "wb").write(b"\x00\x01\x02\xff\xfe[train]\n")
# ---- instruction / chat JSONL (prepare --format alpaca|chat) --------------------------------
good_chat = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
open(path("j_good_chat.jsonl"), "w").write(good_chat + "\n")
open(path("j_bad_json.jsonl"), "w").write(good_chat + '\n{"messages": [{"role": "user", "content": "hi"}\n')
open(path("j_no_output.jsonl"), "w").write(json.dumps({"instruction": "say hi", "input": ""}) + "\n")
# A key given twice: json.loads (and nlohmann) keep the last value silently.
open(path("j_twice.jsonl"), "w").write('{"instruction": "say hi", "input": "", "output": "hi", "output": "bye"}\n')
open(path("j_bad_role.jsonl"), "w").write(
    json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "hello"}]}) + "\n")
open(path("j_content_number.jsonl"), "w").write(
    json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": 5}]}) + "\n")
# ---- preference JSONL (prepare --format preference) -------------------------------------------
def pref(name, **record):
    open(path(name), "w").write(json.dumps(record) + "\n")
pref("p_no_rejected.jsonl", prompt="hi", chosen="hello")
pref("p_empty_chosen.jsonl", prompt="hi", chosen="  ", rejected="go away")
pref("p_long_prompt.jsonl", prompt="word " * 200, chosen="yes", rejected="no")
pref("p_long_response.jsonl", prompt="hi", chosen="hello " * 40, rejected="no")
pref("p_user_response.jsonl", prompt="hi", chosen=[{"role": "user", "content": "hello"}], rejected="no")
pref("p_two_responses.jsonl", prompt="hi", rejected="no",
     chosen=[{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}])
pref("p_both_prompts.jsonl", prompt="hi", messages=[{"role": "user", "content": "hi"}], chosen="a", rejected="b")
pref("p_no_prompt.jsonl", chosen="a", rejected="b")
pref("p_ends_assistant.jsonl", chosen="a", rejected="b",
     messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
pref("p_same.jsonl", prompt="hi", chosen="same", rejected="same")
pref("p_good.jsonl", prompt="hi", chosen="hello", rejected="go away")
print(f"fixtures written to {out}")
