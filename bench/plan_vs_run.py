#!/usr/bin/env python3
"""The planner's figures against the runs of the commands it prints (issue
50): for a model and a set of rows of `trainmem-plan --emit json --all`,
runs each row's `trainmem_run_options` with trainmem-run and reports the
planned peak against the measured arena (they must be equal: the goal is
within 0.1 %), and the predicted step time against the measured one (the
best of the steps after the first), with their ratio and the Spearman rank
correlation of predicted and measured times over the rows.

usage: bench/plan_vs_run.py [--bin build/bin] [--steps 3] [--rows N,...]
                            [--quick] [-- trainmem-plan options]

With `--ranks N` among the plan options, each row runs on N MPI ranks
(mpirun --oversubscribe), its ZeRO rows too.

Without plan options: gpt2-124m at 2 layers, seq 256, bf16, global batch 8,
one rank, `--hardware cpu` (issue 50's example). `--quick` runs a small GPT
instead (hidden 64, vocab 512, seq 64). Rows: by default one of each kind the
space has (micro-batch 1, micro-batch 2, one micro-batch per step;
selective and full recompute; fused attention; 8-bit state; offload of
the states, and with the gradients summed on the host; ZeRO-1 and ZeRO-3 on
more than one rank; tensor and context parallelism,
gradient release and Lion where the plan options search them), chosen from the
table; `--rows` takes row numbers instead."""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                      "data", "kjv-genesis-exodus.txt")
DEFAULT = ["--model", "gpt2-124m", "--layers", "2", "--seq", "256",
           "--global-batch", "8", "--dtype", "bf16", "--hardware", "cpu",
           "--memory", "24GB"]
QUICK = ["--model", "gpt2-124m", "--layers", "2", "--hidden", "64",
         "--heads", "4", "--ffn", "256", "--vocab", "512", "--seq", "64",
         "--global-batch", "8", "--hardware", "cpu", "--memory", "1GB"]


def kinds(candidates):
    """One row of each kind: the first row (in the table's order) that
    matches each description."""
    wanted = [
        ("micro-batch 1", lambda c: c["micro_batch"] == 1 and c["remat"] == "none"),
        ("micro-batch 2", lambda c: c["micro_batch"] == 2 and c["remat"] == "none"),
        ("one micro-batch", lambda c: c["accumulation"] == 1 and c["remat"] == "none"),
        ("selective", lambda c: c["remat"] == "selective"),
        ("full", lambda c: c["remat"] == "full"),
        ("fused attention", lambda c: c["fuse_attention"] and
         c["remat"] == "none"),
        ("8-bit", lambda c: c["eight_bit"] and c["remat"] == "none"),
        ("offload", lambda c: c["offload"] == "states"),
        ("gradients on the host",
         lambda c: c["offload"] == "states+update+gradients"),
        ("ZeRO-1", lambda c: c["zero_stage"] == 1 and c["remat"] == "none"),
        ("ZeRO-3", lambda c: c["zero_stage"] == 3 and c["remat"] == "none"),
        ("tensor-parallel", lambda c: c["tensor_parallel"] > 1 and
         c["remat"] == "none"),
        ("context-parallel", lambda c: c.get("context_parallel", 1) > 1 and
         c["remat"] == "none"),
        ("release", lambda c: c["release_gradients"]),
        ("Lion", lambda c: c["optimizer"] == "lion" and c["remat"] == "none"),
        ("Sophia", lambda c: c["optimizer"] == "sophia" and
         c["remat"] == "none"),
        ("budget", lambda c: c["remat"] == "budget"),
    ]
    plain = {"eight_bit": False, "offload": "none", "fuse_attention": False,
             "fuse_elementwise": False, "tensor_parallel": 1,
             "release_gradients": False, "optimizer": "adamw"}
    rows = []
    for name, match in wanted:
        for c in candidates:
            if "peak_bytes" not in c:
                continue
            base = dict(plain)
            if c.get("zero_stage", -1) > 0 and not name.startswith("ZeRO"):
                continue
            if name == "8-bit":
                base = {"offload": "none", "fuse_attention": False}
            if name in ("offload", "gradients on the host"):
                base = {"eight_bit": False, "fuse_attention": False}
            if name == "fused attention":
                base = {"eight_bit": False, "offload": "none"}
            if name in ("tensor-parallel", "release", "Lion", "Sophia"):
                base = {k: v for k, v in plain.items()
                        if k not in ("tensor_parallel", "release_gradients",
                                     "optimizer")}
            if name == "context-parallel":
                base = {k: v for k, v in plain.items()
                        if k != "fuse_attention"}
            if match(c) and all(c[k] == v for k, v in base.items()):
                rows.append((name, c))
                break
    return rows


def model_command(plan_args, out):
    """trainmem-model's command for the plan's preset options."""
    args, i = [], 0
    keep = {"--model": "--preset", "--layers": "--layers", "--hidden":
            "--hidden", "--heads": "--heads", "--ffn": "--ffn", "--vocab":
            "--vocab", "--seq": "--seq", "--dtype": "--dtype",
            "--kv-heads": "--kv-heads"}
    while i < len(plan_args):
        if plan_args[i] in keep:
            args += [keep[plan_args[i]], plan_args[i + 1]]
        i += 2 if plan_args[i].startswith("--") else 1
    return args + ["-o", out]


