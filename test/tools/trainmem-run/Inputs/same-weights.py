"""Compares the f32 tensors of two trainmem checkpoints: one rank's
(DIR/checkpoint.bin) or a sharded one's (DIR/manifest: the shards joined in
rank order into whole tensors, padding dropped). Every f32 tensor both
hold must agree within a relative tolerance of its largest magnitude, or
of 1e-3 for a tensor that stays below it: one whose exact gradient is 0
(the attention keys' bias, which softmax cancels) holds rounding noise
only, which no two reduction orders share. Prints the worst and exits 1
past the tolerance.
usage: same-weights.py DIR_A DIR_B TOLERANCE"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_file import read_file  # noqa: E402


def whole_tensors(directory):
    """name -> list of floats of the whole tensor."""
    manifest = os.path.join(directory, "manifest")
    if not os.path.exists(manifest):
        return {name: list(struct.unpack(f"<{len(raw) // 4}f", raw))
                for name, (dtype, shape, raw) in
                read_file(os.path.join(directory, "checkpoint.bin")).items()
                if dtype == "f32"}
    lines = open(manifest).read().split("\n")
    whole_shapes, shards = {}, []
    for line in lines:
        fields = line.split()
        if fields[:1] == ["tensor"]:
            dims = [] if fields[4] == "scalar" else \
                [int(d) for d in fields[4].split("x")]
            elements = 1
            for d in dims:
                elements *= d
            whole_shapes[fields[1]] = (fields[3] != fields[4], elements)
        elif fields[:1] == ["shard"]:
            shards.append(read_file(os.path.join(directory, fields[2])))
    result = {}
    for name, (sharded, elements) in whole_shapes.items():
        dtype = shards[0][name][0]
        if dtype != "f32":
            continue
        raw = b"".join(s[name][2] for s in shards) if sharded \
            else shards[0][name][2]
        values = struct.unpack(f"<{len(raw) // 4}f", raw)
        result[name] = list(values[:elements])
    return result


a, b = whole_tensors(sys.argv[1]), whole_tensors(sys.argv[2])
tolerance = float(sys.argv[3])
common = sorted(set(a) & set(b))
if not common:
    sys.exit("the checkpoints share no f32 tensor")
worst, where = 0.0, ""
for name in common:
    if len(a[name]) != len(b[name]):
        sys.exit(f"{name}: {len(a[name])} and {len(b[name])} elements")
    scale = max(max(abs(v) for v in a[name]), 1e-3)
    diff = max(abs(x - y) for x, y in zip(a[name], b[name])) / scale
    if diff > worst:
        worst, where = diff, name
print(f"{len(common)} tensors, worst relative difference {worst:.2e}"
      f"{' (' + where + ')' if where else ''}")
if worst > tolerance:
    print(f"FAIL: more than {tolerance:.0e}")
    sys.exit(1)
