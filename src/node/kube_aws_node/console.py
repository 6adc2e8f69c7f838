"""Log lines of the node program, on stderr and optionally into a log file.

Invariant: every line is written whole, under one lock, so lines from
concurrent releases never interleave mid-line; a `prefix` (a release name)
starts each line of a message.
"""
import datetime
import sys
import threading


class Console(object):
    def __init__(self, program, stream=None, tee=None, timestamps=True):
        self.program = program
        self.stream = stream if stream is not None else sys.stderr
        self.tee = tee
        self.timestamps = timestamps
        self.lock = threading.Lock()

    def raw(self, text):
        """Writes `text` (whole lines) as it is: a child's output."""
        if not text:
            return
        if not text.endswith("\n"):
            text += "\n"
        with self.lock:
            self.stream.write(text)
            self.stream.flush()
            if self.tee is not None:
                with open(self.tee, "a", encoding="utf-8", errors="replace") as f:
                    f.write(text)

    def __call__(self, message, prefix=""):
        head = ""
        if self.timestamps:
            head = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ ")
        head += self.program + ": " + (prefix + ": " if prefix else "")
        lines = str(message).splitlines() or [""]
        self.raw("".join(head + l + "\n" for l in lines))
