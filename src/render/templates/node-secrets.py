#!/usr/bin/env python3
# kube-aws node secrets. Static: what to do comes from the data files
# /etc/kube-aws/{runtime,node}.json written by cloud-init.
#
# Fetches the published secret bundle, decrypts the entries this node's role
# may read (`node.json` secrets.names) with `aws kms decrypt` under the
# encryption context {kube-aws:cluster, kube-aws:secret}, keeps each plaintext
# in /run/kube-aws/secrets/<name> (tmpfs, 0600), and fills the plugin secrets
# into the files that reference them (`node.json` secrets.files):
#   yaml/json: inside string values, so the document stays well-formed whatever
#              the value holds; text: verbatim.
# On controllers (`node.json` secrets.pki) it also places the cluster PKI where
# kubeadm looks for it: each decrypted key `pki/X` at <pki.dir>/X (0600) and each
# public entry of the bundle's `certificates` at <pki.dir>/X (0644), before
# `kubeadm init` or `join` (src/pki.rs).
# Values are data here, never shell: the aws CLI gets argument lists, and no
# plaintext is ever printed. Running it again is harmless (nothing is left to fill).
#
# `kube-aws-node-secrets blank DIR` copies stdin to stdout with every secret
# stored under DIR replaced by `<secret NAME>`: the one rule the addon
# installer (status messages) and the bootstrap (failure reports) blank with.
#
# The reference matching rule is shared with src/render/secrets.rs: the longest
# known reference wins, and it must not run on into [A-Za-z0-9_-].
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time

# KUBE_AWS_ROOT prefixes every path (tests only).
ROOT = os.environ.get("KUBE_AWS_ROOT", "")
ETC = ROOT + "/etc/kube-aws"
RUN = ROOT + "/run/kube-aws"
PREFIX = "kube-aws-secret."


def fail(message):
    print("kube-aws-node-secrets: " + message, file=sys.stderr)
    sys.exit(1)


# Answers that retrying cannot change.
FINAL = ("AccessDenied", "InvalidCiphertext", "IncorrectKey", "NotFound", "NoSuchKey", "NoSuchBucket", "Disabled")


def aws(region, args, attempts=5):
    """Runs the aws CLI, retrying what may pass; returns stdout. Never echoes stdout on failure."""
    err = ""
    for i in range(attempts):
        p = subprocess.run(["aws", "--region", region] + args, capture_output=True, text=True)
        if p.returncode == 0:
            return p.stdout
        err = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        if any(f in err for f in FINAL):
            break
        if i + 1 < attempts:
            time.sleep(2 * (i + 1))
    raise RuntimeError(err)


def write_private(path, data, like=None):
    """Writes bytes atomically; mode 0600 unless `like` (an os.stat_result) gives mode and owner."""
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".kube-aws-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if like is not None:
            os.chmod(tmp, like.st_mode & 0o7777)
            if os.geteuid() == 0:
                os.chown(tmp, like.st_uid, like.st_gid)
        else:
            os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def pki_path(directory, name):
    """<directory>/X for the bundle entry `pki/X`; refuses anything that leaves the directory."""
    rel = name[len("pki/"):] if name.startswith("pki/") else ""
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        fail("the PKI entry %r is not a plain path under pki/" % name)
    return os.path.join(ROOT + directory, *parts)


def place_pki(pki, bundle, store):
    """Writes the cluster PKI into kubeadm's certificate directory."""
    for name in pki.get("keys", []):
        src = os.path.join(store, *name.split("/"))
        if not os.path.exists(src):
            fail("the PKI key %r was not decrypted; it must be among secrets.names" % name)
        target = pki_path(pki["dir"], name)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        write_private(target, open(src, "rb").read())
    certs = bundle.get("certificates", {})
    for name in pki.get("certificates", []):
        if name not in certs:
            fail("the PKI certificate %r is not in the secret bundle; publish again with `kube-aws update`" % name)
        target = pki_path(pki["dir"], name)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        write_private(target, certs[name].encode("utf-8"))
        os.chmod(target, 0o644)


def fill_string(pattern, plain, s):
    return pattern.sub(lambda m: plain[m.group(0)], s)


