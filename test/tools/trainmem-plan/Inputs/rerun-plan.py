"""Reruns trainmem-plan's choices through trainmem-model and trainmem-opt
(the candidate's pipeline, then train-memory-report) and compares the
report's arena plan (the plan the step carries: its loop's, planned
rolled) with the planner's peak_bytes, and the report's most live bytes
with its live_peak_bytes. usage: rerun-plan.py BIN PLAN.json
WHICH... where WHICH is a candidate number, 'best', or the first fitting
candidate measured 'whole-rolled' (the whole model, its micro-batch loop
rolled) or 'extrapolated-rolled'; prints one line per candidate: its
number, how the planner measured it, both peaks and their relative
difference."""

import json
import os
import subprocess
import sys

bin_dir, plan_path = sys.argv[1], sys.argv[2]
plan = json.load(open(plan_path))
rolled = []
for name in sys.argv[3:]:
    kinds = {"whole-rolled": "whole model", "extrapolated-rolled":
             "extrapolated"}
    if name == "best":
        number = plan["best"]
    elif name in kinds:
        number = next(c["number"] for c in plan["candidates"]
                      if c["fits"] and c.get("measured") == kinds[name]
                      and c.get("micro_batch_loop") == "rolled")
    else:
        number = int(name)
    c = plan["candidates"][number - 1]
    assert c["number"] == number
    model = subprocess.run(
        [os.path.join(bin_dir, "trainmem-model"), "--preset", plan["model"],
         "--layers", str(plan["layers"]), "--seq", str(plan["seq"]),
         "--dtype", plan["dtype"],
         "--batch", str(c["micro_batch"] * c["accumulation"])],
        check=True, capture_output=True).stdout
    report = subprocess.run(
        [os.path.join(bin_dir, "trainmem-opt"), "-o", "/dev/null",
         "--pass-pipeline=builtin.module(" + c["pipeline"] +
         ",train-memory-report{format=json})"],
        input=model, check=True, capture_output=True).stdout
    measured = json.loads(report)
    peak = measured["plan"]["arena_bytes"]
    diff = (peak - c["peak_bytes"]) / c["peak_bytes"]
    live = measured["peak_bytes"] == c["live_peak_bytes"]
    print(f"{name}: #{number} ({c['measured']}, micro-batch loop "
          f"{c['micro_batch_loop']}): planner {c['peak_bytes']} B, "
          f"rerun {peak} B, relative difference {diff:+.2e}"
          + (", equal" if peak == c["peak_bytes"] else "")
          + ("" if live else f"; live peak {measured['peak_bytes']} B, "
             f"planner {c['live_peak_bytes']} B"))
    if c["micro_batch_loop"] == "rolled":
        rolled.append(abs(diff))
if rolled:
    print(f"rolled rows rerun: {len(rolled)}, all equal: "
          f"{max(rolled) == 0}")
