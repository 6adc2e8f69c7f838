"""Makes the node program's AWS calls under the credentials in the
environment (a node role's session, assumed by tests/it/node_iam_moto.rs),
against moto with IAM enforced, and prints what AWS answered as JSON.

    python node_iam_driver.py grants ROLE VARS     each grant of the call table for ROLE
    python node_iam_driver.py denied ROLE VARS     each `denied` entry for ROLE
    python node_iam_driver.py joins VARS N         N controllers join in turn under the join lock,
                                                   then a replacement breaks a dead one's lock
    python node_iam_driver.py secrets VARS NAMES   secrets.decrypt_all for NAMES (comma-separated)
    python node_iam_driver.py token-mint VARS      join_token.ensure (a controller mints and publishes;
                                                   the cluster's Secrets are a stand-in: no API server here)
    python node_iam_driver.py token-read VARS      join_token.current (a joining node reads it)
    python node_iam_driver.py token-publish VARS   join_token.publish alone (refused to a worker)
    python node_iam_driver.py token-key VARS       join_token.cluster_key: the key a controller mints
                                                   under, from the etcd settings parameter

VARS is the table's placeholders as JSON ({bucket}, {prefix}, ...; plus
"ciphertext": a KMS ciphertext for kms:Decrypt). A grant's call is the aws
CLI operation of its IAM action; an answer other than AccessDenied (a
missing key, a validation error) means IAM let the call through. The join
and secrets scenarios run the node program's own code (locks.py,
secrets.py), not a copy of it.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "src", "node"))

from kube_aws_node import join_token, locks, secrets  # noqa: E402
from kube_aws_node.awscall import Aws, AwsError  # noqa: E402

DENIED = ("AccessDenied", "UnauthorizedOperation", "not authorized")


def fill(text, v):
    for k, val in v.items():
        text = text.replace("{%s}" % k, str(val))
    return text.replace("*", "any-name")


def cli(args):
    p = subprocess.run(["aws", "--region", os.environ["AWS_DEFAULT_REGION"], "--output", "json"] + args,
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    return p.returncode, (p.stderr or "").strip()


def call_for(g, v, scratch):
    """The aws CLI arguments that exercise grant `g`."""
    action = g["action"]
    res = fill(g["resource"], v)
    ctx = dict((k, fill(x, v)) for k, x in (g.get("context") or {}).items())
    if action.startswith("s3:"):
        bucket_key = res[len("arn:aws:s3:::"):]
        bucket, _, key = bucket_key.partition("/")
        return {
            "s3:GetObject": ["s3api", "get-object", "--bucket", bucket, "--key", key, os.path.join(scratch, "o")],
            "s3:PutObject": ["s3api", "put-object", "--bucket", bucket, "--key", key, "--body", scratch + "/b"],
            "s3:DeleteObject": ["s3api", "delete-object", "--bucket", bucket, "--key", key],
            "s3:ListBucket": ["s3api", "list-objects-v2", "--bucket", bucket, "--prefix", ctx.get("s3:prefix", "")],
        }[action]
    stack_id = ["--stack-name", v["stack"], "--logical-resource-id", "NoSuchResource"]
    return {
        "ssm:GetParameter": lambda: ["ssm", "get-parameter", "--name", res.split(":parameter", 1)[1]],
        "ssm:PutParameter": lambda: ["ssm", "put-parameter", "--name", res.split(":parameter", 1)[1], "--type",
                                     "String", "--value", "x", "--overwrite"],
        "kms:Encrypt": lambda: ["kms", "encrypt", "--key-id", v["kms"], "--plaintext", "fileb://" + scratch + "/b"],
        "kms:Decrypt": lambda: ["kms", "decrypt", "--ciphertext-blob", "fileb://" + scratch + "/ct"],
        "kms:GenerateDataKey": lambda: ["kms", "generate-data-key", "--key-id", v["kms"], "--key-spec", "AES_256"],
        "cloudformation:SignalResource": lambda: ["cloudformation", "signal-resource"] + stack_id
        + ["--unique-id", "x", "--status", "SUCCESS"],
        "cloudformation:DescribeStackResource": lambda: ["cloudformation", "describe-stack-resource"] + stack_id,
        "cloudformation:DescribeStacks": lambda: ["cloudformation", "describe-stacks", "--stack-name", v["stack"]],
        "ec2:DescribeInstances": lambda: ["ec2", "describe-instances"],
        "autoscaling:DescribeAutoScalingInstances": lambda: ["autoscaling", "describe-auto-scaling-instances"],
        "cloudwatch:PutMetricData": lambda: [
            "cloudwatch", "put-metric-data", "--namespace", (g.get("context") or {}).get("cloudwatch:namespace", "x"),
            "--metric-name", "Probe", "--value", "1"],
        "autoscaling:SetInstanceHealth": lambda: [
            "autoscaling", "set-instance-health", "--instance-id", "i-00000000000000000",
            "--health-status", "Unhealthy"],
        "autoscaling:CompleteLifecycleAction": lambda: [
            "autoscaling", "complete-lifecycle-action", "--lifecycle-hook-name", "none",
            "--auto-scaling-group-name", v["controller_group"], "--lifecycle-action-result", "CONTINUE",
            "--instance-id", "i-00000000000000000"],
        "autoscaling:RecordLifecycleActionHeartbeat": lambda: [
            "autoscaling", "record-lifecycle-action-heartbeat", "--lifecycle-hook-name", "none",
            "--auto-scaling-group-name", v["controller_group"], "--instance-id", "i-00000000000000000"],
    }[action]()


def table():
    with open(os.path.join(REPO, "src", "node", "iam-calls.json"), encoding="utf-8") as f:
        return json.load(f)


def answers(entries, role, v):
    out = []
    with tempfile.TemporaryDirectory() as scratch:
        with open(os.path.join(scratch, "b"), "w") as f:
            f.write("{}")
        with open(os.path.join(scratch, "ct"), "wb") as f:
            import base64
            f.write(base64.b64decode(v["ciphertext"]))
        for g in entries:
            if g["role"] != role:
                continue
            args = call_for(g, v, scratch)
            code, err = cli(args)
            answer = "denied" if code != 0 and any(d in err for d in DENIED) else "allowed"
            out.append({"action": g["action"], "resource": fill(g["resource"], v), "answer": answer,
                        "context": g.get("context") or {}, "detail": err.splitlines()[-1] if err else ""})
    return out


def joins(v, n):
    """Controllers 1..n join in turn (take the join lock, join, release it),
    each after the first failing to take the init lock; then a controller
    dies holding the lock and its replacement breaks it as stale."""
    aws = Aws(os.environ["AWS_DEFAULT_REGION"], attempts=1)
    bucket, prefix = v["bucket"], v["prefix"]
    steps = []
    init = "%s/bootstrap/init-lock" % prefix
    join = "%s/bootstrap/join-lock" % prefix
    for i in range(1, n + 1):
        me = "controller-%d" % i
        try:
            first = locks.take(aws, bucket, init, me)
            if not first:
                etag = locks.acquire(aws, bucket, join, me, wait_seconds=30, stale_seconds=1800, poll_seconds=1)
                # Released If-Match the ETag its put returned: it was still this node's.
                assert locks.release(aws, bucket, join, etag), "the join lock was not this node's"
            steps.append({"node": me, "init": first, "joined": True})
        except (locks.LockError, AwsError, AssertionError) as e:
            steps.append({"node": me, "joined": False, "error": str(e)})
    # A controller dies holding the lock; its replacement finds it stale.
    try:
        assert locks.take(aws, bucket, join, "dead")
        # The stale lock is deleted If-Match the ETag the listing returned.
        etag = locks.acquire(aws, bucket, join, "replacement", wait_seconds=30, stale_seconds=0, poll_seconds=1)
        assert locks.release(aws, bucket, join, etag), "the replacement's lock was not its own"
        steps.append({"node": "replacement", "joined": True})
    except (locks.LockError, AwsError, AssertionError) as e:
        steps.append({"node": "replacement", "joined": False, "error": str(e)})
    return steps


def decrypt(v, names):
    root = tempfile.mkdtemp(prefix="kube-aws-node-iam-")
    os.environ["KUBE_AWS_ROOT"] = root
    runtime = {"cluster": v["cluster"], "bucket": v["bucket"], "keyPrefix": v["prefix"],
               "secretBundleParameter": "/kube-aws/%s/secret-bundle/%s" % (v["cluster"], v["node_role"]),
               "region": os.environ["AWS_DEFAULT_REGION"]}
    try:
        secrets.decrypt_all(Aws(runtime["region"], attempts=1), runtime, {"secrets": {"names": names}})
    except secrets.SecretsError as e:
        return {"ok": False, "error": str(e)}
    store = secrets.store_dir()
    got = sorted(os.path.relpath(os.path.join(d, f), store) for d, _, fs in os.walk(store) for f in fs)
    return {"ok": True, "files": got}


class StandInCluster(object):
    """The cluster's bootstrap token Secrets, in memory (the API server's side
    is tests/it/join_token.rs's, on the control-plane test bed)."""

    def __init__(self):
        self.ids = set()

    def token_ids(self):
        return set(self.ids)

    def create(self, secret):
        self.ids.add(secret["stringData"]["token-id"])

    def delete(self, tid):
        self.ids.discard(tid)


