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

# Issue 53: pipeline stages as a dimension. The 1T-parameter GPT of
# Narayanan et al. 2021 (128 layers, hidden 25600, 160 heads, seq 2048) on
# 3,072 A100 80 GB at their configuration (t = 8, p = 64, global batch
# 3072): it must fit 80 GB and plan in under 60 s; and GPT-3 175B (their
# vocabulary of 51,200) on 1,024 A100s at batch 1536, p searched over 8
# and 16.
PIPELINE_GOAL = 60.0
rows = [
    ("gpt-1t, 3072 A100 80GB, t 8, p 64",
     ["--model", "gpt-1t", "--ranks", "3072", "--global-batch", "3072",
      "--hardware", "a100-80gb", "--tensor-parallel", "8",
      "--pipeline-parallel", "64", "--sequence-parallel", "off"]),
    ("gpt3-175b, 1024 A100 80GB, t 8, p 8|16",
     ["--model", "gpt3-175b", "--vocab", "51200", "--ranks", "1024",
      "--global-batch", "1536", "--hardware", "a100-80gb",
      "--tensor-parallel", "8", "--pipeline-parallel", "8,16",
      "--sequence-parallel", "off"]),
]
for name, row in rows:
    seconds, plan = run(row)
    if "best" not in plan:
        print(f"{name}: nothing fits ({seconds:.1f} s)")
        continue
    c = next(c for c in plan["candidates"] if c["number"] == plan["best"])
    flops = c["flops"]
    total = (flops["forward"] + flops["backward"] + flops["recompute"]) * \
        int(row[row.index("--ranks") + 1]) // (c["pipeline_parallel"] *
                                                c["tensor_parallel"])
    print(f"{name}: planned in {seconds:.1f} s (goal {PIPELINE_GOAL:.0f} s: "
          f"{seconds / PIPELINE_GOAL:.2f} of it), {len(plan['candidates'])} "
          f"candidates; best micro-batch {c['micro_batch']} x "
          f"{c['accumulation']}, {c['remat']} recompute, t "
          f"{c['tensor_parallel']}, p {c['pipeline_parallel']} x v "
          f"{c['virtual_stages']}, ZeRO-{c['zero_stage']}, 8-bit "
          f"{c['eight_bit']}: peak {c['peak_bytes'] / 1e9:.2f} GB "
          f"({c['measured']}), step {c['seconds']['step']:.1f} s (bubble "
          f"{c['seconds']['bubble']:.1f} s, exchanges "
          f"{c['seconds']['point_to_point']:.1f} s), "
          f"{c['units_in_flight']} micro-batches in flight on the first stage")
