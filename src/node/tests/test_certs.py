"""Unit tests of the certificate renewal (src/node/kube_aws_node/certs.py):
the decision on kubeadm 1.35.4's own `check-expiration -o json` output, the
static pods restarted one at a time under a fake kubelet (a pod runs while
its manifest is in the manifests directory, with a new container ID each
time it comes back), failures reported in the status objects, and, when
KUBE_AWS_TESTBED_BIN has kubeadm, a renewal by the real kubeadm of
certificates it issued with a one-hour validity.

Not covered here: a real kubelet restarting real static pods (the real-node
bed, tests/it/real_node.rs, does not run this timer yet).
"""
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import certs, reconfigure
from kube_aws_node.awscall import AwsError

NOW = certs.parse_time("2026-12-01T20:14:06Z")
DAY = 86400


def expiration(apiserver_days, admin_days=None, ca_days=3650, external=()):
    """A CertificateExpirationInfo shaped as kubeadm 1.35.4 prints it (entries
    copied from its output, dates moved)."""
    def leaf(name, days, ca="ca"):
        if days is None:
            return {"name": name, "expirationDate": None, "residualTime": 0, "externallyManaged": False,
                    "missing": True}
        return {"name": name, "expirationDate": certs.iso(NOW + days * DAY), "residualTime": int(days * DAY),
                "externallyManaged": name in external, "caName": ca, "missing": False}
    return {"kind": "CertificateExpirationInfo", "apiVersion": "output.kubeadm.k8s.io/v1alpha3",
            "certificates": [leaf("admin.conf", admin_days), leaf("apiserver", apiserver_days),
                             leaf("etcd-peer", apiserver_days + 1, "etcd-ca")],
            "certificateAuthorities": [{"name": "ca", "expirationDate": certs.iso(NOW + ca_days * DAY),
                                        "residualTime": ca_days * DAY, "externallyManaged": False,
                                        "missing": False}]}


class Decide(unittest.TestCase):
    def test_real_output_parses(self):
        leaves, cas = certs.parse(json.loads(
            '{"kind":"CertificateExpirationInfo","apiVersion":"output.kubeadm.k8s.io/v1alpha3","certificates":['
            '{"name":"admin.conf","expirationDate":null,"residualTime":0,"externallyManaged":false,"missing":true},'
            '{"name":"apiserver","expirationDate":"2027-12-01T20:14:06Z","residualTime":31535996,'
            '"externallyManaged":false,"caName":"ca","missing":false}],"certificateAuthorities":['
            '{"name":"ca","expirationDate":"2036-11-28T20:14:06Z","residualTime":315359996,'
            '"externallyManaged":false,"missing":false}]}'))
        self.assertEqual([c["name"] for c in leaves], ["admin.conf", "apiserver"])
        self.assertTrue(leaves[0]["missing"])
        self.assertEqual(leaves[1]["expires"], NOW + 365 * DAY)
        self.assertEqual(leaves[1]["ca"], "ca")
        self.assertEqual(cas[0]["name"], "ca")

    def test_not_kubeadm_output_is_refused(self):
        with self.assertRaises(certs.CertsError) as e:
            certs.parse({"kind": "Status"})
        self.assertIn("CertificateExpirationInfo", str(e.exception))
        with self.assertRaises(certs.CertsError):
            certs.parse({"kind": certs.KIND, "certificates": [{"name": "x", "expirationDate": "soon"}]})

    def test_a_leaf_inside_the_threshold_is_due(self):
        leaves, _ = certs.parse(expiration(58, admin_days=300))
        self.assertEqual(certs.due(leaves, NOW, 60 * DAY), ["apiserver", "etcd-peer"])
        self.assertEqual(certs.due(leaves, NOW, 59 * DAY), ["apiserver"])
        self.assertEqual(certs.due(leaves, NOW, 58 * DAY), [])

    def test_expired_is_due_and_missing_or_external_is_not(self):
        leaves, _ = certs.parse(expiration(-3, admin_days=None, external=("etcd-peer",)))
        self.assertEqual(certs.due(leaves, NOW, 60 * DAY), ["apiserver"])

    def test_report_names_the_earliest_leaf_and_ca(self):
        leaves, cas = certs.parse(expiration(100, admin_days=40))
        r = certs.report({"instanceId": "i-1", "nodeName": "n"}, leaves, cas, NOW, ["apiserver"])
        self.assertEqual(r["earliestLeaf"]["name"], "admin.conf")
        self.assertEqual(r["earliestLeaf"]["expires"], certs.iso(NOW + 40 * DAY))
        self.assertEqual(r["earliestCA"]["name"], "ca")
        self.assertTrue(r["ok"])
        self.assertEqual(r["renewed"], ["apiserver"])


