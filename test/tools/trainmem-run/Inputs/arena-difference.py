"""Checks that two trainmem-run runs measured the arenas their memory reports
planned, and that the measured arenas differ by exactly what the reports
say: report_a.json run_a.out report_b.json run_b.out."""

import json
import re
import sys


def planned_and_measured(report_path, run_path):
    planned = json.load(open(report_path))["plan"]["arena_bytes"]
    text = open(run_path).read()
    match = re.search(r"arena: planned (\d+) B, measured peak (\d+) B", text)
    if not match:
        sys.exit(f"{run_path}: no 'arena: planned ... measured peak' line")
    run_planned, measured = int(match.group(1)), int(match.group(2))
    if run_planned != planned:
        sys.exit(f"{run_path}: the run planned {run_planned} B, the report "
                 f"{planned} B")
    return planned, measured


def main():
    a_planned, a_measured = planned_and_measured(sys.argv[1], sys.argv[2])
    b_planned, b_measured = planned_and_measured(sys.argv[3], sys.argv[4])
    print(f"a: planned {a_planned} B, measured {a_measured} B")
    print(f"b: planned {b_planned} B, measured {b_measured} B")
    print(f"difference: reports {a_planned - b_planned} B, "
          f"measured {a_measured - b_measured} B")
    if a_measured != a_planned or b_measured != b_planned:
        sys.exit("FAIL: a measured arena differs from its plan")
    if a_measured - b_measured != a_planned - b_planned:
        sys.exit("FAIL: the arenas differ by another amount than the reports")
    print("equal")


if __name__ == "__main__":
    main()
