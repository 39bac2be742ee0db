#!/usr/bin/env python3
"""Recompute FLOPs needed to fit a sweep of memory budgets, gpt2-124m.

Runs train-autodiff, then train-remat{policy=budget budget=B} for budgets
from the peak without recompute down past the smallest reachable peak, and
prints, per budget, the measured peak (memory report after
materialization), the recompute FLOPs as a share of the step's, and the
per-layer choices the planner made.

Usage: bench/remat_budget.py [--build build] [--preset gpt2-124m] [--points 8]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    parser.add_argument("--build", default=os.path.join(root, "build"))
    parser.add_argument("--preset", default="gpt2-124m")
    parser.add_argument("--points", type=int, default=8)
    args = parser.parse_args()
    model = os.path.join(args.build, "bin", "trainmem-model")
    opt = os.path.join(args.build, "bin", "trainmem-opt")

    with tempfile.TemporaryDirectory() as tmp:
        step = os.path.join(tmp, "step.mlir")
        subprocess.run(f"{model} --preset {args.preset} | {opt} "
                       f"-train-autodiff -o {step}", shell=True, check=True)

        def report(passes):
            out = subprocess.run([opt, step, *passes,
                                  "-train-memory-report=format=json",
                                  "-o", os.devnull],
                                 capture_output=True, text=True)
            return out

        base = json.loads(report([]).stdout)
        flops = base["flops"]
        step_flops = flops["forward"] + flops["backward"] + flops["optimizer"]
        full = json.loads(report(["-train-remat=policy=full",
                                  "-train-materialize-remat"]).stdout)
        high, low = base["peak_bytes"], full["peak_bytes"]
        print(f"{args.preset}: peak without recompute {high} B, "
              f"with full recompute {low} B")
        print(f"{'budget (B)':>14} {'peak (B)':>14} {'recompute':>10}  choices")
        for i in range(args.points + 1):
            budget = int(high - (high - low * 0.98) * i / args.points)
            out = report([f"-train-remat=policy=budget budget={budget}",
                          "-train-materialize-remat"])
            if out.returncode != 0:
                reason = re.search(r"error: (.*)", out.stderr)
                print(f"{budget:>14} {'-':>14} {'-':>10}  "
                      f"{reason.group(1) if reason else 'failed'}")
                continue
            data = json.loads(out.stdout)
            choices = re.search(r"choices ([^;]*);", out.stderr).group(1)
            counts = {}
            for c in choices.split(", "):
                counts[c] = counts.get(c, 0) + 1
            summary = ", ".join(f"{n}x {c}" for c, n in counts.items())
            share = data["flops"]["recompute"] / step_flops
            print(f"{budget:>14} {data['peak_bytes']:>14} {share:>9.2%}  "
                  f"{summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
