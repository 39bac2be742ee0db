#!/usr/bin/env python3
"""Gradient accumulation on the CPU runtime: step time and arena of N
micro-batches against one batch of the same effective size.

A small GPT (4 layers, h 128, s 128, effective batch 8, f32, no dropout);
for N = 1, 2, 4, 8 micro-batches (train-grad-accum steps=N, unrolled),
trainmem-run trains --steps steps and reports tokens/s and the arena. The
ratio is the time of an accumulated step over the time of one whole-batch
step, measured in one run.

Usage: bench/grad_accum.py [--build build] [--steps 20] [--threads 2]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

MODEL = ["--preset", "tiny", "--layers", "4", "--hidden", "128", "--heads",
         "4", "--ffn", "512", "--seq", "128", "--positions", "128",
         "--batch", "8", "--dropout", "0"]


def main():
    parser = argparse.ArgumentParser()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    parser.add_argument("--build", default=os.path.join(root, "build"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    data = os.path.join(root, "data", "kjv-genesis-exodus.txt")
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gpt.mlir")
        subprocess.run([os.path.join(bin_dir, "trainmem-model"), *MODEL,
                        "-o", model], check=True)
        rows = []
        for n in [1, 2, 4, 8]:
            run = subprocess.run(
                [os.path.join(bin_dir, "trainmem-run"), model, "--data", data,
                 "--steps", str(args.steps), "--threads", str(args.threads),
                 "--grad-accum", f"steps={n}"],
                check=True, capture_output=True, text=True)
            rate = float(re.findall(r"(\d+) tok/s", run.stderr)[-1])
            arena = int(re.search(r"planned (\d+) B", run.stdout).group(1))
            loss = re.search(r"last ([0-9.]+)", run.stdout).group(1)
            rows.append((n, rate, arena, loss))
    base_rate = rows[0][1]
    print(f"{'micro-batches':>13} {'tok/s':>8} {'time ratio':>10} "
          f"{'arena (B)':>12} {'last loss':>9}")
    for n, rate, arena, loss in rows:
        print(f"{n:>13} {rate:>8.0f} {base_rate / rate:>10.2f} {arena:>12} "
              f"{loss:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
