"""Unit tests of the pod identity webhook's in-cluster certificate renewal
(src/node/kube_aws_node/webhook_cert.py): the decision, and a renewal with the
real openssl against a CA made here, through a fake kubectl that keeps the
Secret in memory and records every command.

Not covered here: the real API server (tests/it/webhook_cert_testbed.rs
renews the Secret on the control-plane test bed), a real Deployment rolling
(no kubelet on either bed), and the webhook picking up the new certificate.
"""
import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import webhook_cert as wc

DAY = 86400


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class FakeKubectl(object):
    """kubectl's answers for the Secret and the Deployment; openssl runs for real."""

    def __init__(self, secret=None, fail=()):
        self.secret = secret
        self.fail = set(fail)
        self.calls = []

    def __call__(self, args, stdin=None):
        if args[0] != "kubectl":
            return wc.run_command(args, stdin)
        self.calls.append(args)
        verb = next(a for a in args[1:] if not a.startswith("-") and a not in ("kube-system",))
        if verb in self.fail:
            return 1, "error: the server refused %s" % verb
        if verb == "get":
            if self.secret is None:
                return 1, 'Error from server (NotFound): secrets "pod-identity-webhook-cert" not found'
            return 0, json.dumps(self.secret)
        if verb == "apply":
            with open(args[args.index("-f") + 1]) as f:
                self.secret = json.load(f)
            return 0, "secret/pod-identity-webhook-cert serverside-applied"
        return 0, "ok"


class Renewal(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.root)
        os.environ["KUBE_AWS_ROOT"] = self.root
        self.addCleanup(os.environ.pop, "KUBE_AWS_ROOT")
        os.environ["KUBE_AWS_WEBHOOK_ROLLOUT_TIMEOUT"] = "0"
        self.addCleanup(os.environ.pop, "KUBE_AWS_WEBHOOK_ROLLOUT_TIMEOUT")
        os.makedirs(os.path.join(self.root, "etc/kubernetes/pki"))
        with open(os.path.join(self.root, "etc/kubernetes/admin.conf"), "w") as f:
            f.write("apiVersion: v1\nkind: Config\n")
        self.pki = os.path.join(self.root, "etc/kubernetes/pki")
        ca_key, ca_crt = os.path.join(self.pki, "ca.key"), os.path.join(self.pki, "ca.crt")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", ca_key, "-out", ca_crt, "-days", "3650", "-subj", "/CN=kubernetes")
        self.locked = []

    def lock(self):
        self.locked.append(True)
        return contextlib.nullcontext()

    def secret_with(self, days):
        """The Secret holding a certificate of the CA that ends in `days`."""
        work = tempfile.mkdtemp(dir=self.root)
        key, crt = os.path.join(work, "k"), os.path.join(work, "c")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                "-out", crt + ".csr", "-subj", "/CN=old")
        openssl("x509", "-req", "-in", crt + ".csr", "-CA", os.path.join(self.pki, "ca.crt"), "-CAkey",
                os.path.join(self.pki, "ca.key"), "-set_serial", "1", "-days", str(days), "-out", crt)
        with open(crt) as f, open(key) as g:
            return wc.secret_doc(f.read(), g.read())

    def test_due(self):
        self.assertTrue(wc.due(None, 0, 90 * DAY))
        self.assertTrue(wc.due(89 * DAY, 0, 90 * DAY))
        self.assertFalse(wc.due(91 * DAY, 0, 90 * DAY))

    def test_a_certificate_inside_the_window_is_signed_anew_and_the_webhook_restarted(self):
        k = FakeKubectl(self.secret_with(30))
        old = k.secret["data"]["tls.crt"]
        r = wc.renew(run=k, lock=self.lock)
        self.assertEqual(r["action"], "renewed")
        self.assertEqual(self.locked, [True])
        self.assertNotEqual(k.secret["data"]["tls.crt"], old)
        self.assertGreater(r["expires"], time.time() + 364 * DAY)
        # Signed by the cluster CA, for the Service's names, for serving.
        crt = os.path.join(self.root, "new.crt")
        with open(crt, "w") as f:
            f.write(base64.b64decode(k.secret["data"]["tls.crt"]).decode())
        out = subprocess.run(["openssl", "verify", "-purpose", "sslserver", "-CAfile",
                              os.path.join(self.pki, "ca.crt"), crt], stdout=subprocess.PIPE,
                             universal_newlines=True)
        self.assertEqual(out.returncode, 0, out.stdout)
        text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", crt], stdout=subprocess.PIPE,
                              universal_newlines=True).stdout
        for name in wc.dns_names():
            self.assertIn("DNS:" + name, text)
        self.assertIn("CA:FALSE", text)
        self.assertIn("BEGIN PRIVATE KEY", base64.b64decode(k.secret["data"]["tls.key"]).decode())
        # Written as the reconciler's apply owns it, then the Deployment restarted.
        apply = [c for c in k.calls if "apply" in c][0]
        self.assertEqual(apply[apply.index("--field-manager") + 1], "kubectl")
        self.assertIn("--server-side", apply)
        self.assertTrue(any("restart" in c and "deployment/pod-identity-webhook" in c for c in k.calls), k.calls)
        # The key went to a file removed afterwards, never into an argument.
        self.assertFalse(any("PRIVATE KEY" in " ".join(c) for c in k.calls))
        self.assertEqual([d for d in os.listdir(tempfile.gettempdir()) if d.startswith("kube-aws-webhook-cert-")
                          and os.path.exists(os.path.join(tempfile.gettempdir(), d, "tls.key"))], [])

    def test_a_certificate_with_time_left_is_kept_without_the_lock(self):
        k = FakeKubectl(self.secret_with(200))
        r = wc.renew(run=k, lock=self.lock)
        self.assertEqual(r["action"], "kept")
        self.assertEqual(self.locked, [])
        self.assertFalse(any("apply" in c or "restart" in c for c in k.calls), k.calls)

    def test_the_expiry_joins_certs_status_as_a_leaf_it_does_not_renew(self):
        from kube_aws_node import certs
        k = FakeKubectl(self.secret_with(200))
        r = wc.renew(run=k, lock=self.lock)
        leaves = [wc.leaf(r["expires"])]
        self.assertEqual(certs.earliest(leaves)["name"], "pod-identity-webhook")
        self.assertEqual(certs.due(leaves, r["expires"], 90 * DAY), [], "kubeadm never renews it")
        self.assertAlmostEqual(r["expires"], time.time() + 200 * DAY, delta=DAY)

    def test_no_secret_means_the_plugin_is_off(self):
        k = FakeKubectl(None)
        self.assertEqual(wc.renew(run=k, lock=self.lock)["action"], "absent")
        self.assertEqual(self.locked, [])

    def test_a_refused_write_is_an_error_naming_the_step(self):
        k = FakeKubectl(self.secret_with(10), fail=["apply"])
        with self.assertRaises(wc.WebhookCertError) as e:
            wc.renew(run=k, lock=self.lock)
        self.assertEqual(e.exception.step, "write")
        self.assertFalse(any("restart" in c for c in k.calls))

    def test_not_a_joined_controller_does_nothing(self):
        os.unlink(os.path.join(self.root, "etc/kubernetes/admin.conf"))
        k = FakeKubectl(self.secret_with(10))
        self.assertEqual(wc.renew(run=k, lock=self.lock)["action"], "absent")
        self.assertEqual(k.calls, [])


if __name__ == "__main__":
    unittest.main()
