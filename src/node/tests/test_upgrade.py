"""upgrade: the version decisions, and a controller's join that upgrades the
cluster, against a fake cluster (kubeadm-config, kube-proxy) and a fake boot."""
import json
import os
import socket
import tempfile
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import etcd, restore_takeover, upgrade
from kube_aws_node.upgrade import (UpgradeError, config_version, decide, nodes_behind,
                                   needs_addon_upgrade, restore_refusal)

CLUSTER_CONFIGURATION = ("apiServer: {}\napiVersion: kubeadm.k8s.io/v1beta4\ncontrolPlaneEndpoint: api:6443\n"
                         "kind: ClusterConfiguration\nkubernetesVersion: v1.35.4\nnetworking:\n  podSubnet: 10.0.0.0/16\n")


class Decisions(unittest.TestCase):
    def test_one_minor_at_a_time_never_back(self):
        self.assertEqual(decide("v1.35.4", "1.35.4"), ("join", ""))
        self.assertEqual(decide("v1.36.1", "1.36.3")[0], "upgrade")
        self.assertEqual(decide("v1.35.4", "1.36.3")[0], "upgrade")
        action, why = decide("v1.36.3", "1.35.4")
        self.assertEqual(action, "refuse")
        self.assertIn("runs 1.36.3 and this node is 1.35.4: an older control plane never runs", why)
        self.assertIn("one minor at a time", decide("v1.35.4", "1.37.2")[1])
        self.assertEqual(decide("latest", "1.35.4")[0], "refuse")
        self.assertEqual(decide("v1.36.3", "1.36.1")[0], "refuse")

    def test_kubeadm_config_version_is_read_only_when_there_is_one(self):
        self.assertEqual(config_version(CLUSTER_CONFIGURATION), "v1.35.4")
        self.assertIsNone(config_version("kind: ClusterConfiguration\n"))
        self.assertIsNone(config_version("kubernetesVersion: v1.35.4\nkubernetesVersion: v1.36.3\n"))
        # A nested key of that name is not the version.
        self.assertIsNone(config_version("etcd:\n  kubernetesVersion: v9.9.9\n"))

    def test_kube_proxy_tag(self):
        self.assertTrue(needs_addon_upgrade("registry.k8s.io/kube-proxy:v1.35.4", "1.36.3"))
        self.assertFalse(needs_addon_upgrade("registry.k8s.io/kube-proxy:v1.36.3", "1.36.3"))
        self.assertFalse(needs_addon_upgrade("localhost:5000/kube-proxy:v1.36.3", "v1.36.3"))

    def test_addons_wait_for_every_ready_node_at_the_minor_controllers_and_workers_apart(self):
        def node(name, version, cp=True, ready="True"):
            return {"metadata": {"name": name, "labels": {"node-role.kubernetes.io/control-plane": ""} if cp else {}},
                    "status": {"nodeInfo": {"kubeletVersion": version},
                               "conditions": [{"type": "Ready", "status": ready}]}}
        nodes = {"items": [node("c1", "v1.36.3"), node("c2", "v1.35.4"), node("w2", "v1.35.4", cp=False),
                           node("w1", "v1.35.8", cp=False), node("w3", "v1.36.1", cp=False),
                           node("gone", "v1.35.4", ready="Unknown"),
                           node("gone-worker", "v1.35.4", cp=False, ready="False")]}
        self.assertEqual(nodes_behind(nodes, "1.36.3"), (["c2"], ["w1", "w2"]))
        self.assertEqual(nodes_behind(nodes, "1.35.4"), ([], []))
        # A patch upgrade does not hold the addons back; no version gates nothing.
        self.assertEqual(nodes_behind({"items": [node("c1", "v1.36.1"), node("w", "v1.36.1", cp=False)]}, "1.36.3"),
                         ([], []))
        self.assertEqual(nodes_behind(nodes, ""), ([], []))
        # A kubelet whose version cannot be read counts as behind.
        self.assertEqual(nodes_behind({"items": [node("w", "weird", cp=False)]}, "1.36.3"), ([], ["w"]))

    def test_a_restore_never_runs_older_than_the_record(self):
        self.assertIn("reached Kubernetes 1.36.3 and this node is 1.35.4", restore_refusal("1.36.3", "1.35.4"))
        self.assertEqual(restore_refusal("1.35.4", "1.36.3"), "")
        self.assertEqual(restore_refusal(None, "1.35.4"), "")


