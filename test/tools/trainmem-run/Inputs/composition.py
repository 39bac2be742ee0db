"""The composition test of train-step's options (issue 32, item 2).

Every combination of the four techniques of the seed (recompute x
accumulation x ZeRO x 8-bit state: the full product) and every pair of
values of all options (a covering array built greedily over that product)
either trains 3 steps on the CPU runtime (ZeRO or tensor parallelism on 2
MPI ranks) with each rank's arena equal to its plan and losses equal to
the same step without recompute, accumulation, ZeRO, tensor parallelism,
gradient release and offload (same dtype, state format, fusion, dropout,
optimizer and clipping) within 1e-5 relative in f32 and 1e-3 in 16-bit,
or is refused before step 1 with an error line; none crashes or hangs.

usage: composition.py BIN CORPUS WORKDIR MPIRUN...
Prints the table of combinations, then the counts; exits 1 on a failure.
"""

import itertools
import json
import os
import re
import subprocess
import sys

BIN, CORPUS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
MPIRUN = sys.argv[4:]
STEPS = 3
RANKS = 2
BATCH = 4  # sequences per step over all ranks
TIMEOUT = 300

# The factors: the seed's four (all of their product), then the rest.
MAIN = [
    ("remat", ["none", "selective", "full", "budget"]),
    ("accum", ["1", "2", "2-unrolled"]),
    ("zero", ["none", "0", "1", "2", "3"]),
    ("8bit", ["off", "on"]),
]
REST = [
    ("fuse-attention", ["off", "on"]),
    ("fuse-elementwise", ["off", "on"]),
    # The optimizer's offload; "states+update+gradients" sums the
    # micro-batches' gradients on the host too (issue 52, item 4).
    ("offload", ["none", "states", "states+update",
                 "states+update+gradients"]),
    ("dtype", ["f32", "bf16", "f16"]),
    ("dropout", ["0", "0.1"]),
    # Tensor parallelism over the 2 processes (issue 34): its data ranks
    # are then 1, ZeRO's among them; or context parallelism over them
    # (issue 52: "c2", with fused attention; its data ranks are 1 too;
    # "c2r" its ring form, exchange=ring).
    ("tensor", ["none", "2", "2+sp", "c2", "c2r"]),
    # The optimizer and gradient release (issue 36): Sophia refreshes its
    # Hessian estimate every 2 steps here; a released step is not clipped
    # (its reference neither).
    ("optimizer", ["adamw", "lion", "sophia"]),
    ("release", ["off", "on"]),
    # Activation offload (issue 52): the checkpoints under recompute, every
    # saved tensor without.
    ("offload-activations", ["off", "on"]),
    # The gradients' sums over micro-batches (issue 52, item 4): f32, or
    # "16", the row's 16-bit dtype (train-grad-accum accumulate-dtype);
    # nothing to sum without accumulation.
    ("sums", ["f32", "16"]),
    # Pipeline parallelism (issue 53): 2 stages of 2 micro-batches, one
    # process each; with ZeRO or tensor parallelism, RANKS data-parallel
    # pipelines or tensor groups of them.
    ("pipeline", ["off", "2"]),
]
FACTORS = MAIN + REST