class FakeKubelet(object):
    """`run` for kubeadm and crictl: a static pod runs while its manifest is
    in `manifests`, with a new container ID whenever it comes back; kubeadm
    answers with the next of `checks`."""

    def __init__(self, manifests, checks, stuck=()):
        self.manifests = manifests
        self.checks = list(checks)
        self.stuck = set(stuck)  # pods the kubelet never starts again
        self.calls = []
        self.generation = {}
        self.seen = {}
        self.absent_at_once = 0

    def __call__(self, args):
        self.calls.append(list(args))
        if args[:3] == ["kubeadm", "certs", "check-expiration"]:
            return json.dumps(self.checks.pop(0))
        if args[:3] == ["kubeadm", "certs", "renew"]:
            return ""
        if args[0] == "crictl":
            name = args[args.index("--name") + 1].strip("^$")
            present = os.path.exists(os.path.join(self.manifests, name + ".yaml"))
            absent = sum(1 for n, _ in certs.STATIC_PODS if not os.path.exists(os.path.join(self.manifests,
                                                                                              n + ".yaml")))
            self.absent_at_once = max(self.absent_at_once, absent)
            if not present:
                self.seen[name] = False
                return ""
            if self.seen.get(name) is False and name not in self.stuck:
                self.generation[name] = self.generation.get(name, 0) + 1
                self.seen[name] = True
            if self.seen.get(name) is False:
                return ""
            return "%s-%d\n" % (name, self.generation.get(name, 0))
        raise AssertionError("unexpected command %r" % (args,))


