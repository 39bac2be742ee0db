"""Rewrites one field of a trainmem checkpoint (version 02) and gives it a
valid checksum again, so that the runner's field checks, not its checksum,
must catch the inconsistency.

usage: edit_checkpoint.py IN OUT FIELD VALUE
  FIELD: step | tensors | role-length | byte-count | rank | dim | first-value
  (role-length, byte-count, rank and dim are those of the first tensor;
  first-value: the first 4 bytes of its values, e.g. 0x7fc00000, an f32 NaN)
"""
import struct
import sys


def fnv1a(data):
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    src, dst, field, value = sys.argv[1:5]
    value = int(value, 0) & 0xFFFFFFFFFFFFFFFF
    data = bytearray(open(src, "rb").read()[:-8])
    assert data[:8] == b"TMCKPT02"
    # magic, step, seed, data bytes, data hash, count
    offsets = {"step": 8, "tensors": 40}
    pos = 48
    role_len = struct.unpack_from("<Q", data, pos)[0]
    offsets["role-length"] = pos
    pos += 8 + role_len
    for _ in range(2):  # key, dtype
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
    offsets["rank"] = pos
    rank = struct.unpack_from("<Q", data, pos)[0]
    offsets["dim"] = pos + 8
    offsets["byte-count"] = pos + 8 + 8 * rank
    if field == "first-value":
        struct.pack_into("<I", data, offsets["byte-count"] + 8, value & 0xFFFFFFFF)
    else:
        struct.pack_into("<Q", data, offsets[field], value)
    data += struct.pack("<Q", fnv1a(data))
    open(dst, "wb").write(data)


main()