def refused_by_design(row):
    """The documented refusal a row meets (docs/Optimizers.md), or None:
    Sophia's Hessian step does not compose with ZeRO, accumulation,
    offload, loss scaling (f16), a remat budget and tensor parallelism; a
    released gradient is complete only without accumulation and loss
    scaling."""
    if row["optimizer"] == "sophia":
        for factor, alone in (("zero", "none"), ("accum", "1"),
                              ("offload", "none"), ("tensor", "none")):
            if row[factor] != alone:
                return f"sophia with {factor}={row[factor]}"
        if row["dtype"] == "f16":
            return "sophia with loss scaling"
        if row["remat"] == "budget":
            return "sophia with a remat budget"
    if row["release"] == "on":
        if row["accum"] != "1":
            return "release with accumulation"
        if row["dtype"] == "f16":
            return "release with loss scaling"
    if row["remat"] == "budget" and row["offload-activations"] == "on":
        return "a remat budget with activation offload"
    if row["tensor"] in ("c2", "c2r") and row["fuse-attention"] == "off":
        return "context parallelism without fused attention"
    if row["sums"] == "16" and row["dtype"] == "f32" and row["accum"] != "1":
        return "16-bit sums of f32 gradients"
    if row["pipeline"] != "off":
        # docs/Pipeline.md, "Not built yet" (and DeepSpeed's refusal of
        # ZeRO-2/3 with stages); the stages cut a rolled micro-batch loop.
        for factor, alone in (("offload", "none"),
                              ("offload-activations", "off"),
                              ("release", "off")):
            if row[factor] != alone:
                return f"pipeline stages with {factor}={row[factor]}"
        if row["tensor"] in ("c2", "c2r"):
            return "pipeline stages with context parallelism"
        if row["optimizer"] == "sophia":
            return "pipeline stages with sophia"
        if row["zero"] in ("2", "3"):
            return "pipeline stages with ZeRO-2/3"
        if row["dtype"] == "f16":
            return "pipeline stages with loss scaling"
        if row["accum"] == "2-unrolled":
            return "pipeline stages of a loop unrolled already"
    if row["offload"] == "states+update+gradients":
        if row["accum"] == "1":
            return "gradients on the host without a micro-batch loop"
        if row["accum"] == "2-unrolled":
            return "gradients on the host with the loop unrolled"
        if row["zero"] in ("0", "1"):
            return "gradients on the host with ZeRO-0/1's reduction after " \
                   "the loop"
    return None


def offload_options(c):
    """train-offload-optimizer's options of the row (after what=)."""
    if c["offload"] == "states+update+gradients":
        return "states+update gradients=host"
    return c["offload"]


def covering_rows():
    """The product of MAIN, each row completed with values of REST that
    cover the most pairs not yet covered among the completions no
    documented refusal refuses (first value on ties: the rows do not depend
    on anything but this order); such rows are added until every pair of
    values that one of them can hold is covered. Then, for each pair that
    only a refused row can hold, the row of the first values with that
    pair: it must be refused."""
    names = [name for name, _ in FACTORS]
    uncovered = set()
    for (i, (_, a)), (j, (_, b)) in itertools.combinations(
            enumerate(FACTORS), 2):
        for x in a:
            for y in b:
                uncovered.add((i, x, j, y))

    def runs(row):
        return refused_by_design(dict(zip(names, row))) is None

    def gain(row):
        return sum((i, row[i], j, row[j]) in uncovered
                   for i, j in itertools.combinations(range(len(row)), 2))

    def take(row):
        for i, j in itertools.combinations(range(len(row)), 2):
            uncovered.discard((i, row[i], j, row[j]))

    rows = []
    rest_choices = list(itertools.product(*[v for _, v in REST]))
    for main in itertools.product(*[v for _, v in MAIN]):
        completions = [rest for rest in rest_choices
                       if runs(list(main) + list(rest))]
        gains = [gain(list(main) + list(rest)) for rest in completions]
        # Ties go round the choices, so that rows past full coverage still
        # vary the other options.
        top = [rest for rest, g in zip(completions, gains)
               if g == max(gains)]
        best = top[len(rows) % len(top)]
        row = list(main) + list(best)
        take(row)
        rows.append(dict(zip(names, row)))
    running = [list(r) for r in itertools.product(*[v for _, v in FACTORS])
               if runs(list(r))]
    while True:
        row = max(running, key=gain)
        if gain(row) == 0:
            break
        take(row)
        rows.append(dict(zip(names, row)))
    first = [values[0] for _, values in FACTORS]
    for i, x, j, y in sorted(uncovered, key=lambda p: (
            p[0], FACTORS[p[0]][1].index(p[1]), p[2],
            FACTORS[p[2]][1].index(p[3]))):
        row = list(first)
        row[i], row[j] = x, y
        rows.append(dict(zip(names, row)))
    return rows


