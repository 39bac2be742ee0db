#!/usr/bin/env python3
"""ZeRO with gradient accumulation and recompute, composed (issue 32, item 3).

Llama-2 70B on 8 ranks at sequence 8192, micro-batch 1 x 4 accumulation
steps, fused attention, selective and full recompute, ZeRO stages 2 and 3,
each with `accumulate=micro-batch` (train-zero's default: each
micro-batch's gradients reduce-scattered into f32 shards, 4 Psi / N bytes
per rank) and `accumulate=full` (full f32 accumulators, 4 Psi bytes,
reduce-scattered once after the loop). Each configuration is train-step's
pipeline (trainmem-run's: the loop unrolled, as it runs) and the memory
report's JSON: the per-rank peak and its categories at the peak (GB = 1e9
B), and the ratio of each micro-batch row's peak to its `full` twin's,
measured in the same run.

Usage: bench/zero3_accum.py [--build build] [--layers 80]
"""
import argparse
import json
import os
import subprocess
import sys

CATEGORIES = ["weights", "gradients", "optimizer", "gathered", "activations",
              "temporaries"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--layers", type=int, default=80,
                        help="llama2-70b has 80; fewer for a quick look")
    args = parser.parse_args()
    binary = lambda name: os.path.join(args.build, "bin", name)
    model = subprocess.run(
        [binary("trainmem-model"), "--preset", "llama2-70b", "--layers",
         str(args.layers), "--seq", "8192", "--batch", "4"],
        check=True, capture_output=True).stdout
    print(f"llama2-70b ({args.layers} layers), seq 8192, 8 ranks, micro-batch "
          "1 x 4, fused attention, bf16 with f32 AdamW state; per rank, GB")
    header = ["remat", "stage", "accumulate", "peak"] + CATEGORIES
    print("| " + " | ".join(header) + " | peak / full's |")
    print("|" + "---|" * (len(header) + 1))
    for remat in ["selective", "full"]:
        for stage in [2, 3]:
            peaks = {}
            rows = []
            for accumulate in ["micro-batch", "full"]:
                pipeline = (
                    "builtin.module(train-step{fuse-attention=true "
                    f'remat="policy={remat}" grad-accum="steps=4" '
                    f'zero="stage={stage} ranks=8 accumulate={accumulate}"}},'
                    "train-memory-report{format=json})")
                report = json.loads(subprocess.run(
                    [binary("trainmem-opt"), "--pass-pipeline=" + pipeline,
                     "-o", "/dev/null"], input=model, check=True,
                    capture_output=True).stdout)
                peaks[accumulate] = report["peak_bytes"]
                at = report["at_peak"]
                rows.append([remat, str(stage), accumulate,
                             f"{report['peak_bytes'] / 1e9:.2f}"] +
                            [f"{at.get(c, 0) / 1e9:.2f}" for c in CATEGORIES])
            for row in rows:
                ratio = peaks[row[2]] / peaks["full"]
                print("| " + " | ".join(row) + f" | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
