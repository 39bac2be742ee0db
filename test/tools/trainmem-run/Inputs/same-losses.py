"""Checks that two trainmem-run loss logs hold the same steps with losses
within a relative tolerance at every step; prints the worst difference and
exits 1 past the tolerance. usage: same-losses.py A B TOLERANCE"""

import sys


def read(path):
    return dict((int(s), float(l)) for s, l in
                (line.split() for line in open(path) if line.strip()))


a, b, tolerance = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
if a.keys() != b.keys():
    sys.exit(f"the logs hold other steps: {sorted(a)} and {sorted(b)}")
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
print(f"{len(a)} steps, worst relative difference {worst:.2e}")
if worst > tolerance:
    print(f"FAIL: more than {tolerance:.0e}")
    sys.exit(1)
