"""bootstrap: the Node Ready decision, and the node program's entry points."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import cli
from kube_aws_node.bootstrap import MAC, NODE_NAME, node_ready


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


class Dispatch(unittest.TestCase):
    def test_every_command_names_a_function(self):
        import importlib
        for name, (module, function, _) in cli.COMMANDS.items():
            self.assertTrue(callable(getattr(importlib.import_module("kube_aws_node." + module), function)), name)

    def test_an_unknown_command_is_usage(self):
        self.assertEqual(cli.main(["nope"]), 2)
        self.assertEqual(cli.main([]), 2)


if __name__ == "__main__":
    unittest.main()
