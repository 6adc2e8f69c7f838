"""Short-lived join credentials: kubeadm bootstrap tokens with a TTL, minted
by the controllers and published where only the cluster's roles read them.

`kube-aws-node bootstrap-token [--force]` (kube-aws-bootstrap-token.timer,
every 10 minutes on controllers) reads the published token (the SSM
SecureString node.json bootstrapToken.parameter, encrypted under the
cluster's KMS key), lists the cluster's bootstrap tokens, and mints a new
one when the published one is missing, no longer in the cluster, past half
its TTL, or older than a rotation request (`kube-aws rotate
bootstrap-token` writes s3://BUCKET/PREFIX/bootstrap/token-rotate; its
LastModified is the request's time, read by a listing). Minting: under the
cluster's token lock (bootstrap/token-lock, locks.py) the decision is made
again, the token is created in the cluster as the Secret the bootstrap token
authenticator reads, then published; after a requested or forced rotation
the old token's Secret is deleted at once (revoked), otherwise it lives out
its TTL and the controller manager's tokencleaner deletes it. Every run
writes status/bootstrap-token.json (mintedAt, expires; `kube-aws status`
reads it), a failure also the node's status object.

The Secret is the documented format
(https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/):
kube-system/bootstrap-token-<id>, type bootstrap.kubernetes.io/token, with
`expiration` (RFC 3339), which the API server's bootstrap token
authenticator honours itself (a token past it authenticates no one, before
the tokencleaner deletes it), the usages kubeadm gives a join token
(authentication, and signing for the cluster-info discovery) and kubeadm's
default node group, which kubeadm's RBAC lets create and auto-approves
kubelet client CSRs.

Joining nodes (bootstrap.py) read the published token with `current`,
waiting until there is one with time left (the first controller publishes
it right after `kubeadm init`).

Invariant: the token is never an argument of a command (the Secret goes to
kubectl on stdin, the parameter to the aws CLI in a private file), never
printed; `decide`, `new_token`, `token_secret` and `parse_record` are pure.
"""
import datetime
import json
import os
import re
import secrets as pysecrets
import string
import subprocess
import tempfile
import time

from . import jsonio, locks, paths
from .awscall import AwsError, listed_object
from .console import Console
from .retry import poll

TOKEN = re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}")
ALPHABET = string.ascii_lowercase + string.digits
SECRET_TYPE = "bootstrap.kubernetes.io/token"
# kubeadm's default group for join tokens (kubeadm's constants,
# NodeBootstrapTokenAuthGroup): its RBAC lets the group create CSRs and
# auto-approves their kubelet client certificates.
GROUP = "system:bootstrappers:kubeadm:default-node-token"
LOCK_KEY = "bootstrap/token-lock"
ROTATE_KEY = "bootstrap/token-rotate"
STATUS_KEY = "status/bootstrap-token.json"
NODE_STATUS_KEY = "status/nodes/%s.json"
DEFAULT_TTL = 24 * 3600


class TokenError(Exception):
    def __init__(self, step, message):
        Exception.__init__(self, "%s: %s" % (step, message))
        self.step = step
        self.message = message


def iso(epoch):
    return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def new_token(choice=pysecrets.choice):
    """A kubeadm bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`, from the OS's CSPRNG."""
    return "".join(choice(ALPHABET) for _ in range(6)) + "." + "".join(choice(ALPHABET) for _ in range(16))


def token_id(token):
    return token.split(".", 1)[0]


def token_secret(token, expires, description):
    """The bootstrap token Secret (see the module header)."""
    tid, secret = token.split(".", 1)
    return {
        "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
        "metadata": {"name": "bootstrap-token-" + tid, "namespace": "kube-system",
                     "labels": {"app.kubernetes.io/managed-by": "kube-aws"}},
        "stringData": {"description": description, "token-id": tid, "token-secret": secret,
                       "expiration": iso(expires), "usage-bootstrap-authentication": "true",
                       "usage-bootstrap-signing": "true", "auth-extra-groups": GROUP},
    }


