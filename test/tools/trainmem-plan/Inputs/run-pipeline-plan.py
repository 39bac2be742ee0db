"""Runs trainmem-plan's best pipeline row as it prints it: its
trainmem-model command (the model at the row's batch) and its mpirun
trainmem-run command (its options as printed, with the corpus and 2
steps), then compares every rank's arena line with its plan and the
largest arena with the printed peak. usage: run-pipeline-plan.py BIN
CORPUS PLAN.out WORKDIR MPIRUN..."""

import os
import re
import shlex
import subprocess
import sys

bin_dir, corpus, plan_path, work = sys.argv[1:5]
mpirun = sys.argv[5:]
text = open(plan_path).read()
lines = text.splitlines()
best = next(i for i, line in enumerate(lines) if line.startswith("best:"))
peak = float(re.search(r"peak ([0-9.]+) MB", lines[best]).group(1))
model = os.path.join(work, "model.mlir")
words = shlex.split(lines[best + 1])
words[0] = os.path.join(bin_dir, words[0])
words[words.index("-o") + 1] = model
subprocess.run(words, check=True)
run = shlex.split(lines[best + 3])
assert run[0] == "mpirun" and run[1] == "-np"
ranks = int(run[2])
options = run[run.index("trainmem-run") + 2:]
# The placeholders: the corpus and the steps.
options[options.index("FILE")] = corpus
options[options.index("N")] = "2"
out = subprocess.run(mpirun + ["-np", str(ranks),
                               os.path.join(bin_dir, "trainmem-run"), model,
                               "--threads", "1"] + options,
                     capture_output=True, text=True)
arenas = re.findall(r"rank (\d+): arena planned (\d+) B, measured peak (\d+) B",
                    out.stderr)
if out.returncode != 0 or len(arenas) != ranks:
    sys.exit(f"the run failed ({out.returncode}):\n{out.stderr[-3000:]}")
every = all(planned == measured for _, planned, measured in arenas)
largest = max(int(planned) for _, planned, _ in arenas)
same = abs(largest / 1e6 - peak) < 0.005
print(f"ranks {ranks}, {'every arena its plan' if every else 'ARENA NOT PLAN'}"
      f"; largest {largest} B {'=' if same else '!='} the plan's peak "
      f"({peak:.2f} MB)")