class FakeBoot(object):
    def __init__(self, work):
        self.work = work
        self.node_name = "ip-10-0-0-5.ec2.internal"
        self.rt = {"bucket": "b", "keyPrefix": "p/demo"}
        self.said = []
        self.sh_calls = []
        self.fail_on = None
        self.uploads = []
        self.nodes = {"items": []}
        self.leases = {n: socket.gethostname() + "_new" for n in restore_takeover.LEADER_LEASES}

    def say(self, text):
        self.said.append(text)

    def sh(self, args, capture=False):
        self.sh_calls.append(list(args))
        if self.fail_on and args[:3] == self.fail_on:
            e = Exception("%s failed" % " ".join(args))
            e.code = 1
            raise e
        if capture and args[3:5] == ["get", "nodes"] and "-l" in args:
            return json.dumps(self.nodes)
        if capture and args[3:5] == ["get", "nodes"]:
            return json.dumps({"items": [{"metadata": {"name": self.node_name}, "spec": {},
                                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}}]})
        if capture and args[3:7] == ["-n", "kube-system", "get", "lease"]:
            return json.dumps({"kind": "List", "items": [
                {"metadata": {"name": n}, "spec": {"holderIdentity": h}} for n, h in sorted(self.leases.items())]})
        if args[3:7] == ["-n", "kube-system", "delete", "lease"]:
            # The new process takes a deleted lease at its next try.
            self.leases[args[7]] = socket.gethostname() + "_new"
        return ""

    def wait_node_ready(self):
        self.sh_calls.append(["wait-node-ready"])

    def upgrade_config(self, version):
        return "/upgrade.yaml"

    def step(self, name):
        self.said.append("step " + name)

    def aws(self, args, attempts=None):
        with open(args[-2]) as f:
            self.uploads.append((args[-1], json.load(f)))


class FakeUpgrader(upgrade.Upgrader):
    """kubeadm and kubectl against a fake cluster: kubeadm-config and
    kubelet-config (with the resourceVersion a replace checks) and kube-proxy's image."""

    def __init__(self, boot, version, cluster_version="v1.35.4", proxy="v1.35.4", upload_fails=False):
        upgrade.Upgrader.__init__(self, boot, version)
        self.cms = {
            "kubeadm-config": {"metadata": {"name": "kubeadm-config", "resourceVersion": "1"},
                               "data": {"ClusterConfiguration": CLUSTER_CONFIGURATION.replace("v1.35.4",
                                                                                              cluster_version)}},
            "kubelet-config": {"metadata": {"name": "kubelet-config", "resourceVersion": "1"},
                               "data": {"kubelet": "kind: KubeletConfiguration\nmaxPods: 110\n"}}}
        self.proxy = "registry.k8s.io/kube-proxy:" + proxy
        self.upload_fails = upload_fails
        self.commands = []
        # Errors the next reads answer, in order (then the ConfigMaps).
        self.read_errors = []
        self.slept = []
        self.sleep = self.slept.append
        # The etcd Pods kubeadm join reads its endpoints from, the running
        # controllers, and the Pods deleted.
        self.etcd_pods = {"items": []}
        self.ips = ["10.0.0.5"]
        self.deleted = []

    def controller_ips(self):
        return list(self.ips)

    def bump(self, name, data):
        cm = self.cms[name]
        cm["data"] = data
        cm["metadata"]["resourceVersion"] = str(int(cm["metadata"]["resourceVersion"]) + 1)

    def run(self, args):
        self.commands.append(args)
        if args[:3] == ["kubeadm", "kubeconfig", "user"]:
            return 0, "apiVersion: v1\nkind: Config\n", ""
        if args[:5] == ["kubeadm", "init", "phase", "upload-config", "all"]:
            self.assertions_on_upload(args)
            if self.upload_fails:
                return 1, "", "error uploading the kubelet configuration"
            # This node's configuration, at its version (kubeadm defaults it).
            self.bump("kubeadm-config", {"ClusterConfiguration": CLUSTER_CONFIGURATION.replace(
                "v1.35.4", "v" + self.version).replace("apiServer: {}", "apiServer: {extraArgs: [{name: oidc}]}")})
            self.bump("kubelet-config", {"kubelet": "kind: KubeletConfiguration\nmaxPods: 58\n"})
            return 0, "", ""
        assert args[0] == "kubectl" and args[2] == self.kubeconfig, args
        assert os.stat(self.kubeconfig).st_mode & 0o777 == 0o600
        verb = args[3]
        if verb == "get" and args[4] == "configmap":
            if self.read_errors:
                return 1, "", self.read_errors.pop(0)
            return 0, json.dumps(self.cms[args[5]]), ""
        if verb == "get" and args[4] == "daemonset":
            return 0, self.proxy, ""
        if verb == "get" and args[4] == "pods":
            assert args[5:] == ["-n", "kube-system", "-l", "component=etcd,tier=control-plane", "-o", "json"], args
            return 0, json.dumps(self.etcd_pods), ""
        if verb == "delete" and args[4] == "pod":
            assert "--force" in args and "--grace-period=0" in args, args
            self.deleted.append((args[5], len(self.boot.sh_calls)))
            return 0, "pod deleted\n", ""
        if verb == "replace":
            with open(args[5]) as f:
                new = json.load(f)
            cur = self.cms[new["metadata"]["name"]]
            if new["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"]:
                return 1, "", "Error from server (Conflict): the object has been modified"
            self.bump(new["metadata"]["name"], new["data"])
            return 0, "configmap replaced\n", ""
        raise AssertionError(args)

    def assertions_on_upload(self, args):
        assert args[5:] == ["--config", "/cfg", "--kubeconfig", self.kubeconfig], args

    def version_now(self):
        return config_version(self.cms["kubeadm-config"]["data"]["ClusterConfiguration"])

    def kubelet_now(self):
        return self.cms["kubelet-config"]["data"]["kubelet"]


