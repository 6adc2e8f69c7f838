"""Runs a command under a pseudo-terminal of a fixed size and copies what the
terminal received (both stdout and stderr, as a terminal shows them) to our
stdout, byte for byte. Exits with the command's exit code (128 + N when a
signal N ended it).

    python3 tests/support/pty_run.py COLUMNS ROWS [--type TEXT] [--keys] -- COMMAND [ARG...]

Standard input of the command is the terminal. With --type, TEXT is typed
into it at the start (the terminal holds it until the command reads a line,
and echoes it, as a terminal does). With --keys, whatever arrives on our own
standard input is typed into the terminal as it comes: a "\\x03" byte is
Ctrl-C, which the terminal turns into SIGINT for the command, as for a user.
"""

import fcntl
import os
import pty
import select
import struct
import sys
import termios


def main():
    cols, rows = int(sys.argv[1]), int(sys.argv[2])
    rest = sys.argv[3:]
    typed, keys = None, False
    while rest and rest[0] != "--":
        if rest[0] == "--type":
            typed, rest = rest[1], rest[2:]
        elif rest[0] == "--keys":
            keys, rest = True, rest[1:]
        else:
            sys.exit(f"pty_run.py: unknown option {rest[0]!r}")
    assert rest[:1] == ["--"], "usage: pty_run.py COLUMNS ROWS [--type TEXT] [--keys] -- COMMAND [ARG...]"
    argv = rest[1:]
    pid, master = pty.fork()
    if pid == 0:
        # The child: set the size before exec, so the program sees it at once.
        fcntl.ioctl(sys.stdout.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.execvp(argv[0], argv)
    if typed is not None:
        os.write(master, typed.encode())
    out = sys.stdout.buffer
    inputs = [master] + ([sys.stdin.fileno()] if keys else [])
    done = False
    while not done:
        ready, _, _ = select.select(inputs, [], [])
        for fd in ready:
            if fd == master:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    # EIO: the child closed its side of the terminal.
                    chunk = b""
                if not chunk:
                    done = True
                    break
                out.write(chunk)
                out.flush()
            else:
                data = os.read(fd, 1024)
                if data:
                    os.write(master, data)
                else:
                    inputs.remove(fd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sys.exit(128 + os.WTERMSIG(status))
    sys.exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
