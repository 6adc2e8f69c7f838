"""etcd on the controllers: membership, snapshots to S3, and the restore of a
replaced single controller. Python 3.9, standard library only.

Four modules: this one holds what the others share (the node's paths and
settings, the etcd client, the pure membership decisions);
etcd_lifecycle.py the membership as controllers come and go;
etcd_backup.py the snapshots; etcd_restore.py the restores.

Decisions are pure functions (members, statuses, listings and flags in, a
verdict out), tested in src/node/tests/test_etcd.py. Drivers are thin and take
what they touch as parameters: `aws` (args -> parsed JSON or None, retrying,
raising on failure; it adds --region itself), an etcd client (`EtcdGateway`, or
a fake), a command runner `run(argv) -> stdout` (raises on a non-zero exit) and
a `Clock` (now, sleep).

Subcommands (wired into `kube-aws-node`):
  lifecycle watch     the controller's lifecycle service (kube-aws-lifecycle.service)
  lifecycle leave     what `watch` does on Terminated, once, by hand
  lifecycle prune     remove stale members once (before a controller joins)
  etcd-backup         one snapshot when one is due and this member leads
  etcd-backup --now   one snapshot now, from this member (an operator's
                      snapshot before a risky change, and the tests')
  etcd-restore        the restore decision and steps, before kubeadm

Where the settings come from: /etc/kube-aws/etcd.json names the SSM parameter
(control-plane stack, `EtcdSettings`) holding bucket, backupPrefix,
intervalSeconds, kmsKeyARN, controllerCount, lifecycleHook and
lifecycleTimeoutSeconds; /etc/kube-aws/runtime.json gives the cluster's bucket,
key prefix, stack and API endpoint.
"""
import datetime
import json
import os
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request


# KUBE_AWS_ROOT prefixes every node path this module reads or writes (tests only).
ROOT = os.environ.get("KUBE_AWS_ROOT", "")
ETCD_JSON = "/etc/kube-aws/etcd.json"
RUNTIME_JSON = "/etc/kube-aws/runtime.json"
NODE_JSON = "/etc/kube-aws/node.json"
# The addon installer's settings (src/render/cloudconfig.rs RECONCILER_JSON).
RECONCILER_JSON = "/etc/kube-aws/addons/reconciler.json"
PKI = "/etc/kubernetes/pki/etcd"
CA = PKI + "/ca.crt"
# kubeadm's client certificate for etcd health checks, signed by the etcd CA
# (`kubeadm init phase certs etcd-healthcheck-client`: "If both files already
# exist, kubeadm skips the generation step"), present on every controller.
CLIENT_CERT = PKI + "/healthcheck-client.crt"
CLIENT_KEY = PKI + "/healthcheck-client.key"
ETCD_MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
# Where `withdraw` moves the manifest of a member it took back (outside the
# kubelet's static pod directory).
WITHDRAWN_MANIFEST = "/etc/kubernetes/etcd.yaml.withdrawn"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
DATA_DIR = "/var/lib/etcd"
# Written inside the etcd container, whose /var/lib/etcd is the host's.
SNAPSHOT_PATH = DATA_DIR + "/kube-aws-snapshot.db"
RESTORE_PATH = "/var/lib/kube-aws/etcd-restore.db"
CRI = "unix:///run/containerd/containerd.sock"
IMDS = "http://169.254.169.254/latest"
CLIENT_PORT = 2379
PEER_PORT = 2380
# IMDS polling period ("Retrieve the target lifecycle state through instance
# metadata", EC2 Auto Scaling user guide: poll, act on `Terminated`).
POLL_SECONDS = 5
PRUNE_SECONDS = 60
# How long a failed joiner keeps trying to take its member back.
WITHDRAW_SECONDS = 60
# What a snapshot key looks like: etcd/<tier>/<UTC time>-<member>.db (sorts by
# time). Two tiers, each expired by the bucket's lifecycle rule on its prefix
# (src/aws/services/retention.rs; kops's etcd-manager keeps hourly snapshots for a week
# and daily ones for 90 days): no node deletes a snapshot, and the node role
# has no s3:DeleteObject on them. Keys directly under etcd/ are an older
# layout's, still read by a restore.
SNAPSHOT_SUFFIX = ".db"
HOURLY, DAILY = "hourly/", "daily/"
DAY_SECONDS = 86400
UPLOAD_ATTEMPTS = 3


