#!/usr/bin/env python3
"""trainmem-plan's speed: planning llama2-70b (seq 4096, global batch 512)
on 8 ranks over the whole space (every micro-batch dividing the 64
sequences per rank, no/selective/full/budget recompute, ZeRO 0-3, 8-bit
state off/on) on an 80 GB budget. Goal: <= 10 s. Prints the candidates, the
seconds (best of three runs) and the ratio to the goal; also the same
space on llama2-7b cut to 8 layers, extrapolated and compiled whole
(--exact): the check that extrapolation picks what exhaustive search
picks, and how many peaks differ (candidates marked approximate).
usage: bench/planner.py [build/bin]"""

import json
import subprocess
import sys
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
GOAL = 10.0


def run(args):
    start = time.perf_counter()
    out = subprocess.run([f"{BIN}/trainmem-plan", *args, "--emit", "json"],
                         capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return seconds, json.loads(out.stdout)


args = ["--model", "llama2-70b", "--seq", "4096", "--global-batch", "512",
        "--ranks", "8", "--memory", "80GB", "--hardware", "h100-80gb"]
times = []
for _ in range(3):
    seconds, plan = run(args)
    times.append(seconds)
best = min(times)
compiled = [c for c in plan["candidates"] if "peak_bytes" in c]
print(f"llama2-70b on 8 ranks: {len(plan['candidates'])} candidates "
      f"({len(compiled)} compiled), best of 3 runs {best:.2f} s "
      f"(runs: {', '.join(f'{t:.2f}' for t in times)}); goal {GOAL:.0f} s: "
      f"{best / GOAL:.2f} of it")
if "best" in plan:
    c = next(c for c in plan["candidates"] if c["number"] == plan["best"])
    print(f"  best: micro-batch {c['micro_batch']} x {c['accumulation']}, "
          f"{c['remat']} recompute, ZeRO-{c['zero_stage']}, 8-bit "
          f"{c['eight_bit']}: peak {c['peak_bytes'] / 1e9:.2f} GB")
else:
    print(f"  {plan['nothing_fits']}")

small = ["--model", "llama2-7b", "--layers", "8", "--seq", "1024",
         "--global-batch", "16", "--ranks", "2", "--memory", "30GB"]
fast_s, fast = run(small)
exact_s, exact = run(small + ["--exact"])
differ = sum(a.get("peak_bytes") != b.get("peak_bytes")
             for a, b in zip(fast["candidates"], exact["candidates"]))
approximate = sum(c.get("measured") == "extrapolated, approximate"
                  for c in fast["candidates"])
same = f"{differ} of {len(fast['candidates'])} peaks differ ({approximate} marked approximate)"
print(f"llama2-7b at 8 layers, 2 ranks: extrapolated {fast_s:.2f} s, "
      f"every candidate compiled whole {exact_s:.2f} s; {same}; "
      f"same best: {fast.get('best') == exact.get('best')}")
