"""`kube-aws-node secrets`: this node's secrets, decrypted and filled in.

Fetches the secret bundle this node's stack version was published with (the
content-addressed key its stack's SSM parameter holds, runtime.json
secretBundleParameter: never the latest bundle, which an unconfirmed or
rolled-back `update` may have written), decrypts the entries this node's role
may read (node.json secrets.names) with `aws kms decrypt` under the
encryption context {kube-aws:cluster, kube-aws:secret}, keeps each plaintext
in /run/kube-aws/secrets/<name> (tmpfs, 0600), and fills the plugin secrets
into the files that reference them (node.json secrets.files):
  yaml/json: inside string values, so the document stays well-formed whatever
             the value holds; text: verbatim.
On controllers (node.json secrets.pki) it also places the cluster PKI where
kubeadm looks for it: each decrypted key `pki/X` at <pki.dir>/X (0600) and
each public entry of the bundle's `certificates` at <pki.dir>/X (0644), before
`kubeadm init` or `join` (src/pki.rs).

`kube-aws-node secrets blank DIR` copies stdin to stdout with every secret
stored under DIR replaced by `<secret NAME>`: `blank()` is the one rule the
reconciler (status messages) and the bootstrap (failure reports) use.

The reconciler decrypts the plugin secrets again before each run
(`decrypt_plugin_secrets`, the same code): the store is tmpfs, empty once the
node restarts.

Invariant: no plaintext is ever printed or put in an argument; running it
again is harmless. The reference rule is shared with src/render/secrets.rs
(the longest known reference wins, and it must not run on into
[A-Za-z0-9_-]); tests/fixtures/secret-refs.json holds the vectors both check.
YAML files are read with PyYAML, which AL2023 ships for cloud-init.
"""
import base64
import json
import os
import re
import sys

from . import fsutil, jsonio, paths
from .awscall import Aws, AwsError

PREFIX = "kube-aws-secret."
NAME_CHARS = "A-Za-z0-9_-"


class SecretsError(Exception):
    pass


def reference_pattern(refs):
    """The regex that finds `refs` in text: longest first, not followed by a name character."""
    ordered = sorted(set(refs), key=lambda r: (-len(r), r))
    return re.compile("(?:%s)(?![%s])" % ("|".join(re.escape(r) for r in ordered), NAME_CHARS))


def find_references(text, known):
    """The known references `text` holds (the rule of src/render/secrets.rs find_references)."""
    if not known:
        return set()
    return set(m.group(0) for m in reference_pattern(known).finditer(text))


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


def fill_text(text, fmt, pattern, plain, what):
    """`text` (a file's content in format `fmt`) with the references filled in."""
    if fmt == "text":
        return fill_string(pattern, plain, text)
    if fmt == "json":
        doc = jsonio.parse(text, what)
        return json.dumps(fill_value(pattern, plain, doc), indent=2) + "\n"
    if fmt == "yaml":
        import yaml  # PyYAML: on AL2023 with cloud-init; only files that need it load it

        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as e:
            raise SecretsError("%s is not valid YAML (%s); its secret references cannot be filled in"
                               % (what, e.__class__.__name__))
        filled = [fill_value(pattern, plain, d) for d in docs]
        return yaml.safe_dump_all(filled, sort_keys=False, default_flow_style=False, allow_unicode=True,
                                  width=1 << 30)
    raise SecretsError("%s: unknown fill format %r" % (what, fmt))