class Clock(object):
    def now(self):
        return time.time()

    def sleep(self, seconds):
        time.sleep(seconds)


def run_command(argv):
    """The default runner: argv (never a shell line), stdout back, an error on failure."""
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        tail = (p.stderr or "").strip().splitlines()[-3:]
        raise RuntimeError("%s exited %d: %s" % (argv[0], p.returncode, " | ".join(tail)))
    return p.stdout


# ---------------------------------------------------------------- pure decisions

def as_id(v):
    """An etcd member ID as an int: etcdctl's JSON prints numbers, the gRPC
    gateway prints uint64 as decimal strings."""
    if isinstance(v, int):
        return v
    return int(str(v), 10)


def url_host(url):
    """The host of a peer or client URL (`https://10.0.1.5:2380` -> `10.0.1.5`)."""
    try:
        return urllib.parse.urlsplit(url).hostname or ""
    except ValueError:
        return ""


# kubeadm's annotation on its etcd static Pod: the member's client URL
# (cmd/kubeadm/app/constants EtcdAdvertiseClientUrlsAnnotationKey, v1.35.8).
ADVERTISE_ANNOTATION = "kubeadm.kubernetes.io/etcd.advertise-client-urls"
# The etcd Pods kubeadm reads its endpoints from (the same selector).
ETCD_PODS = "component=etcd,tier=control-plane"


def stale_etcd_pods(pods, controller_ips):
    """The names of the etcd Pods (`kubectl get pods -l ETCD_PODS -o json`)
    whose annotated client URLs name no host of `controller_ips`. None when
    `controller_ips` is empty (a listing that found nothing proves nothing).
    Pure."""
    live = set(controller_ips or [])
    if not live:
        return []
    out = []
    for p in (pods or {}).get("items") or []:
        meta = (p.get("metadata") or {}) if isinstance(p, dict) else {}
        urls = [u.strip() for u in str((meta.get("annotations") or {}).get(ADVERTISE_ANNOTATION, "")).split(",")
                if u.strip()]
        if urls and meta.get("name") and not any(url_host(u) in live for u in urls):
            out.append(meta["name"])
    return sorted(out)


# The states of an instance whose processes may still run: shutting-down and
# stopping ones are still shutting their services down (EC2 user guide,
# "Instance state changes"; systemd stops the reconciler with SIGTERM then).
ALIVE_STATES = ("pending", "running", "shutting-down", "stopping")


def gone(instance_id, listed, own_id):
    """True when the controller `instance_id` is not among `listed` (the
    controllers EC2 lists in ALIVE_STATES): terminated, stopped or unknown to
    EC2. None when the listing proves nothing: it lacks this controller's own
    `own_id` (a wrong filter, an empty answer) or either id is unknown. Pure."""
    if not instance_id or not own_id or own_id not in listed:
        return None
    return instance_id not in listed


def member_ips(member):
    return sorted({url_host(u) for u in member.get("peerURLs") or [] if url_host(u)})


def own_member(members, self_ip):
    """This node's member: the one whose peer URL is on this node's address."""
    for m in members:
        if self_ip in member_ips(m):
            return m
    return None


def peer_endpoints(members, self_ip):
    """The client URLs of every other started member (a member added but not
    started yet has none): the peers a removal goes through."""
    out = []
    for m in members:
        if self_ip in member_ips(m):
            continue
        out.extend(m.get("clientURLs") or [])
    return out


def stale_candidates(members, controller_ips, self_ip):
    """Members whose peer addresses are none of the controllers' (EC2: pending
    or running instances of the controller group). Nothing when the list of
    controllers is empty or does not even hold this node: a view of EC2 that
    cannot be trusted removes nobody."""
    ips = set(controller_ips)
    if not ips or self_ip not in ips:
        return []
    out = []
    for m in members:
        mine = member_ips(m)
        if mine and not ips.intersection(mine):
            out.append(m)
    return out


