"""Holds the advisory lock trainmem-run takes on a --save directory (as a
running trainmem-run would, its pid written in the file) while a command
runs; prints the command's stderr and exit status.

usage: hold-lock.py DIR COMMAND...
"""
import fcntl
import os
import subprocess
import sys


def main():
    directory = sys.argv[1]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "trainmem-run.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("%d\n" % os.getpid())
        lock.flush()
        run = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    sys.stdout.write(run.stderr.decode(errors="replace"))
    print("exit status", run.returncode)


main()
