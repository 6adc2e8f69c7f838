"""`kube-aws-node certs`: renews kubeadm's control-plane certificates on a
controller before they expire, run by kube-aws-certs.timer (daily).

kubeadm's leaf certificates (apiserver, etcd server/peer/client, front-proxy
client, the kubeconfigs admin.conf, controller-manager.conf, scheduler.conf,
super-admin.conf) last one year; kubeadm renews them only on `kubeadm
upgrade`. Steps, as kubeadm's "Certificate Management with kubeadm" gives
them (kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-certs/,
"Manual certificate renewal"): `kubeadm certs check-expiration -o json`;
when a leaf is due, `kubeadm certs renew all`, then every static pod
restarted, "since dynamic certificate reload is currently not supported for
all components": its manifest moved out of /etc/kubernetes/manifests until
the kubelet stops the pod, then moved back and the component waited for.

Invariant: `parse`, `due` and `report` are pure. Renewal and restarts happen
only under the control plane's lock (locks.JOIN_LOCK, the one joins,
upgrades and reconfigurations take), so two controllers never restart etcd
or the API server at once, whatever restarts them; static pods
are restarted one at a time, each healthy again (its own health endpoint on
127.0.0.1) before the next goes; a manifest moved out is always moved back.
Every run writes status/certs/<instance-id>.json (earliest expiry, what was
renewed; `kube-aws status` reads it), and a failure also writes the node's
status object status/nodes/<instance-id>.json.

The JSON kubeadm prints (cmd/kubeadm/app/apis/output, kind
CertificateExpirationInfo, apiVersion output.kubeadm.k8s.io/v1alpha3 in
kubeadm 1.35): {"certificates": [{"name", "expirationDate" (RFC 3339, null
when missing), "residualTime", "externallyManaged", "caName", "missing"}],
"certificateAuthorities": [the same, without caName]}; the test fixture is
kubeadm 1.35.4's own output. CAs are not renewed (kubeadm cannot: they last
ten years and are kube-aws's, in the secret bundle); their expiry is reported.
"""
import datetime
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from . import jsonio, locks, paths, webhook_cert
from .console import Console
from .retry import poll

CERTS_JSON = "/etc/kube-aws/certs.json"
MANIFESTS = "/etc/kubernetes/manifests"
HELD = "/etc/kubernetes/kube-aws-held-manifests"
DAY = 86400
DEFAULT_RENEW_BEFORE_DAYS = 60
KIND = "CertificateExpirationInfo"
STATUS_KEY = "status/certs/%s.json"
NODE_STATUS_KEY = "status/nodes/%s.json"
LOCK_KEY = locks.JOIN_LOCK

# The static pods kubeadm writes, in restart order, with the endpoint that
# says each is healthy again on 127.0.0.1 (kubeadm's own probes: etcd's
# metrics listener http://127.0.0.1:2381, the API server's secure port, the
# controller manager's 10257 and the scheduler's 10259, all readable
# anonymously). etcd first: the API server's /readyz then also checks it.
STATIC_PODS = (
    ("etcd", "http://127.0.0.1:2381/health"),
    ("kube-apiserver", "https://127.0.0.1:6443/readyz"),
    ("kube-controller-manager", "https://127.0.0.1:10257/healthz"),
    ("kube-scheduler", "https://127.0.0.1:10259/healthz"),
)


class CertsError(Exception):
    def __init__(self, step, message):
        Exception.__init__(self, "%s: %s" % (step, message))
        self.step = step
        self.message = message


def parse_time(text):
    """Seconds since the epoch of an RFC 3339 time ("2027-12-01T20:14:06Z")."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def iso(epoch):
    return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(doc):
    """(leaves, cas) of kubeadm's CertificateExpirationInfo: each
    {name, expires (epoch or None), ca, missing, external}."""
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise CertsError("check-expiration", "kubeadm printed no %s (kind %r)" % (
            KIND, doc.get("kind") if isinstance(doc, dict) else type(doc).__name__))

    def one(c):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise CertsError("check-expiration", "a certificate entry without a name: %r" % (c,))
        stamp = c.get("expirationDate")
        try:
            expires = parse_time(stamp) if stamp else None
        except (TypeError, ValueError):
            raise CertsError("check-expiration", "%s: expirationDate %r is not RFC 3339" % (c["name"], stamp))
        return {"name": c["name"], "expires": expires, "ca": c.get("caName", ""),
                "missing": bool(c.get("missing")) or expires is None,
                "external": bool(c.get("externallyManaged"))}

    return ([one(c) for c in doc.get("certificates") or []],
            [one(c) for c in doc.get("certificateAuthorities") or []])


def due(leaves, now, renew_before_seconds):
    """Names of the leaves kubeadm manages that expire within the threshold
    (or already did); a missing or externally managed one is not kubeadm's to renew."""
    return [c["name"] for c in leaves
            if not c["missing"] and not c["external"] and c["expires"] - now < renew_before_seconds]


