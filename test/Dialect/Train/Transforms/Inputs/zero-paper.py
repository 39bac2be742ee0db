"""Checks train-memory-report's JSON for ZeRO stages 0-3 against the paper.

Usage: zero-paper.py PREFIX RANKS PAPER_PSI
PREFIX.S.json is the report of stage S. From each report (numbers the
analysis computed from the IR): the per-rank model states (weights +
gradients + optimizer totals) must equal the formula of Rajbhandari et al.
2020 for mixed-precision AdamW (K = 12) exactly, for this model's own Psi
(the report's parameter count; the shape needs no padding, which the report
must confirm), and be within 1% of the paper's figures for PAPER_PSI
parameters; the communication per rank and step must be 2 Psi (N-1)/N
elements at stages 0-2 and 3 Psi (N-1)/N at stage 3 (within 1%: biases the
backward does not read are not gathered for it).
"""
import json
import sys

prefix, ranks, paper_psi = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
N = ranks
failed = False


def check(ok, message):
    global failed
    print(("ok   " if ok else "FAIL ") + message)
    failed = failed or not ok


def formula(stage, psi):
    return {0: 16 * psi, 1: 4 * psi + 12 * psi / N,
            2: 2 * psi + 14 * psi / N, 3: 16 * psi / N}[stage]


for stage in range(4):
    report = json.load(open("%s.%d.json" % (prefix, stage)))
    psi = report["parameters"]
    totals = report["totals"]
    states = totals["weights"] + totals["gradients"] + totals["optimizer"]
    check(report["ranks"] == N and report["zero_stage"] == stage,
          "stage %d: %d ranks" % (stage, report["ranks"]))
    padding = report.get("padding", {}).get("elements_all_ranks", 0)
    check(padding == 0, "stage %d: no padding (%d elements)" % (stage, padding))
    check(states == formula(stage, psi),
          "stage %d: model states %d B per rank == formula %.1f B (Psi = %d)"
          % (stage, states, formula(stage, psi), psi))
    paper = formula(stage, paper_psi)
    check(abs(states - paper) <= 0.01 * paper,
          "stage %d: %.3f GB per rank vs the paper's %.3f GB (%+.2f%%)"
          % (stage, states / 1e9, paper / 1e9, 100 * (states - paper) / paper))
    if stage == 3:
        print("     stage 3: gathered parameters %.3f GB at most at once"
              % (totals["gathered"] / 1e9))
    elements = sum(kind["elements_per_rank"]
                   for kind in report["communication"].values())
    want = (3 if stage == 3 else 2) * psi * (N - 1) / N
    exact = stage < 3
    ok = elements == want if exact else abs(elements - want) <= 0.01 * want
    check(ok, "stage %d: communication %d elements per rank %s %d Psi (N-1)/N"
          " = %.0f (%.4f Psi)" % (stage, elements, "==" if exact else "~",
                                  3 if stage == 3 else 2, want,
                                  elements / psi))

sys.exit(1 if failed else 0)
