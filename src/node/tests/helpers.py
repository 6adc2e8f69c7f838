"""Test helpers: the package on sys.path, a fake `aws` runner."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))


class FakeRunner(object):
    """Stands in for subprocess.run: answers each call with the next (code, stdout, stderr)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, args, **kw):
        self.calls.append(list(args))
        code, out, err = self.answers.pop(0)
        return subprocess.CompletedProcess(args, code, out, err)
