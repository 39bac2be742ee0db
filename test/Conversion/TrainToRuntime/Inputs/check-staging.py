"""Checks the staging copies of a lowered step with host memory
(train-offload-optimizer): every tmrt_transfer into the device is read by
the calls after it and goes back, from the same place to the same host
location, before the step ends; no call but a transfer names a host
location that has a copy on the device; host locations (TMRT_HOST_MEMORY,
bit 55) lie in the host arena, device ones in the arena. Prints what it
found."""
import re
import sys

HOST = 1 << 55
OFFSET = HOST - 1

text = open(sys.argv[1]).read()
arena = int(re.search(r"tmrt\.arena_bytes = (\d+)", text).group(1))
host_match = re.search(r"tmrt\.host_arena_bytes = (\d+)", text)
host_arena = int(host_match.group(1)) if host_match else 0

# The calls in the order they run: the step's own, then its parts in turn.
functions = {}
order = []
name = None
constants = {}
for line in text.splitlines():
    m = re.match(r"\s*func\.func (?:private )?@([\w.]+)\(", line)
    if m:
        name = m.group(1)
        functions[name] = []
        order.append(name)
        constants = {}
        continue
    m = re.match(r"\s*(%[\w]+) = arith\.constant (-?\d+) : i64", line)
    if m:
        constants[m.group(1)] = int(m.group(2))
        continue
    m = re.match(r"\s*(?:func\.)?call @([\w.]+)\(([^)]*)\)", line)
    if m and name:
        args = [constants.get(a.strip()) for a in m.group(2).split(",")[1:]]
        functions[name].append((m.group(1), args))

step = [n for n in order if not n.startswith("tmrt_") and ".part" not in n]
calls = []


def expand(fn):
    for callee, args in functions[fn]:
        if callee in functions and not callee.startswith("tmrt_"):
            expand(callee)
        else:
            calls.append((callee, args))


for fn in step:
    expand(fn)


def fail(message):
    print("error:", message)
    sys.exit(1)


def check_range(location, size):
    offset = location & OFFSET
    limit = host_arena if location & HOST else arena
    if offset + size > limit:
        fail("%d B at %d lie outside the %s of %d B" %
             (size, offset, "host arena" if location & HOST else "arena", limit))


active = {}  # device offset -> [host location, bytes, calls that read it]
copies = transfers = moved = host_args = readers = 0
for callee, args in calls:
    if callee == "tmrt_transfer":
        source, dest, size = args
        check_range(source, size)
        check_range(dest, size)
        transfers += 1
        moved += size
        if source & HOST and not dest & HOST:
            if dest in active:
                fail("a copy into %d while the copy there is live" % dest)
            active[dest] = [source, size, 0]
            copies += 1
        elif dest & HOST and not source & HOST:
            if source not in active or active[source][:2] != [dest, size]:
                fail("a copy back from %d that did not come in" % source)
            if active[source][2] == 0:
                fail("the copy at %d goes back unread" % source)
            del active[source]
        else:
            fail("a transfer within one arena")
        continue
    for a in args:
        if a is None or a < 0:
            continue
        location = a & ((1 << 56) - 1)  # without the element type
        if location & HOST:
            host_args += 1
            if any(host == location for host, _, _ in active.values()):
                fail("%s names host location %d while it has a copy" % (callee, location))
        elif location in active:
            active[location][2] += 1
            readers += 1
if active:
    fail("copies never go back: %s" % sorted(active))

print("staging copies %d, calls reading them %d, transfers %d, bytes per "
      "step %d, host arguments of other calls %d, host arena %d" %
      (copies, readers, transfers, moved, host_args, host_arena))
