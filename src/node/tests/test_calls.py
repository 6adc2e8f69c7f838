"""The AWS call table (src/node/iam-calls.json) lists every call site of the
node program and of the user-data stub, one entry per site.

A new `aws` call without its entry fails here; the entry's grants are then
checked against the rendered policies (tests/it/node_iam.rs) and made under
the role's own credentials against moto (tests/it/node_iam_moto.rs). A call
site is an argument list literal whose first two items are an aws CLI
service and operation (`["s3api", "put-object", ...]`), or an `aws ...`
command line in stub.sh.
"""
import ast
import collections
import json
import os
import re
import unittest

import helpers

SERVICES = ("s3", "s3api", "ssm", "cloudformation", "ec2", "kms", "autoscaling", "sts", "iam", "sqs",
            "elbv2", "route53", "secretsmanager", "cloudwatch")
PACKAGE = os.path.join(helpers.HERE, "..", "kube_aws_node")
STUB = os.path.join(helpers.REPO, "src", "render", "templates", "stub.sh")
TABLE = os.path.join(helpers.HERE, "..", "iam-calls.json")
_STUB_CALL = re.compile(r'(?m)^[ \t]*aws[ \t]+(?:--region[ \t]+"\$region"[ \t]+)?([a-z0-9]+)[ \t]+([a-z0-9-]+)')


def python_call_sites(source):
    """(service operation) of every call-site literal in a module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.List) or len(node.elts) < 2:
            continue
        a, b = node.elts[0], node.elts[1]
        if (isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value in SERVICES
                and isinstance(b, ast.Constant) and isinstance(b.value, str)):
            found.append("%s %s" % (a.value, b.value))
    return found


def stub_call_sites(text):
    return ["%s %s" % m.groups() for m in _STUB_CALL.finditer(text)]


def source_sites():
    sites = collections.Counter()
    for name in sorted(os.listdir(PACKAGE)):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE, name), encoding="utf-8") as f:
                for call in python_call_sites(f.read()):
                    sites[(name, call)] += 1
    with open(STUB, encoding="utf-8") as f:
        for call in stub_call_sites(f.read()):
            sites[("stub.sh", call)] += 1
    return sites


def table_sites():
    with open(TABLE, encoding="utf-8") as f:
        table = json.load(f)
    return collections.Counter((c["file"], c["call"]) for c in table["calls"]), table


class CallTable(unittest.TestCase):
    def test_every_call_site_has_one_entry_and_every_entry_a_site(self):
        have, _ = table_sites()
        want = source_sites()
        self.assertTrue(want, "no call site found: the scan is broken")
        missing = dict((k, n - have[k]) for k, n in want.items() if n > have[k])
        extra = dict((k, n - want[k]) for k, n in have.items() if n > want[k])
        self.assertEqual(missing, {}, "call sites without an entry in src/node/iam-calls.json (add one, with "
                                      "the grants the call needs, per role)")
        self.assertEqual(extra, {}, "entries in src/node/iam-calls.json whose call site is gone")

    def test_every_entry_grants_something_to_a_known_role(self):
        _, table = table_sites()
        for c in table["calls"]:
            self.assertTrue(c["grants"], c)
            for g in c["grants"]:
                self.assertIn(g["role"], ("controller", "worker"), c)
                self.assertRegex(g["action"], r"^[a-z0-9]+:[A-Za-z]+$", c)
                self.assertTrue(g["resource"], c)

    def test_the_scan_finds_a_call_and_ignores_other_lists(self):
        src = 'aws(["s3api", "put-object", "--bucket", b])\nrun(["kubectl", "get", "nodes"])\nx = ["s3", 1]\n'
        self.assertEqual(python_call_sites(src), ["s3api put-object"])
        self.assertEqual(stub_call_sites('  aws --region "$region" s3 cp --only-show-errors "$a" "$b"\n'),
                         ["s3 cp"])


if __name__ == "__main__":
    unittest.main()