class Clock(object):
    def __init__(self):
        self.t = NOW

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class Renewal(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.manifests = os.path.join(self.dir, "manifests")
        self.held = os.path.join(self.dir, "held")
        os.makedirs(self.manifests)
        for name, _ in certs.STATIC_PODS:
            with open(os.path.join(self.manifests, name + ".yaml"), "w") as f:
                f.write("kind: Pod\n")
        self.locked = []
        self.log = []

    @contextlib.contextmanager
    def lock(self):
        self.locked.append("in")
        try:
            yield
        finally:
            self.locked.append("out")

    def host(self, kubelet, health=lambda url: True):
        clock = Clock()
        return certs.Host(run=kubelet, health=health, clock=clock, sleep=clock.sleep)

    def renew(self, host):
        return certs.renew_if_due(host, {"renewBeforeSeconds": 60 * DAY}, self.lock, self.log.append,
                                  manifests=self.manifests, held=self.held)

    def test_nothing_due_takes_no_lock_and_renews_nothing(self):
        kubelet = FakeKubelet(self.manifests, [expiration(200)])
        _, _, renewed = self.renew(self.host(kubelet))
        self.assertEqual(renewed, [])
        self.assertEqual(self.locked, [])
        self.assertEqual(len(kubelet.calls), 1)

    def test_due_renews_under_the_lock_and_restarts_each_pod_once_in_order(self):
        kubelet = FakeKubelet(self.manifests, [expiration(30), expiration(365)])
        health = []
        _, _, renewed = self.renew(self.host(kubelet, health=lambda url: health.append(url) or True))
        self.assertEqual(renewed, ["apiserver", "etcd-peer"])
        self.assertEqual(self.locked, ["in", "out"])
        self.assertIn(["kubeadm", "certs", "renew", "all"], kubelet.calls)
        self.assertEqual([u for _, u in certs.STATIC_PODS], health)
        self.assertEqual(kubelet.generation, {n: 1 for n, _ in certs.STATIC_PODS})
        self.assertEqual(kubelet.absent_at_once, 1, "one static pod down at a time")
        self.assertEqual(sorted(os.listdir(self.manifests)), sorted(n + ".yaml" for n, _ in certs.STATIC_PODS))

    def test_a_pod_that_never_returns_fails_and_its_manifest_is_back(self):
        kubelet = FakeKubelet(self.manifests, [expiration(30)], stuck=("kube-apiserver",))
        with self.assertRaises(certs.CertsError) as e:
            self.renew(self.host(kubelet))
        self.assertIn("kube-apiserver has not started again", str(e.exception))
        self.assertTrue(os.path.exists(os.path.join(self.manifests, "kube-apiserver.yaml")))
        self.assertNotIn("kube-controller-manager", kubelet.generation, "no restart after a failed one")
        self.assertEqual(self.locked, ["in", "out"])

    def test_an_unhealthy_component_fails(self):
        kubelet = FakeKubelet(self.manifests, [expiration(30)])
        with self.assertRaises(certs.CertsError) as e:
            self.renew(self.host(kubelet, health=lambda url: "2381" in url))
        self.assertIn("kube-apiserver is not healthy", str(e.exception))

    def test_still_due_after_renewal_is_a_failure(self):
        kubelet = FakeKubelet(self.manifests, [expiration(30), expiration(30)])
        with self.assertRaises(certs.CertsError) as e:
            self.renew(self.host(kubelet))
        self.assertIn("still due", str(e.exception))

    def test_a_forced_renewal_renews_what_is_not_due_and_succeeds(self):
        # Nothing due within the window; forced, all renewed, and the fresh
        # certificates pass the check (the window, not an infinite one).
        kubelet = FakeKubelet(self.manifests, [expiration(200), expiration(300)])
        _, _, renewed = certs.renew_if_due(self.host(kubelet), {"renewBeforeSeconds": 60 * DAY}, self.lock,
                                           self.log.append, manifests=self.manifests, held=self.held, force=True)
        self.assertEqual(renewed, ["apiserver", "etcd-peer"])
        self.assertIn(["kubeadm", "certs", "renew", "all"], kubelet.calls)
        self.assertEqual(self.locked, ["in", "out"])

    def test_a_manifest_left_out_by_a_dead_run_goes_back(self):
        os.makedirs(self.held)
        os.rename(os.path.join(self.manifests, "etcd.yaml"), os.path.join(self.held, "etcd.yaml"))
        kubelet = FakeKubelet(self.manifests, [expiration(200)])
        self.renew(self.host(kubelet))
        self.assertTrue(os.path.exists(os.path.join(self.manifests, "etcd.yaml")))
        self.assertIn("moving back etcd.yaml, left out by an earlier run", self.log)


class FakeAws(object):
    def __init__(self):
        self.puts = []

    def __call__(self, args):
        assert args[:2] == ["s3api", "put-object"], args
        with open(args[args.index("--body") + 1]) as f:
            self.puts.append((args[args.index("--key") + 1], json.load(f)))
        return {}


class Main(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.root)
        os.environ["KUBE_AWS_ROOT"] = self.root
        self.addCleanup(os.environ.pop, "KUBE_AWS_ROOT")
        os.makedirs(os.path.join(self.root, "etc/kube-aws"))
        os.makedirs(os.path.join(self.root, "etc/kubernetes/manifests"))
        with open(os.path.join(self.root, "etc/kube-aws/runtime.json"), "w") as f:
            json.dump({"bucket": "b", "keyPrefix": "p/demo", "stackName": "demo-control-plane",
                       "asgLogicalId": "ControllerGroup"}, f)

    def test_each_run_writes_the_certificate_status(self):
        aws = FakeAws()
        kubelet = FakeKubelet("/nonexistent", [expiration(200)])
        code = certs.main([], aws, host=certs.Host(run=kubelet, clock=lambda: NOW),
                          instance={"instanceId": "i-1", "nodeName": "n"}, say=lambda m: None)
        self.assertEqual(code, 0)
        self.assertEqual([k for k, _ in aws.puts], ["p/demo/status/certs/i-1.json"])
        self.assertEqual(aws.puts[0][1]["earliestLeaf"]["name"], "apiserver")

    def test_a_failure_is_in_the_node_status_object(self):
        aws = FakeAws()

        def broken(args):
            raise certs.CertsError("kubeadm certs check-expiration", "unable to read config")
        code = certs.main([], aws, host=certs.Host(run=broken, clock=lambda: NOW),
                          instance={"instanceId": "i-1", "nodeName": "n"}, say=lambda m: None)
        self.assertEqual(code, 1)
        keys = [k for k, _ in aws.puts]
        self.assertEqual(keys, ["p/demo/status/certs/i-1.json", "p/demo/status/nodes/i-1.json"])
        self.assertFalse(aws.puts[0][1]["ok"])
        node = aws.puts[1][1]
        self.assertEqual(node["step"], "certs-kubeadm certs check-expiration")
        self.assertIn("unable to read config", node["log"])

    def test_a_due_renewal_waits_for_the_join_lock_another_controller_holds(self):
        # A join, upgrade or reconfiguration on another controller holds the
        # control plane's lock: the renewal restarts nothing (its etcd restart
        # beside another's `kubeadm upgrade apply` would cost etcd its quorum)
        # and says so once its wait is over (here none: KUBE_AWS_CERTS_LOCK_WAIT=0).
        class Held(FakeAws):
            def __init__(self):
                FakeAws.__init__(self)
                self.tried = []

            def __call__(self, args, attempts=None):
                if "--if-none-match" in args:
                    self.tried.append(args[args.index("--key") + 1])
                    raise AwsError("An error occurred (PreconditionFailed) when calling the PutObject operation")
                if args[:2] == ["s3api", "list-objects-v2"]:
                    return {"Contents": [{"Key": args[args.index("--prefix") + 1], "ETag": '"e"',
                                          "LastModified": certs.iso(time.time() - 60)}]}
                return FakeAws.__call__(self, args)
        os.environ["KUBE_AWS_CERTS_LOCK_WAIT"] = "0"
        self.addCleanup(os.environ.pop, "KUBE_AWS_CERTS_LOCK_WAIT")
        aws = Held()
        kubelet = FakeKubelet(os.path.join(self.root, "etc/kubernetes/manifests"), [expiration(20)])
        code = certs.main([], aws, host=certs.Host(run=kubelet, clock=lambda: NOW),
                          instance={"instanceId": "i-1", "nodeName": "n"}, say=lambda m: None)
        self.assertEqual(code, 1)
        self.assertEqual(aws.tried, ["p/demo/bootstrap/join-lock"])
        self.assertEqual(certs.LOCK_KEY, reconfigure.LOCK_KEY)
        self.assertFalse([c for c in kubelet.calls if c[:3] == ["kubeadm", "certs", "renew"]], kubelet.calls)
        node = dict(aws.puts)["p/demo/status/nodes/i-1.json"]
        self.assertEqual(node["step"], "certs-join-lock", node["log"])
        self.assertIn("still held by another node", node["log"])

    def test_a_bad_threshold_is_reported(self):
        with open(os.path.join(self.root, "etc/kube-aws/certs.json"), "w") as f:
            json.dump({"renewBeforeDays": "sixty"}, f)
        aws = FakeAws()
        code = certs.main([], aws, host=certs.Host(run=FakeKubelet("/x", []), clock=lambda: NOW),
                          instance={"instanceId": "i-1"}, say=lambda m: None)
        self.assertEqual(code, 1)
        self.assertIn("renewBeforeDays 'sixty'", aws.puts[0][1]["error"])


BIN = os.environ.get("KUBE_AWS_TESTBED_BIN", "")


@unittest.skipUnless(BIN and os.path.exists(os.path.join(BIN, "kubeadm")),
                     "KUBE_AWS_TESTBED_BIN has no kubeadm: the real-kubeadm renewal is not checked")
class RealKubeadm(unittest.TestCase):
    """The built kubeadm issues the control plane's certificates with a one-hour
    validity (ClusterConfiguration certificateValidityPeriod); the renewal
    finds them due, `kubeadm certs renew all` (with the cluster's config now
    at kubeadm's default year) renews them, and the re-check passes."""

    def config(self, d, validity):
        with open(os.path.join(d, "kubeadm.yaml"), "w") as f:
            f.write("apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n"
                    "kubernetesVersion: v1.35.4\ncertificatesDir: %s/pki\n"
                    "controlPlaneEndpoint: 127.0.0.1:6443\ncertificateValidityPeriod: %s\n---\n"
                    "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n"
                    "localAPIEndpoint: {advertiseAddress: 192.0.2.10}\nnodeRegistration: {name: n1}\n"
                    % (d, validity))

    def test_short_lived_certificates_are_renewed(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        kubeadm = os.path.join(BIN, "kubeadm")
        self.config(d, "1h0m0s")
        subprocess.run([kubeadm, "init", "phase", "certs", "all", "--config", os.path.join(d, "kubeadm.yaml")],
                       check=True, capture_output=True)
        self.config(d, "8760h0m0s")

        def run(args):
            if args[0] == "kubeadm":
                return certs.run_command([kubeadm] + args[1:] + ["--config", os.path.join(d, "kubeadm.yaml")])
            raise AssertionError(args)
        manifests = os.path.join(d, "manifests")
        os.makedirs(manifests)
        import time
        leaves, cas, renewed = certs.renew_if_due(certs.Host(run=run), {"renewBeforeSeconds": 30 * DAY},
                                                  contextlib.nullcontext, lambda m: None, manifests=manifests,
                                                  held=os.path.join(d, "held"))
        self.assertIn("apiserver", renewed)
        self.assertIn("etcd-peer", renewed)
        first = certs.earliest(leaves)
        self.assertGreater(first["expires"] - time.time(), 300 * DAY)
        self.assertEqual(certs.due(leaves, time.time(), 30 * DAY), [])


if __name__ == "__main__":
    unittest.main()
