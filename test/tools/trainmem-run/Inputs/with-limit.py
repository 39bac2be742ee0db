"""Runs a command under a resource limit, printing its stderr (the last
2000 characters) and its exit status.

usage: with-limit.py file|data BYTES COMMAND...
  file: the largest file it may write (RLIMIT_FSIZE, as `ulimit -f`)
  data: its heap and private mappings (RLIMIT_DATA, as `ulimit -d`)
"""
import resource
import subprocess
import sys


def main():
    kind = {"file": resource.RLIMIT_FSIZE, "data": resource.RLIMIT_DATA}[
        sys.argv[1]]
    limit = int(sys.argv[2])

    def limited():
        resource.setrlimit(kind, (limit, limit))

    run = subprocess.run(sys.argv[3:], preexec_fn=limited,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sys.stdout.write(run.stderr.decode(errors="replace")[-2000:])
    print("exit status", run.returncode)


main()
