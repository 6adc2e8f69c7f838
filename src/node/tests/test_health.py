"""A controller whose bootstrap fails marks itself Unhealthy in its group
(kube_aws_node.health, called from Bootstrap.fail after the FAILURE signal);
a worker does not; a failed call never raises."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kube_aws_node import bootstrap, health  # noqa: E402
from kube_aws_node.awscall import AwsError  # noqa: E402


class FakeAws(object):
    def __init__(self, fail=False):
        self.calls = []
        self.fail = fail

    def __call__(self, args, attempts=None):
        self.calls.append(list(args))
        if self.fail:
            raise AwsError("An error occurred (AccessDenied)")
        return {}


class MarkUnhealthy(unittest.TestCase):
    def test_the_call_and_its_refusals(self):
        aws = FakeAws()
        self.assertTrue(health.mark_unhealthy(aws, "i-0123456789abcdef0"))
        self.assertEqual(aws.calls, [["autoscaling", "set-instance-health", "--instance-id", "i-0123456789abcdef0",
                                      "--health-status", "Unhealthy", "--no-should-respect-grace-period"]])
        # No instance ID (IMDS never answered): nothing to mark.
        self.assertFalse(health.mark_unhealthy(aws, "ip-10-0-0-1"))
        self.assertEqual(len(aws.calls), 1)
        self.assertFalse(health.mark_unhealthy(FakeAws(fail=True), "i-0123456789abcdef0"))


class Failing(object):
    """What Bootstrap.fail uses of a bootstrap."""

    def __init__(self, role):
        self.role, self.step_name, self.instance_id = role, "kubeadm", "i-0123456789abcdef0"
        self.aws, self.said, self.signals = FakeAws(), [], []

    def say(self, m):
        self.said.append(m)

    def blank(self, s):
        return s

    def report(self, code, command):
        pass

    def signal(self, status):
        self.signals.append(status)


class BootstrapFail(unittest.TestCase):
    def test_a_controller_signals_then_takes_itself_out_of_service(self):
        b = Failing("controller")
        self.assertEqual(bootstrap.Boot.fail(b, 3, "kubeadm init"), 3)
        self.assertEqual(b.signals, ["FAILURE"])
        self.assertEqual([c[:2] for c in b.aws.calls], [["autoscaling", "set-instance-health"]])
        self.assertIn("marked this controller Unhealthy", b.said[-1])

    def test_a_worker_only_signals(self):
        b = Failing("worker")
        bootstrap.Boot.fail(b, 3, "kubeadm join")
        self.assertEqual((b.signals, b.aws.calls), (["FAILURE"], []))


if __name__ == "__main__":
    unittest.main()
