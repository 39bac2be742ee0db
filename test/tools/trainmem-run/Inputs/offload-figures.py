"""Prints an offloaded run's arenas and staging bytes next to its memory
report's, and how much smaller the device arena is than without offload.
Arguments: the report (JSON), the offloaded run's output, the run's output
without offload."""
import json
import re
import sys

report = json.load(open(sys.argv[1]))
run = open(sys.argv[2]).read()
plain = open(sys.argv[3]).read()
arena = int(re.search(r"^arena: planned (\d+) B", run, re.M).group(1))
m = re.search(r"^host arena: planned (\d+) B, measured peak \d+ B; staging copies (\d+) B per step", run, re.M)
host, moved = int(m.group(1)), int(m.group(2))
plain_arena = int(re.search(r"^arena: planned (\d+) B", plain, re.M).group(1))
print("device arena: report %d B, run %d B" % (report["plan"]["arena_bytes"], arena))
print("host arena: report %d B, run %d B" % (report["host"]["arena_bytes"], host))
print("host<->device per step: report %d B, run %d B" %
      (report["host"]["host_device_bytes_per_step"], moved))
print("device arena without offload - with: %d B" % (plain_arena - arena))