def run(cmd, log):
    """Runs `cmd`, its output in `log`; under mpirun each rank's output
    goes to a file of its own (the ranks' lines would interleave), all of
    them returned one after the other."""
    ranks = log + ".ranks"
    if cmd[:len(MPIRUN)] == MPIRUN:
        cmd = MPIRUN + ["--output-filename", ranks] + cmd[len(MPIRUN):]
    with open(log, "w") as out:
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=TIMEOUT)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    text = open(log, errors="replace").read()
    if os.path.isdir(ranks):
        # mpirun's own output repeats the ranks' (interleaved): theirs only.
        text = ""
        for root, _, files in sorted(os.walk(ranks)):
            for name in sorted(files):
                text += open(os.path.join(root, name), errors="replace").read()
    return code, text


def model(dtype, dropout, batch):
    path = os.path.join(WORK, f"model-{dtype}-{dropout}-{batch}.mlir")
    if not os.path.exists(path):
        subprocess.run([os.path.join(BIN, "trainmem-model"), "--preset", "tiny",
                        "--layers", "2", "--hidden", "32", "--heads", "2",
                        "--ffn", "64", "--seq", "16", "--batch", str(batch),
                        "--dtype", dtype, "--dropout", dropout, "-o", path],
                       check=True)
    return path


def losses(path):
    return [float(line.split()[1]) for line in open(path) if line.strip()]


def tensor_options(c):
    """train-tensor-parallel's options of the combination, or None."""
    if c["tensor"] in ("none", "c2", "c2r"):
        return None
    return "size=2" + (" sequence-parallel=true" if c["tensor"] == "2+sp"
                       else "")


def context_options(c):
    """train-context-parallel's options of the combination, or None."""
    if c["tensor"] == "c2r":
        return f"size={RANKS} exchange=ring"
    return f"size={RANKS}" if c["tensor"] == "c2" else None


def processes(c):
    """The MPI processes the combination runs on (1: none): pipeline
    stages times the data ranks."""
    stages = 2 if c["pipeline"] != "off" else 1
    return stages * (RANKS if c["zero"] != "none" or tensor_options(c) or
                     context_options(c) else 1)


def pipeline_options(c):
    """--pipeline's options of the combination, or None."""
    if c["pipeline"] == "off":
        return None
    return f"stages={c['pipeline']} micro-batches=2"


def rank_batch(c):
    """One process's batch: a tensor or context group trains on the whole
    batch (its data ranks are 1), ZeRO's data ranks on their share."""
    if tensor_options(c) or context_options(c):
        return BATCH
    return BATCH // RANKS if c["zero"] != "none" else BATCH


def zero_ranks(c):
    return RANKS // 2 if tensor_options(c) or context_options(c) else RANKS


def autodiff_options(c):
    """train-autodiff's options of the combination and its reference: the
    optimizer, clipped at norm 1 unless its gradients are released."""
    opts = f"optimizer={c['optimizer']} lr=1e-3 weight-decay=0.0"
    if c["optimizer"] == "sophia":
        opts += " hessian-interval=2"
    return opts + (" clip-norm=0" if c["release"] == "on" else
                   " clip-norm=1.0")


def common_options(c):
    """Options of both the combination and its reference."""
    opts = ["--data", CORPUS, "--steps", str(STEPS), "--threads", "1"]
    if c["8bit"] == "on":
        opts.append("--quantize-optimizer-state")
    if c["dtype"] == "f16":
        opts.append("--loss-scale")
    return opts


def forward_options(c):
    opts = []
    if c["fuse-attention"] == "on":
        opts.append("--fuse-attention")
    if c["fuse-elementwise"] == "on":
        opts.append("--fuse-elementwise")
    return opts


REFERENCES = {}


