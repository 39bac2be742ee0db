"""Lists the tensors of a trainmem checkpoint file (version 02), one line
each: 'role:key dtype shape'.

usage: checkpoint-tensors.py CHECKPOINT"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_file import read_file  # noqa: E402

for name, (dtype, shape, _) in read_file(sys.argv[1]).items():
    print(f"{name} {dtype} {'x'.join(map(str, shape)) or 'scalar'}")