_PAUSE = upgrade.APPLY_PAUSE


def setUpModule():
    # No real pause between `kubeadm upgrade apply` runs in these tests.
    upgrade.APPLY_PAUSE = 0


def tearDownModule():
    upgrade.APPLY_PAUSE = _PAUSE


class Join(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.boot = FakeBoot(self.dir)
        self.joined = []

    def join(self):
        self.joined.append(True)
        self.boot.sh(["kubeadm", "join", "--config", "x"])

    def statuses(self):
        return [(u[1].get("phase"), u[1].get("step")) for u in self.boot.uploads]

    def test_a_newer_controller_sets_the_version_joins_then_upgrade_apply(self):
        u = FakeUpgrader(self.boot, "1.36.3")
        self.assertEqual(u.join("/cfg", self.join), "upgrade")
        # kubeadm-config named the new version before the join (static pods new from the start).
        self.assertEqual(u.version_now(), "v1.36.3")
        self.assertEqual(self.boot.sh_calls, [["kubeadm", "join", "--config", "x"], ["wait-node-ready"],
                                              ["kubeadm", "upgrade", "apply", "v1.36.3", "--yes", "--config", "/upgrade.yaml"]])
        self.assertEqual(self.statuses()[0], ("upgrading", "upload-config"))
        self.assertEqual(self.statuses()[-1], ("upgraded", "done"))
        last = self.boot.uploads[-1]
        self.assertEqual(last[0], "s3://b/p/demo/status/control-plane/upgrade.json")
        self.assertEqual((last[1]["from"], last[1]["to"], last[1]["version"]), ("1.35.4", "1.36.3", "1.36.3"))
        # The minted admin kubeconfig is gone.
        self.assertFalse(os.path.exists(u.kubeconfig))

    def test_a_failed_upgrade_apply_puts_the_version_back_and_says_so(self):
        self.boot.fail_on = ["kubeadm", "upgrade", "apply"]
        u = FakeUpgrader(self.boot, "1.36.3")
        with self.assertRaises(UpgradeError) as e:
            u.join("/cfg", self.join)
        self.assertIn("kubeadm upgrade apply v1.36.3 exited 1", str(e.exception))
        self.assertEqual(u.version_now(), "v1.35.4")
        phase, step = self.statuses()[-1]
        self.assertEqual((phase, step), ("failed", "kubeadm-upgrade-apply"))
        msg = self.boot.uploads[-1][1]["message"]
        self.assertIn("kubeadm-config and kubelet-config are back as they were (1.35.4)", msg)
        self.assertIn("maxPods: 110", u.kubelet_now())
        self.assertEqual(self.boot.uploads[-1][1]["version"], "1.35.4")

    def test_a_failed_upgrade_apply_is_run_again_and_its_second_run_upgrades(self):
        # kubeadm's preflight Job missed its fixed 60 s once (a busy control
        # plane): the command is idempotent, the second run goes through.
        self.boot.fail_on = ["kubeadm", "upgrade", "apply"]
        sh = self.boot.sh

        def once_then_fine(args, capture=False):
            if args[:3] == ["kubeadm", "upgrade", "apply"] and self.boot.fail_on:
                self.boot.fail_on = None
                self.boot.sh_calls.append(list(args))
                raise upgrade.UpgradeError("exit 1")
            return sh(args, capture)
        self.boot.sh = once_then_fine
        u = FakeUpgrader(self.boot, "1.36.3")
        self.assertEqual(u.join("/cfg", self.join), "upgrade")
        applies = [c for c in self.boot.sh_calls if c[:3] == ["kubeadm", "upgrade", "apply"]]
        self.assertEqual(len(applies), 2)
        self.assertTrue(any("running it again (attempt 2 of 5)" in t for t in self.boot.said), self.boot.said)
        self.assertEqual(self.statuses()[-1], ("upgraded", "done"))

    def test_a_failed_upgrade_node_after_a_join_is_run_again(self):
        # kubeadm upgrade node gave up waiting for this node's mirror Pod
        # (the bed at load 20): the join stands, the second run upgrades.
        sh = self.boot.sh
        failed = []

        def once_then_fine(args, capture=False):
            if args[:3] == ["kubeadm", "upgrade", "node"] and not failed:
                failed.append(True)
                self.boot.sh_calls.append(list(args))
                raise upgrade.UpgradeError("exit 1")
            return sh(args, capture)
        self.boot.sh = once_then_fine
        u = FakeUpgrader(self.boot, "1.36.3", cluster_version="v1.36.3", proxy="v1.35.4")
        self.assertEqual(u.join("/cfg", self.join), "join")
        nodes = [c for c in self.boot.sh_calls if c[:3] == ["kubeadm", "upgrade", "node"]]
        self.assertEqual(len(nodes), 2)
        self.assertTrue(any("kubeadm upgrade node exited 1; running it again (attempt 2 of 3)" in t
                            for t in self.boot.said), self.boot.said)
        self.assertEqual(self.statuses()[-1], ("upgraded", "done"))

    def test_an_upgrade_node_that_keeps_failing_fails_the_boot_after_three_runs(self):
        self.boot.fail_on = ["kubeadm", "upgrade", "node"]
        u = FakeUpgrader(self.boot, "1.36.3", cluster_version="v1.36.3", proxy="v1.35.4")
        with self.assertRaises(UpgradeError) as e:
            u.join("/cfg", self.join)
        self.assertIn("kubeadm upgrade node exited 1", str(e.exception))
        nodes = [c for c in self.boot.sh_calls if c[:3] == ["kubeadm", "upgrade", "node"]]
        self.assertEqual(len(nodes), 3)
        self.assertEqual(self.statuses()[-1], ("failed", "kubeadm-upgrade-node"))

    def test_the_etcd_pods_of_controllers_gone_are_deleted_before_the_join(self):
        # A restore's snapshot: the old controllers' etcd Pods (.1, .2), the
        # restorer's (.5) not mirrored yet, and one of another cluster's
        # layout (no annotation): only the old ones go, before kubeadm join.
        def pod(name, url):
            ann = {etcd.ADVERTISE_ANNOTATION: url} if url else {}
            return {"metadata": {"name": name, "annotations": ann}}
        u = FakeUpgrader(self.boot, "1.35.4")
        u.etcd_pods = {"items": [pod("etcd-old-1", "https://10.0.0.1:2379"), pod("etcd-old-2", "https://10.0.0.2:2379"),
                                 pod("etcd-new", "https://10.0.0.5:2379"), pod("etcd-other", "")]}
        self.assertEqual(u.join("/cfg", self.join), "join")
        self.assertEqual([n for n, _ in u.deleted], ["etcd-old-1", "etcd-old-2"])
        self.assertTrue(all(at == 0 for _, at in u.deleted), "deleted after kubeadm join: %s" % u.deleted)
        self.assertTrue(any("deleting the etcd Pod etcd-old-1" in t for t in self.boot.said), self.boot.said)

    def test_no_controller_listed_deletes_no_etcd_pod_and_a_failed_look_still_joins(self):
        u = FakeUpgrader(self.boot, "1.35.4")
        u.etcd_pods = {"items": [{"metadata": {"name": "etcd-a", "annotations": {
            etcd.ADVERTISE_ANNOTATION: "https://10.0.0.1:2379"}}}]}
        u.ips = []
        self.assertEqual(u.join("/cfg", self.join), "join")
        self.assertEqual(u.deleted, [])

        def broken():
            raise upgrade.AwsError("ec2 describe-instances: AccessDenied")
        u2 = FakeUpgrader(self.boot, "1.35.4")
        u2.controller_ips = broken
        self.assertEqual(u2.join("/cfg", self.join), "join")
        self.assertTrue(any("cannot look for stale etcd Pods" in t and "AccessDenied" in t for t in self.boot.said))

    def test_a_failed_join_changes_nothing_else(self):
        self.boot.fail_on = ["kubeadm", "join", "--config"]
        u = FakeUpgrader(self.boot, "1.36.3")
        with self.assertRaises(Exception):
            u.join("/cfg", self.join)
        self.assertEqual(u.version_now(), "v1.35.4")
        self.assertNotIn(["kubeadm", "upgrade", "apply", "v1.36.3", "--yes", "--config", "/upgrade.yaml"], self.boot.sh_calls)
        self.assertEqual(self.statuses()[-1], ("failed", "kubeadm-join"))

    def test_an_older_controller_refuses_before_joining(self):
        u = FakeUpgrader(self.boot, "1.35.4", cluster_version="v1.36.3")
        with self.assertRaises(UpgradeError) as e:
            u.join("/cfg", self.join)
        self.assertIn("older control plane never runs", str(e.exception))
        self.assertEqual(self.joined, [])
        self.assertEqual(self.statuses(), [("refused", "version-check")])
        self.assertFalse([c for c in u.commands if c[3:4] == ["replace"] or "upload-config" in c])

    def test_a_later_controller_joins_and_upgrades_the_addons_left_behind(self):
        u = FakeUpgrader(self.boot, "1.36.3", cluster_version="v1.36.3", proxy="v1.35.4")
        self.assertEqual(u.join("/cfg", self.join), "join")
        self.assertEqual(self.boot.sh_calls, [["kubeadm", "join", "--config", "x"],
                                              ["kubeadm", "upgrade", "node", "--config", "/upgrade.yaml"]])
        self.assertEqual(self.statuses()[-1], ("upgraded", "done"))
        # At the same version with current addons: a plain join.
        boot = FakeBoot(self.dir)
        u = FakeUpgrader(boot, "1.36.3", cluster_version="v1.36.3", proxy="v1.36.3")
        u.join("/cfg", lambda: boot.sh(["kubeadm", "join"]))
        self.assertEqual(boot.sh_calls, [["kubeadm", "join"]])
        self.assertEqual(boot.uploads, [])

    def test_a_changed_configuration_reaches_the_configmaps_before_the_join(self):
        # Same version, new flags and kubelet settings: uploaded, then the
        # join writes this node's static pods and kubelet config from them.
        u = FakeUpgrader(self.boot, "1.35.4", proxy="v1.35.4")
        order = []
        u.join("/cfg", lambda: order.append((u.version_now(), len(u.commands))) or self.join())
        self.assertIn("oidc", u.cms["kubeadm-config"]["data"]["ClusterConfiguration"])
        self.assertIn("maxPods: 58", u.kubelet_now())
        uploads = [i for i, c in enumerate(u.commands) if c[:4] == ["kubeadm", "init", "phase", "upload-config"]]
        self.assertEqual(len(uploads), 1)
        # The upload came before the join.
        self.assertEqual(order[0][0], "v1.35.4")
        self.assertLess(uploads[0], order[0][1])
        self.assertEqual(self.boot.sh_calls, [["kubeadm", "join", "--config", "x"]])
        self.assertEqual(self.boot.uploads, [])

    def test_reads_no_api_server_answered_are_retried_and_an_answer_is_not(self):
        # The first controller's API server serves (its join token is out)
        # before the load balancer routes to it alone: seen in CI.
        u = FakeUpgrader(self.boot, "1.35.4", proxy="v1.35.4")
        u.read_errors = ["The connection to the server api:6443 was refused - did you specify the right host or port?",
                         "Unable to connect to the server: dial tcp 10.0.0.9:6443: i/o timeout"]
        self.assertEqual(u.join("/cfg", self.join), "join")
        self.assertEqual(self.joined, [True])
        self.assertEqual(u.slept, [3, 6])
        self.assertEqual(len([m for m in self.boot.said if "retrying" in m]), 2)
        # What an API server answered is final: no retry, no join.
        boot = FakeBoot(self.dir)
        u = FakeUpgrader(boot, "1.35.4", proxy="v1.35.4")
        u.read_errors = ['Error from server (Forbidden): configmaps "kubeadm-config" is forbidden']
        with self.assertRaises(UpgradeError) as e:
            u.join("/cfg", lambda: boot.sh(["kubeadm", "join"]))
        self.assertIn("Forbidden", str(e.exception))
        self.assertEqual((u.slept, boot.sh_calls), ([], []))
        # Refused for longer than the tries: the last error, after them all.
        boot = FakeBoot(self.dir)
        u = FakeUpgrader(boot, "1.35.4", proxy="v1.35.4")
        u.read_errors = ["The connection to the server api:6443 was refused"] * 10
        with self.assertRaises(UpgradeError) as e:
            u.join("/cfg", lambda: boot.sh(["kubeadm", "join"]))
        self.assertIn("was refused", str(e.exception))
        self.assertEqual(u.slept, [3 * i for i in range(1, 10)])

    def test_a_failed_upload_joins_nothing(self):
        u = FakeUpgrader(self.boot, "1.36.3", upload_fails=True)
        with self.assertRaises(UpgradeError) as e:
            u.join("/cfg", self.join)
        self.assertIn("upload-config", str(e.exception))
        self.assertEqual(self.joined, [])
        self.assertEqual(u.version_now(), "v1.35.4")
        self.assertEqual(self.statuses()[-1], ("failed", "upload-config"))


class AfterInit(unittest.TestCase):
    """A single controller's init: the version recorded; on a restored
    snapshot of an older control plane, the same kubeadm upgrade apply."""

    def setUp(self):
        self.boot = FakeBoot(tempfile.mkdtemp())

    def last(self):
        return self.boot.uploads[-1][1]

    def kubectl_calls(self):
        return [c[3:] for c in self.boot.sh_calls if c[0] == "kubectl"]

    def test_a_fresh_or_same_version_init_records_its_version(self):
        self.assertEqual(restore_takeover.after_init(self.boot, "1.35.4", None, restored=False), "init")
        self.assertEqual(self.boot.sh_calls, [])
        # A restore at the same version: only the replaced controllers' Nodes go (none here).
        self.assertEqual(restore_takeover.after_init(self.boot, "1.35.4", "1.35.4", restored=True), "init")
        lease = ["-n", "kube-system", "get", "lease", "kube-controller-manager", "kube-scheduler",
                 "cloud-controller-manager", "--ignore-not-found", "-o", "json"]
        self.assertEqual(self.kubectl_calls(), [["get", "nodes", "-l", "node-role.kubernetes.io/control-plane",
                                                 "-o", "json"], lease, lease])
        self.assertEqual((self.last()["phase"], self.last()["version"]), ("running", "1.35.4"))

    def test_a_restored_older_snapshot_is_upgraded_by_kubeadm(self):
        def node(name, control_plane):
            labels = {"node-role.kubernetes.io/control-plane": ""} if control_plane else {}
            return {"metadata": {"name": name, "labels": labels}}
        # The snapshot holds the replaced controller's Node (and a worker's).
        self.boot.nodes = {"items": [node(self.boot.node_name, True), node("ip-10-0-0-4.ec2.internal", True),
                                     node("ip-10-0-9-9.ec2.internal", False)]}
        # ... and its controller manager's leader lease.
        self.boot.leases["kube-controller-manager"] = "ip-10-0-0-4.ec2.internal_0f3c"
        self.assertEqual(restore_takeover.after_init(self.boot, "1.36.3", "1.35.4", restored=True), "upgrade")
        calls = self.kubectl_calls()
        self.assertEqual(calls[1], ["delete", "node", "ip-10-0-0-4.ec2.internal", "--wait=false"])
        self.assertEqual(calls[3], ["-n", "kube-system", "delete", "lease", "kube-controller-manager",
                                    "--ignore-not-found"])
        self.assertEqual(len(calls), 6)
        self.assertEqual(self.boot.sh_calls[5], ["wait-node-ready"])
        self.assertEqual(calls[5], ["get", "nodes", "-o", "json"])
        self.assertEqual(self.boot.sh_calls[7], ["kubeadm", "upgrade", "apply", "v1.36.3", "--yes", "--config", "/upgrade.yaml"])
        self.assertEqual([u[1]["phase"] for u in self.boot.uploads], ["upgrading", "upgrading", "upgraded"])
        self.assertEqual((self.last()["from"], self.last()["version"]), ("1.35.4", "1.36.3"))

    def test_the_health_check_job_needs_a_node_without_the_cloud_providers_taint(self):
        def node(name, ready=True, taints=(), unschedulable=False):
            return {"metadata": {"name": name}, "spec": {"taints": list(taints), "unschedulable": unschedulable},
                    "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
        cp = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
        uninit = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
        nodes = {"items": [node("me", taints=[cp, uninit]), node("w1", ready=False), node("w2", unschedulable=True),
                           node("w3", taints=[{"key": "x", "effect": "PreferNoSchedule"}])]}
        self.assertEqual(restore_takeover.schedulable_nodes(nodes), ["w3"])
        self.assertEqual(restore_takeover.schedulable_nodes({"items": [node("me", taints=[cp])]}), ["me"])
        self.assertEqual(restore_takeover.schedulable_nodes({"items": [node("me", taints=[cp, uninit])]}), [])

    def test_leader_leases_not_taken_in_time_fail_the_restore_before_the_upgrade(self):
        self.boot.leases = {"kube-scheduler": socket.gethostname() + "_new"}
        t = [0]

        def clock():
            t[0] += 30
            return t[0]
        with self.assertRaises(UpgradeError) as e:
            restore_takeover.take_over_leader_leases(self.boot, sleep=lambda s: None, clock=clock)
        self.assertIn("did not take their leader leases within 180 s", str(e.exception))
        self.assertNotIn(["kubeadm", "upgrade", "apply"], [c[:3] for c in self.boot.sh_calls])
        self.assertEqual(restore_takeover.stale_leases({"items": [{"metadata": {"name": "a"}, "spec": {"holderIdentity": "h_1"}},
                                                         {"metadata": {"name": "b"}, "spec": {"holderIdentity": "hx_1"}},
                                                         {"metadata": {"name": "c"}, "spec": {}}]}, "h"), ["b", "c"])

    def test_a_failed_upgrade_after_a_restore_records_the_newer_version(self):
        self.boot.fail_on = ["kubeadm", "upgrade", "apply"]
        with self.assertRaises(UpgradeError) as e:
            restore_takeover.after_init(self.boot, "1.36.3", "1.35.4", restored=True)
        self.assertIn("kubeadm upgrade apply v1.36.3 exited 1", str(e.exception))
        last = self.last()
        self.assertEqual((last["phase"], last["step"], last["version"]), ("failed", "kubeadm-upgrade-apply", "1.36.3"))
        self.assertIn("an older one must not restore it", last["message"])
        # The roll back's older controller then refuses this data.
        self.assertIn("reached Kubernetes 1.36.3", restore_refusal(last["version"], "1.35.4"))



class WorkerGate(unittest.TestCase):
    """reconcile's Ready-node gate: a worker first while the root stack rolls the pools."""

    def gate(self, plan, worker, in_progress):
        from kube_aws_node import cfn, reconcile
        calls = []

        class R(object):
            aws, stack, poll = None, "demo", 0

            def wait_until(self, seconds, probe):
                calls.append(seconds)
                return reconcile.Reconciler.wait_until(self, min(seconds, 0), probe)

            def a_worker_is_ready(self):
                return worker

            def a_node_is_ready(self):
                return True
        R.plan = plan
        saved = cfn.stack_in_progress
        cfn.stack_in_progress = lambda aws, stack: in_progress
        try:
            return reconcile.Reconciler.ready_node_gate(R()), calls
        finally:
            cfn.stack_in_progress = saved

    def test_a_worker_is_waited_for_only_while_the_stack_rolls(self):
        plan = {"workerReadyTimeoutSeconds": 2400, "nodeReadyTimeoutSeconds": 600}
        self.assertEqual(self.gate(plan, worker=True, in_progress=True), (True, [2400, 600]))
        # No worker yet while the stack rolls: the worker wait runs out, then any node will do.
        self.assertEqual(self.gate(plan, worker=False, in_progress=True), (True, [2400, 600]))
        # No pool starts with a node: any Ready node, as before.
        self.assertEqual(self.gate({"nodeReadyTimeoutSeconds": 600}, worker=False, in_progress=True), (True, [600]))


if __name__ == "__main__":
    unittest.main()