def confirmed_stale(previous, current):
    """The candidates seen stale twice in a row (a minute apart): an instance
    EC2 has only just started listing, whose member its join just added, is
    never removed on one look."""
    before = {as_id(m["ID"]) for m in previous}
    return [m for m in current if as_id(m["ID"]) in before]


def removable(stale, members):
    """Never remove so many that the members left could not have a majority
    of the old membership: a wrong EC2 view must not dissolve the cluster.
    Removing stale members keeps the started ones; at most a minority goes."""
    limit = (len(members) - 1) // 2
    return stale[:limit]


def status_of(status):
    """One endpoint's status from `etcdctl endpoint status -w json` (a list of
    {"Endpoint", "Status": {...}}) or the gateway's /v3/maintenance/status."""
    if isinstance(status, list):
        if not status:
            return {}
        status = status[0].get("Status", status[0])
    return status or {}


def is_leader(status):
    """Whether the member that answered leads: its own ID is the leader's."""
    s = status_of(status)
    try:
        return as_id(s["leader"]) == as_id(s["header"]["member_id"]) and as_id(s["leader"]) != 0
    except (KeyError, TypeError, ValueError):
        return False


def parse_time(s):
    """S3's LastModified (`2026-12-01T03:00:00.000Z`, or +00:00) as epoch seconds."""
    s = s.replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(s).timestamp()


JOIN, INIT, RESTORE, FAIL = "join", "init", "restore", "fail"


def failure_report(instance, runtime, step, message, now, command=""):
    """A node status object, in the shape of the bootstrap's failure report
    (`kube-aws status` and `kube-aws logs` read it)."""
    return {
        "instanceId": instance.get("instanceId", ""),
        "nodeName": instance.get("nodeName", ""),
        "role": "controller",
        "stack": runtime.get("stackName", ""),
        "asgLogicalId": runtime.get("asgLogicalId", ""),
        "step": step,
        "exitCode": 1,
        "command": command,
        "log": message,
        "timestamp": int(now),
    }


# ---------------------------------------------------------------- etcd client

