"""CRC-32C in plain Python, from its definition (reflected polynomial 0x82F63B78, initial
value and final xor 0xFFFFFFFF), independent of meshtrain's implementation: the checksum a
checkpoint stores for each tensor is crc32c(dataset[...].astype('<f4').tobytes()).

    crc32c(b"123456789") == 0xE3069283

`restamp(f, name)` recomputes a dataset's checksum after a test edited its values on
purpose (so that the edit reaches the check behind the checksum)."""

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    t = _TABLE
    for b in data:
        c = (c >> 8) ^ t[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def tensor_crc(dataset) -> int:
    """The CRC-32C of an h5py dataset's values as stored (little-endian float32, row-major)."""
    return crc32c(dataset[...].astype("<f4").tobytes())


def restamp(f, name):
    """Rewrites the `crc32c` attribute of dataset `name` of an open h5py file (if it has one)."""
    import numpy as np
    ds = f[name]
    if "crc32c" in ds.attrs:
        ds.attrs.modify("crc32c", np.uint32(tensor_crc(ds)))


assert crc32c(b"123456789") == 0xE3069283