def spearman(xs, ys):
    def ranks(values):
        order = sorted(range(len(values)), key=lambda i: values[i])
        r = [0.0] * len(values)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r
    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    if n < 2:
        return float("nan")
    d = sum((a - b) ** 2 for a, b in zip(rx, ry))
    return 1 - 6 * d / (n * (n * n - 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="build/bin")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows", default="")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("plan", nargs="*")
    options = parser.parse_args()
    plan_args = options.plan or (QUICK if options.quick else DEFAULT)
    ranks = int(plan_args[plan_args.index("--ranks") + 1]) \
        if "--ranks" in plan_args else 1
    global_batch = int(plan_args[plan_args.index("--global-batch") + 1])
    out = subprocess.run([f"{options.bin}/trainmem-plan", *plan_args,
                          "--all", "--emit", "json"], capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"trainmem-plan failed: {out.stderr}")
    document = json.loads(out.stdout)
    candidates = document["candidates"]
    best = document.get("best")
    if options.rows:
        numbers = {int(n) for n in options.rows.split(",")}
        rows = [(f"#{c['number']}", c) for c in candidates
                if c["number"] in numbers]
    else:
        rows = kinds(candidates)
    # The planner's best runs too: its measured time against the fastest
    # measured row's.
    if best and all(c["number"] != best for _, c in rows):
        rows += [("planner's best", c) for c in candidates
                 if c["number"] == best]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {}

        def model_for(c):
            """trainmem-model builds one data rank's batch (a tensor group
            shares its batch)."""
            batch = global_batch // (
                ranks // (c["tensor_parallel"] * c.get("context_parallel", 1) *
                          c.get("pipeline_parallel", 1)))
            if batch not in models:
                path = os.path.join(tmp, f"model-{batch}.mlir")
                subprocess.run([f"{options.bin}/trainmem-model",
                                *model_command(plan_args, path), "--batch",
                                str(batch)], check=True)
                models[batch] = path
            return models[batch]
        print("| row | kind | options | planned peak (B) | measured arena (B) "
              "| arena / plan | predicted s | measured s | measured / "
              "predicted |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, c in rows:
            # On N ranks the printed command runs under mpirun; each rank
            # reports its own arena (ZeRO's ranks plan alike), rank 0's
            # line is read.
            launcher = f"mpirun --allow-run-as-root --oversubscribe -np " \
                f"{ranks} " if ranks > 1 else ""
            command = f"{launcher}{options.bin}/trainmem-run {model_for(c)} " \
                f"--data {CORPUS} --steps {options.steps}" \
                f"{' --threads 1' if ranks > 1 else ''}" \
                f"{' ' + c['trainmem_run_options'] if c['trainmem_run_options'] else ''}"
            run = subprocess.run(command, shell=True, capture_output=True,
                                 text=True, env=env)
            text = run.stdout + run.stderr
            arena = re.search(r"arena: planned (\d+) B, measured peak (\d+) B",
                              text)
            # Pipeline stages plan apart: the largest stage's arena is the
            # row's (each rank's line says its own).
            stages = re.findall(r"rank \d+: arena planned (\d+) B, measured "
                                r"peak (\d+) B", text)
            if c.get("pipeline_parallel", 1) > 1 and stages:
                arena = re.match(r"(\d+) (\d+)", " ".join(max(
                    stages, key=lambda s: int(s[1]))))
            timing = re.search(r"step time: best ([0-9.]+) s", text)
            if run.returncode != 0 or not arena:
                print(f"| {c['number']} | {name} | "
                      f"`{c['trainmem_run_options']}` | run failed: "
                      f"{text.strip().splitlines()[-1:]} |")
                continue
            measured = int(arena.group(2))
            planned = c["peak_bytes"]
            seconds = float(timing.group(1)) if timing else float("nan")
            predicted = c["seconds"]["step"]
            results.append((name, planned, measured, predicted, seconds,
                            c["number"]))
            print(f"| {c['number']} | {name} | "
                  f"`{c['trainmem_run_options'].strip() or '(none)'}` | "
                  f"{planned:,} | {measured:,} | {measured / planned:.6f} | "
                  f"{predicted:.3f} | {seconds:.3f} | "
                  f"{seconds / predicted:.2f} |", flush=True)
    if not results:
        sys.exit("no row ran")
    worst = max(abs(m / p - 1) for _, p, m, _, _, _ in results)
    print(f"\npeaks: {sum(p == m for _, p, m, _, _, _ in results)} of "
          f"{len(results)} rows equal to the byte; largest difference "
          f"{worst:.2e} of the plan (goal: 1e-3)")
    times = [(p, s) for _, _, _, p, s, _ in results if s == s]
    if len(times) >= 2:
        rho = spearman([p for p, _ in times], [s for _, s in times])
        ratios = [s / p for p, s in times]
        print(f"step time: measured / predicted from {min(ratios):.2f} to "
              f"{max(ratios):.2f} (goal 0.8-1.25); Spearman {rho:.2f} "
              f"(goal >= 0.9)")
    chosen = [s for _, _, _, _, s, n in results if n == best and s == s]
    if chosen and times:
        fastest = min(s for _, s in times)
        print(f"best: row #{best} measured {chosen[0]:.3f} s, the fastest "
              f"row run {fastest:.3f} s: {chosen[0] / fastest:.3f} of it "
              f"(goal within 1.05)")


if __name__ == "__main__":
    main()
