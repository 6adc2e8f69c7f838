"""An EC2 instance metadata service (IMDSv2 only) for the real-node bed
(tests/it/real_node.rs): one per node, on the host's bridge address, which
the node reaches as 169.254.169.254 (scripts/nodebed/node.sh start with
NODEBED_IMDS: a DNAT in the node's network namespace).

    python3 tests/support/imds.py --bind 10.250.0.1 --port PORT --config FILE

FILE is JSON: instanceId, localHostname, localIpv4, mac, region,
availabilityZone, role and credentials (AccessKeyId, SecretAccessKey, Token,
Expiration: an STS assume-role answer of the node's rendered role), and
optionally targetLifecycleState (`autoscaling/target-lifecycle-state`).

As EC2's: `PUT /latest/api/token` with X-aws-ec2-metadata-token-ttl-seconds
gives a token (and the TTL back in the same header); every other request needs it (X-aws-ec2-metadata-token), or
is refused 401; a path that does not exist is 404. What it answers is what
the node program (bootstrap.py metadata), cloud-init and the aws CLI's
credential provider read. Each request is logged to stderr.

Why this and not amazon-ec2-metadata-mock: one small file with no build,
whose answers the test sets per node (instance id, DNS name, the role's
moto credentials); the mock's Go build and its config format buy nothing the
bed needs yet.
"""
import argparse
import json
import secrets
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def tree(c):
    creds = dict(c["credentials"])
    # STS calls it SessionToken; the instance metadata, Token.
    if "SessionToken" in creds:
        creds.setdefault("Token", creds.pop("SessionToken"))
    creds.setdefault("Code", "Success")
    creds.setdefault("Expiration", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 6 * 3600)))
    creds.setdefault("Type", "AWS-HMAC")
    creds.setdefault("LastUpdated", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    role = c["role"]
    meta = {
        "instance-id": c["instanceId"],
        "local-hostname": c["localHostname"],
        "hostname": c["localHostname"],
        "local-ipv4": c["localIpv4"],
        "mac": c["mac"],
        "placement/region": c["region"],
        "placement/availability-zone": c["availabilityZone"],
        "iam/security-credentials/": role,
        "iam/security-credentials/" + role: json.dumps(creds),
        "iam/info": json.dumps({"Code": "Success", "InstanceProfileArn": c.get("instanceProfileArn", ""),
                                "InstanceProfileId": "AIPAKUBEAWSNODEBED"}),
        "network/interfaces/macs/%s/local-ipv4s" % c["mac"]: c["localIpv4"],
    }
    # What an instance in an Auto Scaling group reads while a lifecycle hook
    # holds it ("Retrieve the target lifecycle state through instance
    # metadata"): set by the test when it terminates the instance.
    if c.get("targetLifecycleState"):
        meta["autoscaling/target-lifecycle-state"] = c["targetLifecycleState"]
    meta[""] = "\n".join(sorted({k.split("/")[0] + ("/" if "/" in k else "") for k in meta if k}))
    out = {"/latest/meta-data/" + k: v for k, v in meta.items()}
    out["/latest/meta-data/iam/security-credentials"] = role
    out["/latest/dynamic/instance-identity/document"] = json.dumps({
        "instanceId": c["instanceId"], "region": c["region"], "availabilityZone": c["availabilityZone"],
        "privateIp": c["localIpv4"], "accountId": c.get("accountId", "123456789012")})
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--config", required=True)
    a = ap.parse_args(argv)
    with open(a.config) as f:
        paths = tree(json.load(f))
    tokens = set()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, code, body="", headers=()):
            data = body.encode("utf-8")
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self):  # noqa: N802 - http.server's name
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            if self.path != "/latest/api/token":
                return self.answer(404)
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds") or ""
            if not ttl.isdigit():
                return self.answer(400)
            t = secrets.token_urlsafe(32)
            tokens.add(t)
            # EC2 answers the token's TTL in the same header; aws-sdk-go-v2's
            # IMDS client (feature/ec2/imds, token_provider.go) refuses a token
            # without it and then asks without one (401 here, as on EC2 with
            # IMDSv2 required): the cloud controller manager's GetRegion did.
            self.answer(200, t, [("X-aws-ec2-metadata-token-ttl-seconds", ttl)])

        def do_GET(self):  # noqa: N802
            if self.headers.get("X-aws-ec2-metadata-token") not in tokens:
                return self.answer(401)
            body = paths.get(self.path)
            if body is None:
                return self.answer(404)
            self.answer(200, body)

        def log_message(self, fmt, *args):
            sys.stderr.write("imds: %s %s\n" % (self.address_string(), fmt % args))

    srv = ThreadingHTTPServer((a.bind, a.port), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