def reference(c):
    key = (c["dtype"], c["dropout"], c["8bit"], c["fuse-attention"],
           c["fuse-elementwise"], c["optimizer"], c["release"])
    if key not in REFERENCES:
        name = "ref-" + "-".join(key)
        log = os.path.join(WORK, name + ".losses")
        code, text = run([os.path.join(BIN, "trainmem-run"),
                          model(c["dtype"], c["dropout"], BATCH), "--loss-log",
                          log, "--autodiff-options=" + autodiff_options(c)] +
                         common_options(c) + forward_options(c),
                         os.path.join(WORK, name + ".out"))
        if code != 0:
            sys.exit(f"reference {name} failed ({code}):\n{text}")
        REFERENCES[key] = losses(log)
    return REFERENCES[key]


def step_peak(c, remat):
    """The arena of the combination's step with `remat` (train-remat's
    options, or empty), from train-step and the memory report: what a
    budget is for."""
    zero = c["zero"] != "none"
    if c["accum"] == "2-unrolled":
        # The hand-unrolled step and trainmem-run's passes after it, as the
        # row runs them (a rolled loop's plan is another).
        passes, after = unrolled_passes(c, [remat] if remat else [])
        after = [p for p in after
                 if not p.startswith(("train-grad-accum", "train-unroll"))]
        pipeline = passes + after + ["train-memory-report{format=json}"]
        report = subprocess.run(
            [os.path.join(BIN, "trainmem-opt"),
             model(c["dtype"], c["dropout"], rank_batch(c)),
             "--pass-pipeline=builtin.module(" + ",".join(pipeline) + ")",
             "-o", "/dev/null"], capture_output=True, text=True)
        if report.returncode != 0:
            raise Refused(report.stderr)
        return json.loads(report.stdout)["plan"]["arena_bytes"]
    options = [f'autodiff="{autodiff_options(c)}"']
    if c["fuse-attention"] == "on":
        options.append("fuse-attention=true")
    if c["fuse-elementwise"] == "on":
        options.append("fuse-elementwise=true")
    if c["dtype"] == "f16":
        options.append("loss-scale=true")
    if remat:
        options.append(f'remat="{remat}"')
    if c["accum"] != "1":
        options.append(f'grad-accum="{grad_accum_options(c)}"')
    if c["8bit"] == "on":
        options.append("quantize=true")
    if zero:
        options.append(f'zero="stage={c["zero"]} ranks={zero_ranks(c)}"')
    if c["offload"] != "none":
        options.append(f'offload="{offload_options(c)}"')
    if c["release"] == "on":
        options.append("release-gradients=true")
    if tensor_options(c):
        options.append(f'tensor-parallel="{tensor_options(c)}"')
    if context_options(c):
        options.append(f'context-parallel="{context_options(c)}"')
    if c["offload-activations"] == "on":
        options.append(f'offload-activations="{offload_activations(c)}"')
    report = subprocess.run(
        [os.path.join(BIN, "trainmem-opt"),
         model(c["dtype"], c["dropout"], rank_batch(c)),
         "--pass-pipeline=builtin.module(train-step{" + " ".join(options) +
         "},train-memory-report{format=json})", "-o", "/dev/null"],
        capture_output=True, text=True)
    if report.returncode != 0:
        raise Refused(report.stderr)
    return json.loads(report.stdout)["plan"]["arena_bytes"]


class Refused(Exception):
    """The step of a combination did not compile: its errors."""


def grad_accum_options(c):
    """train-grad-accum's options for the row's 2 micro-batches."""
    if c["sums"] == "16":
        return "steps=2 accumulate-dtype=" + c["dtype"]
    return "steps=2"


def remat_option(c):
    if c["remat"] == "none":
        return []
    if c["remat"] == "budget":
        # Half-way between the step's arena with full recompute and without
        # any: what a user short of memory gives, met by a mix of choices
        # (and 1% over: the arenas of the mixes between are not linear in
        # their live bytes).
        none = step_peak(c, "")
        budget = (none + step_peak(c, "policy=full")) // 2 + none // 100
        return [f"policy=budget budget={budget}"]
    return ["policy=" + c["remat"]]


