"""Checks the staging copies of a lowered step with host memory
(train-offload-optimizer): every tmrt_transfer into the device comes right
before an optimizer update that reads its destination, and goes back from
the same place right after it; host locations (TMRT_HOST_MEMORY, bit 55)
lie in the host arena, device ones in the arena. Prints what it found."""
import re
import sys

HOST = 1 << 55

text = open(sys.argv[1]).read()
arena = int(re.search(r"tmrt\.arena_bytes = (\d+)", text).group(1))
host_match = re.search(r"tmrt\.host_arena_bytes = (\d+)", text)
host_arena = int(host_match.group(1)) if host_match else 0

calls = []  # (callee, [int args or None])
constants = {}
for line in text.splitlines():
    if "func.func" in line:
        constants = {}
    m = re.match(r"\s*(%[\w]+) = arith\.constant (-?\d+) : i64", line)
    if m:
        constants[m.group(1)] = int(m.group(2))
        continue
    m = re.match(r"\s*(?:func\.)?call @(tmrt_\w+)\(([^)]*)\)", line)
    if m:
        args = [constants.get(a.strip()) for a in m.group(2).split(",")[1:]]
        calls.append((m.group(1), args))


def fail(message):
    print("error:", message)
    sys.exit(1)


def check_range(location, size):
    offset = location & (HOST - 1)
    limit = host_arena if location & HOST else arena
    if offset + size > limit:
        fail("%d B at %d lie outside the %s of %d B" %
             (size, offset, "host arena" if location & HOST else "arena", limit))


updates = transfers = moved = host_args = 0
i = 0
while i < len(calls):
    name, args = calls[i]
    if name != "tmrt_transfer":
        host_args += sum(1 for a in args if a is not None and a >= 0 and a & HOST)
        i += 1
        continue
    # A run of transfers in, the update, the same transfers out.
    ins = []
    while i < len(calls) and calls[i][0] == "tmrt_transfer":
        ins.append(calls[i][1])
        i += 1
    if i >= len(calls):
        fail("transfers at the end of the step")
    update, update_args = calls[i]
    i += 1
    outs = []
    while i < len(calls) and calls[i][0] == "tmrt_transfer" and len(outs) < len(ins):
        outs.append(calls[i][1])
        i += 1
    for (source, dest, size), back in zip(ins, outs):
        if not source & HOST or dest & HOST:
            fail("a transfer before %s is not host -> device" % update)
        if back != [dest, source, size]:
            fail("%s: the copy in %s does not go back (%s)" % (update, [source, dest, size], back))
        if dest not in update_args:
            fail("%s does not read its staging copy at %d" % (update, dest))
        if source in update_args:
            fail("%s names host location %d itself" % (update, source))
        check_range(source, size)
        check_range(dest, size)
        moved += 2 * size
    if len(outs) != len(ins):
        fail("%s: %d copies in, %d back" % (update, len(ins), len(outs)))
    updates += 1
    transfers += len(ins) + len(outs)

print("staged updates %d, transfers %d, bytes per step %d, host arguments "
      "of other calls %d, host arena %d" % (updates, transfers, moved, host_args,
                                            host_arena))
