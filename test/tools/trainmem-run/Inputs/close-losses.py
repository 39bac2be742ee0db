"""Compares two trainmem-run loss logs ('step loss' lines) step by step:
prints how many steps agree within `tolerance` relative, or the first that
does not (and exits 1)."""

import sys


def losses(path):
    return [float(line.split()[1]) for line in open(path) if line.strip()]


def main():
    reference, candidate, tolerance = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ref, cand = losses(reference), losses(candidate)
    if len(ref) != len(cand) or not ref:
        sys.exit(f"the logs have {len(ref)} and {len(cand)} steps")
    for step, (a, b) in enumerate(zip(ref, cand), start=1):
        if abs(a - b) > tolerance * abs(a):
            print(f"FAIL: step {step}: {a} vs {b}, more than {tolerance} apart")
            sys.exit(1)
    print(f"{len(ref)} steps within {tolerance}")


if __name__ == "__main__":
    main()
