#!/usr/bin/env python3
"""Lists the C++ functions of lib/, tools/ and runtime/ longer than N lines
(default 100), longest first: the table issue 33 asks for before and after.

A function is a definition that starts a line (at most one level of
indentation, a member defined in its class) and ends with '{'; its length
runs to the matching '}', lambdas inside included. A heuristic on the text,
not a parser: comments and strings with braces are skipped.

usage: scripts/function-lengths.py [--min N] [DIR...]"""

import argparse
import os
import re
import sys

START = re.compile(r"^( {0,2})(?!(?:if|for|while|switch|return|else|do|"
                   r"namespace|struct|class|enum|union|extern)\b)"
                   r"[A-Za-z_~][\w:<>,*&\s~\[\]]*\([^;]*\)\s*"
                   r"(?:const\s*)?(?:override\s*)?(?:->\s*[\w:<>]+\s*)?\{\s*$")


def strip(line):
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(?:\\.|[^'\\])*'", "''", line)
    return line.split("//")[0]


def functions(path):
    lines = open(path, errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        text = lines[i]
        # A signature may span lines: join up to 6 lines back to the start.
        if strip(text).rstrip().endswith("{"):
            # The signature's first line: the nearest line at most one
            # level in, up to 8 lines back (continuation lines are deeper).
            j = i
            while j > 0 and not re.match(r"^ {0,2}\S", lines[j]) and i - j < 8:
                j -= 1
            head = " ".join(strip(l).strip() for l in lines[j:i + 1])
            if START.match(" " * (len(lines[j]) - len(lines[j].lstrip())) +
                           head):
                depth, k = 0, i
                while k < len(lines):
                    s = strip(lines[k])
                    depth += s.count("{") - s.count("}")
                    if depth == 0:
                        break
                    k += 1
                name = re.search(r"([\w:~]+)\s*\(", head)
                yield (k - j + 1, name.group(1) if name else head[:40], j + 1)
                i = k
        i += 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min", type=int, default=100)
    parser.add_argument("dirs", nargs="*",
                        default=["lib", "tools", "runtime"])
    args = parser.parse_args()
    rows = []
    for d in args.dirs:
        for root, _, files in os.walk(d):
            for f in files:
                if f.endswith((".cpp", ".h", ".cu")):
                    path = os.path.join(root, f)
                    for length, name, line in functions(path):
                        if length > args.min:
                            rows.append((length, name, f"{path}:{line}"))
    rows.sort(key=lambda r: (-r[0], r[2]))
    print(f"{len(rows)} functions over {args.min} lines")
    for length, name, where in rows:
        print(f"{length:5d}  {name}  {where}")


if __name__ == "__main__":
    sys.exit(main())
