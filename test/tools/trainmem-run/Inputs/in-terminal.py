"""Runs a command with its stderr on a pseudo-terminal (as in a terminal)
and prints what it wrote there with control characters escaped (\\r, \\n,
\\x1b), on one line, for FileCheck. usage: in-terminal.py COMMAND [ARGS...]"""

import os
import pty
import subprocess
import sys
import termios

master, slave = pty.openpty()
# A terminal that does not turn \n into \r\n, so the bytes are the program's.
attrs = termios.tcgetattr(slave)
attrs[1] &= ~termios.OPOST
termios.tcsetattr(slave, termios.TCSANOW, attrs)
process = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL,
                           stderr=slave, stdin=subprocess.DEVNULL)
os.close(slave)
chunks = []
while True:
    try:
        data = os.read(master, 65536)
    except OSError:  # the other end closed (Linux: EIO)
        break
    if not data:
        break
    chunks.append(data)
code = process.wait()
text = b"".join(chunks).decode("utf-8", "replace")
print(text.replace("\x1b", "\\x1b").replace("\r", "\\r").replace("\n", "\\n"))
sys.exit(code)