def offload_activations(c):
    """train-offload-activations' options of the combination: the
    checkpoints of full recompute, else every saved tensor (selective
    recompute with fused attention, or a budget, may recompute nothing)."""
    return "what=checkpoints" if c["remat"] == "full" else "what=all"


def combination(index, c):
    log = os.path.join(WORK, f"c{index:03d}.losses")
    try:
        return run_combination(index, c, log)
    except Refused as refused:
        # The budget's measure of the step was refused: as trainmem-run
        # would have been.
        return 1, str(refused), log


def unrolled_passes(c, remats):
    """The passes of a 2-unrolled row up to its unrolled loop (trainmem-run
    runs the rest), with `remats` (train-remat's options; a budget measured
    after the passes that follow, trainmem-run's included)."""
    zero = c["zero"] != "none"
    passes = []
    if tensor_options(c):
        passes.append("train-tensor-parallel{" + tensor_options(c) + "}")
    if c["fuse-attention"] == "on":
        passes.append("train-fuse-attention")
    if context_options(c):
        passes.append("train-context-parallel{" + context_options(c) +
                      "}")
    if c["fuse-elementwise"] == "on":
        passes.append("train-fuse-elementwise")
    passes.append("train-autodiff{" + autodiff_options(c) + "}")
    if c["dtype"] == "f16":
        passes.append("train-loss-scale")
    # A budget is for the step as it will run: the passes after it,
    # trainmem-run's included (measure-after).
    after = ["train-grad-accum{" + grad_accum_options(c) + "}",
             "train-unroll-accum"]
    if c["8bit"] == "on":
        after.append("train-quantize-optimizer-state")
    after.append("train-materialize-remat")
    if c["offload-activations"] == "on":
        after.append("train-offload-activations{" +
                     offload_activations(c) + "}")
    if zero:
        full = " accumulate=full" if c["zero"] in ("2", "3") else ""
        after.append(f"train-zero{{stage={c['zero']} ranks={zero_ranks(c)}"
                     f"{full}}}")
    if c["release"] == "on":
        after.append("train-release-gradients")
    if c["offload"] != "none":
        after.append("train-offload-optimizer{what=" + offload_options(c) +
                     "}")
    for r in remats:
        if "budget" in r:
            r += " measure-after={" + ",".join(after) + "}"
        passes.append("train-remat{" + r + "}")
    passes += ["train-grad-accum{" + grad_accum_options(c) + "}",
               "train-unroll-accum"]
    return passes, after


def run_combination(index, c, log):
    zero = c["zero"] != "none"
    batch = rank_batch(c)
    name = f"c{index:03d}"
    opts = common_options(c) + ["--loss-log", log]
    if c["offload"] != "none":
        opts.append("--offload-optimizer=" + offload_options(c))
    if c["offload-activations"] == "on":
        opts.append("--offload-activations=" + offload_activations(c))
    stage = "stage=" + c["zero"]
    if c["accum"] == "2-unrolled":
        # The micro-batch loop unrolled by hand before the rest of the
        # passes: the step prepared by trainmem-opt, trainmem-run given it.
        step = os.path.join(WORK, name + ".step.mlir")
        passes, _ = unrolled_passes(c, remat_option(c))
        code, text = run([os.path.join(BIN, "trainmem-opt"),
                          model(c["dtype"], c["dropout"], batch),
                          "--pass-pipeline=builtin.module(" + ",".join(passes)
                          + ")", "-o", step], os.path.join(WORK, name + ".opt"))
        if code != 0:
            return code, text, log
        target = step
        if c["dtype"] == "f16":
            opts.remove("--loss-scale")
        if c["zero"] in ("2", "3"):
            stage += " accumulate=full"
    else:
        target = model(c["dtype"], c["dropout"], batch)
        opts += forward_options(c)
        opts.append("--autodiff-options=" + autodiff_options(c))
        if tensor_options(c):
            opts.append("--tensor-parallel=" + tensor_options(c))
        if context_options(c):
            opts.append("--context-parallel=" + context_options(c))
        opts += ["--remat=" + r for r in remat_option(c)]
        if c["accum"] == "2":
            opts.append("--grad-accum=" + grad_accum_options(c))
    if zero:
        opts.append("--zero=" + stage)
    if c["release"] == "on":
        opts.append("--release-gradients")
    if pipeline_options(c):
        opts.append("--pipeline=" + pipeline_options(c))
    cmd = [os.path.join(BIN, "trainmem-run"), target] + opts
    if processes(c) > 1:
        cmd = MPIRUN + ["-np", str(processes(c))] + cmd
    code, text = run(cmd, os.path.join(WORK, name + ".out"))
    return code, text, log