def make_record(token, now, ttl):
    return {"token": token, "mintedAt": iso(now), "expires": iso(now + ttl)}


def parse_record(text):
    """The published record {token, mintedAt, expires} with epochs, or None when it is not one."""
    try:
        r = json.loads(text)
        if not isinstance(r, dict) or not TOKEN.fullmatch(r.get("token") or ""):
            return None
        return {"token": r["token"], "minted": parse_time(r["mintedAt"]), "expires": parse_time(r["expires"])}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def decide(record, now, ttl, cluster_ids, rotate_at):
    """Why a new token is due ("" when none is): pure."""
    if record is None:
        return "no token is published"
    if token_id(record["token"]) not in cluster_ids:
        return "the published token is not in the cluster"
    # Both are whole seconds: a request in the second of the mint counts as served.
    if rotate_at is not None and rotate_at > record["minted"]:
        return "a rotation was requested at %s" % iso(rotate_at)
    if record["expires"] - now < ttl / 2.0:
        return "the published token expires at %s" % iso(record["expires"])
    return ""


def settings(node):
    """node.json bootstrapToken: {parameter, ttlSeconds}. The key ("kms") is
    filled in by `cluster_key`: node.json is user data, and a key there would
    replace every node when kmsKeyARN changes."""
    s = node.get("bootstrapToken") or {}
    name = s.get("parameter")
    if not isinstance(name, str) or not name.startswith("/"):
        raise TokenError("settings", "node.json names no bootstrapToken.parameter; render and publish again "
                                     "with `kube-aws update`")
    ttl = s.get("ttlSeconds", DEFAULT_TTL)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 60:
        raise TokenError("settings", "bootstrapToken.ttlSeconds %r is not a whole number of seconds >= 60" % (ttl,))
    return {"parameter": name, "ttl": paths.knob("TOKEN_TTL_SECONDS", ttl), "kms": ""}


def cluster_key(aws, etcd_json=None):
    """kmsKeyARN, from the controllers' etcd settings parameter, which the
    stack manages (src/render/cfn/etcd.rs): after a key rotation the next
    token is minted under the new key with no node replaced."""
    from . import etcd  # the settings parameter's one reader (and its IAM entry)
    try:
        return etcd.Node(aws, etcd_json=etcd_json).settings().get("kmsKeyARN") or ""
    except (AwsError, KeyError, ValueError, TypeError) as e:
        raise TokenError("settings", "cannot read the cluster's key from the etcd settings parameter: %s" % e)


# ---------------------------------------------------------------- effects

def read_published(aws, name):
    """The published record, or None when there is none (or it is not a record)."""
    try:
        out = aws(["ssm", "get-parameter", "--name", name, "--with-decryption"], attempts=3)
    except AwsError as e:
        if "ParameterNotFound" in e.message:
            return None
        # Parameter Store names KMS when the value does not decrypt for this
        # role: e.g. a token under a key retired longer than the roles keep it.
        step = "undecryptable" if "kms" in e.message.lower() else "read"
        raise TokenError(step, "cannot read %s: %s" % (name, e))
    try:
        return parse_record(out["Parameter"]["Value"])
    except (KeyError, TypeError):
        return None