def fill(path, fmt, pattern, plain):
    """Fills the file in place, keeping its mode and owner; a file without references is left alone."""
    st = os.stat(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not pattern.search(text):
        return
    try:
        out = fill_text(text, fmt, pattern, plain, path)
    except jsonio.JsonError as e:
        raise SecretsError("%s; its secret references cannot be filled in" % e)
    fsutil.write_atomic(path, out.encode("utf-8"), like=st)


def stored_plugin_secrets(store):
    """{reference: plaintext} of the plugin secrets decrypted under `store`."""
    plain = {}
    if os.path.isdir(store):
        for name in os.listdir(store):
            if name.startswith(PREFIX):
                with open(os.path.join(store, name), encoding="utf-8") as f:
                    plain[name] = f.read()
    return plain


def fill_files(base, files, plain):
    """Fills each {path, format} (relative to `base`, '/'-separated) with `plain`."""
    if not plain:
        return
    pattern = reference_pattern(plain)
    for f in files:
        fill(os.path.join(base, *f["path"].lstrip("/").split("/")), f["format"], pattern, plain)


def blank(text, store):
    """`text` with every value stored under `store` replaced by `<secret NAME>`."""
    values = []
    for top, _, files in os.walk(store):
        for f in files:
            if not f.startswith("."):
                p = os.path.join(top, f)
                with open(p, errors="replace") as fh:
                    v = fh.read()
                if v.strip():
                    values.append((v, os.path.relpath(p, store)))
    # Longest first, so a value containing another is blanked whole.
    for v, name in sorted(values, key=lambda x: -len(x[0])):
        for form in {v, v.strip()}:
            if form:
                text = text.replace(form, "<secret %s>" % name)
    return text


def store_dir():
    return paths.path(paths.SECRETS)


def pki_path(directory, name):
    """<directory>/X for the bundle entry `pki/X`; refuses anything that leaves the directory."""
    rel = name[len("pki/"):] if name.startswith("pki/") else ""
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        raise SecretsError("the PKI entry %r is not a plain path under pki/" % name)
    return os.path.join(paths.path(directory), *parts)


def place_pki(pki, bundle, store):
    """Writes the cluster PKI into kubeadm's certificate directory."""
    for name in pki.get("keys", []):
        src = os.path.join(store, *name.split("/"))
        if not os.path.exists(src):
            raise SecretsError("the PKI key %r was not decrypted; it must be among secrets.names" % name)
        target = pki_path(pki["dir"], name)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        with open(src, "rb") as f:
            fsutil.write_atomic(target, f.read())
    certs = bundle.get("certificates", {})
    for name in pki.get("certificates", []):
        if name not in certs:
            raise SecretsError("the PKI certificate %r is not in the secret bundle; publish again with "
                               "`kube-aws update`" % name)
        target = pki_path(pki["dir"], name)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        fsutil.write_atomic(target, certs[name].encode("utf-8"), mode=0o644)


BUNDLE_KEY = re.compile(r"secrets/[0-9a-f]{64}/bundle\.json")


def bundle_uri(aws, runtime):
    """The S3 URI of the bundle the node's stack points at."""
    name = runtime.get("secretBundleParameter") or ""
    if not name:
        raise SecretsError("runtime.json names no secretBundleParameter; render and publish again with "
                           "`kube-aws update`")
    try:
        out = aws(["ssm", "get-parameter", "--name", name], attempts=10)
        key = out["Parameter"]["Value"]
    except (AwsError, KeyError, TypeError) as e:
        raise SecretsError("cannot read the secret bundle pointer %s: %s" % (name, e))
    if not isinstance(key, str) or not BUNDLE_KEY.fullmatch(key):
        raise SecretsError("the secret bundle pointer %s holds %r, not secrets/<sha256>/bundle.json"
                           % (name, key))
    return "s3://%s/%s/%s" % (runtime["bucket"], runtime["keyPrefix"], key)


def decrypt_all(aws, runtime, node, plugin_only=False):
    """Decrypts, stores and fills this node's secrets (see the module header).
    `plugin_only`: only the plugin secrets (PREFIX), into the store, and
    nothing placed or filled (decrypt_plugin_secrets)."""
    want = node.get("secrets", {})
    names = [n for n in want.get("names", []) if not plugin_only or n.startswith(PREFIX)]
    if not names:
        return
    cluster = runtime["cluster"]
    uri = bundle_uri(aws, runtime)
    store = store_dir()
    os.makedirs(store, mode=0o700, exist_ok=True)
    os.chmod(store, 0o700)
    bundle_path = os.path.join(store, ".bundle.json")
    try:
        aws(["s3", "cp", "--only-show-errors", uri, bundle_path], attempts=10)
        bundle = jsonio.read(bundle_path)
    except (AwsError, jsonio.JsonError) as e:
        raise SecretsError("cannot read the secret bundle %s: %s" % (uri, e))
    if bundle.get("encryptionContext", {}).get("kube-aws:cluster") != cluster:
        raise SecretsError("the secret bundle %s belongs to another cluster; publish again with "
                           "`kube-aws update`" % uri)
    plain = {}
    for name in names:
        ct = bundle.get("secrets", {}).get(name)
        if ct is None:
            raise SecretsError("the secret %r is not in %s; publish again with `kube-aws update`" % (name, uri))
        blob = os.path.join(store, ".ciphertext")
        fsutil.write_atomic(blob, base64.b64decode(ct))
        context = json.dumps({"kube-aws:cluster": cluster, "kube-aws:secret": name})
        try:
            out = aws(["kms", "decrypt", "--ciphertext-blob", "fileb://" + blob,
                       "--encryption-context", context, "--query", "Plaintext"])
        except AwsError as e:
            raise SecretsError("cannot decrypt the secret %r with this node's role: %s" % (name, e))
        finally:
            os.unlink(blob)
        if not isinstance(out, str):
            raise SecretsError("KMS gave no plaintext for the secret %r" % name)
        value = base64.b64decode(out.strip())
        target = os.path.join(store, *name.split("/"))
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        fsutil.write_atomic(target, value)
        if name.startswith(PREFIX):
            plain[name] = value.decode("utf-8")
    os.unlink(bundle_path)
    if plugin_only:
        return
    if want.get("pki"):
        place_pki(want["pki"], bundle, store)
    fill_files(paths.root() or "/", want.get("files", []), plain)


def decrypt_plugin_secrets(aws, runtime, node):
    """The reconciler's step before each run: the plugin secrets of node.json
    decrypted again into the store (tmpfs: empty once the node restarts), by
    the same code as the boot; the PKI and the node's own files are left
    alone."""
    decrypt_all(aws, runtime, node, plugin_only=True)


def run(argv):
    """`secrets` (decrypt and fill) or `secrets blank DIR` (a filter)."""
    if argv[:1] == ["blank"]:
        if len(argv) != 2:
            print("usage: kube-aws-node secrets blank DIR", file=sys.stderr)
            return 2
        sys.stdout.write(blank(sys.stdin.read(), argv[1]))
        return 0
    if argv:
        print("usage: kube-aws-node secrets [blank DIR]", file=sys.stderr)
        return 2
    try:
        runtime = jsonio.read(paths.etc("runtime.json"))
        node = jsonio.read(paths.etc("node.json"))
        decrypt_all(Aws(runtime["region"]), runtime, node)
    except (SecretsError, jsonio.JsonError) as e:
        print("kube-aws-node secrets: %s" % e, file=sys.stderr)
        return 1
    return 0
