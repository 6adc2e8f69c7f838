"""The pod identity webhook's serving certificate, renewed in the cluster from
the cluster CA (issue 27 item 1): no publish, no node replaced.

The certificate kube-aws signs at publish (src/pki.rs `webhook_entries`, one
year) reaches the cluster as the Secret kube-system/pod-identity-webhook-cert
of the plugin's manifests (plugins/pod-identity-webhook), which the
reconciler applies with `kubectl apply --server-side`. The controllers' daily
certificate timer (certs.py) calls `renew` here: when the certificate in the
Secret has less than WEBHOOK_RENEW_BEFORE_SECONDS left (90 days, the same
threshold as a publish's, src/pki.rs SERVING_RENEW_BEFORE) or is missing its
key, it signs a new one with the CA on disk (/etc/kubernetes/pki/ca.crt and
ca.key, which kube-aws-node secrets wrote from the bundle) for the same
names and lifetime, writes it into the Secret, and restarts the webhook's
Deployment.

Why the Secret is written with `kubectl apply --server-side` under kubectl's
own field manager ("kubectl", the default of `kubectl apply --server-side`,
which is what the reconciler runs): the reconciler owns the Secret's data
fields by server-side apply, and a write under another manager would make
its next apply of the manifests fail with a conflict. Under the same
manager, a later apply of the published certificate (a plan change) takes
the Secret back to that one, which is still valid: a publish renews it in the
same window, and this timer renews again within a day when it is due.

Why the Deployment is restarted: upstream's webhook (v0.6.17, the plugin's
image) reads --tls-cert/--tls-key through controller-runtime v0.13.0's
certwatcher (main.go), which reloads on fsnotify events only; the kubelet
updates a Secret volume by swapping a symlink and removing the old files,
after which that watcher can be left watching nothing and miss every later
update (kubernetes-sigs/controller-runtime#3020, which moved certwatcher to
polling in late 2024, long after v0.13). A rolling restart (`kubectl rollout
restart`, the PodDisruptionBudget keeps one pod serving) does not depend on
it.

The CA bundle in the MutatingWebhookConfiguration is the cluster CA's and
does not change. Invariant: the key is written only to a 0600 file in a
private temporary directory, removed afterwards, and never printed;
`due` and `secret_doc` are pure.
"""
import base64
import datetime
import json
import os
import shutil
import subprocess
import tempfile
import time

from . import paths

SECRET = "pod-identity-webhook-cert"
NAMESPACE = "kube-system"
DEPLOYMENT = "pod-identity-webhook"
SERVICE = "pod-identity-webhook"
PKI_DIR = "/etc/kubernetes/pki"
# src/pki.rs SERVING_VALIDITY and SERVING_RENEW_BEFORE.
VALIDITY_DAYS = 365
RENEW_BEFORE = 90 * 86400
# kubectl apply --server-side's default field manager: the reconciler's (see above).
FIELD_MANAGER = "kubectl"


class WebhookCertError(Exception):
    def __init__(self, step, message):
        Exception.__init__(self, "%s: %s" % (step, message))
        self.step = step
        self.message = message


def dns_names():
    """src/pki.rs `service_dns_names` for the webhook's Service."""
    return [SERVICE, "%s.%s" % (SERVICE, NAMESPACE), "%s.%s.svc" % (SERVICE, NAMESPACE),
            "%s.%s.svc.cluster.local" % (SERVICE, NAMESPACE)]


def due(not_after, now, renew_before):
    """Whether a certificate expiring at `not_after` (epoch) is renewed at `now`."""
    return not_after is None or not_after - now < renew_before


def secret_doc(cert_pem, key_pem):
    """The Secret as the plugin's manifest declares it, with new data."""
    b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": SECRET, "namespace": NAMESPACE},
            "data": {"tls.crt": b64(cert_pem), "tls.key": b64(key_pem)}}


def run_command(args, stdin=None):
    """(exit code, output) of a command; kubectl gets the admin kubeconfig."""
    if args and args[0] == "kubectl":
        args = ["kubectl", "--kubeconfig", paths.path(paths.ADMIN_CONF)] + list(args[1:])
    try:
        p = subprocess.run(args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, errors="replace")
    except OSError as e:
        return 127, e.strerror or str(e)
    return p.returncode, p.stdout


def last_line(text):
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else ""


def not_after(run, cert_pem, workdir):
    """The certificate's notAfter (epoch) by openssl, or None when it does not parse."""
    path = os.path.join(workdir, "current.crt")
    with open(path, "w") as f:
        f.write(cert_pem)
    code, out = run(["openssl", "x509", "-noout", "-enddate", "-in", path])
    if code != 0 or "notAfter=" not in out:
        return None
    text = out.strip().split("notAfter=", 1)[1].strip()
    try:
        t = datetime.datetime.strptime(text, "%b %d %H:%M:%S %Y GMT")
    except ValueError:
        return None
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def current(run):
    """The Secret's certificate PEM ("" when it has none), or None when the
    Secret does not exist (the plugin is disabled: nothing to renew)."""
    code, out = run(["kubectl", "-n", NAMESPACE, "get", "secret", SECRET, "-o", "json"])
    if code != 0:
        if "NotFound" in out or "not found" in out:
            return None
        raise WebhookCertError("read", "kubectl get secret %s/%s: %s" % (NAMESPACE, SECRET, last_line(out)))
    try:
        data = json.loads(out).get("data") or {}
        if not data.get("tls.key"):
            return ""
        return base64.b64decode(data.get("tls.crt") or "").decode()
    except (ValueError, TypeError, AttributeError):
        return ""


