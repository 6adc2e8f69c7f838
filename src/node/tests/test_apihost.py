"""apihost: the API's name pinned to this controller in /etc/hosts during its bootstrap."""
import os
import tempfile
import unittest

import helpers  # noqa: F401 - the package on sys.path

from kube_aws_node import apihost

NAME = "Bed-Network-ABC.elb.us-west-2.amazonaws.com"


class Pinned(unittest.TestCase):
    def test_one_marked_line_is_added_and_the_rest_kept(self):
        text = "127.0.0.1 localhost\n10.0.1.5 ip-10-0-1-5\n"
        out = apihost.pinned(text, "10.0.1.5", "api.example")
        self.assertTrue(out.endswith(text))
        added = out[:-len(text)].splitlines()
        self.assertEqual(len(added), 1)
        self.assertTrue(added[0].startswith("10.0.1.5 api.example "))

    def test_pinning_again_replaces_the_earlier_line(self):
        once = apihost.pinned("127.0.0.1 localhost", "10.0.1.5", "api.example")
        twice = apihost.pinned(once, "10.0.1.6", "api.example")
        self.assertEqual(twice.count(apihost.MARK), 1)
        self.assertIn("10.0.1.6 api.example", twice)
        self.assertEqual(apihost.without_pin(twice), "127.0.0.1 localhost\n")

    def test_an_operators_own_line_for_the_name_is_not_removed(self):
        text = "10.9.9.9 api.example\n"
        out = apihost.pinned(text, "10.0.1.5", "api.example")
        self.assertTrue(out.startswith("10.0.1.5 api.example "))
        self.assertEqual(apihost.without_pin(out), text)


class OnDisk(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.before = os.environ.get("KUBE_AWS_ROOT")
        os.environ["KUBE_AWS_ROOT"] = self.root
        os.makedirs(os.path.join(self.root, "etc"))
        self.hosts = os.path.join(self.root, "etc/hosts")
        with open(self.hosts, "w") as f:
            f.write("127.0.0.1 localhost\n")
        os.chmod(self.hosts, 0o644)
        self.said = []

    def tearDown(self):
        if self.before is None:
            del os.environ["KUBE_AWS_ROOT"]
        else:
            os.environ["KUBE_AWS_ROOT"] = self.before

    def read(self):
        with open(self.hosts) as f:
            return f.read()

    def test_pin_then_unpin_leaves_the_file_as_it_was(self):
        self.assertTrue(apihost.pin("10.0.1.5", NAME, self.said.append))
        self.assertIn("10.0.1.5 %s " % NAME.lower(), self.read())
        self.assertEqual(os.stat(self.hosts).st_mode & 0o777, 0o644)
        apihost.unpin()
        self.assertEqual(self.read(), "127.0.0.1 localhost\n")
        self.assertEqual(sorted(os.listdir(os.path.dirname(self.hosts))), ["hosts"])

    def test_no_address_pins_nothing_and_says_so(self):
        self.assertFalse(apihost.pin("", NAME, self.said.append))
        self.assertEqual(self.read(), "127.0.0.1 localhost\n")
        self.assertIn("left to DNS", self.said[0])


if __name__ == "__main__":
    unittest.main()