def main():
    os.makedirs(WORK, exist_ok=True)
    rows = covering_rows()
    ran, refused, failed = 0, {}, []
    documented = {}
    print(f"{len(rows)} combinations: the {4 * 3 * 5 * 2} of recompute x "
          f"accumulation x ZeRO x 8-bit, every pair of values of all "
          f"{len(FACTORS)} options; "
          f"{sum(refused_by_design(c) is not None for c in rows)} of them "
          f"hold a pair that a documented refusal refuses")
    for index, c in enumerate(rows):
        desc = " ".join(f"{k}={v}" for k, v in c.items())
        multi = processes(c) > 1
        code, text, log = combination(index, c)
        tolerance = 1e-5 if c["dtype"] == "f32" else 1e-3
        if code == "timeout" or (isinstance(code, int) and
                                 (code < 0 or code > 128)):
            failed.append(f"{desc}: crashed or hung ({code})")
            continue
        if code != 0:
            errors = [l for l in text.splitlines() if "error:" in l]
            if re.search(r"^step 1/", text, re.M) or not errors:
                failed.append(f"{desc}: failed after starting or without "
                              f"an error line:\n{text[-2000:]}")
                continue
            message = re.sub(r"^.*?error: ", "", errors[0])
            message = re.sub(r"\d{3,}", "N", message)
            why = refused_by_design(c)
            if why:
                documented.setdefault(why, []).append(message)
            else:
                refused.setdefault(message, []).append(desc)
            print(f"refused  {desc}")
            continue
        if refused_by_design(c):
            failed.append(f"{desc}: ran, but documented as refused "
                          f"({refused_by_design(c)})")
            continue
        arenas = re.findall(r"rank \d+: arena planned (\d+) B, measured peak "
                            r"(\d+) B" if multi else
                            r"arena: planned (\d+) B, measured peak (\d+) B",
                            text)
        expected = processes(c)
        if len(arenas) < expected or any(a != b for a, b in arenas):
            failed.append(f"{desc}: arena not the plan on every rank "
                          f"{arenas}")
            continue
        got, want = losses(log), reference(c)
        if len(got) != STEPS:
            failed.append(f"{desc}: {len(got)} losses logged")
            continue
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
        if worst > tolerance:
            failed.append(f"{desc}: losses {got} against {want}, "
                          f"{worst:.2e} apart (tolerance {tolerance})")
            continue
        ran += 1
        print(f"ran      {desc}  worst {worst:.1e}")
    print(f"ran {ran}, refused as documented "
          f"{sum(len(v) for v in documented.values())}, refused "
          f"{sum(len(v) for v in refused.values())}, failed {len(failed)} "
          f"of {len(rows)}")
    for why, messages in sorted(documented.items()):
        for message in sorted(set(messages)):
            print(f"documented, {why}: {message}")
    for message, which in sorted(refused.items()):
        print(f"refused {len(which)}: {message}")
    for f in failed:
        print("FAILED", f)
    sys.exit(1 if failed else 0)


main()
