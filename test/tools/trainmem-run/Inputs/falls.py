"""Checks that a trainmem-run loss log ('step loss' lines) falls: the mean
of its last `window` steps is below the mean of its first `window` by at
least the fraction `minimum`; prints both and exits 1 otherwise."""

import sys


def main():
    path, window, minimum = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    losses = [float(line.split()[1]) for line in open(path) if line.strip()]
    if len(losses) < 2 * window:
        sys.exit(f"{path}: {len(losses)} steps, fewer than two windows of {window}")
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    fell = (first - last) / first
    print(f"mean loss of the first {window} steps {first:.4f}, of the last "
          f"{window} {last:.4f}: fell by {fell:.2%}")
    if fell < minimum:
        print(f"FAIL: fell by less than {minimum:.0%}")
        sys.exit(1)


main()