def token(v, what):
    aws = Aws(os.environ["AWS_DEFAULT_REGION"], attempts=1)
    name = "/kube-aws/%s/bootstrap-token" % v["cluster"]
    rt = {"bucket": v["bucket"], "keyPrefix": v["prefix"], "cluster": v["cluster"]}
    try:
        if what == "token-mint":
            cfg = {"parameter": name, "ttl": 3600, "kms": v["kms"]}

            def lock():
                return join_token.S3Lock(aws, rt, "driver", lambda m: None)
            r = join_token.ensure(aws, rt, cfg, StandInCluster(), lock, lambda m: None)
            return {"ok": True, "action": r["action"], "tokenId": join_token.token_id(r["record"]["token"])}
        if what == "token-publish":
            join_token.publish(aws, name, join_token.make_record(join_token.new_token(), 0, 3600), v["kms"])
            return {"ok": True}
        os.environ.setdefault("KUBE_AWS_TOKEN_WAIT", "0")
        return {"ok": True, "tokenId": join_token.token_id(join_token.current(aws, name))}
    except (join_token.TokenError, AwsError) as e:
        return {"ok": False, "error": str(e)}


def main(argv):
    what = argv[0]
    if what in ("grants", "denied"):
        role, v = argv[1], json.loads(argv[2])
        t = table()
        entries = [g for c in t["calls"] for g in c["grants"]] if what == "grants" else t["denied"]
        result = answers(entries, role, v)
    elif what == "joins":
        result = joins(json.loads(argv[1]), int(argv[2]))
    elif what == "secrets":
        result = decrypt(json.loads(argv[1]), argv[2].split(","))
    elif what == "token-key":
        v = json.loads(argv[1])
        aws = Aws(os.environ["AWS_DEFAULT_REGION"], attempts=1)
        try:
            result = {"ok": True, "kms": join_token.cluster_key(aws, {"settingsParameter": v["etcd_parameter"]})}
        except join_token.TokenError as e:
            result = {"ok": False, "error": str(e)}
    elif what in ("token-mint", "token-read", "token-publish"):
        result = token(json.loads(argv[1]), what)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
