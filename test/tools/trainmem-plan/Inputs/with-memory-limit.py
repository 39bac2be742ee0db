"""Runs a command with its data memory limited (RLIMIT_DATA: the heap and
private mappings, as `ulimit -d`); prints its exit status.

usage: with-memory-limit.py MEGABYTES COMMAND...
"""
import resource
import subprocess
import sys


def main():
    limit = int(sys.argv[1]) * 1024 * 1024

    def limited():
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    run = subprocess.run(sys.argv[2:], preexec_fn=limited,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sys.stdout.write(run.stderr.decode(errors="replace")[-2000:])
    print("exit status", run.returncode)


main()
