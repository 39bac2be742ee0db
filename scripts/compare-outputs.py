#!/usr/bin/env python3
"""Compares two folders of scripts/capture-outputs.sh: the FileCheck inputs
and the files the tests left, byte for byte. Files that differ are compared
again with what differs by nature masked (timings and rates, the order in
which MPI ranks' lines interleave, temporary folder names) and listed as
'same but timings' or as 'DIFFERENT' with the first differing lines.

usage: compare-outputs.py BEFORE AFTER
Exits 1 when a file is DIFFERENT or only in one of the two.
"""

import os
import re
import sys

TIMING = [
    (re.compile(r"[0-9.]+ tok/s"), "N tok/s"),
    (re.compile(r"(ETA|done in) ([0-9]+h)?([0-9]+m)?([0-9]+s)?"), r"\1 T "),
    (re.compile(r"step time: .*"), "step time: T"),
    (re.compile(r"[0-9.]+(e-?[0-9]+)? ?(s|ms|seconds)\b"), "T s"),
    (re.compile(r'"(seconds|time_s|compile_s|elapsed_s)": [0-9.e-]+'), r'"\1": T'),
    (re.compile(r"/tmp/[A-Za-z0-9_.-]+"), "/tmp/X"),
    (re.compile(r"\.tmp\.[0-9]+"), ".tmp.PID"),
    (re.compile(r"\(pid [0-9]+\)"), "(pid PID)"),
]

# Outputs that differ between any two runs, and why: compared only for
# being there.
BY_NATURE = {
    "filecheck/Runtime_scalar-kernels.test": "kernel timings",
    "filecheck/Runtime_vector-paths.test": "kernel timings",
    "output/tools/trainmem-run/Output/hardening.test.tmp/sigint/":
        "the step SIGINT lands after",
    "output/tools/trainmem-run/Output/hardening.test.tmp/sigterm/":
        "the step SIGTERM lands after",
    "output/tools/trainmem-run/Output/hardening.test.tmp/sigkill/":
        "the step SIGKILL lands after",
}


# Outputs of test/tools/trainmem-run/Inputs/interrupt.sh (a run stopped by
# SIGINT, SIGTERM or SIGKILL): which step the signal lands after differs
# from run to run.
INTERRUPTED = re.compile(rb"^exit (130|143|137)\n")


def characters(data):
    """The characters of the text but white space, timings masked, sorted:
    for stderr that several ranks wrote into one file, character by
    character."""
    text = data.decode("utf-8", errors="replace")
    for pattern, repl in TIMING:
        text = pattern.sub(repl, text)
    lines = [line for line in text.splitlines() if not MPIRUN_NOISE.match(line)]
    return sorted("".join("".join(lines).split()))


# mpirun's own lines: process ids, host names, which rank it saw abort
# first.
MPIRUN_NOISE = re.compile(
    r"^\s*(\[[^]]*:[0-9]+\]|Process name:|MPI_ABORT was invoked on rank|"
    r"Local host:|Exit code:|PID |NOTE: invoking MPI_ABORT|You may or may not|"
    r"-----|with errorcode|exactly when Open MPI|[0-9]+ more process)")


def masked(data):
    """The set of words of the text, timings masked, mpirun's own lines
    dropped: ranks' lines interleave mid-line under mpirun, and when one
    rank fails, mpirun ends the others at different points of their
    error lines."""
    text = data.decode("utf-8", errors="replace")
    for pattern, repl in TIMING:
        text = pattern.sub(repl, text)
    lines = [line for line in text.splitlines() if not MPIRUN_NOISE.match(line)]
    return sorted(set(" ".join(lines).split()))


# Files that hold a process id.
SKIPPED = {"trainmem-run.lock"}


def files(root):
    out = set()
    for folder, _, names in os.walk(root):
        for name in names:
            out.add(os.path.relpath(os.path.join(folder, name), root))
    return out


def main():
    before, after = sys.argv[1], sys.argv[2]
    a, b = files(before), files(after)
    same = timing = ranked = interleaved = 0
    bad, natural = [], []
    for name in sorted(a | b):
        if os.path.basename(name) in SKIPPED:
            continue
        # mpirun's combined output interleaves the ranks' characters; the
        # ranks' own files (NAME.ranks/, --output-filename) are compared.
        if (os.path.isdir(os.path.join(before, name + ".ranks")) and
                os.path.isdir(os.path.join(after, name + ".ranks"))):
            ranked += 1
            continue
        nature = next((why for prefix, why in BY_NATURE.items()
                       if name.startswith(prefix)), None)
        if nature and name in a and name in b:
            natural.append(f"{name} ({nature})")
            continue
        if name not in a or name not in b:
            bad.append(f"only in {'after' if name in b else 'before'}: {name}")
            continue
        x = open(os.path.join(before, name), "rb").read()
        y = open(os.path.join(after, name), "rb").read()
        if x != y and INTERRUPTED.match(x) and INTERRUPTED.match(y):
            natural.append(f"{name} (the step a signal lands after)")
            continue
        if x == y:
            same += 1
        elif masked(x) == masked(y):
            timing += 1
        elif characters(x) == characters(y):
            interleaved += 1
        else:
            mx, my = masked(x), masked(y)
            first = next((i for i, (p, q) in enumerate(zip(mx, my)) if p != q),
                         min(len(mx), len(my)))
            bad.append(f"DIFFERENT: {name}\n  before: "
                       f"{mx[first] if first < len(mx) else '(end)'}\n  after:  "
                       f"{my[first] if first < len(my) else '(end)'}"
                       f" (words {first} of {len(mx)} / {len(my)})")
    print(f"{same} files byte for byte the same, {timing} the same but "
          f"timings and rank interleaving, {interleaved} the same characters "
          f"(ranks' stderr interleaved in one file), {ranked} mpirun outputs "
          f"compared "
          f"rank by rank, {len(natural)} different by nature, {len(bad)} "
          f"different")
    for line in natural:
        print("by nature:", line)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
