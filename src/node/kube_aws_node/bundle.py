"""The addon bundle: fetched, checked against the plan pointer's sha256,
unpacked, and its secret references filled in.

Invariant: nothing is unpacked from a bundle whose sha256 differs from the
pointer's; every bundle path is a plain relative path (no '/', '.', '..'
escape); files are private (0600); secrets come from the values the node
decrypted at boot, by secrets.py's own fill rule.
"""
import hashlib
import os
import shutil

from . import fsutil, jsonio, secrets
from .awscall import AwsError


class BundleError(Exception):
    pass


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack(aws, uri, sha256, out, store):
    """Unpacks the bundle at `uri` into the fresh directory `out`."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    raw = os.path.join(out, ".bundle.json")
    try:
        aws(["s3", "cp", "--only-show-errors", uri, raw])
    except AwsError as e:
        raise BundleError("cannot fetch %s: %s" % (uri, e))
    if sha256_file(raw) != sha256:
        raise BundleError("%s does not match its sha256" % uri)
    try:
        doc = jsonio.read(raw)
    except jsonio.JsonError as e:
        raise BundleError(str(e))
    for rel, text in sorted(doc.get("files", {}).items()):
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise BundleError("bundle path %r is not a plain relative path" % rel)
        fsutil.write_atomic(os.path.join(out, *parts), text.encode("utf-8"))
    files = doc.get("secretFiles", [])
    if files:
        try:
            secrets.fill_files(out, files, secrets.stored_plugin_secrets(store))
        except secrets.SecretsError as e:
            raise BundleError(str(e))
