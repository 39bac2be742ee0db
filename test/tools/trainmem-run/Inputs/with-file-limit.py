"""Runs a command with a file-size limit (RLIMIT_FSIZE, as `ulimit -f`),
printing its exit status and its stderr.

usage: with-file-limit.py BYTES COMMAND...
"""
import resource
import subprocess
import sys


def main():
    limit = int(sys.argv[1])

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run = subprocess.run(sys.argv[2:], preexec_fn=limited,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sys.stdout.write(run.stderr.decode(errors="replace"))
    print("exit status", run.returncode)


main()
