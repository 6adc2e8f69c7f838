"""bootstrap: the Node Ready decision, the join-or-restore choice, and the node program's entry points."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import cli
from kube_aws_node import bootstrap, etcd_restore
from kube_aws_node.bootstrap import MAC, NODE_NAME, StepFailed, node_ready


class NodeReady(unittest.TestCase):
    def test_ready_only_when_the_condition_says_true(self):
        self.assertEqual(node_ready({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}), (True, ""))
        ok, why = node_ready({"status": {"conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "cni plugin not initialized"}]}})
        self.assertFalse(ok)
        self.assertEqual(why, "KubeletNotReady: cni plugin not initialized")
        self.assertEqual(node_ready({}), (False, "no Ready condition yet"))

    def test_imds_answers_are_checked(self):
        self.assertTrue(NODE_NAME.fullmatch("ip-10-0-1-23.eu-west-1.compute.internal"))
        self.assertFalse(NODE_NAME.fullmatch("bad name; $(id)"))
        self.assertTrue(MAC.fullmatch("0e:49:61:0f:c3:11"))
        self.assertFalse(MAC.fullmatch("0e:49:61:0f:c3"))


class HowItEnded(unittest.TestCase):
    def test_a_signal_is_named_not_a_negative_exit(self):
        self.assertEqual(bootstrap.how_it_ended(1), "exit 1")
        self.assertEqual(bootstrap.how_it_ended(-9), "killed by signal 9 (SIGKILL)")
        self.assertEqual(bootstrap.how_it_ended(-200), "killed by signal 200")


class Dispatch(unittest.TestCase):
    def test_every_command_names_a_function(self):
        import importlib
        for name, (module, function, _) in cli.COMMANDS.items():
            self.assertTrue(callable(getattr(importlib.import_module("kube_aws_node." + module), function)), name)

    def test_an_unknown_command_is_usage(self):
        self.assertEqual(cli.main(["nope"]), 2)
        self.assertEqual(cli.main([]), 2)



class JoinOrRestore(unittest.TestCase):
    """What a controller that did not take the init lock does with each
    restore decision (the decision itself: test_etcd_backup.py)."""

    class Boot(object):
        def __init__(self):
            self.calls = []

        def step(self, name):
            self.calls.append(("step", name))

        def say(self, text):
            self.calls.append(("say", text))

        def blank(self, text):
            return text

        def init(self, extra=()):
            self.calls.append(("init", list(extra)))

        def join_control_plane(self):
            self.calls.append(("join",))

        def recorded_version(self):
            return self.recorded

        def after_init(self, recorded, restored):
            self.calls.append(("after_init", recorded, restored))

        aws = None
        recorded = None
        node = {"kubernetesVersion": "1.35.4"}

    def run_with(self, answer, recorded=None):
        saved = etcd_restore.restore_if_needed

        def fake(aws, say=None):
            if isinstance(answer, Exception):
                raise answer
            return answer
        etcd_restore.restore_if_needed = fake
        try:
            b = self.Boot()
            b.recorded = recorded
            bootstrap.Boot.join_or_restore(b)
            return b.calls
        finally:
            etcd_restore.restore_if_needed = saved

    def test_a_restore_inits_on_the_restored_data(self):
        calls = self.run_with({"action": "restored", "key": "etcd/x.db"})
        self.assertIn(("init", ["--ignore-preflight-errors=DirAvailable--var-lib-etcd"]), calls)
        self.assertNotIn(("join",), calls)
        # Then the upgrade check, with the version the control plane reached.
        self.assertEqual(calls[-1], ("after_init", None, True))
        calls = self.run_with({"action": "restored", "key": "etcd/x.db"}, recorded="1.34.2")
        self.assertEqual(calls[-1], ("after_init", "1.34.2", True))

    def test_a_restore_at_an_older_version_than_the_cluster_reached_is_refused(self):
        with self.assertRaises(StepFailed) as e:
            self.run_with({"action": "restored", "key": "etcd/x.db"}, recorded="1.36.3")
        self.assertEqual(e.exception.command, "restore etcd")
        self.assertIn("the control plane reached Kubernetes 1.36.3 and this node is 1.35.4", e.exception.message)

    def test_a_join_decision_joins(self):
        calls = self.run_with({"action": "join", "reason": "the API answers"})
        self.assertEqual(calls[-1], ("join",))

    def test_no_snapshot_fails_the_boot_with_the_reason(self):
        with self.assertRaises(StepFailed) as e:
            self.run_with({"action": "fail", "reason": "no etcd snapshot to restore"})
        self.assertEqual(e.exception.command, "restore etcd")

    def test_an_undecidable_restore_falls_back_to_the_join(self):
        calls = self.run_with(RuntimeError("ParameterNotFound"))
        self.assertEqual(calls[-1], ("join",))
        self.assertTrue(any(c[0] == "say" and "ParameterNotFound" in c[1] for c in calls))


if __name__ == "__main__":
    unittest.main()


class FailedJoin(unittest.TestCase):
    """A controller whose `kubeadm join --control-plane` fails takes back its
    etcd member (etcd_lifecycle.py withdraw) before it releases the join lock, and the
    join's failure is the one raised."""

    class Boot(object):
        rt = {"keyPrefix": "p/demo", "bucket": "b"}
        node = {"kubernetesVersion": "1.36.5"}
        aws = None

        def __init__(self, calls, join_fails):
            self.calls = calls
            self.join_fails = join_fails

        def step(self, name):
            self.calls.append(("step", name))

        def say(self, text):
            self.calls.append(("say", text))

        def unique_id(self):
            return "i-0abc"

        def prune_stale_members(self):
            self.calls.append(("prune",))

        def kubeadm_config(self, *a):
            return "/etc/kube-aws/kubeadm-%s.yaml" % a[0]

        def sh(self, args, **kw):
            self.calls.append(("sh", args[:2]))
            if self.join_fails:
                raise StepFailed(137, "kubeadm join")

        def withdraw_member(self):
            self.calls.append(("withdraw",))

    def run_join(self, join_fails):
        from kube_aws_node import locks, upgrade
        calls = []
        saved = (locks.acquire, locks.release, upgrade.Upgrader)

        class Upgrader(object):
            def __init__(self, boot, version):
                pass

            def join(self, config, do_join):
                do_join()

        locks.acquire = lambda *a, **k: calls.append(("acquire",)) or "etag"
        locks.release = lambda *a, **k: calls.append(("release",)) or True
        upgrade.Upgrader = Upgrader
        try:
            b = self.Boot(calls, join_fails)
            try:
                bootstrap.Boot.join_control_plane(b)
                return calls, None
            except StepFailed as e:
                return calls, e
        finally:
            locks.acquire, locks.release, upgrade.Upgrader = saved

    def test_a_failed_join_withdraws_its_member_under_the_lock(self):
        calls, e = self.run_join(True)
        self.assertEqual(e.code, 137)
        ops = [c[0] for c in calls if c[0] != "say"]
        self.assertEqual(ops, ["step", "acquire", "prune", "step", "sh", "withdraw", "release"])

    def test_a_join_that_succeeds_withdraws_nothing(self):
        calls, e = self.run_join(False)
        self.assertIsNone(e)
        self.assertNotIn(("withdraw",), calls)
        self.assertEqual(calls[-1], ("release",))
