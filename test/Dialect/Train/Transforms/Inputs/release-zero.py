"""Prints, for ZeRO stages 1-3 over 4 ranks with 25 MB buckets, the step's
peak and its gradients live at once without and with
train-release-gradients (the memory report's JSON). usage:
release-zero.py BIN MODEL.mlir"""

import json
import subprocess
import sys

bin_dir, model = sys.argv[1], sys.argv[2]


def report(stage, release):
    passes = ("train-autodiff{clip-norm=0},"
              f"train-zero{{stage={stage} ranks=4 bucket=25000000}}")
    if release:
        passes += ",train-release-gradients"
    out = subprocess.run(
        [f"{bin_dir}/trainmem-opt", model,
         f"--pass-pipeline=builtin.module({passes},"
         "train-memory-report{format=json})", "-o", "/dev/null"],
        check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return r["peak_bytes"], r["most_live_gradients"]


for stage in (1, 2, 3):
    (p0, g0), (p1, g1) = report(stage, False), report(stage, True)
    print(f"stage {stage}: peak {p0} -> {p1} B, "
          f"gradients live at once {g0} -> {g1} B")