def fill_value(pattern, plain, v):
    if isinstance(v, str):
        return fill_string(pattern, plain, v)
    if isinstance(v, list):
        return [fill_value(pattern, plain, x) for x in v]
    if isinstance(v, dict):
        return {k: fill_value(pattern, plain, x) for k, x in v.items()}
    return v


def fill(path, fmt, pattern, plain):
    st = os.stat(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not pattern.search(text):
        return
    if fmt == "text":
        out = fill_string(pattern, plain, text)
    elif fmt == "json":
        try:
            out = json.dumps(fill_value(pattern, plain, json.loads(text)), indent=2) + "\n"
        except ValueError as e:
            fail("%s is not valid JSON (%s); its secret references cannot be filled in" % (path, e.__class__.__name__))
    elif fmt == "yaml":
        import yaml

        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as e:
            fail("%s is not valid YAML (%s); its secret references cannot be filled in" % (path, e.__class__.__name__))
        filled = [fill_value(pattern, plain, d) for d in docs]
        out = yaml.safe_dump_all(filled, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1 << 30)
    else:
        fail("%s: unknown fill format %r" % (path, fmt))
    write_private(path, out.encode("utf-8"), like=st)


def blank(text, store):
    """`text` with every value stored under `store` replaced by `<secret NAME>`."""
    values = []
    for root, _, files in os.walk(store):
        for f in files:
            if not f.startswith("."):
                path = os.path.join(root, f)
                v = open(path, errors="replace").read()
                if v.strip():
                    values.append((v, os.path.relpath(path, store)))
    # Longest first, so a value containing another is blanked whole.
    for v, name in sorted(values, key=lambda x: -len(x[0])):
        for form in {v, v.strip()}:
            if form:
                text = text.replace(form, "<secret %s>" % name)
    return text


def main():
    rt = json.load(open(os.path.join(ETC, "runtime.json")))
    node = json.load(open(os.path.join(ETC, "node.json")))
    want = node.get("secrets", {})
    names = want.get("names", [])
    if not names:
        return
    region, cluster = rt["region"], rt["cluster"]
    uri = "s3://%s/%s/secrets/bundle.json" % (rt["bucket"], rt["keyPrefix"])
    store = os.path.join(RUN, "secrets")
    os.makedirs(store, mode=0o700, exist_ok=True)
    os.chmod(store, 0o700)

    bundle_path = os.path.join(store, ".bundle.json")
    try:
        aws(region, ["s3", "cp", "--only-show-errors", uri, bundle_path], attempts=10)
        bundle = json.load(open(bundle_path))
    except (RuntimeError, ValueError) as e:
        fail("cannot read the secret bundle %s: %s" % (uri, e))
    if bundle.get("encryptionContext", {}).get("kube-aws:cluster") != cluster:
        fail("the secret bundle %s belongs to another cluster; publish again with `kube-aws update`" % uri)

    plain = {}
    for name in names:
        ct = bundle.get("secrets", {}).get(name)
        if ct is None:
            fail("the secret %r is not in %s; publish again with `kube-aws update`" % (name, uri))
        blob = os.path.join(store, ".ciphertext")
        write_private(blob, base64.b64decode(ct))
        context = json.dumps({"kube-aws:cluster": cluster, "kube-aws:secret": name})
        try:
            out = aws(region, ["kms", "decrypt", "--ciphertext-blob", "fileb://" + blob,
                               "--encryption-context", context, "--query", "Plaintext", "--output", "text"])
        except RuntimeError as e:
            fail("cannot decrypt the secret %r with this node's role: %s" % (name, e))
        finally:
            os.unlink(blob)
        value = base64.b64decode(out.strip())
        target = os.path.join(store, *name.split("/"))
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        write_private(target, value)
        if name.startswith(PREFIX):
            plain[name] = value.decode("utf-8")

    os.unlink(bundle_path)
    if want.get("pki"):
        place_pki(want["pki"], bundle, store)
    if plain:
        refs = sorted(plain, key=lambda r: (-len(r), r))
        pattern = re.compile("(?:%s)(?![A-Za-z0-9_-])" % "|".join(re.escape(r) for r in refs))
        for f in want.get("files", []):
            fill(ROOT + f["path"], f["format"], pattern, plain)


if __name__ == "__main__":
    if sys.argv[1:2] == ["blank"] and len(sys.argv) == 3:
        sys.stdout.write(blank(sys.stdin.read(), sys.argv[2]))
    else:
        main()
