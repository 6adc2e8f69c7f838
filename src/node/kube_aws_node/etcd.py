"""etcd on the controllers: membership, snapshots to S3, and the restore of a
replaced single controller. Python 3.9, standard library only.

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
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from . import locks, metrics, reconcile
from .awscall import AwsError, listed_object

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
# (src/aws/retention.rs; kops's etcd-manager keeps hourly snapshots for a week
# and daily ones for 90 days): no node deletes a snapshot, and the node role
# has no s3:DeleteObject on them. Keys directly under etcd/ are an older
# layout's, still read by a restore.
SNAPSHOT_SUFFIX = ".db"
# `kube-aws restore` (src/aws/restore.rs) writes its request here, relative to
# the cluster's key prefix ({"id", "key"}), after deleting RESTORE_LOCK; the
# first replacement controller to take the lock restores the key, the others
# join it (kops's etcd-manager likewise restores on one member and lets the
# others join empty and sync: docs/backup-restore.md).
RESTORE_REQUEST = "bootstrap/etcd-restore.json"
RESTORE_LOCK = "bootstrap/etcd-restore-lock"
# What the restorer writes once the snapshot is in place ("request" names the
# request it served). A request it names is over: a controller that boots
# later (a rolling update, the single controller replaced again) decides as
# if there were none, instead of joining a restore that is long done.
RESTORE_STATUS = "status/etcd/restore.json"
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


def snapshot_tier(key, prefix):
    """"hourly/", "daily/" or "" (the older flat layout) for a snapshot key
    under `prefix`; None for anything else."""
    if not key.startswith(prefix) or not key.endswith(SNAPSHOT_SUFFIX):
        return None
    rest = key[len(prefix):]
    for tier in (HOURLY, DAILY):
        if rest.startswith(tier) and "/" not in rest[len(tier):]:
            return tier
    return "" if "/" not in rest else None


def snapshots(listing, prefix, tiers=(HOURLY, DAILY, "")):
    """The snapshot objects of a list-objects-v2 answer in `tiers`, oldest
    first: [{"key", "size", "time", "tier"}]."""
    out = []
    for o in (listing or {}).get("Contents") or []:
        key = o.get("Key", "")
        tier = snapshot_tier(key, prefix)
        if tier is not None and tier in tiers:
            out.append({"key": key, "size": int(o.get("Size", 0)), "time": parse_time(o["LastModified"]),
                        "tier": tier})
    out.sort(key=lambda o: (o["time"], o["key"]))
    return out


def backup_due(snaps, now, interval):
    """A snapshot is due when none is younger than the interval (a minute's
    slack for the timer's jitter)."""
    if not snaps:
        return True
    return now - snaps[-1]["time"] >= interval - 60


def snapshot_key(prefix, now, member_name):
    stamp = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-." else "-" for c in member_name) or "member"
    return "%s%s-%s%s" % (prefix, stamp, safe, SNAPSHOT_SUFFIX)


def daily_key(prefix, hourly_key):
    """The daily tier's copy of an hourly snapshot: same name, daily/ prefix."""
    return prefix + DAILY + hourly_key.rsplit("/", 1)[-1]


JOIN, INIT, RESTORE, FAIL = "join", "init", "restore", "fail"


def requested_restore_decision(request, took_restore_lock, prefix):
    """A pending `kube-aws restore` request decides before anything else: the
    controller that took the restore lock restores the requested key (one of
    this cluster's snapshots, else it fails), the others join it, whatever
    the API answers (the old controllers may still be leaving)."""
    key = str(request.get("key", ""))
    rid = str(request.get("id", ""))
    if not took_restore_lock:
        return {"action": JOIN, "request": rid,
                "reason": "kube-aws restore %s: another controller restores the snapshot; join it" % rid}
    if snapshot_tier(key, prefix) is None:
        return {"action": FAIL, "request": rid,
                "reason": "kube-aws restore %s asks for %r, which is not a snapshot under %s" % (rid, key, prefix)}
    return {"action": RESTORE, "key": key, "request": rid,
            "reason": "kube-aws restore %s: this controller took the restore lock and restores %s" % (rid, key)}


def read_restore_request(node):
    """The pending request of `kube-aws restore`, or None."""
    bucket = node.runtime["bucket"]
    key = "%s/%s" % (node.runtime["keyPrefix"], RESTORE_REQUEST)
    if listed_object(node.aws, bucket, key) is None:
        return None
    fd, path = tempfile.mkstemp(prefix="kube-aws-restore-")
    os.close(fd)
    try:
        node.aws(["s3api", "get-object", "--bucket", bucket, "--key", key, path])
        return read_json(path, {}) or None
    finally:
        os.unlink(path)


def restore_status(node):
    """The restorer's status object, or {} when it cannot be read (none yet,
    a refusal, a network error)."""
    fd, path = tempfile.mkstemp(prefix="kube-aws-restore-status-")
    os.close(fd)
    try:
        node.aws(["s3api", "get-object", "--bucket", node.runtime["bucket"],
                  "--key", "%s/%s" % (node.runtime["keyPrefix"], RESTORE_STATUS), path], attempts=1)
        doc = read_json(path, {}) or {}
        return doc if isinstance(doc, dict) else {}
    except (AwsError, OSError, ValueError, AttributeError):
        return {}
    finally:
        os.unlink(path)


def restore_served(node, rid):
    """Whether request `rid` was served: the restorer's status object names
    it. Unreadable is not served: the controller then joins the restore, as
    before the status existed."""
    return bool(rid) and str(restore_status(node).get("request", "")) == rid


# How long a controller joining a restore waits for the restorer's cleanup
# (finish_restore) before it joins anyway: the restore, `kubeadm init` on it
# and the cleanup take minutes on a busy instance.
RESTORE_CLEAN_WAIT = 1200
RESTORE_CLEAN_POLL = 5


def wait_restore_clean(node, rid, clock, say, limit=None):
    """A controller that joins restore `rid` waits until the restorer says
    the snapshot's old controllers are gone from the API (`clean` in its
    status object, finish_restore): until then the API lists their etcd
    static pods, and `kubeadm join` takes its etcd endpoints from those pods
    (kubeadm's etcdutil NewFromCluster, then Sync), none of which answers
    (the restored etcd has one member, the restorer's), and fails its
    check-etcd phase after etcdAPICall. Returns whether it was clean; after
    `limit` seconds it joins anyway, as before the cleanup existed."""
    limit = RESTORE_CLEAN_WAIT if limit is None else limit
    end = clock.now() + limit
    said = False
    while True:
        status = restore_status(node)
        if str(status.get("request", "")) == rid and status.get("clean"):
            return True
        if clock.now() >= end:
            say(json.dumps({"action": "warning", "reason": "kube-aws restore %s: the restorer did not say the old "
                            "controllers are gone from the API within %ds; joining anyway" % (rid, limit)}))
            return False
        if not said:
            say(json.dumps({"action": "wait", "reason": "kube-aws restore %s: waiting for the restorer to remove "
                            "the snapshot's old controllers from the API before joining" % rid}))
            said = True
        clock.sleep(RESTORE_CLEAN_POLL)


def stale_controllers(nodes_json, self_name):
    """The control-plane Nodes of `kubectl get nodes -o json` other than this
    one: after a restore, the snapshot's old controllers (a restore replaces
    every controller)."""
    out = []
    for n in (nodes_json or {}).get("items") or []:
        meta = n.get("metadata") or {}
        name = meta.get("name", "")
        if name and name != self_name and "node-role.kubernetes.io/control-plane" in (meta.get("labels") or {}):
            out.append(name)
    return sorted(out)


def finish_restore(node, plan, self_name, run=run_command, clock=None, say=print):
    """The restorer, once `kubeadm init` on the restored data answers:
    deletes the snapshot's old controllers from the API (each one's pods in
    kube-system, its etcd static pod among them, then its Node; kubelets of
    live nodes would post theirs again), then says `clean` in the restore
    status, which the joining controllers wait for (wait_restore_clean).
    A failure is said and the status still written: the joiners would
    otherwise wait out RESTORE_CLEAN_WAIT."""
    clock = clock or Clock()
    kubectl = ["kubectl", "--kubeconfig", ADMIN_CONF]
    gone, problem = [], ""
    try:
        stale = stale_controllers(json.loads(run(kubectl + ["get", "nodes", "-o", "json"]) or "{}"), self_name)
        for name in stale:
            run(kubectl + ["delete", "pods", "-n", "kube-system", "--field-selector", "spec.nodeName=" + name,
                           "--wait=false", "--ignore-not-found"])
            run(kubectl + ["delete", "node", name, "--wait=false", "--ignore-not-found"])
            gone.append(name)
    except (RuntimeError, OSError, ValueError) as e:
        problem = str(e)
        say(json.dumps({"action": "warning", "reason": "the snapshot's old controllers could not all be removed "
                        "from the API: %s" % problem}))
    status = restore_status(node)
    status.update({"key": plan.get("key", ""), "request": plan.get("request", status.get("request", "")),
                   "clean": True, "removedControllers": gone, "cleanedAt": int(clock.now())})
    if problem:
        status["cleanProblem"] = problem
    node.put_json(RESTORE_STATUS, status)
    say(json.dumps({"action": "cleaned", "removedControllers": gone}))
    return gone


def restore_decision(took_init_lock, api_answers, controller_count, snaps):
    """What a booting controller does with etcd:
    - it took the init lock: the cluster is new, `kubeadm init`;
    - an API answers: the cluster is alive, join it;
    - a single-controller cluster existed (the lock was taken before) and no
      API answers: its only controller was replaced and etcd went with its
      root volume: restore the newest snapshot, then `kubeadm init` on it;
      with no snapshot there is nothing to restore: fail, saying so;
    - several controllers and no API yet: the others may be booting too,
      join (kubeadm join waits for the API)."""
    if took_init_lock:
        return {"action": INIT, "reason": "this controller took the init lock: a new cluster"}
    if api_answers:
        return {"action": JOIN, "reason": "the API answers"}
    if controller_count == 1:
        if snaps:
            return {"action": RESTORE, "key": snaps[-1]["key"], "time": snaps[-1]["time"],
                    "reason": "the cluster existed, no API answers and it has one controller: "
                              "restoring its newest snapshot"}
        return {"action": FAIL,
                "reason": "the cluster existed and its only controller is gone, but there is no etcd "
                          "snapshot to restore; destroy and up the cluster again, or put a snapshot "
                          "in the backup prefix"}
    return {"action": JOIN, "reason": "no API answers yet; %d controllers: join and wait" % controller_count}


def etcd_image(images_list):
    """The etcd image of `kubeadm config images list` output."""
    for line in images_list.splitlines():
        name = line.strip()
        if name.rsplit("/", 1)[-1].startswith("etcd:"):
            return name
    return None


def restore_commands(image, snapshot, node_name, ip, data_dir=DATA_DIR, present=False):
    """The commands that restore `snapshot` into `data_dir` as a new
    one-member cluster named like the member kubeadm's etcd manifest will
    start (`--name <node name>`, peer URL on the node's address). etcdutl
    (etcd >= 3.5; in the registry.k8s.io/etcd image) runs from the very image
    kubeadm will run, with /var/lib mounted; `kubeadm init` then needs
    `--ignore-preflight-errors=DirAvailable--var-lib-etcd` to keep the data.
    The image is pulled first unless it is `present` already (an AMI with
    the images baked in need not reach a registry: `ctr images pull`
    resolves the name at the registry even when the image is there)."""
    peer = "https://%s:%d" % (ip, PEER_PORT)
    pull = [] if present else [["ctr", "-n", "k8s.io", "images", "pull", image]]
    return pull + [
        ["ctr", "-n", "k8s.io", "run", "--rm",
         "--mount", "type=bind,src=/var/lib,dst=/var/lib,options=rbind:rw",
         image, "kube-aws-etcd-restore",
         "etcdutl", "snapshot", "restore", snapshot,
         "--data-dir", data_dir, "--name", node_name,
         "--initial-cluster", "%s=%s" % (node_name, peer),
         "--initial-advertise-peer-urls", peer],
    ]


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

    def controller_ips(self):
        """Private addresses of the cluster's pending or running controllers."""
        name = "%s-controller" % self.runtime.get("cluster", "")
        out = self.aws(["ec2", "describe-instances", "--filters",
                        "Name=tag:Name,Values=%s" % name,
                        "Name=instance-state-name,Values=pending,running"]) or {}
        ips = []
        for r in out.get("Reservations") or []:
            for i in r.get("Instances") or []:
                if i.get("PrivateIpAddress"):
                    ips.append(i["PrivateIpAddress"])
        return ips

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

def remove_member_through_peer(etcd, self_ip, endpoints, clock, deadline):
    """Removes this node's member through another member, retrying until
    `deadline`. `endpoints` are where to read the member list (this node's,
    then the other controllers': the local member may be down already).
    Returns (ok, message)."""
    last = "no attempt"
    while True:
        try:
            members = etcd.member_list(endpoints)
            own = own_member(members, self_ip)
            if own is None:
                return True, "no etcd member on %s: nothing to remove" % self_ip
            peers = peer_endpoints(members, self_ip)
            if not peers:
                return True, "the last etcd member stays (a cluster cannot remove its only member)"
            # Through a peer: the leaving member is the one going away.
            via = etcd.member_remove(peers, own["ID"]) or peers[0]
            return True, "removed etcd member %s (%s) through %s" % (own.get("name", ""), own["ID"], via)
        except Exception as e:
            last = str(e)
        if clock.now() >= deadline:
            return False, "could not remove the etcd member on %s: %s" % (self_ip, last)
        clock.sleep(POLL_SECONDS)


def leave_verdict(members, self_ip, healthy):
    """("remove" | "hold" | "none", why) for the member on this node. Pure.

    `healthy`: the IDs (as_id) of the members whose endpoint answered a status
    just now. The member is removed only when the members left keep a quorum
    among those that answer: len(others) // 2 + 1 of them (etcd's majority of
    the membership after the removal; "Runtime reconfiguration", etcd docs:
    removing a member of a cluster with a failed minority can lose quorum).
    Otherwise the controller holds: its own member still votes, and going
    would leave a cluster that cannot elect a leader."""
    own = own_member(members, self_ip)
    if own is None:
        return "none", "no etcd member on %s: nothing to remove" % self_ip
    others = [m for m in members if as_id(m["ID"]) != as_id(own["ID"])]
    if not others:
        return "none", "the last etcd member stays (a cluster cannot remove its only member)"
    need = len(others) // 2 + 1
    up = [m for m in others if as_id(m["ID"]) in healthy]
    if len(up) >= need:
        return "remove", "%d of the %d other etcd members answer (a quorum is %d)" % (len(up), len(others), need)
    down = sorted(m.get("name") or ",".join(member_ips(m)) or str(as_id(m["ID"])) for m in others if m not in up)
    return "hold", ("removing the etcd member on %s would leave %d members of which %d answer (%s do not), fewer "
                    "than the %d a quorum needs: this controller stays until they are back (replace or repair "
                    "them; `kube-aws status` shows them)" % (self_ip, len(others), len(up), ", ".join(down), need))


def healthy_members(etcd, members):
    """The IDs of the members whose client endpoint answers a status now."""
    out = set()
    for m in members:
        for url in m.get("clientURLs") or []:
            try:
                etcd.status(url)
                out.add(as_id(m["ID"]))
                break
            except Exception:
                continue
    return out


def own_group(node, instance_id):
    groups = node.aws(["autoscaling", "describe-auto-scaling-instances", "--instance-ids", instance_id]) or {}
    found = groups.get("AutoScalingInstances") or []
    if not found:
        raise RuntimeError("instance %s is in no auto scaling group" % instance_id)
    return found[0]["AutoScalingGroupName"]


def heartbeat(node, instance_id, settings):
    """Holds the termination hook for another HeartbeatTimeout."""
    node.aws(["autoscaling", "record-lifecycle-action-heartbeat",
              "--lifecycle-hook-name", settings.get("lifecycleHook", "kube-aws-etcd-member"),
              "--auto-scaling-group-name", own_group(node, instance_id), "--instance-id", instance_id])


def remove_when_safe(node, etcd, self_ip, endpoints, clock, deadline, settings, instance):
    """Removes this node's member once the others keep a quorum without it
    (leave_verdict), holding the termination hook (heartbeats) while they
    would not, or while the removal fails although they would: the roll
    stops here, with the reason in this node's status object, instead of
    taking etcd's quorum. A membership no endpoint answers for cannot be
    judged: then the removal is tried until `deadline` as before (a
    controller that never joined must not hold its replacement back).
    Returns (ok, message)."""
    timeout = int(settings.get("lifecycleTimeoutSeconds", 300))
    beat_every = max(10, timeout // 3)
    last_beat, said = clock.now(), None
    while True:
        try:
            members = etcd.member_list(endpoints)
        except Exception as e:
            members, why = None, "could not read the etcd membership: %s" % e
            if said is None:
                # Never judged: tried until the deadline, then the group goes on.
                if clock.now() >= deadline:
                    return False, why
                clock.sleep(POLL_SECONDS)
                continue
        if members is not None:
            verdict, why = leave_verdict(members, self_ip, healthy_members(etcd, members))
            if verdict == "none":
                return True, why
            if verdict == "remove":
                ok, message = remove_member_through_peer(etcd, self_ip, endpoints, clock, clock.now())
                if ok:
                    return True, message + " (%s)" % why
                why = "%s, although the others keep a quorum: this controller stays until it succeeds" % message
        if why != said:
            said = why
            print("kube-aws: holding the termination: %s" % why, flush=True)
            try:
                node.put_json("status/nodes/%s.json" % instance["instanceId"],
                              failure_report(instance, node.runtime, "etcd-quorum-hold", why, clock.now(),
                                             "kube-aws-node lifecycle leave"))
            except Exception as e:
                print("kube-aws: could not write the status object: %s" % e, file=sys.stderr, flush=True)
        if clock.now() - last_beat >= beat_every:
            try:
                heartbeat(node, instance["instanceId"], settings)
                last_beat = clock.now()
            except Exception as e:
                # No lifecycle action left to hold (the hook's global timeout,
                # or someone completed it): the group goes on anyway.
                return False, "%s; the termination hook can no longer be held: %s" % (why, e)
        clock.sleep(POLL_SECONDS)


def prune_once(node, etcd, previous):
    """One look at stale members: removes those seen stale on the previous
    look too (a minority at most). Returns (candidates now, removed)."""
    self_ip = node.ip()
    endpoints = [local_endpoint(self_ip)]
    members = etcd.member_list(endpoints)
    current = stale_candidates(members, node.controller_ips(), self_ip)
    gone = removable(confirmed_stale(previous, current), members)
    removed = []
    for m in gone:
        etcd.member_remove(endpoints, m["ID"])
        removed.append(m)
    return current, removed


def leave(node, etcd, run, clock):
    """On Terminated: drain and delete this Node, remove the etcd member
    through a peer once the others keep a quorum without it (holding the
    hook while they would not: remove_when_safe), then complete the
    lifecycle action (CONTINUE); a failure is reported in the node status
    object."""
    settings = node.settings()
    instance = node.instance()
    self_ip = node.ip()
    start = clock.now()
    # Leave a minute of the hook's heartbeat timeout for the completion itself.
    deadline = start + max(30, int(settings.get("lifecycleTimeoutSeconds", 300)) - 60)
    problems = []
    name = instance.get("nodeName", "")
    if name and os.path.exists(host(ADMIN_CONF)):
        for argv in (["kubectl", "--kubeconfig", ADMIN_CONF, "drain", name, "--ignore-daemonsets",
                      "--delete-emptydir-data", "--force", "--timeout=90s"],
                     ["kubectl", "--kubeconfig", ADMIN_CONF, "delete", "node", name, "--ignore-not-found"]):
            try:
                run(argv)
            except Exception as e:
                problems.append(str(e))
    ok, message = True, "no etcd on this node"
    if os.path.exists(host(ETCD_MANIFEST)) and int(settings.get("controllerCount", 1)) == 1:
        # The only controller is going (an AMI refresh, a node-file change):
        # a last snapshot now makes its replacement's restore lose nothing.
        try:
            code, report = backup_once(node, run, clock, force=True)
            if report is not None:
                node.put_json(BACKUP_STATUS, report)
            if code != 0:
                problems.append("last snapshot: %s" % (report or {}).get("message", "failed"))
        except Exception as e:
            problems.append("last snapshot: %s" % e)
    if os.path.exists(host(ETCD_MANIFEST)):
        endpoints = [local_endpoint(self_ip)]
        try:
            endpoints += ["https://%s:%d" % (ip, CLIENT_PORT) for ip in node.controller_ips() if ip != self_ip]
        except Exception as e:
            problems.append("listing the other controllers: %s" % e)
        ok, message = remove_when_safe(node, etcd, self_ip, endpoints, clock, deadline, settings, instance)
    if not ok:
        problems.append(message)
    if problems:
        try:
            node.put_json("status/nodes/%s.json" % instance["instanceId"],
                          failure_report(instance, node.runtime, "etcd-member-remove", "\n".join(problems),
                                         clock.now(), "kube-aws-node lifecycle leave"))
        except Exception as e:
            problems.append("could not write the status object: %s" % e)
    try:
        complete_lifecycle_action(node, instance["instanceId"], settings)
    except Exception as e:
        # The group went on without us (the hook's timeout, or the instance
        # is gone): nothing left to complete; said, not a crash loop.
        problems.append("completing the lifecycle action: %s" % e)
        return 1, message, problems
    return 0 if ok else 1, message, problems


def complete_lifecycle_action(node, instance_id, settings):
    node.aws(["autoscaling", "complete-lifecycle-action",
              "--lifecycle-hook-name", settings.get("lifecycleHook", "kube-aws-etcd-member"),
              "--auto-scaling-group-name", own_group(node, instance_id),
              "--lifecycle-action-result", "CONTINUE", "--instance-id", instance_id])


def watch(node, etcd_factory, run, clock, max_ticks=None):
    """The lifecycle service's loop: every 5 s the IMDS target lifecycle
    state; every minute, on a controller running etcd, a look at stale members."""
    previous, last_prune, ticks = [], None, 0
    while max_ticks is None or ticks < max_ticks:
        ticks += 1
        state = None
        try:
            state = node.imds("autoscaling/target-lifecycle-state")
        except Exception as e:
            print("kube-aws: IMDS: %s" % e, file=sys.stderr)
        if state == "Terminated":
            code, message, problems = leave(node, LazyEtcd(etcd_factory), run, clock)
            print("kube-aws: leaving: %s%s" % (message, "; " + "; ".join(problems) if problems else ""), flush=True)
            return code
        now = clock.now()
        if os.path.exists(host(ETCD_MANIFEST)) and (last_prune is None or now - last_prune >= PRUNE_SECONDS):
            last_prune = now
            try:
                previous, removed = prune_once(node, etcd_factory(), previous)
                for m in removed:
                    # flush: stdout is a pipe to the journal, block-buffered; the
                    # real-node bed found this line missing (tests/it/real_node.rs)
                    print("kube-aws: removed stale etcd member %s (%s)" % (m.get("name", ""), member_ips(m)),
                          flush=True)
            except Exception as e:
                print("kube-aws: stale member check: %s" % e, file=sys.stderr)
        clock.sleep(POLL_SECONDS)
    return 0


def withdraw(node, etcd, run, clock, deadline):
    """After this controller's `kubeadm join --control-plane` failed, under
    the join lock it holds: takes back the etcd member the join may have
    added, so that a failed joiner is not a dead vote (a cluster of three
    with a failed fourth needs three of four for a quorum: one more loss
    and it has none). kubeadm's own cleanup does the same (`kubeadm reset`
    removes the local stacked etcd member, its `remove-etcd-member` phase:
    https://kubernetes.io/docs/reference/setup-tools/kubeadm/kubeadm-reset/),
    but needs admin.conf, which a join that failed early has not written;
    here the member list is read through the other controllers' members.

    The removal follows leave's rule (leave_verdict): only while the others
    keep a quorum among those that answer; otherwise the member stays and
    the failure report says so. Then the local etcd's static pod manifest is
    moved aside, so that the kubelet stops a member the cluster no longer
    knows (it would crash-loop on its removed ID) and nothing restarts it.
    Returns (ok, message)."""
    self_ip = node.ip()
    peers = ["https://%s:%d" % (ip, CLIENT_PORT) for ip in node.controller_ips() if ip != self_ip]
    if not peers:
        return True, "no other controller: no member to take back"
    last = "no attempt"
    while True:
        try:
            members = etcd.member_list(peers)
            verdict, why = leave_verdict(members, self_ip, healthy_members(etcd, members))
            if verdict == "none":
                return True, "no etcd member of this node: %s" % why
            if verdict == "hold":
                return False, "the failed join's etcd member stays: %s" % why
            own = own_member(members, self_ip)
            via = etcd.member_remove(peer_endpoints(members, self_ip) or peers, own["ID"]) or peers[0]
            break
        except Exception as e:
            last = str(e)
        if clock.now() >= deadline:
            return False, "could not take back the failed join's etcd member on %s: %s" % (self_ip, last)
        clock.sleep(POLL_SECONDS)
    message = "took back the failed join's etcd member %s (%s) through %s" % (own.get("name", ""), own["ID"], via)
    if os.path.exists(host(ETCD_MANIFEST)):
        try:
            os.replace(host(ETCD_MANIFEST), host(WITHDRAWN_MANIFEST))
            message += "; its static pod manifest moved to %s" % WITHDRAWN_MANIFEST
        except OSError as e:
            message += "; cannot move its static pod manifest aside: %s" % e.strerror
    return True, message


def lifecycle_main(argv, aws, imds=imds_get, etcd_factory=EtcdGateway, run=run_command, clock=None):
    clock = clock or Clock()
    what = argv[0] if argv else "watch"
    node = Node(aws, imds)
    if what == "watch":
        return watch(node, etcd_factory, run, clock)
    if what == "leave":
        code, message, problems = leave(node, LazyEtcd(etcd_factory), run, clock)
        print(message)
        for p in problems:
            print("kube-aws: %s" % p, file=sys.stderr)
        return code
    if what == "prune":
        # Before a joining controller's `kubeadm join`: its client certificate
        # comes from the etcd CA already in /etc/kubernetes/pki.
        run(["kubeadm", "init", "phase", "certs", "etcd-healthcheck-client"])
        etcd = etcd_factory()
        self_ip = node.ip()
        peers = ["https://%s:%d" % (ip, CLIENT_PORT) for ip in node.controller_ips() if ip != self_ip]
        if not peers:
            print("no other controller: nothing to prune")
            return 0
        members = etcd.member_list(peers)
        first = stale_candidates(members, node.controller_ips(), self_ip)
        if not first:
            print("no stale etcd member")
            return 0
        clock.sleep(PRUNE_SECONDS)
        members = etcd.member_list(peers)
        gone = removable(confirmed_stale(first, stale_candidates(members, node.controller_ips(), self_ip)), members)
        for m in gone:
            etcd.member_remove(peers, m["ID"])
            print("removed stale etcd member %s (%s)" % (m.get("name", ""), ", ".join(member_ips(m))))
        if not gone:
            # Another controller's watch may have removed them in the minute
            # between the looks (seen on the real-node bed): say so.
            print("no stale etcd member left on the second look (%s)" % ", ".join(
                ip for m in first for ip in member_ips(m)))
        return 0
    if what == "withdraw":
        run(["kubeadm", "init", "phase", "certs", "etcd-healthcheck-client"])
        ok, message = withdraw(node, LazyEtcd(etcd_factory), run, clock, clock.now() + WITHDRAW_SECONDS)
        print(message)
        return 0 if ok else 1
    print("usage: kube-aws-node lifecycle [watch|leave|prune|withdraw]", file=sys.stderr)
    return 2


# ---------------------------------------------------------------- backups

def etcdctl_in_container(run, args):
    """etcdctl inside the running etcd static pod's container (the etcd image
    ships it; the pod mounts /etc/kubernetes/pki/etcd and /var/lib/etcd)."""
    ids = run(["crictl", "--runtime-endpoint", CRI, "ps", "--state", "Running", "-q",
               "--label", "io.kubernetes.container.name=etcd"]).split()
    if not ids:
        raise RuntimeError("no running etcd container")
    return run(["crictl", "--runtime-endpoint", CRI, "exec", ids[0], "etcdctl",
                "--endpoints", local_endpoint(), "--cacert", CA, "--cert", CLIENT_CERT, "--key", CLIENT_KEY]
               + list(args))


def upload_snapshot(aws, path, bucket, key, kms, clock, attempts=UPLOAD_ATTEMPTS):
    """Uploads with SSE-KMS (the cluster's key), retried with a growing pause.
    Returns None, or the last error."""
    sse = ["--sse", "aws:kms", "--sse-kms-key-id", kms] if kms else ["--sse", "AES256"]
    last = None
    for i in range(attempts):
        try:
            aws(["s3", "cp", "--only-show-errors", path, "s3://%s/%s" % (bucket, key)] + sse)
            return None
        except Exception as e:
            last = str(e)
            if i + 1 < attempts:
                clock.sleep(10 * (i + 1))
    return last


# The key a follower's `etcd-backup --now` reads linearizably before its
# snapshot (any key does; none needs to exist).
SNAPSHOT_BARRIER = "/kube-aws/snapshot-barrier"


def backup_once(node, run, clock, host_snapshot=None, force=False, anywhere=False):
    """One timer tick: a snapshot when one is due and this member leads
    (`force`: due or not; `anywhere`: on a follower too, after a
    linearizable read through it). Returns (exit code, status object or None)."""
    s = node.settings()
    status = json.loads(etcdctl_in_container(run, ["endpoint", "status", "-w", "json"]))
    cluster = node.runtime.get("cluster", "")
    leads = is_leader(status)
    if not leads:
        # Every controller records the raft term it saw (metrics.py).
        metrics.tick(node.aws, cluster, status_of(status), False, None, clock.now(), host(metrics.TERM_STATE))
        if not anywhere:
            return 0, None
    bucket, prefix = s["bucket"], s["backupPrefix"]
    listing = node.aws(["s3api", "list-objects-v2", "--bucket", bucket, "--prefix", prefix]) or {}
    hourly = snapshots(listing, prefix, (HOURLY, ""))
    daily = snapshots(listing, prefix, (DAILY,))
    now = clock.now()
    if leads:
        metrics.tick(node.aws, cluster, status_of(status), True, hourly[-1]["time"] if hourly else None, now,
                     host(metrics.TERM_STATE))
    if not force and not backup_due(hourly, now, int(s["intervalSeconds"])):
        return 0, None
    instance = node.instance()
    key = snapshot_key(prefix + HOURLY, now, instance.get("nodeName") or instance.get("instanceId", ""))
    report = {"phase": "failed", "key": key, "instanceId": instance.get("instanceId", ""),
              "startedAt": int(now)}
    local = host_snapshot or host(SNAPSHOT_PATH)
    try:
        if not leads:
            # A follower may not yet have applied the newest committed writes.
            # A linearizable read through it first (etcd's ReadIndex: the
            # member waits until it has applied up to the leader's commit
            # index; etcd server/etcdserver/v3_server.go,
            # linearizableReadNotify) puts every write acknowledged before
            # this call into the snapshot.
            etcdctl_in_container(run, ["get", "--consistency=l", "--keys-only", "--limit=1", SNAPSHOT_BARRIER])
        etcdctl_in_container(run, ["snapshot", "save", SNAPSHOT_PATH])
        size = os.path.getsize(local)
        err = upload_snapshot(node.aws, local, bucket, key, s.get("kmsKeyARN", ""), clock)
        # One snapshot a day also goes to the daily tier, kept longer.
        if not err and backup_due(daily, now, DAY_SECONDS):
            err = upload_snapshot(node.aws, local, bucket, daily_key(prefix, key), s.get("kmsKeyARN", ""), clock)
            if not err:
                report["daily"] = daily_key(prefix, key)
    except Exception as e:
        err, size = str(e), 0
    finally:
        if os.path.exists(local):
            os.unlink(local)
    report["updatedAt"] = int(clock.now())
    if err:
        report["message"] = err
        return 1, report
    report.update({"phase": "ok", "size": size})
    return 0, report


# The backup status object `kube-aws backups` prints.
BACKUP_STATUS = "status/etcd/backup.json"


def etcd_backup_main(argv, aws, imds=imds_get, run=run_command, clock=None):
    if argv not in ([], ["--now"]):
        print("usage: kube-aws-node etcd-backup [--now]", file=sys.stderr)
        return 2
    now = argv == ["--now"]
    clock = clock or Clock()
    node = Node(aws, imds)
    try:
        code, report = backup_once(node, run, clock, force=now, anywhere=now)
    except Exception as e:
        code, report = 1, {"phase": "failed", "message": str(e), "updatedAt": int(clock.now())}
    if report is not None:
        try:
            node.put_json(BACKUP_STATUS, report)
        except Exception as e:
            print("kube-aws: could not write %s: %s" % (BACKUP_STATUS, e), file=sys.stderr)
        print("kube-aws: etcd backup %s: %s" % (report["phase"], report.get("key", report.get("message", ""))))
    return code


# ---------------------------------------------------------------- restore

def api_answers(endpoint, attempts=6, pause=10, clock=None, opener=None):
    """Whether anything answers HTTPS on the API endpoint (any HTTP status
    counts: an answer is an API server)."""
    clock = clock or Clock()
    ctx = None
    if opener is None:
        # Only whether something answers matters here (no data is sent): the
        # cluster CA when it is in place, else any certificate.
        ca = host("/etc/kubernetes/pki/ca.crt")
        ctx = ssl.create_default_context(cafile=ca) if os.path.exists(ca) else ssl._create_unverified_context()
    for i in range(attempts):
        try:
            req = urllib.request.Request("https://%s:6443/readyz" % endpoint)
            if opener is not None:
                opener(req)
            else:
                urllib.request.urlopen(req, timeout=5, context=ctx).close()
            return True
        except urllib.error.HTTPError:
            return True
        except Exception:
            if i + 1 < attempts:
                clock.sleep(pause)
    return False


def restore_if_needed(aws, took_init_lock=False, imds=imds_get, run=run_command, clock=None, answers=None,
                      say=print):
    """The restore decision, and on `restore` the restore itself, for the
    bootstrap of a controller (after the PKI, the packages and containerd,
    before kubeadm). Returns the final plan: {"action": "init" | "join" |
    "fail" | "restored", "reason" or "key"}. On "restored", bootstrap runs
    `kubeadm init` with `--ignore-preflight-errors=DirAvailable--var-lib-etcd`
    on the restored data; on "fail" it fails the boot with the reason."""
    clock = clock or Clock()
    node = Node(aws, imds)
    s = node.settings()
    bucket, prefix = s["bucket"], s["backupPrefix"]
    count = int(s.get("controllerCount", 1))
    request = None if took_init_lock else read_restore_request(node)
    took = request and locks.take(node.aws, node.runtime["bucket"],
                                  "%s/%s" % (node.runtime["keyPrefix"], RESTORE_LOCK),
                                  node.instance().get("instanceId", ""))
    if request and not took:
        # Joining a restore: not before the restorer has removed the
        # snapshot's old controllers from the API (wait_restore_clean).
        rid = str(request.get("id", ""))
        if wait_restore_clean(node, rid, clock, say) or restore_served(node, rid):
            request = None
    if request:
        plan = requested_restore_decision(request, took, prefix)
        say(json.dumps(plan))
        if plan["action"] != RESTORE:
            return plan
        return restore_snapshot(node, run, clock, plan, say)
    if not took_init_lock and count > 1:
        # Several controllers always join (restore_decision): no need to probe.
        plan = restore_decision(False, False, count, [])
        say(json.dumps(plan))
        return plan
    up = took_init_lock or (answers(node.runtime.get("apiEndpoint", "")) if answers else
                            api_answers(node.runtime.get("apiEndpoint", ""), clock=clock))
    snaps = [] if took_init_lock or up else snapshots(
        node.aws(["s3api", "list-objects-v2", "--bucket", bucket, "--prefix", prefix]) or {}, prefix)
    plan = restore_decision(took_init_lock, up, count, snaps)
    say(json.dumps(plan))
    if plan["action"] != RESTORE:
        return plan
    return restore_snapshot(node, run, clock, plan, say)


def reset_installed_record(node, snapshot):
    """After a restore: the addon installer's record (reconciler.json
    installedURI) made to say that nothing is current
    (reconcile.after_restore), so the reconciler brings every release from
    the snapshot's versions to the current plan instead of trusting a record
    of releases etcd no longer holds. No other controller runs the installer
    now (a restore happens before the first one initializes). "reset",
    "none" (no record: nothing was installed) or the reason it failed."""
    uri = read_json(host(RECONCILER_JSON), {}).get("installedURI") or ""
    if not uri.startswith("s3://"):
        return "no installed record is configured (%s)" % RECONCILER_JSON
    bucket, _, key = uri[len("s3://"):].partition("/")
    try:
        if listed_object(node.aws, bucket, key) is None:
            return "none"
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "installed.json")
            node.aws(["s3api", "get-object", "--bucket", bucket, "--key", key, path])
            with open(path) as f:
                doc = json.load(f)
            with open(path, "w") as f:
                json.dump(reconcile.after_restore(doc, snapshot), f)
            node.aws(["s3api", "put-object", "--bucket", bucket, "--key", key, "--body", path,
                      "--content-type", "application/json"])
    except (AwsError, OSError, ValueError, RuntimeError) as e:
        return "the addon record %s could not be reset (the addons may stay at the snapshot's versions until " \
               "a plan changes): %s" % (uri, e)
    return "reset"


def restore_snapshot(node, run, clock, plan, say):
    """Restores plan["key"] into etcd's data dir as a one-member cluster;
    bootstrap then runs `kubeadm init` on it."""
    bucket = node.settings()["bucket"]
    version = read_json(host(NODE_JSON), {}).get("kubernetesVersion", "")
    image = etcd_image(run(["kubeadm", "config", "images", "list", "--kubernetes-version", version]))
    if not image:
        failed = {"action": FAIL, "reason": "kubeadm lists no etcd image for %s" % version}
        say(json.dumps(failed))
        return failed
    node.aws(["s3", "cp", "--only-show-errors", "s3://%s/%s" % (bucket, plan["key"]), host(RESTORE_PATH)])
    instance = node.instance()
    present = image in run(["ctr", "-n", "k8s.io", "images", "ls", "-q", "name==" + image]).split()
    for argv in restore_commands(image, RESTORE_PATH, instance["nodeName"], node.ip(), present=present):
        run(argv)
    os.unlink(host(RESTORE_PATH))
    addons = reset_installed_record(node, plan["key"])
    if addons not in ("reset", "none"):
        say(json.dumps({"action": "warning", "reason": addons}))
    node.put_json(RESTORE_STATUS, {"key": plan["key"], "instanceId": instance["instanceId"],
                                   "request": plan.get("request", ""), "addonRecord": addons,
                                   "restoredAt": int(clock.now())})
    done = {"action": "restored", "key": plan["key"]}
    say(json.dumps(done))
    return done


def etcd_restore_main(argv, aws, imds=imds_get, run=run_command, clock=None, answers=None):
    """`etcd-restore [--took-init-lock]`: prints the decision as JSON, then,
    after a restore, {"action": "restored", "key": ...}. Exit 1 on fail."""
    plan = restore_if_needed(aws, "--took-init-lock" in argv, imds, run, clock, answers)
    return 1 if plan["action"] == FAIL else 0