def publish(aws, name, record, kms):
    """Overwrites the parameter with `record` (a SecureString under `kms`; the
    value goes to the CLI in a 0600 file, never as an argument)."""
    doc = {"Name": name, "Type": "SecureString", "Overwrite": True, "Tier": "Standard",
           "Description": "kube-aws: the current kubeadm join token (minted by the controllers)",
           "Value": json.dumps(record)}
    if kms:
        doc["KeyId"] = kms
    fd, path = tempfile.mkstemp(prefix="kube-aws-token-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        aws(["ssm", "put-parameter", "--cli-input-json", "file://" + path])
    except AwsError as e:
        raise TokenError("publish", "cannot write %s: %s" % (name, e))
    finally:
        os.unlink(path)


def rotate_requested_at(aws, rt):
    """When `kube-aws rotate bootstrap-token` last asked (the request object's LastModified), or None."""
    try:
        found = listed_object(aws, rt["bucket"], "%s/%s" % (rt["keyPrefix"], ROTATE_KEY), attempts=3)
    except AwsError as e:
        raise TokenError("rotate-request", str(e))
    return None if found is None else locks.parse_time(found.get("LastModified", ""))


def kubectl_run(args, stdin=None):
    try:
        p = subprocess.run(["kubectl", "--kubeconfig", paths.path(paths.ADMIN_CONF)] + list(args),
                           input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, errors="replace")
    except OSError as e:
        raise TokenError("kubectl", e.strerror)
    if p.returncode != 0:
        raise TokenError("kubectl", (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1])
    return p.stdout


class Cluster(object):
    """The cluster's bootstrap tokens through kubectl and admin.conf; replaceable in tests."""

    def __init__(self, run=kubectl_run):
        self.run = run

    def token_ids(self):
        out = self.run(["-n", "kube-system", "get", "secrets", "--field-selector", "type=" + SECRET_TYPE,
                        "-o", "jsonpath={.items[*].metadata.name}"])
        return set(n[len("bootstrap-token-"):] for n in out.split() if n.startswith("bootstrap-token-"))

    def create(self, secret):
        self.run(["create", "-f", "-"], stdin=json.dumps(secret))

    def delete(self, tid):
        self.run(["-n", "kube-system", "delete", "secret", "bootstrap-token-" + tid, "--ignore-not-found"])


def ensure(aws, rt, cfg, cluster, lock, say, clock=time.time, force=False, who=""):
    """One run: {"action": "kept"|"minted", "reason", "record"}."""
    def look():
        try:
            record = read_published(aws, cfg["parameter"])
        except TokenError as e:
            if e.step != "undecryptable":
                raise
            # Minted over: the new token is encrypted under the key this node may use.
            say("the published token does not decrypt (%s): minting over it" % e.message)
            record = None
        return (record, cluster.token_ids(), rotate_requested_at(aws, rt))

    record, ids, rotate_at = look()
    reason = "forced" if force else decide(record, clock(), cfg["ttl"], ids, rotate_at)
    if not reason:
        return {"action": "kept", "reason": "", "record": record}
    with lock():
        if not force:
            # Another controller may have minted while this one waited.
            record, ids, rotate_at = look()
            reason = decide(record, clock(), cfg["ttl"], ids, rotate_at)
            if not reason:
                return {"action": "kept", "reason": "", "record": record}
        say("minting a new join token: %s" % reason)
        now = clock()
        token = new_token()
        cluster.create(token_secret(token, now + cfg["ttl"], "kube-aws join token, minted by %s" % (who or "?")))
        published = make_record(token, now, cfg["ttl"])
        publish(aws, cfg["parameter"], published, cfg["kms"])
        revoke = force or reason.startswith("a rotation was requested")
        if revoke and record is not None and token_id(record["token"]) != token_id(token):
            cluster.delete(token_id(record["token"]))
            say("revoked the previous token %s" % token_id(record["token"]))
    return {"action": "minted", "reason": reason, "record": parse_record(json.dumps(published))}


def current(aws, name, clock=time.time, sleep=time.sleep, say=None):
    """The published token for a join, waiting until there is one with at
    least KUBE_AWS_TOKEN_MIN_LEFT seconds left (a cluster being created
    publishes it once its first controller has run `kubeadm init`)."""
    limit = paths.knob("TOKEN_WAIT", 1800)
    seen = {"last": "", "checks": 0}

    def token():
        try:
            record = read_published(aws, name)
        except TokenError as e:
            # E.g. a token under a key the roles no longer keep: the controllers mint over it.
            record, seen["last"] = None, e.message
        if record is not None and record["expires"] - clock() > paths.knob("TOKEN_MIN_LEFT", 120):
            return record["token"]
        if say is not None and not seen["checks"]:
            say("waiting for the controllers to publish a join token in %s" % name)
        seen["checks"] += 1
        return None
    found = poll(token, limit, paths.knob("TOKEN_POLL", 10), sleep=sleep, clock=clock)
    if not found:
        raise TokenError("join-token", "no join token with time left in %s after %ds (are the controllers' "
                                       "kube-aws-bootstrap-token timers running?)%s"
                         % (name, limit, "; last answer: " + seen["last"] if seen["last"] else ""))
    return found


def S3Lock(aws, rt, holder, say):
    """The lock at LOCK_KEY, held for a `with` block (locks.Held)."""
    return locks.Held(aws, rt, LOCK_KEY, holder, say, lambda m: TokenError("token-lock", m), "TOKEN_LOCK", (600, 600, 10))


def put_json(aws, rt, key, value):
    fd, path = tempfile.mkstemp(prefix="kube-aws-token-status-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
        aws(["s3api", "put-object", "--bucket", rt["bucket"], "--key", "%s/%s" % (rt["keyPrefix"], key),
             "--body", path, "--server-side-encryption", "AES256", "--content-type", "application/json"])
    finally:
        os.unlink(path)


def status(instance, result, now, error="", step=""):
    """status/bootstrap-token.json: no token, only its id and times."""
    r = (result or {}).get("record")
    return {"instanceId": instance.get("instanceId", ""), "checkedAt": iso(now),
            "action": (result or {}).get("action", ""), "reason": (result or {}).get("reason", ""),
            "tokenId": token_id(r["token"]) if r else "", "mintedAt": iso(r["minted"]) if r else None,
            "expires": iso(r["expires"]) if r else None, "ok": not error,
            "error": ("%s: %s" % (step, error)) if error else ""}


def main(argv, aws, cluster=None, instance=None, say=None, clock=time.time):
    """`kube-aws-node bootstrap-token [--force]`."""
    say = say or Console("kube-aws-bootstrap-token")
    if argv not in ([], ["--force"]):
        say("usage: kube-aws-node bootstrap-token [--force]")
        return 2
    rt = jsonio.read(paths.etc("runtime.json"))
    node = jsonio.read(paths.etc("node.json"))
    if instance is None:
        instance = jsonio.read(paths.path(paths.INSTANCE_JSON), {})
    iid = instance.get("instanceId") or os.uname()[1]
    result, error, step = None, "", ""
    try:
        cfg = settings(node)
        cfg["kms"] = cluster_key(aws)
        result = ensure(aws, rt, cfg, cluster or Cluster(), lambda: S3Lock(aws, rt, iid, say), say, clock=clock,
                        force=argv == ["--force"], who=iid)
    except TokenError as e:
        error, step = e.message, e.step
    except Exception as e:  # noqa: BLE001 - reported, never a silent failure
        error, step = "%s: %s" % (e.__class__.__name__, e), "mint"
    now = clock()
    code = 0
    if error:
        say("the join token run failed at %s: %s" % (step, error))
        code = 1
    else:
        r = result["record"]
        say("%s join token %s, expires %s" % (result["action"], token_id(r["token"]), iso(r["expires"])))
    try:
        put_json(aws, rt, STATUS_KEY, status(instance, result, now, error, step))
        if error:
            put_json(aws, rt, NODE_STATUS_KEY % iid, {
                "instanceId": iid, "nodeName": instance.get("nodeName", ""), "role": "controller",
                "stack": rt.get("stackName", ""), "asgLogicalId": rt.get("asgLogicalId", ""),
                "step": "bootstrap-token-" + step, "exitCode": 1, "command": "kube-aws-node bootstrap-token",
                "log": error, "timestamp": int(now)})
    except Exception as e:  # noqa: BLE001 - the journal keeps the result
        say("cannot write the status object: %s" % e)
        code = 1
    return code

