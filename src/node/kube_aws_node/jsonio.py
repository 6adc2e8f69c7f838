"""The one JSON reader (and writer) of the node program.

Invariant: a file that is missing or not JSON raises JsonError naming the
file; a value is never guessed or half-read. Writes are atomic.
"""
import json

from . import fsutil

_MISSING = object()


class JsonError(Exception):
    pass


def parse(text, what):
    try:
        return json.loads(text)
    except ValueError as e:
        raise JsonError("%s is not JSON (%s)" % (what, e.__class__.__name__))


def read(path, default=_MISSING):
    """The parsed file; `default` when it does not exist (if given)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        if default is not _MISSING:
            return default
        raise JsonError("%s is missing" % path)
    except OSError as e:
        raise JsonError("cannot read %s: %s" % (path, e.strerror))
    return parse(text, path)


def write(path, value, mode=0o644):
    fsutil.write_atomic(path, (json.dumps(value, indent=2) + "\n").encode("utf-8"), mode=mode)
