"""Runs a command under a pseudo-terminal of a fixed size and copies what the
terminal received (both stdout and stderr, as a terminal shows them) to our
stdout, byte for byte. Exits with the command's exit code (128 + N when a
signal N ended it).

    python3 tests/support/pty_run.py COLUMNS ROWS [--type TEXT] -- COMMAND [ARG...]

Standard input of the command is the terminal. With --type, TEXT is typed
into it at the start (the terminal holds it until the command reads a line,
and echoes it, as a terminal does); otherwise nothing is typed.
"""

import fcntl
import os
import pty
import struct
import sys
import termios


def main():
    cols, rows = int(sys.argv[1]), int(sys.argv[2])
    rest = sys.argv[3:]
    typed = None
    if rest[:1] == ["--type"]:
        typed, rest = rest[1], rest[2:]
    assert rest[:1] == ["--"], "usage: pty_run.py COLUMNS ROWS [--type TEXT] -- COMMAND [ARG...]"
    argv = rest[1:]
    pid, master = pty.fork()
    if pid == 0:
        # The child: set the size before exec, so the program sees it at once.
        fcntl.ioctl(sys.stdout.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.execvp(argv[0], argv)
    if typed is not None:
        os.write(master, typed.encode())
    out = sys.stdout.buffer
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            # EIO: the child closed its side of the terminal.
            break
        if not chunk:
            break
        out.write(chunk)
        out.flush()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sys.exit(128 + os.WTERMSIG(status))
    sys.exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
