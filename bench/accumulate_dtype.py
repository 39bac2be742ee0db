#!/usr/bin/env python3
"""The precision cost of 16-bit gradient accumulators, over 300 steps.

train-grad-accum{accumulate-dtype=bf16} sums a bf16 model's micro-batch
gradients in bf16 instead of f32 (half the accumulators' bytes). This
trains the tiny GPT (2 layers, h 64, s 64, effective batch 16, no dropout)
on the shipped corpus for --steps steps, the same seed and batches, with N
micro-batches (N = 4 and 16) three ways:

  f32       the model in f32, f32 sums (the reference)
  bf16/f32  the model in bf16, f32 sums (what 16-bit training costs)
  bf16/bf16 the model in bf16, bf16 sums (what the accumulators add)

and prints, per N: the mean loss of the last 50 steps, its relative
difference to the f32 reference and to bf16/f32, the largest per-step loss
difference between bf16/bf16 and bf16/f32, and each run's arena (the
accumulators' bytes halve).

Usage: bench/accumulate_dtype.py [--build build] [--steps 300] [--threads 2]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

MODEL = ["--preset", "tiny", "--batch", "16"]


def read_losses(path):
    losses = []
    with open(path) as f:
        for line in f:
            step, loss = line.split()
            losses.append(float(loss))
    return losses


def main():
    parser = argparse.ArgumentParser()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    parser.add_argument("--build", default=os.path.join(root, "build"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--window", type=int, default=50)
    args = parser.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    data = os.path.join(root, "data", "kjv-genesis-exodus.txt")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for dtype in ["f32", "bf16"]:
            models[dtype] = os.path.join(tmp, f"{dtype}.mlir")
            subprocess.run([os.path.join(bin_dir, "trainmem-model"), *MODEL,
                            "--dtype", dtype, "-o", models[dtype]],
                           check=True)
        for n in [4, 16]:
            runs = {}
            for name, model, sums in [("f32", "f32", "f32"),
                                      ("bf16/f32", "bf16", "f32"),
                                      ("bf16/bf16", "bf16", "bf16")]:
                log = os.path.join(tmp, f"{n}-{model}-{sums}.loss")
                run = subprocess.run(
                    [os.path.join(bin_dir, "trainmem-run"), models[model],
                     "--data", data, "--steps", str(args.steps),
                     "--threads", str(args.threads), "--grad-accum",
                     f"steps={n} accumulate-dtype={sums}",
                     "--loss-log", log],
                    check=True, capture_output=True, text=True)
                arena = re.search(r"arena: planned (\d+) B, measured peak "
                                  r"(\d+) B", run.stdout)
                if arena.group(1) != arena.group(2):
                    print(f"{name} N={n}: measured arena {arena.group(2)} B "
                          f"is not the plan {arena.group(1)} B")
                    return 1
                runs[name] = (read_losses(log), int(arena.group(1)))
            rows.append((n, runs))
    w = args.window
    print(f"{args.steps} steps, tiny GPT, effective batch 16; loss = mean of "
          f"the last {w} steps")
    print(f"{'N':>3} {'run':>10} {'loss':>8} {'vs f32':>9} {'vs bf16/f32':>12} "
          f"{'max step diff':>14} {'arena (B)':>10}")
    for n, runs in rows:
        ref = sum(runs["f32"][0][-w:]) / w
        mixed = sum(runs["bf16/f32"][0][-w:]) / w
        for name, (losses, arena) in runs.items():
            mean = sum(losses[-w:]) / w
            step_diff = ""
            if name == "bf16/bf16":
                step_diff = "%.2e" % max(
                    abs(a - b) for a, b in zip(losses, runs["bf16/f32"][0]))
            print(f"{n:>3} {name:>10} {mean:>8.4f} {(mean - ref) / ref:>+9.2%} "
                  f"{(mean - mixed) / mixed:>+12.2%} {step_diff:>14} "
                  f"{arena:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
