"""helm_release.paused_overrides and its use in Reconciler.install: a release
whose Deployment carries the pause `kube-aws update --wait` records
(src/aws/lifecycle/autoscaler.rs) is upgraded with the plan's replicas value at 0, so a
chart upgrade during the roll (Helm 3's three-way merge) does not bring the
cluster-autoscaler back; once the resume has removed the record, it is
installed with the chart's count again. After each failed attempt of such an
upgrade (whose --atomic rollback puts the last revision's count back) its
Deployments are scaled back to 0. tests/it/helm_pause_testbed.rs runs
the real helm against the real API server."""
import io
import json
import os
import shutil
import tempfile
import unittest
import unittest.mock

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import bundle
from kube_aws_node.console import Console
from kube_aws_node.helm_release import PAUSED_REPLICAS, paused_overrides, repause_command
from kube_aws_node.reconcile import Reconciler

RELEASE = {"name": "cluster-autoscaler", "namespace": "kube-system", "replicasValue": "replicaCount"}


def deployments(*annotations):
    """A `kubectl get deployments -o json` answer, one Deployment per annotations dict."""
    return {"kind": "DeploymentList", "items": [
        {"metadata": {"name": "d%d" % i, "annotations": a}, "spec": {"replicas": 0}}
        for i, a in enumerate(annotations)]}


class PausedOverrides(unittest.TestCase):
    def test_a_paused_deployment_is_upgraded_at_zero(self):
        self.assertEqual(paused_overrides(RELEASE, deployments({PAUSED_REPLICAS: "2"})),
                         ["--set", "replicaCount=0"])

    def test_one_paused_deployment_of_several_is_enough(self):
        self.assertEqual(paused_overrides(RELEASE, deployments({}, {PAUSED_REPLICAS: "1"})),
                         ["--set", "replicaCount=0"])

    def test_after_the_resume_the_charts_count_is_installed_again(self):
        # The resume removes the record: nothing forces 0 any more.
        self.assertEqual(paused_overrides(RELEASE, deployments({"deployment.kubernetes.io/revision": "3"})), [])
        self.assertEqual(paused_overrides(RELEASE, deployments(None)), [])

    def test_a_release_not_installed_yet_has_nothing_to_keep(self):
        self.assertEqual(paused_overrides(RELEASE, deployments()), [])

    def test_a_release_without_a_replicas_value_is_never_overridden(self):
        plain = dict(RELEASE)
        del plain["replicasValue"]
        self.assertEqual(paused_overrides(plain, deployments({PAUSED_REPLICAS: "2"})), [])

    def test_the_value_path_is_the_plans(self):
        r = dict(RELEASE, replicasValue="controller.replicas")
        self.assertEqual(paused_overrides(r, deployments({PAUSED_REPLICAS: "1"})),
                         ["--set", "controller.replicas=0"])

    def test_an_answer_of_another_shape_pauses_nothing(self):
        for answer in (None, [], {"items": None}, {"items": [None, "x", {"metadata": []}]}):
            self.assertEqual(paused_overrides(RELEASE, answer), [], answer)


class Repause(unittest.TestCase):
    def test_the_releases_deployments_by_its_label_to_zero(self):
        self.assertEqual(repause_command(RELEASE),
                         ["kubectl", "-n", "kube-system", "scale", "deployments", "-l",
                          "app.kubernetes.io/instance=cluster-autoscaler", "--replicas=0"])


class Install(Reconciler):
    """Reconciler.install with the commands recorded and answered: kubectl's
    list of the release's Deployments and its scale, helm history (no
    release) and helm (`helm_code` its exit code)."""

    def __init__(self, tmp, listing, list_code=0, helm_code=0, attempts=1):
        self.stream = io.StringIO()
        self.log = Console("kube-aws-addons", stream=self.stream)
        self.scratch = self.addons = tmp
        self.helm = "helm"
        self.helm_major = 3
        self.attempts, self.delay = attempts, 0
        self.listing, self.list_code, self.helm_code = listing, list_code, helm_code
        self.commands = []

    def status(self, name, phase, message=""):
        pass

    def aws(self, args):
        shutil.copy(os.path.join(self.scratch, "chart.tgz"), args[-1])

    def run(self, args, out=None):
        code, text = self.answer(args)
        if out is not None:
            with open(out, "w") as f:
                f.write(text)
        return code, text

    def run_watching(self, args, out, watch):
        """helm, as run answers it (the watch while it waits: test_stuck_container)."""
        return self.run(args, out)

    def answer(self, args):
        self.commands.append(list(args))
        if args[:4] == ["kubectl", "-n", "kube-system", "scale"]:
            return 0, "deployment.apps/d0 scaled\n"
        if args[0] == "kubectl":
            return self.list_code, json.dumps(self.listing) if self.list_code == 0 else "forbidden\n"
        if args[1] == "history":
            return 1, "Error: release: not found\n"
        if args[1] == "upgrade" and self.helm_code:
            return self.helm_code, "Error: UPGRADE FAILED: release failed, and has been rolled back due to atomic\n"
        return 0, ""


