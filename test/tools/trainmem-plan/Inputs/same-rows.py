"""Compares two `trainmem-plan --emit json --all` plans of one model written
two ways (trainmem-import's module and the equivalent preset): the rows'
analysis figures (FLOPs, most live bytes: equal but for a few kB of
train-zero's padding where the two order their parameters differently)
outside budget recompute, their arenas, and the best (measured whole by
both: its arena the same where the programs are). An arena is the memory plan of the step as compiled,
which follows the order of the parameters (train-zero's buckets, the
placement's ties): two programs that order them differently plan arenas a
little apart (the import's weights are PyTorch's [out, in], read
transposed, its projections made in the module's order), and a budget
plan, made for the arena, may then choose another recompute. usage:
same-rows.py A.json B.json"""

import json
import sys

# --arena-bound X: the arenas' bound (default 3e-2: two programs).
bound = float(sys.argv[4]) if sys.argv[3:4] == ["--arena-bound"] else 3e-2
a, b = (json.load(open(p)) for p in sys.argv[1:3])
rows = list(zip(a["candidates"], b["candidates"]))
assert len(a["candidates"]) == len(b["candidates"])
plain = [(x, y) for x, y in rows if x["remat"] != "budget"
         and "live_peak_bytes" in x and "live_peak_bytes" in y]
flops = all(x["flops"] == y["flops"] for x, y in plain)


def compare(key, bound):
    pairs = [(x[key], y[key]) for x, y in plain]
    worst = max(abs(p - q) / q for p, q in pairs)
    return (f"{sum(p == q for p, q in pairs)} equal, the largest relative "
            f"difference below {bound:.0e}: "
            f"{'yes' if worst < bound else 'no'}")


print(f"rows {len(rows)}, {len(plain)} without budget recompute; FLOPs "
      f"equal: {'yes' if flops else 'no'}")
print(f"live peaks: {compare('live_peak_bytes', 1e-5)}")
print(f"arenas: {compare('peak_bytes', bound)}")
print(f"best: #{a['best']} and #{b['best']}")
if a["best"] and b["best"]:
    x, y = a["candidates"][a["best"] - 1], b["candidates"][b["best"] - 1]
    print(f"the best's arenas: "
          f"{'equal' if x['peak_bytes'] == y['peak_bytes'] else 'differ'}")