def sign(run, pki_dir, workdir):
    """A new serving certificate and key (ECDSA P-256, as src/pki.rs signs),
    signed by the cluster CA in `pki_dir`: (certificate PEM, key PEM)."""
    key = os.path.join(workdir, "tls.key")
    csr = os.path.join(workdir, "tls.csr")
    crt = os.path.join(workdir, "tls.crt")
    ext = os.path.join(workdir, "ext.cnf")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid,issuer\n"
                "subjectAltName=%s\n" % ",".join("DNS:" + n for n in dns_names()))
    old = os.umask(0o077)
    try:
        steps = [
            ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
            ["openssl", "req", "-new", "-key", key, "-subj", "/CN=%s" % dns_names()[2], "-out", csr],
            ["openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(pki_dir, "ca.crt"),
             "-CAkey", os.path.join(pki_dir, "ca.key"), "-set_serial",
             "0x%s" % os.urandom(16).hex(), "-days", str(VALIDITY_DAYS), "-extfile", ext, "-out", crt],
        ]
        for args in steps:
            code, out = run(args)
            if code != 0:
                raise WebhookCertError("sign", "%s: %s" % (" ".join(args[:2]), last_line(out)))
    finally:
        os.umask(old)
    with open(crt) as f:
        cert_pem = f.read()
    with open(key) as f:
        key_pem = f.read()
    return cert_pem, key_pem


def renew(run=run_command, clock=time.time, say=None, lock=None, pki_dir=None):
    """One run: {"action": "absent"|"kept"|"renewed", "expires": epoch or None}.
    `lock` (a context manager factory, the cluster's certificate lock) is
    entered only when a renewal is due."""
    say = say or (lambda m: None)
    if not os.path.exists(paths.path(paths.ADMIN_CONF)):
        # Not a controller that has joined (no kubeconfig to write with): nothing here.
        return {"action": "absent", "expires": None}
    pki_dir = pki_dir or paths.path(PKI_DIR)
    renew_before = paths.knob("WEBHOOK_RENEW_BEFORE_SECONDS", RENEW_BEFORE)
    work = tempfile.mkdtemp(prefix="kube-aws-webhook-cert-")
    try:
        cert = current(run)
        if cert is None:
            return {"action": "absent", "expires": None}
        expires = not_after(run, cert, work) if cert else None
        if not due(expires, clock(), renew_before):
            return {"action": "kept", "expires": expires}
        with (lock() if lock is not None else _Nothing()):
            # Another controller may have renewed while this one waited.
            cert = current(run)
            expires = not_after(run, cert, work) if cert else None
            if cert is None or not due(expires, clock(), renew_before):
                return {"action": "kept" if cert is not None else "absent", "expires": expires}
            say("the pod identity webhook's certificate %s: signing a new one with the cluster CA"
                % ("expires at %s" % _iso(expires) if expires else "is missing or unreadable"))
            cert_pem, key_pem = sign(run, pki_dir, work)
            path = os.path.join(work, "secret.json")
            with open(path, "w") as f:
                json.dump(secret_doc(cert_pem, key_pem), f)
            code, out = run(["kubectl", "apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", path])
            if code != 0:
                raise WebhookCertError("write", "kubectl apply of %s/%s: %s" % (NAMESPACE, SECRET, last_line(out)))
            code, out = run(["kubectl", "-n", NAMESPACE, "rollout", "restart", "deployment/" + DEPLOYMENT])
            if code != 0 and "NotFound" not in out and "not found" not in out:
                raise WebhookCertError("restart", "kubectl rollout restart deployment/%s: %s"
                                       % (DEPLOYMENT, last_line(out)))
            wait = paths.knob("WEBHOOK_ROLLOUT_TIMEOUT", 300)
            if code == 0 and wait > 0:
                code, out = run(["kubectl", "-n", NAMESPACE, "rollout", "status", "deployment/" + DEPLOYMENT,
                                 "--timeout=%ss" % int(wait)])
                if code != 0:
                    raise WebhookCertError("restart", "deployment/%s did not roll out: %s"
                                           % (DEPLOYMENT, last_line(out)))
            expires = not_after(run, cert_pem, work)
            say("renewed the pod identity webhook's certificate; it expires at %s" % _iso(expires))
            return {"action": "renewed", "expires": expires}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def leaf(expires):
    """The certificate as certs.py lists kubeadm's leaves (its status report)."""
    return {"name": "pod-identity-webhook", "expires": expires, "ca": "ca", "missing": False, "external": True}


def _iso(epoch):
    if epoch is None:
        return "?"
    return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Nothing(object):
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
