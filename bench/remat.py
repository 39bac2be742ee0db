#!/usr/bin/env python3
"""Activation checkpointing on the CPU runtime: memory saved vs predicted,
time spent vs recompute FLOPs.

For a small GPT (4 layers, h 128, s 128, b 8, f32, dropout 0.1) and each
policy (none, selective, full), in one run:
  - the memory report's prediction (train-memory-report JSON): arena plan
    and FLOPs per phase, recompute included;
  - trainmem-run for --steps steps: measured arena peak and tokens/s.
Reports the measured arena drop against the predicted one (goal: within the
plan's 5%) and the step-time rise against the recompute FLOP share (goal:
rise <= share + 5 points).

Usage: bench/remat.py [--build build] [--steps 30] [--threads 2]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

AUTODIFF = "lr=3e-3 weight-decay=0.0 clip-norm=1.0"
MODEL = ["--preset", "tiny", "--layers", "4", "--hidden", "128", "--heads",
         "4", "--ffn", "512", "--seq", "128", "--positions", "128",
         "--batch", "8", "--dropout", "0.1"]


def main():
    parser = argparse.ArgumentParser()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    parser.add_argument("--build", default=os.path.join(root, "build"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    data = os.path.join(root, "data", "kjv-genesis-exodus.txt")

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gpt.mlir")
        subprocess.run([os.path.join(bin_dir, "trainmem-model"), *MODEL,
                        "-o", model], check=True)
        for policy in ["", "policy=selective", "policy=full"]:
            passes = [f"-train-autodiff={AUTODIFF}"]
            if policy:
                passes += [f"-train-remat={policy}", "-train-materialize-remat"]
            report = subprocess.run(
                [os.path.join(bin_dir, "trainmem-opt"), model, *passes,
                 "-train-memory-report=format=json", "-o", os.devnull],
                check=True, capture_output=True, text=True).stdout
            report = json.loads(report)
            run = subprocess.run(
                [os.path.join(bin_dir, "trainmem-run"), model, "--data", data,
                 "--steps", str(args.steps), "--threads", str(args.threads),
                 "--remat", policy],
                check=True, capture_output=True, text=True)
            measured = int(re.search(r"measured peak (\d+) B", run.stdout).group(1))
            rate = float(re.findall(r"(\d+) tok/s", run.stderr)[-1])
            flops = report["flops"]
            step = flops["forward"] + flops["backward"] + flops["optimizer"]
            rows[policy or "none"] = dict(
                plan=report["plan"]["arena_bytes"], measured=measured,
                rate=rate, share=flops["recompute"] / step)

    base = rows["none"]
    print(f"{'policy':<10} {'plan (B)':>10} {'measured (B)':>12} "
          f"{'tok/s':>8} {'recompute':>9} {'drop pred.':>11} "
          f"{'drop meas.':>11} {'meas/pred':>9} {'time rise':>9}")
    ok = True
    for name, row in rows.items():
        predicted = base["plan"] - row["plan"]
        measured = base["measured"] - row["measured"]
        ratio = measured / predicted if predicted else 1.0
        rise = base["rate"] / row["rate"] - 1.0
        print(f"{name:<10} {row['plan']:>10} {row['measured']:>12} "
              f"{row['rate']:>8.0f} {row['share']:>8.1%} {predicted:>11} "
              f"{measured:>11} {ratio:>9.3f} {rise:>+8.1%}")
        if name != "none":
            ok &= abs(ratio - 1.0) <= 0.05 and rise <= row["share"] + 0.05
    print("goals met" if ok else "goals NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
