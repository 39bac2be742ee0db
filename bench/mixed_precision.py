#!/usr/bin/env python3
"""Step time of a small GPT in bf16 and f16 against f32 on the CPU runtime,
and against PyTorch eager in bf16 on the same threads.

The model is trainmem-model's GPT at 4 layers, hidden 256, 4 heads, seq 128,
batch 8 (bench/pytorch_step.py's first shape), trained by trainmem-run's
default step (AdamW after clipping to 1.0). trainmem's 16-bit steps keep the
weights, activations and gradients in 16 bits with f32 masters and Adam
state (train-autodiff's mixed precision); the kernels compute in f32. The
run prints how its 16-bit GEMMs ran (trainmem-run's "bf16 GEMMs:" line):
OpenBLAS's cblas_sbgemm when TMRT_BF16_GEMM=sbgemm and the library has it
(Debian's OpenBLAS 0.3.21 is built without it), else tiles widened to f32.

PyTorch is Debian's python3-torch (1.13) run by /usr/bin/python3 (see
bench/pytorch_step.py), bf16 being its CPU autocast (bf16 matmuls, f32
weights); where it is not importable its columns are skipped and the
benchmark says so.

Rounds alternate the configurations (each a fresh process of --steps steps,
the first step left out); the table gives the best and the median step of
each and the ratios, all measured in this one run.

Usage: bench/mixed_precision.py [--build build] [--steps 8] [--rounds 3]
                                [--threads 1 2]
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pytorch_step as ps  # noqa: E402

SHAPE = (4, 256, 4, 128, 8)  # layers, hidden, heads, seq, batch


def run_trainmem(build, model, threads, steps, env):
    cmd = [os.path.join(build, "bin", "trainmem-run"), model, "--data",
           ps.CORPUS, "--steps", str(steps), "--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=env)
    times, gemm = None, "f32 GEMMs: cblas_sgemm"
    for line in out.stdout.splitlines():
        if line.startswith("step time:"):
            words = line.split()
            times = (float(words[3]), float(words[6]))
    for line in out.stderr.splitlines():
        if "GEMMs:" in line:
            gemm = line.split(": ", 1)[1]
    return times, gemm


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ps.ROOT, "build"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sbgemm", action="store_true",
                        help="also time bf16 with TMRT_BF16_GEMM=sbgemm")
    args = parser.parse_args()
    torch_ok = subprocess.run([ps.TORCH_PYTHON, "-c", "import torch"],
                              capture_output=True).returncode == 0
    if not torch_ok:
        print("PyTorch is not importable by /usr/bin/python3 (apt-get "
              "install python3-torch): its columns are skipped")

    layers, hidden, heads, seq, batch = SHAPE
    configs = [("f32", {}), ("bf16", {}), ("f16", {})]
    if args.sbgemm:
        configs.append(("bf16", {"TMRT_BF16_GEMM": "sbgemm"}))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for dtype in ("f32", "bf16", "f16"):
            models[dtype] = os.path.join(tmp, f"gpt-{dtype}.mlir")
            subprocess.run([os.path.join(args.build, "bin", "trainmem-model"),
                            "--preset", "tiny", "--layers", str(layers),
                            "--hidden", str(hidden), "--heads", str(heads),
                            "--seq", str(seq), "--positions", str(seq),
                            "--batch", str(batch), "--dtype", dtype, "-o",
                            models[dtype]], check=True)
        init = None
        if torch_ok:
            init_dir = os.path.join(tmp, "init")
            subprocess.run([os.path.join(args.build, "bin", "trainmem-run"),
                            models["f32"], "--data", ps.CORPUS, "--steps",
                            "0", "--save", init_dir], check=True,
                           capture_output=True)
            init = os.path.join(init_dir, "checkpoint.bin")
        for threads in args.threads:
            results = {}
            for _ in range(args.rounds):
                for dtype, extra in configs:
                    name = dtype + (" sbgemm" if extra else "")
                    env = dict(os.environ, **extra)
                    (best, med), gemm = run_trainmem(args.build,
                                                     models[dtype], threads,
                                                     args.steps, env)
                    entry = results.setdefault(name, ([], [], gemm))
                    entry[0].append(best)
                    entry[1].append(med)
                if torch_ok:
                    for dtype in ("f32", "bf16"):
                        seconds = ps.run_torch(tmp, list(SHAPE), threads,
                                               args.steps, init,
                                               dtype=dtype)["seconds"][1:]
                        entry = results.setdefault("torch " + dtype,
                                                   ([], [], "PyTorch eager"))
                        entry[0].append(min(seconds))
                        entry[1].append(ps.median(seconds))
            for name, (bests, medians, gemm) in results.items():
                rows.append((threads, name, min(bests), ps.median(medians),
                             gemm))

    print(f"GPT {layers} layers, hidden {hidden}, {heads} heads, seq {seq}, "
          f"batch {batch}; {args.steps} steps x {args.rounds} rounds")
    print(f"{'thr':>3} {'config':<12} {'best':>9} {'median':>9} "
          f"{'vs f32':>7} {'vs torch bf16':>13}  GEMMs")
    for threads in args.threads:
        mine = {name: (best, med) for t, name, best, med, _ in rows
                if t == threads}
        for t, name, best, med, gemm in rows:
            if t != threads:
                continue
            vs32 = med / mine["f32"][1]
            vst = (f"{med / mine['torch bf16'][1]:>12.2f}x"
                   if "torch bf16" in mine else f"{'skipped':>13}")
            print(f"{threads:>3} {name:<12} {best * 1e3:>6.1f} ms "
                  f"{med * 1e3:>6.1f} ms {vs32:>6.2f}x {vst}  {gemm}")
    print("ratios of median step times (below 1: faster than the reference)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
