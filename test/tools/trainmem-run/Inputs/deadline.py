"""Runs a command and says how it ended: "exit CODE within DEADLINE s", or
"still running after DEADLINE s" (then kills its process group). Its
output goes to OUTPUT. usage: deadline.py SECONDS OUTPUT COMMAND..."""

import os
import signal
import subprocess
import sys
import time

deadline, output, command = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
start = time.monotonic()
with open(output, "w") as out:
    process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        code = process.wait(timeout=deadline)
        print(f"exit {code} within {deadline:.0f} s "
              f"({time.monotonic() - start:.1f} s)")
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        print(f"still running after {deadline:.0f} s")
