"""Atomic file writes.

Invariant: a file is replaced whole (temporary file + rename in the same
directory), private (0600) unless a mode or a model file is given, and no
temporary file is left behind on failure.
"""
import os
import tempfile


def write_atomic(path, data, mode=0o600, like=None):
    """Writes bytes atomically; `like` (an os.stat_result) gives mode and owner."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".kube-aws-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if like is not None:
            os.chmod(tmp, like.st_mode & 0o7777)
            if os.geteuid() == 0:
                os.chown(tmp, like.st_uid, like.st_gid)
        else:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
