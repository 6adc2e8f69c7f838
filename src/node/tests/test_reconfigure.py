"""Unit tests of the in-place reconfiguration (src/node/kube_aws_node/reconfigure.py):
the decision, and a controller's and a worker's run against a fake node: a
fake kubeadm that writes the manifest of a component from the flag in the
config file it is given (`init phase control-plane`) and the kubelet config
from a fake kubelet-config ConfigMap (`upgrade node phase kubelet-config`),
a fake kubelet whose containers get new IDs when their manifest changes, and
a fake S3 for the lock and the status objects.

When KUBE_AWS_TESTBED_BIN has kubeadm, the built kubeadm writes the static
pod manifests from the configuration a controller builds (no bootstrap
token, the node's values), in its dry-run directory.

Not covered here: real kubeadm phases against a cluster and a real kubelet
(the real-node bed, tests/it/real_node/upgrade.rs), IAM (node_iam.rs,
node_iam_moto.rs check the rows of src/node/iam-calls.json).
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import certs, reconfigure
from kube_aws_node.awscall import AwsError


def cluster_doc(flag):
    return {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration", "clusterName": "demo",
            "apiServer": {"extraArgs": [{"name": "oidc-issuer-url", "value": flag}]}}


def kubeadm_json(flag, max_pods=110):
    return {"documents": [
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration", "nodeRegistration": {}},
        cluster_doc(flag),
        {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": max_pods},
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration", "nodeRegistration": {}},
    ]}


class Decide(unittest.TestCase):
    def test_the_same_digest_is_nothing_to_do(self):
        self.assertEqual(reconfigure.decide("a", "a", "v1.35.4", "v1.35.4", {}), ("none", ""))

    def test_another_version_in_kubeadm_config_is_an_upgrade_under_way(self):
        action, reason = reconfigure.decide("b", "a", "v1.36.3", "v1.35.4", {})
        self.assertEqual(action, "skip")
        self.assertIn("an upgrade is under way", reason)

    def test_a_configuration_that_failed_elsewhere_is_not_tried(self):
        marker = {"phase": "failed", "sha256": "b" * 64, "node": "ip-10-0-1-5", "step": "kube-apiserver",
                  "message": "not healthy"}
        action, reason = reconfigure.decide("b" * 64, "a", "v1.35.4", "1.35.4", marker)
        self.assertEqual(action, "skip")
        self.assertIn("failed on ip-10-0-1-5 at kube-apiserver", reason)
        self.assertEqual(reconfigure.decide("c" * 64, "a", "v1.35.4", "1.35.4", marker)[0], "apply")

    def test_flag_files_are_the_api_servers_node_files_of_either_shape(self):
        v1beta4 = {"kind": "ClusterConfiguration", "apiServer": {"extraArgs": [
            {"name": "audit-policy-file", "value": "/etc/kube-aws/apiserver/audit-policy.json"},
            {"name": "audit-log-path", "value": "/var/log/kubernetes/audit/audit.log"},
            {"name": "oidc-issuer-url", "value": "https://dex"}]}}
        v1beta3 = {"kind": "ClusterConfiguration", "apiServer": {"extraArgs": {
            "encryption-provider-config": "/etc/kubernetes/pki/encryption.json"}}}
        self.assertEqual(reconfigure.flag_files([v1beta4, {"kind": "KubeletConfiguration"}]),
                         ["/etc/kube-aws/apiserver/audit-policy.json"])
        self.assertEqual(reconfigure.flag_files([v1beta3]), ["/etc/kubernetes/pki/encryption.json"])

    def test_no_record_applies(self):
        self.assertEqual(reconfigure.decide("b", None, "v1.35.4", "v1.35.4", None), ("apply", ""))

    def test_the_digest_is_of_the_cluster_wide_documents_only(self):
        docs = kubeadm_json("https://a")["documents"]
        other_join = [dict(d, nodeRegistration={"name": "x"}) if d["kind"] == "JoinConfiguration" else d
                      for d in docs]
        self.assertEqual(reconfigure.digest(docs), reconfigure.digest(other_join))
        self.assertNotEqual(reconfigure.digest(docs), reconfigure.digest(kubeadm_json("https://b")["documents"]))
        self.assertNotEqual(reconfigure.digest(docs), reconfigure.digest(kubeadm_json("https://a", 50)["documents"]))

    def test_desired_has_no_bootstrap_token_and_the_node_values(self):
        docs = reconfigure.desired("ip-10-0-1-5.ec2.internal", "v1.35.4", kubeadm_json("https://a")["documents"],
                                   [{"kind": "KubeletConfiguration", "maxPods": 30}],
                                   {"apiEndpoint": "Api-X.elb.amazonaws.com", "caCertHash": "sha256:x"})
        kinds = [d["kind"] for d in docs]
        self.assertEqual(kinds, ["InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"])
        self.assertNotIn("bootstrapTokens", docs[0])
        self.assertEqual(docs[1]["kubernetesVersion"], "v1.35.4")
        self.assertEqual(docs[1]["controlPlaneEndpoint"], "api-x.elb.amazonaws.com:6443")
        self.assertEqual(docs[2]["maxPods"], 30)


class FakeAws(object):
    def __init__(self, marker=None):
        self.objects = {}
        self.calls = []
        if marker is not None:
            self.objects["p/demo/" + reconfigure.STATUS_KEY] = marker

    def __call__(self, args, attempts=None):
        self.calls.append(list(args))
        if args[:2] == ["s3api", "put-object"]:
            key = args[args.index("--key") + 1]
            if "--if-none-match" in args and key in self.objects:
                raise AwsError("PreconditionFailed", "PreconditionFailed")
            with open(args[args.index("--body") + 1]) as f:
                self.objects[key] = json.load(f)
            return {}
        if args[:2] == ["s3api", "delete-object"]:
            self.objects.pop(args[args.index("--key") + 1], None)
            return {}
        if args[:2] == ["s3", "cp"]:
            key = args[-2].split("/", 3)[3]
            if key not in self.objects:
                raise AwsError("An error occurred (403) when calling the HeadObject operation: Forbidden")
            with open(args[-1], "w") as f:
                json.dump(self.objects[key], f)
            return {}
        raise AssertionError("unexpected aws call %r" % (args,))

    def status(self):
        return self.objects.get("p/demo/" + reconfigure.STATUS_KEY)


class FakeNode(object):
    """kubeadm, kubectl, crictl and systemctl of one node, as far as reconfigure.py sees them."""

    def __init__(self, root, version="v1.35.4", cluster_version="v1.35.4", kubelet_text="maxPods: 110\n"):
        self.root = root
        self.manifests = os.path.join(root, "etc/kubernetes/manifests")
        self.kubelet_config = os.path.join(root, "var/lib/kubelet/config.yaml")
        os.makedirs(self.manifests)
        os.makedirs(os.path.dirname(self.kubelet_config))
        self.version = version
        self.configmaps = {
            "kubeadm-config": {"metadata": {"name": "kubeadm-config"},
                               "data": {"ClusterConfiguration": "kubernetesVersion: %s\n" % cluster_version}},
            "kubelet-config": {"metadata": {"name": "kubelet-config"}, "data": {"kubelet": kubelet_text}},
        }
        self.generation = {}
        self.calls = []
        self.broken_flag = None
        self.healthy = lambda url: True
        self.replaced = []
        for name, _, _ in reconfigure.COMPONENTS:
            self.write_manifest(name, "--oidc-issuer-url=https://a")
        with open(self.kubelet_config, "w") as f:
            f.write(kubelet_text)

    def write_manifest(self, name, flag):
        path = os.path.join(self.manifests, name + ".yaml")
        text = "name: %s\nflag: %s\n" % (name, flag)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            with open(path, "w") as f:
                f.write(text)
            self.generation[name] = self.generation.get(name, 0) + 1

    def containers(self, name):
        """A running container per manifest generation (a new ID when it changed), none when broken."""
        path = os.path.join(self.manifests, name + ".yaml")
        if not os.path.exists(path):
            return ""
        text = open(path).read()
        if self.broken_flag and self.broken_flag in text:
            return ""
        return "%s-%s\n" % (name, hash(text) & 0xffff)

    def __call__(self, args):
        self.calls.append(list(args))
        if args[:3] == ["kubeadm", "version", "-o"]:
            return self.version + "\n"
        if args[0] == "crictl":
            return self.containers(args[args.index("--name") + 1].strip("^$"))
        if args[0] == "kubectl" and "get" in args:
            return json.dumps(self.configmaps[args[args.index("configmap") + 1]])
        if args[0] == "kubectl" and "replace" in args:
            with open(args[-1]) as f:
                doc = json.load(f)
            self.configmaps[doc["metadata"]["name"]] = doc
            self.replaced.append(doc["metadata"]["name"])
            return ""
        if args[:5] == ["kubeadm", "init", "phase", "upload-config", "all"]:
            with open(args[args.index("--config") + 1]) as f:
                docs = [json.loads(d) for d in f.read().split("\n---\n")]
            cc = [d for d in docs if d["kind"] == "ClusterConfiguration"][0]
            kc = [d for d in docs if d["kind"] == "KubeletConfiguration"][0]
            self.configmaps["kubeadm-config"]["data"] = {"ClusterConfiguration": json.dumps(cc)}
            self.configmaps["kubelet-config"]["data"] = {"kubelet": "maxPods: %s\n" % kc.get("maxPods")}
            return ""
        if args[:4] == ["kubeadm", "init", "phase", "control-plane"]:
            with open(args[args.index("--config") + 1]) as f:
                docs = [json.loads(d) for d in f.read().split("\n---\n")]
            cc = [d for d in docs if d["kind"] == "ClusterConfiguration"][0]
            flag = cc["apiServer"]["extraArgs"][0]["value"]
            name = {"apiserver": "kube-apiserver", "controller-manager": "kube-controller-manager",
                    "scheduler": "kube-scheduler"}[args[4]]
            self.write_manifest(name, "--oidc-issuer-url=" + flag)
            return ""
        if args[:5] == ["kubeadm", "upgrade", "node", "phase", "kubelet-config"]:
            with open(self.kubelet_config, "w") as f:
                f.write(self.configmaps["kubelet-config"]["data"]["kubelet"])
            return ""
        if args[:2] == ["systemctl", "restart"]:
            return ""
        raise AssertionError("unexpected command %r" % (args,))


class Clock(object):
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class Runs(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.root)
        os.environ["KUBE_AWS_ROOT"] = self.root
        self.addCleanup(os.environ.pop, "KUBE_AWS_ROOT")
        for k, v in (("RECONFIGURE_START_TIMEOUT", "20"), ("RECONFIGURE_HEALTH_TIMEOUT", "20"),
                     ("JOIN_LOCK_POLL", "1")):
            os.environ["KUBE_AWS_" + k] = v
            self.addCleanup(os.environ.pop, "KUBE_AWS_" + k)
        self.etc = os.path.join(self.root, "etc/kube-aws")
        os.makedirs(self.etc)
        os.makedirs(os.path.join(self.root, "var/lib/kube-aws"))
        self.rt = {"region": "eu-west-1", "bucket": "b", "keyPrefix": "p/demo", "apiEndpoint": "api.example",
                   "caCertHash": "sha256:x", "role": "controller"}
        self.instance = {"instanceId": "i-1", "nodeName": "ip-10-0-1-5.ec2.internal"}
        self.write("runtime.json", self.rt)
        self.said = []

    def write(self, name, doc):
        with open(os.path.join(self.etc, name), "w") as f:
            json.dump(doc, f)

    def controller(self, node, aws):
        clock = Clock()
        host = certs.Host(run=node, health=lambda url: node.healthy(url), clock=clock, sleep=clock.sleep)
        return reconfigure.Controller(aws, host, self.rt, self.instance, self.said.append,
                                      manifests=node.manifests, kubelet_config=node.kubelet_config)

    def booted(self, flag="https://a", **kw):
        """A controller booted with `flag`: its record says what it joined with."""
        self.write("kubeadm.json", kubeadm_json(flag))
        node = FakeNode(self.root, **kw)
        reconfigure.record_boot("controller", node, self.rt, self.instance["nodeName"], self.said.append)
        return node

    def test_nothing_changed_takes_no_lock_and_runs_no_phase(self):
        node = self.booted()
        aws = FakeAws()
        self.assertEqual(self.controller(node, aws).reconcile(), "none")
        self.assertEqual(aws.calls, [])
        self.assertFalse([c for c in node.calls if c[:3] == ["kubeadm", "init", "phase"]])

    def test_a_changed_flag_reaches_every_manifest_under_the_lock_then_is_recorded(self):
        node = self.booted()
        self.write("kubeadm.json", kubeadm_json("https://dex.example"))
        aws = FakeAws()
        self.assertEqual(self.controller(node, aws).reconcile(), "applied")
        for name, _, _ in reconfigure.COMPONENTS:
            with open(os.path.join(node.manifests, name + ".yaml")) as f:
                self.assertIn("--oidc-issuer-url=https://dex.example", f.read())
            self.assertEqual(node.generation[name], 2)
        self.assertIn("https://dex.example", node.configmaps["kubeadm-config"]["data"]["ClusterConfiguration"])
        # Under the join lock, taken and released.
        puts = [c for c in aws.calls if c[:2] == ["s3api", "put-object"]]
        self.assertEqual(puts[0][puts[0].index("--key") + 1], "p/demo/bootstrap/join-lock")
        self.assertEqual(aws.calls[-1][:2], ["s3api", "delete-object"])
        self.assertEqual(aws.status()["phase"], "applied")
        # The kubelet config did not change: no kubelet restart.
        self.assertNotIn(["systemctl", "restart", "kubelet"], node.calls)
        # The next run finds it applied.
        aws.calls = []
        self.assertEqual(self.controller(node, aws).reconcile(), "none")
        self.assertEqual(aws.calls, [])

    def test_a_kubelet_configuration_change_restarts_the_kubelet(self):
        node = self.booted()
        doc = kubeadm_json("https://a", max_pods=50)
        self.write("kubeadm.json", doc)
        aws = FakeAws()
        self.assertEqual(self.controller(node, aws).reconcile(), "applied")
        with open(node.kubelet_config) as f:
            self.assertEqual(f.read(), "maxPods: 50\n")
        self.assertIn(["systemctl", "restart", "kubelet"], node.calls)
        # Manifests unchanged: no static pod waited for.
        self.assertEqual(node.generation["kube-apiserver"], 1)

    def test_a_flag_naming_a_file_this_controller_lacks_leaves_it_alone_and_marks_nothing_failed(self):
        node = self.booted()
        doc = kubeadm_json("https://a")
        doc["documents"][1]["apiServer"]["extraArgs"].append(
            {"name": "encryption-provider-config", "value": "/etc/kubernetes/pki/encryption.json"})
        self.write("kubeadm.json", doc)
        aws = FakeAws()
        self.assertEqual(self.controller(node, aws).reconcile(), "skip")
        self.assertEqual(aws.calls, [], "no lock taken, no status written")
        self.assertFalse([c for c in node.calls if c[:3] == ["kubeadm", "init", "phase"]])
        self.assertIn("/etc/kubernetes/pki/encryption.json, which this controller does not have", self.said[-1])
        # A controller that has it (the one that replaces this one) applies it.
        path = os.path.join(self.root, "etc/kubernetes/pki/encryption.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
        self.assertEqual(self.controller(node, aws).reconcile(), "applied")

    def test_an_api_server_that_does_not_come_back_is_undone_and_stops_the_others(self):
        node = self.booted()
        self.write("kubeadm.json", kubeadm_json("https://broken"))
        node.broken_flag = "https://broken"
        aws = FakeAws()
        with self.assertRaises(reconfigure.ReconfigureError) as e:
            self.controller(node, aws).reconcile()
        self.assertEqual(e.exception.step, "kube-apiserver")
        with open(os.path.join(node.manifests, "kube-apiserver.yaml")) as f:
            self.assertIn("https://a", f.read())
        # The other components were never touched.
        self.assertEqual(node.generation["kube-controller-manager"], 1)
        self.assertEqual(sorted(node.replaced), ["kubeadm-config", "kubelet-config"])
        self.assertIn("v1.35.4", node.configmaps["kubeadm-config"]["data"]["ClusterConfiguration"])
        status = aws.status()
        self.assertEqual((status["phase"], status["step"]), ("failed", "kube-apiserver"))
        self.assertIn("back as they were", status["message"])
        report = aws.objects["p/demo/status/nodes/i-1.json"]
        self.assertEqual(report["step"], "reconfigure-kube-apiserver")
        self.assertEqual(aws.calls[-1][:2], ["s3api", "delete-object"])  # the lock is released
        # Another controller with the same configuration does not try it.
        other = FakeNode(tempfile.mkdtemp(dir=self.root))
        reconfigure.record(controller="an older one")
        self.assertEqual(self.controller(other, aws).reconcile(), "skip")
        self.assertFalse([c for c in other.calls if c[:4] == ["kubeadm", "init", "phase", "control-plane"]])
        self.assertTrue(any("failed on ip-10-0-1-5.ec2.internal at kube-apiserver" in s for s in self.said))

    def test_an_upgrade_under_way_is_left_alone(self):
        node = self.booted(cluster_version="v1.36.3")
        self.write("kubeadm.json", kubeadm_json("https://dex.example"))
        aws = FakeAws()
        self.assertEqual(self.controller(node, aws).reconcile(), "skip")
        self.assertFalse([c for c in node.calls if c[:3] == ["kubeadm", "init", "phase"]])
        self.assertEqual(aws.calls[-1][:2], ["s3api", "delete-object"])

    def worker(self, node, aws):
        clock = Clock()
        host = certs.Host(run=node, health=lambda url: node.healthy(url), clock=clock, sleep=clock.sleep)
        return reconfigure.Worker(aws, host, self.rt, self.instance, self.said.append,
                                  kubelet_config=node.kubelet_config)

    def test_a_worker_takes_a_new_kubelet_config_in_place(self):
        node = FakeNode(self.root)
        reconfigure.record_boot("worker", node, self.rt, "", self.said.append)
        aws = FakeAws()
        self.assertEqual(self.worker(node, aws).reconcile(), "none")
        node.configmaps["kubelet-config"]["data"]["kubelet"] = "maxPods: 50\n"
        self.assertEqual(self.worker(node, aws).reconcile(), "applied")
        with open(node.kubelet_config) as f:
            self.assertEqual(f.read(), "maxPods: 50\n")
        phase = [c for c in node.calls if c[:5] == ["kubeadm", "upgrade", "node", "phase", "kubelet-config"]]
        self.assertEqual(phase[0][-1], os.path.join(self.root, "etc/kubernetes/kubelet.conf"))
        self.assertIn(["systemctl", "restart", "kubelet"], node.calls)
        self.assertEqual(aws.calls, [])  # no lock, no status on success
        self.assertEqual(self.worker(node, aws).reconcile(), "none")

    def test_a_kubelet_that_does_not_come_back_gets_its_old_config(self):
        node = FakeNode(self.root)
        reconfigure.record_boot("worker", node, self.rt, "", self.said.append)
        node.configmaps["kubelet-config"]["data"]["kubelet"] = "maxPods: 50\n"
        node.healthy = lambda url: url != reconfigure.KUBELET_HEALTH
        with self.assertRaises(reconfigure.ReconfigureError):
            self.worker(node, FakeAws()).reconcile()
        with open(node.kubelet_config) as f:
            self.assertEqual(f.read(), "maxPods: 110\n")
        self.assertEqual(node.calls.count(["systemctl", "restart", "kubelet"]), 2)


BIN = os.environ.get("KUBE_AWS_TESTBED_BIN", "")


@unittest.skipUnless(BIN and os.path.exists(os.path.join(BIN, "kubeadm")),
                     "KUBE_AWS_TESTBED_BIN has no kubeadm: the real kubeadm's manifests are not checked")
class RealKubeadm(unittest.TestCase):
    def test_the_built_kubeadm_writes_the_flags_into_each_manifest(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        kubeadm = os.path.join(BIN, "kubeadm")
        rendered = kubeadm_json("https://dex.example")["documents"]
        rendered[1]["controllerManager"] = {"extraArgs": [{"name": "node-monitor-grace-period", "value": "50s"}]}
        docs = reconfigure.desired("ip-10-0-1-5.ec2.internal", "v1.35.4", rendered, [],
                                   {"apiEndpoint": "api.example", "caCertHash": "sha256:x"})
        config = os.path.join(d, "kubeadm-reconfigure.yaml")
        with open(config, "w") as f:
            f.write(reconfigure.kubeadmcfg.text(docs))
        out = os.path.join(d, "dry")
        env = dict(os.environ, KUBEADM_INIT_DRYRUN_DIR=out)
        for _, phase, _ in reconfigure.COMPONENTS:
            p = subprocess.run([kubeadm, "init", "phase", "control-plane", phase, "--config", config, "--dry-run"],
                               env=env, capture_output=True, universal_newlines=True)
            self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "kube-apiserver.yaml")) as f:
            self.assertIn("--oidc-issuer-url=https://dex.example", f.read())
        with open(os.path.join(out, "kube-controller-manager.yaml")) as f:
            self.assertIn("--node-monitor-grace-period=50s", f.read())
        self.assertTrue(os.path.exists(os.path.join(out, "kube-scheduler.yaml")))


if __name__ == "__main__":
    unittest.main()
