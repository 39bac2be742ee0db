"""Prints the train ops that docs/CostModel.md's table does not list.

Usage: ops-in-cost-model.py TrainOps.td CostModel.md
"""
import re
import sys

ops = re.findall(r'^def Train_\w+Op : \w+<"(\w+)"', open(sys.argv[1]).read(),
                 re.M)
listed = set(re.findall(r"`(\w+)`", open(sys.argv[2]).read()))
missing = [op for op in ops if op not in listed and op != "yield"]
print(f"{len(ops)} ops")
for op in missing:
    print(f"missing from the cost table: {op}")
if not missing:
    print("every op is listed")
