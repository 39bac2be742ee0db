#!/usr/bin/env python3
"""Compile-time benchmark of train-autodiff + train-memory-report.

For each preset, times (best of --repeat rounds that run base and step in
turn, wall clock, one process each):
  base:  trainmem-opt IN -o /dev/null                      (parse, verify, print)
  step:  trainmem-opt IN -train-autodiff -train-memory-report -o /dev/null
         (parse, autodiff, analysis + report, print of the whole step)
and reports step/base. A second table times `step` on one architecture at
12 and 96 layers (gpt2-124m width) to show that the passes scale linearly
with depth. A third times the memory report of gpt2-124m (batch 256)
accumulated over 16, 64 and 256 unrolled micro-batches. Goals (issues 3
and 11): step/base <= 3x, 96/12 layers <= 9x, the report linear in the
micro-batches (about 4x per 4x). A fourth times trainmem-run (compile, JIT
and one step of a tiny model) over 16, 64 and 256 micro-batches, the
loop rolled (trainmem-run's default: the runtime runs it as a loop) and
unrolled (--unroll-accum): the whole run's wall time, and that less the
step's own time (what trainmem-run prints as its step time), the time to
compile, JIT and set up. Issue 50's goal: that time independent of the
micro-batches.

Usage: bench/compile_time.py [--build build] [--repeat 5]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def best_time(cmd, repeat):
    return best_times([cmd], repeat)[0]


def best_times(cmds, repeat):
    """Best wall time of each command over `repeat` rounds; each round runs
    the commands in turn, so that a slow spell of a shared machine falls on
    all of them and not on one command's runs (a ratio of two bests is then
    measured in the same conditions)."""
    best = [float("inf")] * len(cmds)
    for _ in range(repeat):
        for i, cmd in enumerate(cmds):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def pass_time(cmd, name):
    """Wall seconds of pass `name` in one run, from -mlir-timing."""
    out = subprocess.run([*cmd, "-mlir-timing"], check=True, text=True,
                         stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE).stderr
    for line in out.splitlines():
        if line.strip().endswith(name):
            return float(line.split()[0])
    sys.exit(f"no timing of {name} in: {' '.join(cmd)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(
        os.path.dirname(__file__), "..", "build"))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    model = os.path.join(args.build, "bin", "trainmem-model")
    opt = os.path.join(args.build, "bin", "trainmem-opt")
    step_passes = ["-train-autodiff", "-train-memory-report=output=/dev/null"]

    with tempfile.TemporaryDirectory() as tmp:
        def graph(name, *flags):
            path = os.path.join(tmp, name + ".mlir")
            subprocess.run([model, *flags, "-o", path], check=True)
            return path

        print(f"{'preset':<12} {'layers':>6} {'base (s)':>10} {'step (s)':>10} {'step/base':>10}")
        for preset, layers in [("gpt2-124m", 12), ("llama2-7b", 32),
                               ("gpt3-175b", 96)]:
            path = graph(preset, "--preset", preset)
            base, step = best_times(
                [[opt, path, "-o", os.devnull],
                 [opt, path, *step_passes, "-o", os.devnull]], args.repeat)
            print(f"{preset:<12} {layers:>6} {base:>10.3f} {step:>10.3f} {step / base:>9.2f}x")

        print()
        print(f"{'gpt2-124m width':<16} {'step (s)':>10}")
        depths = (12, 96)
        paths = [graph(f"gpt2-{layers}", "--preset", "gpt2-124m",
                       "--layers", str(layers)) for layers in depths]
        times = dict(zip(depths, best_times(
            [[opt, path, *step_passes, "-o", os.devnull] for path in paths],
            args.repeat)))
        for layers in depths:
            print(f"{layers:>3} layers {'':<6} {times[layers]:>10.3f}")
        print(f"96/12 layers: {times[96] / times[12]:.2f}x (8x more layers)")

        # Micro-batches: the unrolled step grows linearly with them, and so
        # must the analysis. Timed: the memory report pass alone, from
        # MLIR's pass timing (best of the runs), next to parse + print.
        print()
        print(f"{'micro-batches':<14} {'parse+print (s)':>16} {'report pass (s)':>16}")
        batch = graph("gpt2-batch256", "--preset", "gpt2-124m", "--batch", "256")
        step_path = os.path.join(tmp, "gpt2-batch256-step.mlir")
        subprocess.run([opt, batch, "-train-autodiff", "-o", step_path],
                       check=True)
        report = {}
        for steps in (16, 64, 256):
            unrolled = os.path.join(tmp, f"unrolled-{steps}.mlir")
            subprocess.run([opt, step_path, f"-train-grad-accum=steps={steps}",
                            "-train-unroll-accum", "-o", unrolled], check=True)
            repeat = max(1, min(args.repeat, 2))
            plain = best_time([opt, unrolled, "-o", os.devnull], repeat)
            report[steps] = min(
                pass_time([opt, unrolled,
                           "-train-memory-report=output=" + os.devnull,
                           "-o", os.devnull], "TrainMemoryReportPass")
                for _ in range(repeat))
            print(f"{steps:<14} {plain:>16.3f} {report[steps]:>16.3f}")
        print(f"report 64/16: {report[64] / report[16]:.2f}x, "
              f"256/64: {report[256] / report[64]:.2f}x (4x more micro-batches each)")

        # Issue 50, item 5: the micro-batch loop runs rolled (its body's
        # calls compiled once) or unrolled (compiled once per micro-batch).
        # Timed: one step of a tiny model (batch = micro-batches, one row
        # each), the whole run's wall clock, and that less the step's own
        # time as trainmem-run reports it: compile, JIT and setup.
        run = os.path.join(args.build, "bin", "trainmem-run")
        corpus = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "..", "data", "kjv-genesis-exodus.txt")

        def run_once(cmd):
            start = time.perf_counter()
            out = subprocess.run(cmd, check=True, text=True,
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL).stdout
            wall = time.perf_counter() - start
            for line in out.splitlines():
                if line.startswith("step time: best "):
                    return wall, wall - float(line.split()[3])
            sys.exit(f"no step time from: {' '.join(cmd)}")

        print()
        print(f"{'micro-batches':<14} {'rolled: run (s)':>16} "
              f"{'compile (s)':>12} {'unrolled: run (s)':>18} "
              f"{'compile (s)':>12}")
        compile_time = {}
        for steps in (16, 64, 256):
            tiny = graph(f"tiny-batch{steps}", "--preset", "tiny", "--batch",
                         str(steps))
            cmd = [run, tiny, "--data", corpus, "--steps", "1", "--threads",
                   "1", f"--grad-accum=steps={steps}"]
            best = {}
            for _ in range(max(1, min(args.repeat, 2))):
                for mode, flags in (("rolled", []),
                                    ("unrolled", ["--unroll-accum"])):
                    wall, compiled = run_once(cmd + flags)
                    old = best.get(mode, (float("inf"), float("inf")))
                    best[mode] = (min(old[0], wall), min(old[1], compiled))
            compile_time[steps] = {m: best[m][1] for m in best}
            print(f"{steps:<14} {best['rolled'][0]:>16.3f} "
                  f"{best['rolled'][1]:>12.3f} {best['unrolled'][0]:>18.3f} "
                  f"{best['unrolled'][1]:>12.3f}")
        for mode in ("rolled", "unrolled"):
            c = {k: v[mode] for k, v in compile_time.items()}
            print(f"{mode} compile 64/16: {c[64] / c[16]:.2f}x, 256/64: "
                  f"{c[256] / c[64]:.2f}x (goal, rolled: about 1x)")
        print(f"256 micro-batches, compile unrolled / rolled: "
              f"{compile_time[256]['unrolled'] / compile_time[256]['rolled']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
