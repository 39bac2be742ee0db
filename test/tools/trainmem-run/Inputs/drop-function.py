"""Copies an MLIR module from stdin to stdout without the function NAME
(a top-level `func.func @NAME` and its body, as trainmem-opt prints them).

usage: drop-function.py NAME < in.mlir > out.mlir"""

import sys


def main():
    name = sys.argv[1]
    lines = sys.stdin.read().split("\n")
    out, skipping = [], False
    for line in lines:
        if line.startswith(f"  func.func @{name}("):
            skipping = True
            continue
        if skipping:
            if line == "  }":
                skipping = False
            continue
        out.append(line)
    if skipping:
        sys.exit(f"@{name} does not end")
    sys.stdout.write("\n".join(out))


main()