def earliest(entries):
    """The present entry that expires first, or None."""
    present = [c for c in entries if not c["missing"]]
    return min(present, key=lambda c: c["expires"]) if present else None


def report(instance, leaves, cas, now, renewed, error=""):
    """The certificate status object (status/certs/<instance-id>.json)."""
    def expiry(c):
        return None if c is None else {"name": c["name"], "expires": iso(c["expires"]),
                                        "expiresEpoch": int(c["expires"])}
    return {
        "instanceId": instance.get("instanceId", ""),
        "nodeName": instance.get("nodeName", ""),
        "checkedAt": iso(now),
        "earliestLeaf": expiry(earliest(leaves)),
        "earliestCA": expiry(earliest(cas)),
        "renewed": list(renewed),
        "ok": not error,
        "error": error,
    }


def settings(path=None):
    """/etc/kube-aws/certs.json: {"renewBeforeDays"}; the default when absent."""
    s = jsonio.read(path or paths.path(CERTS_JSON), {})
    days = s.get("renewBeforeDays", DEFAULT_RENEW_BEFORE_DAYS)
    if not isinstance(days, int) or isinstance(days, bool) or days < 1:
        raise CertsError("settings", "renewBeforeDays %r is not a positive whole number of days" % (days,))
    return {"renewBeforeSeconds": paths.knob("CERTS_RENEW_BEFORE_SECONDS", days * DAY)}


# ---------------------------------------------------------------- effects

def run_command(args):
    """A command's stdout; CertsError with its last stderr line when it fails."""
    try:
        p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, errors="replace")
    except OSError as e:
        raise CertsError(args[0], e.strerror)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        raise CertsError(" ".join(args[:3]), tail)
    return p.stdout


def running_containers(run, name):
    """IDs of the running containers named exactly `name` (crictl)."""
    out = run(["crictl", "--runtime-endpoint", "unix:///run/containerd/containerd.sock", "ps",
               "--name", "^%s$" % name, "--state", "Running", "-q"])
    return set(line.strip() for line in out.splitlines() if line.strip())


