#!/usr/bin/env python3
"""One training step of the same GPT: trainmem-run (CPU runtime) against
PyTorch eager, same threads.

The model is trainmem-model's GPT (pre-LN, learned positions, tied head,
tanh GELU, dropout 0) at the shapes below, in f32 on byte-level data; the
step is trainmem-run's default: AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8,
no weight decay) after clipping the global gradient norm to 1.0.

Same model, checked before any timing:
  * PyTorch starts from trainmem's initial weights (a step-0 checkpoint of
    trainmem-run, read here) and trains on the same batches (trainmem-run's
    Philox batch sampler, reimplemented here);
  * the losses of the first steps agree within --loss-tol (absolute), and
    the weights after them within --weight-tol (absolute). Both are loose
    next to f32 rounding (1e-4 and 1e-3, one step of lr 1e-3; set when the
    default was 3e-3, so looser still now)
    because Adam's first steps move each weight by about lr whatever the
    size of its gradient: a weight whose gradient is near zero (the key
    projection's, whose bias gradient is exactly zero in exact arithmetic)
    takes rounding noise for a direction. Measured: losses within 2e-6 to
    3e-5, weights within 3e-5 to 3e-4, depending on nothing but the order
    of the sums (the attention kernel's tile sizes).
Then, per shape and thread count, rounds alternate trainmem-run and PyTorch
(each a fresh process of --steps steps), every step timed; the table gives
the best and the median step of each, the ratios trainmem / PyTorch
(below 1: trainmem is faster; the goal is 0.8 or less) and each process's
peak resident memory (the largest over the rounds, from wait4).

trainmem runs with --fuse-attention (train.attention, its tiled kernels)
and --fuse-elementwise (bias + GELU as one op) unless --decomposed; PyTorch
1.13 has no fused attention on the CPU, so its eager step forms the score
tensors.

PyTorch is Debian's python3-torch (1.13) run by /usr/bin/python3, with
OMP_WAIT_POLICY=PASSIVE (without it its two thread pools spin against each
other on 2 cores) and OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set to the
thread count: its GEMMs run in the system OpenBLAS, whose threads
torch.set_num_threads does not govern (measured: a 1024^3 matmul at
set_num_threads(1) used 1.98 cores without them, 1.00 with).

Usage: bench/pytorch_step.py [--build build] [--steps 8] [--rounds 3]
                             [--threads 1 2] [--shapes 0 1 2]
                             [--decomposed]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(ROOT, "data", "kjv-genesis-exodus.txt")
TORCH_PYTHON = "/usr/bin/python3"
SHAPES = [  # layers, hidden, heads, seq, batch
    (4, 256, 4, 128, 8),
    (2, 512, 8, 256, 4),
    (2, 256, 4, 2048, 1),  # long sequence: attention's s^2 terms dominate
]

# --- trainmem-run's batches: Philox-4x32-10 as in Support/Philox.h -------

M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for round_ in range(10):
        if round_:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & M32,
                          (p0 >> 32) ^ c3 ^ k1, p0 & M32)
    return c0, c1, c2, c3


def philox_word(seed, offset, index):
    block = index // 4
    ctr = (block & M32, block >> 32, offset & M32, offset >> 32)
    return philox4x32_10(ctr, (seed & M32, seed >> 32))[index % 4]


def random64(seed, stream, index):
    lo = philox_word(seed, stream, 2 * index)
    hi = philox_word(seed, stream, 2 * index + 1)
    return (hi << 32) | lo


def batch(data, seed, step, batch_size, seq):
    """tokens[b] = data[start_b : start_b + seq], targets shifted by one."""
    span = len(data) - seq
    tokens, targets = [], []
    for b in range(batch_size):
        start = random64(seed, 2000000 + step, b) % span
        tokens.append(list(data[start:start + seq]))
        targets.append(list(data[start + 1:start + seq + 1]))
    return tokens, targets


# --- trainmem checkpoints (version 02) -----------------------------------

def read_checkpoint(path):
    """{(role, key): (shape, bytes)} of a trainmem-run checkpoint."""
    data = open(path, "rb").read()
    if data[:8] != b"TMCKPT02":
        sys.exit(f"{path}: not a version 02 trainmem checkpoint")
    pos = 8 + 8 * 4  # step, seed, data bytes, data hash

    def u64():
        nonlocal pos
        value = struct.unpack_from("<Q", data, pos)[0]
        pos += 8
        return value

    def string():
        nonlocal pos
        size = u64()
        value = data[pos:pos + size].decode()
        pos += size
        return value

    tensors = {}
    for _ in range(u64()):
        role, key, dtype = string(), string(), string()
        shape = [u64() for _ in range(u64())]
        size = u64()
        if dtype != "f32":
            sys.exit(f"{path}: {key} is {dtype}; the benchmark compares f32")
        tensors[(role, key)] = (shape, data[pos:pos + size])
        pos += size
    return tensors


# --- the PyTorch side (runs under /usr/bin/python3) -----------------------

def torch_worker(spec_path):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import time
    import torch
    import torch.nn.functional as F

    spec = json.load(open(spec_path))
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    layers, hidden, heads, seq, batch_size = spec["shape"]
    d = hidden // heads
    init = read_checkpoint(spec["init"])
    params = {}
    for (role, key), (shape, raw) in init.items():
        if role == "param":
            t = torch.frombuffer(bytearray(raw), dtype=torch.float32)
            params[key] = t.reshape(shape).clone().requires_grad_(True)
    p = params
    causal = torch.ones(seq, seq, dtype=torch.bool).triu(1)

    def loss_of(tokens, targets):
        x = p["wte"][tokens] + p["wpe"][:seq]
        for l in range(layers):
            pre = f"h.{l}"
            n = F.layer_norm(x, (hidden,), p[pre + ".ln_1.weight"],
                             p[pre + ".ln_1.bias"], 1e-5)

            def proj(name, value):
                return value @ p[f"{pre}.attn.{name}.weight"] + \
                    p[f"{pre}.attn.{name}.bias"]

            def heads_first(t):
                return t.view(batch_size, seq, heads, d).transpose(1, 2)
            q = heads_first(proj("q", n))
            k = heads_first(proj("k", n))
            v = heads_first(proj("v", n))
            scores = (q @ k.transpose(-1, -2)) * (1.0 / d ** 0.5)
            probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
            context = (probs @ v).transpose(1, 2).reshape(batch_size, seq,
                                                          hidden)
            x = x + proj("proj", context)
            n = F.layer_norm(x, (hidden,), p[pre + ".ln_2.weight"],
                             p[pre + ".ln_2.bias"], 1e-5)
            up = n @ p[pre + ".mlp.fc.weight"] + p[pre + ".mlp.fc.bias"]
            act = F.gelu(up, approximate="tanh")
            x = x + act @ p[pre + ".mlp.proj.weight"] + \
                p[pre + ".mlp.proj.bias"]
        n = F.layer_norm(x, (hidden,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
        logits = n @ p["wte"].t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets.reshape(-1))

    # "bf16": the forward and backward under CPU autocast (bf16 matmuls,
    # f32 weights and optimizer), how PyTorch trains in bf16 on a CPU.
    autocast = spec.get("dtype", "f32") == "bf16"
    plain_loss_of = loss_of

    def loss_of(tokens, targets):
        if not autocast:
            return plain_loss_of(tokens, targets)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return plain_loss_of(tokens, targets)

    optimizer = torch.optim.AdamW(list(p.values()), lr=1e-3,
                                  betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.0)
    data = open(spec["corpus"], "rb").read()
    losses, seconds = [], []
    for step in range(1, spec["steps"] + 1):
        tokens, targets = batch(data, 0, step, batch_size, seq)
        start = time.perf_counter()
        tokens = torch.tensor(tokens)
        targets = torch.tensor(targets)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        optimizer.step()
        value = loss.item()
        seconds.append(time.perf_counter() - start)
        losses.append(value)
    weights = {k: v.detach().reshape(-1).tolist() for k, v in p.items()} \
        if spec.get("weights") else None
    json.dump({"losses": losses, "seconds": seconds, "weights": weights},
              open(spec["out"], "w"))


# --- driver ---------------------------------------------------------------

def run_torch(tmp, shape, threads, steps, init, weights=False, dtype="f32"):
    spec = os.path.join(tmp, "spec.json")
    out = os.path.join(tmp, "torch.json")
    json.dump({"shape": shape, "threads": threads, "steps": steps,
               "init": init, "corpus": CORPUS, "out": out,
               "weights": weights, "dtype": dtype}, open(spec, "w"))
    # Debian's torch does its GEMMs in the system OpenBLAS, whose threads
    # torch.set_num_threads does not govern: without these, a "1 thread"
    # PyTorch step multiplies on every core.
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE",
               OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    _, rss = run_measured([TORCH_PYTHON, os.path.abspath(__file__),
                           "--torch-worker", spec], env=env)
    result = json.load(open(out))
    result["rss"] = rss
    return result


# Processes are started by a small launcher process made at start-up: a
# child's peak resident size (wait4's ru_maxrss) includes the memory of the
# process it was forked from (Linux records the pre-exec image's high-water
# mark at exec), and this script grows as it compares weights, so children
# forked from it directly reported its size, not theirs (earlier tables:
# 574 MiB for a trainmem-run whose own peak is 224 MiB).
_launcher = None


def launcher_loop():
    """The launcher: runs each command it reads, answers with its exit
    status, stdout and peak resident bytes (one JSON line each way)."""
    for line in sys.stdin:
        request = json.loads(line)
        process = subprocess.Popen(request["cmd"], stdout=subprocess.PIPE,
                                   text=True, env=request["env"])
        stdout = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        sys.stdout.write(json.dumps({
            "status": os.waitstatus_to_exitcode(status), "stdout": stdout,
            "rss": usage.ru_maxrss * 1024}) + "\n")
        sys.stdout.flush()


def run_measured(cmd, env=None):
    """Runs cmd to its end; returns (its stdout, its peak resident bytes)."""
    global _launcher
    if _launcher is None:
        _launcher = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--launcher"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _launcher.stdin.write(json.dumps(
        {"cmd": cmd, "env": dict(env if env is not None else os.environ)})
        + "\n")
    _launcher.stdin.flush()
    answer = json.loads(_launcher.stdout.readline())
    if answer["status"] != 0:
        sys.exit(f"{cmd[0]} failed with exit code {answer['status']}")
    return answer["stdout"], answer["rss"]


def run_trainmem(build, model, threads, steps, tmp, save=None, fuse=True):
    log = os.path.join(tmp, "loss.log")
    cmd = [os.path.join(build, "bin", "trainmem-run"), model, "--data",
           CORPUS, "--steps", str(steps), "--threads", str(threads),
           "--loss-log", log]
    if fuse:
        cmd += ["--fuse-attention", "--fuse-elementwise"]
    if save:
        cmd += ["--save", save]
    stdout, rss = run_measured(cmd)
    times = None
    for line in stdout.splitlines():
        if line.startswith("step time:"):
            words = line.split()
            times = (float(words[3]), float(words[6]))
    losses = [float(line.split()[1]) for line in open(log)]
    return losses, times, rss


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--check-steps", type=int, default=5)
    parser.add_argument("--loss-tol", type=float, default=1e-4)
    parser.add_argument("--weight-tol", type=float, default=1e-3)
    parser.add_argument("--shapes", type=int, nargs="+",
                        default=list(range(len(SHAPES))),
                        choices=range(len(SHAPES)),
                        help="indices into SHAPES")
    parser.add_argument("--decomposed", action="store_true",
                        help="trainmem without --fuse-attention and "
                             "--fuse-elementwise")
    parser.add_argument("--torch-worker")
    parser.add_argument("--launcher", action="store_true")
    args = parser.parse_args()
    if args.launcher:
        return launcher_loop()
    if args.torch_worker:
        return torch_worker(args.torch_worker)
    run_measured(["true"])  # the launcher, while this process is small
    if subprocess.run([TORCH_PYTHON, "-c", "import torch"],
                      capture_output=True).returncode != 0:
        sys.exit("PyTorch is not importable by /usr/bin/python3 "
                 "(apt-get install python3-torch)")

    model_tool = os.path.join(args.build, "bin", "trainmem-model")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in [SHAPES[i] for i in args.shapes]:
            layers, hidden, heads, seq, batch_size = shape
            model = os.path.join(tmp, f"gpt-{layers}x{hidden}.mlir")
            subprocess.run([model_tool, "--preset", "tiny", "--layers",
                            str(layers), "--hidden", str(hidden), "--heads",
                            str(heads), "--seq", str(seq), "--positions",
                            str(seq), "--batch", str(batch_size), "-o",
                            model], check=True)
            init_dir = os.path.join(tmp, "init")
            subprocess.run([os.path.join(args.build, "bin", "trainmem-run"),
                            model, "--data", CORPUS, "--steps", "0",
                            "--save", init_dir], check=True,
                           capture_output=True)
            init = os.path.join(init_dir, "checkpoint.bin")

            # The same model and data: losses and weights agree.
            after = os.path.join(tmp, "after")
            fuse = not args.decomposed
            ours, _, _ = run_trainmem(args.build, model, 1, args.check_steps,
                                      tmp, save=after, fuse=fuse)
            theirs = run_torch(tmp, shape, 1, args.check_steps, init,
                               weights=True)
            loss_diff = max(abs(a - b) for a, b in
                            zip(ours, theirs["losses"]))
            final = read_checkpoint(os.path.join(after, "checkpoint.bin"))
            weight_diff = 0.0
            for (role, key), (shp, raw) in final.items():
                if role != "param":
                    continue
                values = struct.unpack(f"<{len(raw) // 4}f", raw)
                weight_diff = max(weight_diff, max(
                    abs(a - b) for a, b in zip(values,
                                               theirs["weights"][key])))
            print(f"{layers} layers, hidden {hidden}, {heads} heads, seq "
                  f"{seq}, batch {batch_size}: {args.check_steps} steps, "
                  f"losses within {loss_diff:.1e}, weights within "
                  f"{weight_diff:.1e}")
            if loss_diff > args.loss_tol or weight_diff > args.weight_tol:
                sys.exit("FAIL: the two steps do not compute the same thing")

            for threads in args.threads:
                ours_best, ours_median, theirs_best, theirs_median = \
                    [], [], [], []
                ours_rss, theirs_rss = 0, 0
                for _ in range(args.rounds):
                    _, (best, med), rss = run_trainmem(
                        args.build, model, threads, args.steps, tmp,
                        fuse=fuse)
                    ours_best.append(best)
                    ours_median.append(med)
                    ours_rss = max(ours_rss, rss)
                    result = run_torch(tmp, shape, threads, args.steps, init)
                    seconds = result["seconds"][1:]
                    theirs_best.append(min(seconds))
                    theirs_median.append(median(seconds))
                    theirs_rss = max(theirs_rss, result["rss"])
                rows.append((shape, threads, min(ours_best),
                             median(ours_median), min(theirs_best),
                             median(theirs_median), ours_rss, theirs_rss))

    print()
    print(f"{'shape (L,h,a,s,b)':<22} {'thr':>3} {'trainmem best':>14} "
          f"{'median':>9} {'torch best':>11} {'median':>9} "
          f"{'ratio best':>11} {'median':>7} {'RSS trainmem':>13} "
          f"{'torch':>8} {'ratio':>6}")
    for shape, threads, ob, om, tb, tm, orss, trss in rows:
        print(f"{str(shape):<22} {threads:>3} {ob * 1e3:>11.1f} ms "
              f"{om * 1e3:>6.1f} ms {tb * 1e3:>8.1f} ms {tm * 1e3:>6.1f} ms "
              f"{ob / tb:>10.2f}x {om / tm:>6.2f}x {orss / 2**20:>9.0f} MiB "
              f"{trss / 2**20:>4.0f} MiB {orss / trss:>5.2f}x")
    print("ratio = trainmem / PyTorch eager step time (below 1: trainmem is "
          "faster; goal <= 0.8); RSS = peak resident memory of the process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
