"""Checks a Sophia plan's released row against the memory reports of its
step and Hessian step: the row's most live bytes (live_peak_bytes) are the
Hessian step's peak plus the bytes of the step's optimizer state that the
Hessian step does not read.
usage: sophia-peak.py PLAN.json STEP-REPORT.json HESSIAN-REPORT.json"""

import json
import sys

plan, step, hessian = (json.load(open(p)) for p in sys.argv[1:4])
row = next(c for c in plan["candidates"] if c["release_gradients"])
resident = sum(b for kind, b in step["optimizer_state"].items()
               if kind not in hessian["optimizer_state"])
expected = hessian["peak_bytes"] + resident
print(f"released row: planner {row['live_peak_bytes']} B, Hessian step + "
      f"resident state {expected} B")
print(f"released step alone {step['peak_bytes']} B, below: "
      f"{'yes' if step['peak_bytes'] < row['live_peak_bytes'] else 'no'}")