class InstallWithThePause(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)
        chart = os.path.join(self.tmp, "chart.tgz")
        with open(chart, "wb") as f:
            f.write(b"chart")
        self.release = dict(RELEASE, locked=True, chartObject="s3://b/chart.tgz", sha256=bundle.sha256_file(chart),
                            timeoutSeconds=60, valuesFile="values/cluster-autoscaler.yaml")

    def helm_upgrade(self, r):
        return [c for c in r.commands if c[:2] == ["helm", "upgrade"]]

    def test_a_paused_release_is_upgraded_with_its_replicas_at_zero(self):
        r = Install(self.tmp, deployments({PAUSED_REPLICAS: "2"}))
        self.assertEqual(r.install(self.release), ("ready", ""))
        listing = r.commands[0]
        self.assertEqual(listing, ["kubectl", "-n", "kube-system", "get", "deployments", "-l",
                                   "app.kubernetes.io/instance=cluster-autoscaler", "-o", "json"])
        (upgrade,) = self.helm_upgrade(r)
        self.assertEqual(upgrade[-2:], ["--set", "replicaCount=0"])
        self.assertIn("paused by `kube-aws update`", r.stream.getvalue())

    def test_a_resumed_release_is_upgraded_with_the_charts_count(self):
        r = Install(self.tmp, deployments({}))
        self.assertEqual(r.install(self.release), ("ready", ""))
        (upgrade,) = self.helm_upgrade(r)
        self.assertNotIn("--set", upgrade)

    def test_a_release_without_a_replicas_value_is_not_looked_at(self):
        plain = dict(self.release)
        del plain["replicasValue"]
        r = Install(self.tmp, deployments({PAUSED_REPLICAS: "2"}))
        self.assertEqual(r.install(plain), ("ready", ""))
        self.assertFalse([c for c in r.commands if c[0] == "kubectl"])

    def test_after_each_failed_attempt_of_a_paused_release_it_is_scaled_to_zero_again(self):
        r = Install(self.tmp, deployments({PAUSED_REPLICAS: "2"}), helm_code=1, attempts=2)
        with unittest.mock.patch("time.sleep"):
            phase, _ = r.install(self.release)
        self.assertEqual(phase, "failed")
        steps = [c[1] if c[0] == "helm" else c[3] for c in r.commands]
        steps = [s for s in steps if s in ("upgrade", "scale")]
        self.assertEqual(steps, ["upgrade", "scale", "upgrade", "scale"])
        self.assertIn(repause_command(self.release), r.commands)
        self.assertIn("paused Deployments are scaled to 0 again", r.stream.getvalue())

    def test_a_failed_upgrade_of_a_release_not_paused_is_left_to_helm(self):
        r = Install(self.tmp, deployments({}), helm_code=1)
        phase, _ = r.install(self.release)
        self.assertEqual(phase, "failed")
        self.assertFalse([c for c in r.commands if "scale" in c])

    def test_when_kubectl_cannot_tell_the_release_fails_rather_than_guess(self):
        r = Install(self.tmp, None, list_code=1)
        phase, message = r.install(self.release)
        self.assertEqual(phase, "failed")
        self.assertIn("cannot tell whether the Deployments of cluster-autoscaler are paused", message)
        self.assertEqual(self.helm_upgrade(r), [])

    def test_an_answer_that_is_not_json_fails_the_release(self):
        r = Install(self.tmp, None)
        r.listing = None
        r.run = lambda args, out=None: (0, "Warning: something\n") if args[0] == "kubectl" else (1, "")
        phase, message = r.install(self.release)
        self.assertEqual(phase, "failed")
        self.assertIn("is not JSON", message)


if __name__ == "__main__":
    unittest.main()