def healthy(url, timeout=5):
    """Whether `url` answers 200 (TLS not verified: a local component's own
    serving certificate, on 127.0.0.1, as the kubelet's probes ask)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class Host(object):
    """What a restart touches, replaceable in tests."""

    def __init__(self, run=run_command, health=healthy, clock=time.time, sleep=time.sleep):
        self.run = run
        self.health = health
        self.clock = clock
        self.sleep = sleep


def wait_for(host, what, done, limit):
    if not poll(done, limit, paths.knob("CERTS_POLL", 2), sleep=host.sleep, clock=host.clock):
        raise CertsError("restart", "%s after %ds" % (what, limit))


def restart_static_pod(host, name, url, manifests, held):
    """Moves the manifest out until the kubelet has stopped the pod, moves it
    back (always), then waits for a new container and its health endpoint."""
    src = os.path.join(manifests, name + ".yaml")
    dst = os.path.join(held, name + ".yaml")
    os.makedirs(held, mode=0o700, exist_ok=True)
    before = running_containers(host.run, name)
    os.rename(src, dst)
    try:
        # The kubelet looks at the directory every 20 s (fileCheckFrequency).
        wait_for(host, "the kubelet has not stopped %s" % name,
                 lambda: not (running_containers(host.run, name) & before), paths.knob("CERTS_STOP_TIMEOUT", 120))
    finally:
        os.rename(dst, src)
    wait_for(host, "%s has not started again" % name,
             lambda: running_containers(host.run, name) - before, paths.knob("CERTS_START_TIMEOUT", 300))
    wait_for(host, "%s is not healthy (%s)" % (name, url), lambda: host.health(url),
             paths.knob("CERTS_HEALTH_TIMEOUT", 300))


def restore_held(manifests, held, say):
    """A manifest left in the held directory by a run that died mid-restart goes back."""
    if not os.path.isdir(held):
        return
    for f in sorted(os.listdir(held)):
        if f.endswith(".yaml") and not os.path.exists(os.path.join(manifests, f)):
            say("moving back %s, left out by an earlier run" % f)
            shutil.move(os.path.join(held, f), os.path.join(manifests, f))


def check(run):
    return parse(jsonio.parse(run(["kubeadm", "certs", "check-expiration", "-o", "json"]),
                              "kubeadm certs check-expiration"))


def renew_if_due(host, cfg, lock, say, manifests=None, held=None, force=False):
    """One run: (leaves, cas, renewed). `lock` is a context manager factory
    (the cluster lock), entered only when something is due (with `force`,
    everything is). The check after the renewal uses the configured window
    either way: a forced renewal whose certificates came out fresh succeeded
    (with an infinite window they would all still be "due", which failed
    every `certs --force` on the real-node bed)."""
    manifests = manifests or paths.path(MANIFESTS)
    held = held or paths.path(HELD)
    restore_held(manifests, held, say)
    leaves, cas = check(host.run)
    names = due(leaves, host.clock(), float("inf") if force else cfg["renewBeforeSeconds"])
    if not names:
        return leaves, cas, []
    say("due for renewal: %s" % ", ".join(names))
    with lock():
        host.run(["kubeadm", "certs", "renew", "all"])
        for name, url in STATIC_PODS:
            if os.path.exists(os.path.join(manifests, name + ".yaml")):
                say("restarting %s" % name)
                restart_static_pod(host, name, url, manifests, held)
        leaves, cas = check(host.run)
    still = due(leaves, host.clock(), cfg["renewBeforeSeconds"])
    if still:
        raise CertsError("renew", "still due after `kubeadm certs renew all`: %s (the threshold is longer "
                                  "than the certificates' validity?)" % ", ".join(still))
    return leaves, cas, names


def S3Lock(aws, rt, holder, say):
    """The lock at LOCK_KEY, held for a `with` block (locks.Held)."""
    return locks.Held(aws, rt, LOCK_KEY, holder, say, lambda m: CertsError("join-lock", m), "CERTS_LOCK",
                      # Waits up to an hour (a join or an upgrade may hold it);
                      # stale after 30 minutes, as every other taker judges it.
                      (3600, 1800, 30))


def put_json(aws, rt, key, value):
    """Writes a status object under the cluster's prefix (AES256)."""
    fd, path = tempfile.mkstemp(prefix="kube-aws-certs-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
        aws(["s3api", "put-object", "--bucket", rt["bucket"], "--key", "%s/%s" % (rt["keyPrefix"], key),
             "--body", path, "--server-side-encryption", "AES256", "--content-type", "application/json"])
    finally:
        os.unlink(path)


def failure_report(instance, rt, step, message, now):
    """The node status object, in the shape of the bootstrap's failure report."""
    return {"instanceId": instance.get("instanceId", ""), "nodeName": instance.get("nodeName", ""),
            "role": "controller", "stack": rt.get("stackName", ""), "asgLogicalId": rt.get("asgLogicalId", ""),
            "step": "certs-" + step, "exitCode": 1, "command": "kube-aws-node certs", "log": message,
            "timestamp": int(now)}


def main(argv, aws, host=None, instance=None, say=None):
    """`kube-aws-node certs [--force]`: --force renews whatever the expiry."""
    say = say or Console("kube-aws-certs")
    if argv not in ([], ["--force"]):
        say("usage: kube-aws-node certs [--force]")
        return 2
    host = host or Host()
    rt = jsonio.read(paths.etc("runtime.json"))
    if instance is None:
        instance = jsonio.read(paths.path(paths.INSTANCE_JSON), {})
    leaves, cas, renewed, error, step = [], [], [], "", ""
    try:
        cfg = settings()
        leaves, cas, renewed = renew_if_due(host, cfg, lambda: S3Lock(aws, rt, instance.get("instanceId", ""),
                                                                    say), say, force=argv == ["--force"])
        # The pod identity webhook's serving certificate, in the cluster (its own module);
        # its expiry joins the leaves `kube-aws status` reports.
        web = webhook_cert.renew(say=say, lock=lambda: S3Lock(aws, rt, instance.get("instanceId", ""), say))
        if web["action"] == "renewed":
            renewed = list(renewed) + ["the pod identity webhook's certificate"]
        if web["expires"] is not None:
            leaves = list(leaves) + [webhook_cert.leaf(web["expires"])]
    except webhook_cert.WebhookCertError as e:
        error, step = e.message, "webhook-cert-" + e.step
    except CertsError as e:
        error, step = e.message, e.step
    except Exception as e:  # noqa: BLE001 - reported, never a silent failure
        error, step = "%s: %s" % (e.__class__.__name__, e), "renew"
    now = host.clock()
    code = 0
    if error:
        say("certificate renewal failed at %s: %s" % (step, error))
        code = 1
    elif renewed:
        say("renewed %s; earliest expiry now %s" % (", ".join(renewed), iso(earliest(leaves)["expires"])))
    else:
        first = earliest(leaves)
        say("nothing due; earliest expiry %s" % (iso(first["expires"]) if first else "unknown"))
    iid = instance.get("instanceId") or os.uname()[1]
    try:
        put_json(aws, rt, STATUS_KEY % iid, report(instance, leaves, cas, now, renewed, error))
        if error:
            put_json(aws, rt, NODE_STATUS_KEY % iid, failure_report(instance, rt, step, error, now))
    except Exception as e:  # noqa: BLE001 - the journal keeps the result
        say("cannot write the status object: %s" % e)
        code = 1
    return code