class EtcdGateway(object):
    """etcd's v3 JSON gateway (gRPC-gateway: POST /v3/cluster/member/list,
    /v3/cluster/member/remove, /v3/maintenance/status; "[CLIENT-URL]/v3/*"
    from etcd 3.5, etcd docs "Why gRPC gateway"; uint64s are decimal strings)
    over TLS with the etcd CA and a client certificate it signed. Python's ssl
    does the TLS: no etcdctl is needed on the host, so a controller that has
    not joined yet can use it too. Checked against a real etcd 3.6 in
    tests/test_etcd_real.py."""

    def __init__(self, ca=CA, cert=CLIENT_CERT, key=CLIENT_KEY, timeout=5, opener=None):
        self.timeout = timeout
        self.opener = opener
        self.ctx = None
        if opener is None:
            self.ctx = ssl.create_default_context(cafile=ca)
            self.ctx.load_cert_chain(cert, key)

    def call(self, endpoints, path, body):
        """The first endpoint's answer that comes: (endpoint, parsed JSON)."""
        last = None
        for ep in endpoints:
            req = urllib.request.Request(ep.rstrip("/") + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
            try:
                if self.opener is not None:
                    return ep, self.opener(req)
                with urllib.request.urlopen(req, timeout=self.timeout, context=self.ctx) as r:
                    return ep, json.loads(r.read().decode() or "{}")
            except (urllib.error.URLError, OSError, ValueError) as e:
                last = "%s: %s" % (ep, e)
        raise RuntimeError("no etcd endpoint answered (%s)" % (last or "none given"))

    def member_list(self, endpoints):
        return self.call(endpoints, "/v3/cluster/member/list", {})[1].get("members") or []

    def member_remove(self, endpoints, member_id):
        """Removes a member (uint64 as a decimal string, as the gateway
        writes them); returns the endpoint that did it."""
        return self.call(endpoints, "/v3/cluster/member/remove", {"ID": str(as_id(member_id))})[0]

    def status(self, endpoint):
        return self.call([endpoint], "/v3/maintenance/status", {})[1]


class LazyEtcd(object):
    """Makes the client on first use, so that a missing certificate is one
    more failed attempt of a removal (reported, the action still completed),
    not a crash before the lifecycle action is completed."""

    def __init__(self, factory):
        self.factory = factory
        self.client = None

    def _c(self):
        if self.client is None:
            self.client = self.factory()
        return self.client

    def member_list(self, endpoints):
        return self._c().member_list(endpoints)

    def member_remove(self, endpoints, member_id):
        return self._c().member_remove(endpoints, member_id)

    def status(self, endpoint):
        return self._c().status(endpoint)


def local_endpoint(ip="127.0.0.1"):
    return "https://%s:%d" % (ip, CLIENT_PORT)


# ---------------------------------------------------------------- node facts

def imds_get(path, timeout=2):
    """An IMDSv2 metadata item, or None when it is absent (404)."""
    tok_req = urllib.request.Request(IMDS + "/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    with urllib.request.urlopen(tok_req, timeout=timeout) as r:
        token = r.read().decode()
    req = urllib.request.Request(IMDS + "/meta-data/" + path, headers={"X-aws-ec2-metadata-token": token})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode().strip()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def host(path):
    """A node path under KUBE_AWS_ROOT."""
    return ROOT + path


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        if default is not None:
            return default
        raise


class Node(object):
    """What the drivers know of this node: files, IMDS, settings."""

    def __init__(self, aws, imds=imds_get, runtime=None, etcd_json=None):
        self.aws = aws
        self.imds = imds
        self.runtime = runtime if runtime is not None else read_json(host(RUNTIME_JSON), {})
        self.etcd_json = etcd_json if etcd_json is not None else read_json(host(ETCD_JSON), {})
        self._settings = None

    def settings(self):
        if self._settings is None:
            out = self.aws(["ssm", "get-parameter", "--name", self.etcd_json["settingsParameter"]])
            self._settings = json.loads(out["Parameter"]["Value"])
        return self._settings

    def instance(self):
        return {"instanceId": self.imds("instance-id") or "", "nodeName": (self.imds("local-hostname") or "").lower()}

    def ip(self):
        return self.imds("local-ipv4") or ""

    def controllers(self, states=("pending", "running")):
        """The cluster's controller instances (EC2's Instance objects) in `states`."""
        name = "%s-controller" % self.runtime.get("cluster", "")
        out = self.aws(["ec2", "describe-instances", "--filters",
                        "Name=tag:Name,Values=%s" % name,
                        "Name=instance-state-name,Values=%s" % ",".join(states)]) or {}
        return [i for r in out.get("Reservations") or [] for i in r.get("Instances") or []]

    def controller_ips(self):
        """Private addresses of the cluster's pending or running controllers."""
        return [i["PrivateIpAddress"] for i in self.controllers() if i.get("PrivateIpAddress")]

    def controller_gone(self, instance_id, own_id):
        """Whether EC2 lists the controller `instance_id` as gone (see `gone`)."""
        listed = [i.get("InstanceId", "") for i in self.controllers(ALIVE_STATES)]
        return gone(instance_id, listed, own_id)

    def put_json(self, key, value):
        """Writes a status object under the cluster's prefix (AES256, like every object there)."""
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(value, f)
            path = f.name
        try:
            self.aws(["s3api", "put-object", "--bucket", self.runtime["bucket"],
                      "--key", "%s/%s" % (self.runtime["keyPrefix"], key), "--body", path,
                      "--server-side-encryption", "AES256", "--content-type", "application/json"])
        finally:
            os.unlink(path)


# ---------------------------------------------------------------- membership drivers


# ---------------------------------------------------------------- backups


# ---------------------------------------------------------------- restore


