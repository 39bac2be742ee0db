"""Compares two trainmem-run loss logs ('step loss' lines) of the same run
length: prints each one's final loss (mean of the last `window` steps) and
their relative difference; exits 1 when that exceeds `tolerance`."""

import sys


def final_loss(path, window):
    losses = [float(line.split()[1]) for line in open(path) if line.strip()]
    if len(losses) < window:
        sys.exit(f"{path}: {len(losses)} steps, fewer than the window {window}")
    return losses, sum(losses[-window:]) / window


def main():
    reference, candidate, window, tolerance = sys.argv[1:5]
    window, tolerance = int(window), float(tolerance)
    ref, ref_final = final_loss(reference, window)
    cand, cand_final = final_loss(candidate, window)
    if len(ref) != len(cand):
        sys.exit(f"the logs have {len(ref)} and {len(cand)} steps")
    diff = (cand_final - ref_final) / ref_final
    print(f"final loss (mean of the last {window} steps): "
          f"reference {ref_final:.4f}, candidate {cand_final:.4f}, "
          f"relative difference {diff:+.4%}")
    if abs(diff) > tolerance:
        print(f"FAIL: more than {tolerance:.2%} apart")
        sys.exit(1)
    print("within tolerance")


main()
