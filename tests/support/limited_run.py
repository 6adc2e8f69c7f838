"""Runs a command under an address-space limit and reports its peak memory.

Usage: limited_run.py LIMIT_BYTES STDERR_FILE COMMAND [ARG...]
Prints {"code": …, "signal": …, "peakKb": …} on stdout; the command's
stdin and stdout are /dev/null, its stderr goes to STDERR_FILE.

Why a wrapper (tests/it/template_growth.rs): Linux's ru_maxrss is a
process's peak from its fork on, before its exec too, so a command forked
from the test binary (hundreds of MB while the whole suite runs) reports the
test binary's size, not its own. Forked from this small interpreter, the
command's peak is its own plus this interpreter's few MB.
"""

import json
import os
import resource
import sys


def main():
    limit, err_path, *cmd = sys.argv[1:]
    limit = int(limit)
    pid = os.fork()
    if pid == 0:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            null = os.open(os.devnull, os.O_RDWR)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(err, 2)
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    print(
        json.dumps(
            {
                "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "peakKb": usage.ru_maxrss,
            }
        )
    )


if __name__ == "__main__":
    main()
