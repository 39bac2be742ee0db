"""The gpt2 line of scripts/gpu-check.sh: step time, tokens per second and
model FLOP utilization (the memory report's forward + backward FLOPs over
the best step time and the GPU's dense bf16 peak), and the device arena's
measured peak against the plan.
usage: gpu-step-summary.py REPORT.json RUN.out PEAK_TFLOPS TOKENS"""

import json
import re
import sys

report = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
peak = float(sys.argv[3])
tokens = int(sys.argv[4])
flops = report["flops"]["forward"] + report["flops"]["backward"]
best = re.search(r"step time: best ([0-9.]+) s", out)
arena = re.search(r"arena: planned ([0-9]+) B, measured peak ([0-9]+) B", out)
if not best or not arena:
    print("no step time: " + " ".join(out.strip().splitlines()[-2:]))
    sys.exit(0)
t = float(best.group(1))
mfu = f"{flops / t / (peak * 1e12):.3f}" if peak > 0 else "n/a (peak unknown)"
print(f"{t * 1e3:.1f} ms/step, {tokens / t:.0f} tok/s, MFU {mfu} "
      f"(model {flops / 1e12:.2f} TFLOP/step, peak {peak:g} TFLOP/s); "
      f"device peak {arena.group(2)} B vs plan {arena.group(1)} B")
