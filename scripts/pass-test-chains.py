#!/usr/bin/env python3
"""Counts the trainmem-opt RUN lines of the lit tests, those that chain
two or more train passes (a train-step pipeline counts as a chain) and,
of those, the ones that run a pass on train-autodiff's output made in the
same line (a pass test that depends on train-autodiff's output rather
than on input IR), per directory.
Usage: scripts/pass-test-chains.py [TEST_ROOT] (default: test/)."""
import collections
import glob
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "test")
PASS = re.compile(r"(?<![\w.-])--?(train-[a-z-]+|convert-train-to-runtime)")
REPORTS = {"train-memory-report", "train-cost-report"}
lines = chained = afterAutodiff = 0
by_dir = collections.Counter()
for path in sorted(glob.glob(os.path.join(root, "**", "*"), recursive=True)):
    if not path.endswith((".mlir", ".test")) or "/Inputs/" in path:
        continue
    for line in open(path, errors="replace"):
        run = re.match(r"\s*(//|#)\s*RUN:(.*)", line)
        if not run or "trainmem-opt" not in run.group(2):
            continue
        lines += 1
        passes = [p for p in PASS.findall(run.group(2)) if p not in REPORTS]
        pipeline = re.search(r"pass-pipeline=['\"]?([^'\"]*)", run.group(2))
        if pipeline:
            passes += [p for p in re.findall(r"(train-[a-z-]+)",
                                             pipeline.group(1))
                       if p not in REPORTS]
        if "train-autodiff" in passes and len(passes) >= 2:
            afterAutodiff += 1
        if "train-step" in passes or len(passes) >= 2:
            chained += 1
            by_dir[os.path.relpath(os.path.dirname(path), root)] += 1
print(f"{lines} trainmem-opt RUN lines, {chained} chain two or more "
      f"passes, {afterAutodiff} of them run another pass on train-autodiff's "
      f"output made in the test")
for directory, count in by_dir.most_common():
    print(f"  {count:4d} {directory}")
