#!/usr/bin/env python3
"""Benchmark of train-tensor-parallel on this machine's CPU.

A small GPT (4 layers, hidden 256, 4 heads, f32, batch 4 x 128 tokens, no
dropout, AdamW without clipping) trained for --steps steps by one rank and
by t = 2 ranks (mpirun -np 2, --tensor-parallel size=2), each rank on
--threads threads:

- the step time (median after the first) of t = 2 relative to one rank on
  as many threads as one of its ranks and on as many as both (t · threads:
  the same cores);
- each rank's planned and measured arena peak, against one rank's;
- the bytes each rank sends per step, as the runtime counts them, against
  the analysis's figure and against Megatron's: per layer two all-reduces
  of s·b·h forward and two backward, a ring all-reduce sending
  2(t-1)/t of its buffer: 4 · layers · 2(t-1)/t · s·b·h · 4 B; and the
  vocabulary's: the embedding's lookups summed and the head's input
  gradient (two all-reduces of s·b·h), the parallel cross-entropy's rows'
  maxima, sums of exponentials and target logits (three of b·s);
- the same with sequence parallelism (--tensor-parallel "size=2
  sequence-parallel=true"), its bytes against Korthikanti et al.'s
  all-gathers and reduce-scatters: per layer two of each forward, their
  conjugates backward and the split parts' inputs gathered again for the
  weight gradients (Megatron's extra all-gather), 10 · (t-1)/t · s·b·h · 4
  B, and outside the layers the embedding's lookups reduce-scattered and
  their gradient gathered, the position rows' piece's gradient gathered,
  the head's input gathered, gathered again in the backward and its
  gradient reduce-scattered, the norms' whole parameters' gradients
  summed over the group (f: ring all-reduces sending 2(t-1)·ceil(n/t)
  elements) and the cross-entropy's three all-reduces of b·s;
- the largest relative difference of the losses (one rank vs t = 2).

Usage: bench/tensor_parallel.py [--build build] [--steps 10] [--threads 1]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

LAYERS, HIDDEN, HEADS, BATCH, SEQ = 4, 256, 4, 4, 128


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{result.stderr}")
    return result.stdout + result.stderr


def median_step(text):
    m = re.search(r"step time: best [0-9.e-]+ s, median ([0-9.e-]+) s", text)
    return float(m.group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if not shutil.which("mpirun"):
        sys.exit("mpirun is not installed")
    bin_dir = os.path.join(args.build, "bin")
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                        "data", "kjv-genesis-exodus.txt")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    os.environ.update(env)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gpt.mlir")
        run([os.path.join(bin_dir, "trainmem-model"), "--preset", "tiny",
             "--layers", str(LAYERS), "--hidden", str(HIDDEN), "--heads",
             str(HEADS), "--ffn", str(4 * HIDDEN), "--batch", str(BATCH),
             "--seq", str(SEQ), "--positions", str(SEQ), "--dropout", "0",
             "-o", model])
        common = [os.path.join(bin_dir, "trainmem-run"), model, "--data", data,
                  "--steps", str(args.steps), "--threads", str(args.threads),
                  "--autodiff-options", "lr=1e-3 weight-decay=0.0"]
        one_log, two_log, sp_log = (os.path.join(tmp, n) for n in
                                    ("one.log", "t2.log", "sp2.log"))
        one = run(common + ["--loss-log", one_log])
        wide = run([c if c != str(args.threads) or i != common.index(
            "--threads") + 1 else str(2 * args.threads)
            for i, c in enumerate(common)])
        two = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                   "2"] + common + ["--tensor-parallel", "size=2",
                                    "--loss-log", two_log])
        sp = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                  "2"] + common + ["--tensor-parallel",
                                   "size=2 sequence-parallel=true",
                                   "--loss-log", sp_log])
        t = 2
        print(f"GPT {LAYERS} layers, hidden {HIDDEN}, {HEADS} heads, f32, "
              f"batch {BATCH} x {SEQ}, {args.steps} steps, "
              f"{args.threads} thread(s) per rank")
        print(f"step time (median): one rank {median_step(one):.4f} s "
              f"({args.threads} thread(s)), {median_step(wide):.4f} s "
              f"({2 * args.threads}); t = 2 {median_step(two):.4f} s: "
              f"{median_step(two) / median_step(one):.2f} and "
              f"{median_step(two) / median_step(wide):.2f} of them")
        arena = re.search(r"arena: planned (\d+) B, measured peak (\d+) B", one)
        print(f"one rank: arena planned {int(arena.group(1))} B, measured "
              f"{int(arena.group(2))} B")
        sbh = SEQ * BATCH * HIDDEN

        def ring(n):
            return 2 * (t - 1) * -(-n // t)
        # The vocabulary's collectives: the lookups' sum and the head's
        # input gradient, the cross-entropy's rows' max, sums and targets.
        vocabulary = (2 * ring(sbh) + 3 * ring(SEQ * BATCH)) * 4
        formula = (4 * LAYERS * 2 * (t - 1) / t * sbh * 4) + vocabulary
        for m in re.finditer(
                r"rank (\d+): arena planned (\d+) B, measured peak (\d+) B; "
                r"sent (\d+) B, received \d+ B: (\d+) B per step "
                r"\(analysis (\d+) B\)", two):
            rank, planned, measured, _, per_step, analysis = map(int, m.groups())
            print(f"t = 2, rank {rank}: arena planned {planned} B, measured "
                  f"{measured} B ({planned / int(arena.group(1)):.3f} of one "
                  f"rank's); sent {per_step} B per step, analysis "
                  f"{analysis} B, Megatron's formula {formula:.0f} B "
                  f"(layers {formula - vocabulary:.0f} B, vocabulary "
                  f"{vocabulary:.0f} B)")
        layers = LAYERS * 10 * (t - 1) / t * sbh * 4
        outside = (5 * (t - 1) / t * sbh * 4 +
                   (t - 1) / t * SEQ * HIDDEN * 4 +
                   (6 * LAYERS + 2) * ring(HIDDEN) * 4 +
                   3 * ring(SEQ * BATCH) * 4)
        print(f"sequence-parallel t = 2 {median_step(sp):.4f} s: "
              f"{median_step(sp) / median_step(two):.2f} of t = 2")
        for m in re.finditer(
                r"rank (\d+): arena planned (\d+) B, measured peak (\d+) B; "
                r"sent (\d+) B, received \d+ B: (\d+) B per step "
                r"\(analysis (\d+) B\)", sp):
            rank, planned, measured, _, per_step, analysis = map(int, m.groups())
            print(f"sequence-parallel t = 2, rank {rank}: arena planned "
                  f"{planned} B, measured {measured} B "
                  f"({planned / int(arena.group(1)):.3f} of one rank's); sent "
                  f"{per_step} B per step, analysis {analysis} B, the "
                  f"formula {layers + outside:.0f} B (layers {layers:.0f} B, "
                  f"outside them {outside:.0f} B)")
        a = [float(l.split()[1]) for l in open(one_log)]
        for name, log in (("t = 2", two_log), ("sequence-parallel t = 2",
                                               sp_log)):
            b = [float(l.split()[1]) for l in open(log)]
            print(f"largest relative loss difference over the steps, {name}: "
                  f"{max(abs(x - y) / abs(x) for x, y in zip(a, b)):.2e}")


if __name__ == "__main__":
    main()
