"""Lists the tensors of a trainmem checkpoint file (version 02), one line
each: 'role:key dtype shape'.

usage: checkpoint-tensors.py CHECKPOINT"""

import struct
import sys


def main():
    data = open(sys.argv[1], "rb").read()
    pos = 8 + 8 * 4  # magic, step, seed, data bytes, data hash

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

    for _ in range(u64()):
        role, key, dtype = string(), string(), string()
        shape = [u64() for _ in range(u64())]
        size = u64()
        pos += size
        print(f"{role}:{key} {dtype} {'x'.join(map(str, shape)) or 'scalar'}")


main()
