"""The addon bundle: fetched, checked against the plan pointer's sha256,
unpacked, and its secret references filled in.

Invariant: nothing is read or unpacked from a bundle whose sha256 differs
from the pointer's; every bundle path is a plain relative path (no '/', '.',
'..' escape); files are private (0600) in a private directory (0700);
secrets come from the values decrypted into the store, by secrets.py's own
fill rule, and a file the bundle marks as holding references is never
unpacked with a reference that has no value (BundleError names the
reference, never a value).
"""
import hashlib
import os
import re
import shutil

from . import fsutil, jsonio, secrets
from .awscall import AwsError

# Any reference, known here or not: PREFIX, then name characters and dots,
# not ending on a dot (the names of src/render/secrets.rs).
ANY_REFERENCE = re.compile(re.escape(secrets.PREFIX) + r"[A-Za-z0-9_.-]*[A-Za-z0-9_-]")


class BundleError(Exception):
    pass


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(aws, uri, sha256, path):
    """The bundle at `uri`, at `path` and checked against `sha256`; a copy
    already there that matches is kept (the published bundle holds
    references, never values)."""
    if os.path.exists(path) and sha256_file(path) == sha256:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    part = path + ".part"
    try:
        aws(["s3", "cp", "--only-show-errors", uri, part])
    except AwsError as e:
        raise BundleError("cannot fetch %s: %s" % (uri, e))
    if sha256_file(part) != sha256:
        os.unlink(part)
        raise BundleError("%s does not match its sha256" % uri)
    os.replace(part, path)
    return path


def read(path):
    try:
        doc = jsonio.read(path)
    except jsonio.JsonError as e:
        raise BundleError(str(e))
    if not isinstance(doc, dict) or not isinstance(doc.get("files", {}), dict):
        raise BundleError("%s is not an addon bundle" % path)
    return doc


def plan(doc):
    """The bundle's plan.json (it holds no secret reference)."""
    text = doc.get("files", {}).get("plan.json")
    if not isinstance(text, str):
        raise BundleError("the addon bundle has no plan.json")
    try:
        return jsonio.parse(text, "the addon bundle's plan.json")
    except jsonio.JsonError as e:
        raise BundleError(str(e))


def missing_references(text, plain):
    """The references in `text` that `plain` has no value for, sorted."""
    rest = secrets.reference_pattern(plain).sub("", text) if plain else text
    return sorted(set(ANY_REFERENCE.findall(rest)))


def unpack_doc(doc, out, store):
    """Unpacks the bundle `doc` into the fresh private directory `out`, secrets filled."""
    files = doc.get("files", {})
    secret_files = doc.get("secretFiles", [])
    plain = secrets.stored_plugin_secrets(store) if secret_files else {}
    for f in secret_files:
        text = files.get(f.get("path", "").lstrip("/"), "")
        missing = missing_references(text, plain)
        if missing:
            raise BundleError("the secret reference %s in %s has no value on this controller (it was not "
                              "decrypted: is it among node.json's secrets.names?)" % (", ".join(missing), f["path"]))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out, mode=0o700)
    os.chmod(out, 0o700)
    for rel, text in sorted(files.items()):
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise BundleError("bundle path %r is not a plain relative path" % rel)
        fsutil.write_atomic(os.path.join(out, *parts), text.encode("utf-8"))
    if secret_files:
        try:
            secrets.fill_files(out, secret_files, plain)
        except secrets.SecretsError as e:
            raise BundleError(str(e))


def unpack(aws, uri, sha256, out, store):
    """Fetches the bundle at `uri` and unpacks it into the fresh directory `out`."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out, mode=0o700)
    raw = fetch(aws, uri, sha256, os.path.join(out, ".bundle.json"))
    unpack_doc(read(raw), out, store)
