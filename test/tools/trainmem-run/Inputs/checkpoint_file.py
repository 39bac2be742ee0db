"""Reads a trainmem checkpoint file (version 02, or a rank's shard of
version 03, which records its layout and each tensor's split): the helpers
of the test scripts that look into checkpoints (same-weights.py,
checkpoint-tensors.py)."""

import struct


def read_file(path):
    data = open(path, "rb").read()
    shard = data[:8] == b"TMCKPT03"
    pos = 8 + 8 * 4  # magic, step, seed, data bytes, data hash
    if shard:
        pos += 8 * 4  # rank, ranks, stage, tensor-parallel parts

    def u64():
        nonlocal pos
        (value,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        return value

    def string():
        nonlocal pos
        size = u64()
        value = data[pos:pos + size].decode()
        pos += size
        return value

    count = u64()
    tensors = {}
    for _ in range(count):
        role, key, dtype = string(), string(), string()
        shape = [u64() for _ in range(u64())]
        if shard:
            u64()  # the split dimension + 1, or 0
        size = u64()
        raw = data[pos:pos + size]
        pos += size
        tensors[role + ":" + key] = (dtype, shape, raw)
    return tensors
