"""Unit tests of the at-rest rewrite's decision (src/node/kube_aws_node/encryption.py).
The rewrite itself runs against a real kube-apiserver and etcd in
tests/it/encryption_testbed.rs."""
import json
import os
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import encryption

FLAG = "--encryption-provider-config=/etc/kubernetes/pki/encryption.json"


def config(*providers):
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
            "resources": [{"resources": ["secrets"], "providers": list(providers)}]}


def pod(node, flags=(FLAG,), ready=True):
    return {"spec": {"nodeName": node, "containers": [{"name": "kube-apiserver",
                                                       "command": ["kube-apiserver"] + list(flags)}]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class CurrentKey(unittest.TestCase):
    def test_the_first_providers_first_key(self):
        c = config({"secretbox": {"keys": [{"name": "key-2", "secret": "x"}, {"name": "key-1", "secret": "y"}]}},
                   {"identity": {}})
        self.assertEqual(encryption.current_key(c), "secretbox:key-2")

    def test_identity_first_encrypts_nothing(self):
        self.assertIsNone(encryption.current_key(config({"identity": {}})))

    def test_a_configuration_without_secrets_is_an_error_without_its_content(self):
        c = {"resources": [{"resources": ["configmaps"],
                            "providers": [{"secretbox": {"keys": [{"name": "k", "secret": "SECRETVALUE"}]}}]}]}
        with self.assertRaises(encryption.EncryptionError) as e:
            encryption.current_key(c)
        self.assertNotIn("SECRETVALUE", str(e.exception))



class Decide(unittest.TestCase):
    def test_recorded_key_is_done(self):
        self.assertEqual(encryption.decide("secretbox:k", "secretbox:k", ["a"], [])[0], "done")

    def test_no_control_plane_node_waits(self):
        self.assertEqual(encryption.decide("secretbox:k", None, [], [])[0], "wait")

    def test_every_node_needs_a_ready_apiserver_with_the_flag(self):
        nodes = ["a", "b", "c"]
        self.assertEqual(encryption.decide("secretbox:k", None, nodes, [pod("a"), pod("b")]),
                         ("wait", "no kube-apiserver pod on c yet"))
        what, why = encryption.decide("secretbox:k", None, nodes, [pod("a"), pod("b", flags=()), pod("c")])
        self.assertEqual(what, "wait")
        self.assertIn("on b runs without", why)
        what, why = encryption.decide("secretbox:k", None, nodes, [pod("a"), pod("b"), pod("c", ready=False)])
        self.assertEqual((what, why), ("wait", "the kube-apiserver on c is not Ready"))
        self.assertEqual(encryption.decide("secretbox:k", None, nodes, [pod("a"), pod("b"), pod("c")])[0],
                         "rewrite")

    def test_a_new_key_is_rewritten_again(self):
        self.assertEqual(encryption.decide("secretbox:new", "secretbox:old", ["a"], [pod("a")])[0], "rewrite")

    def test_the_flag_as_two_arguments(self):
        p = pod("a", flags=("--encryption-provider-config", "/x"))
        self.assertTrue(encryption.has_flag(p))
        self.assertFalse(encryption.has_flag(pod("a", flags=("--encryption-provider-config-automatic-reload",))))


class Ensure(unittest.TestCase):
    """ensure() against a recorded kubectl: the listing goes to replace as it came, and the key is recorded."""

    class Kubectl(object):
        def __init__(self, recorded, nodes, pods):
            self.calls = []
            self.answers = {"configmap": json.dumps({"data": {"rewrittenWith": recorded}}) if recorded else "",
                            "nodes": json.dumps({"items": [{"metadata": {"name": n}} for n in nodes]}),
                            "pods": json.dumps({"items": pods}),
                            "secrets": json.dumps({"items": [{"kind": "Secret"}] * 3})}

        def run(self, args, stdin=None):
            self.calls.append((args, stdin))
            if args[0] == "get":
                return self.answers[args[1]].encode()
            return b""

        items = encryption.Kubectl.items

    def test_rewrites_then_records(self):
        k = self.Kubectl(None, ["a"], [pod("a")])
        c = config({"secretbox": {"keys": [{"name": "k1", "secret": "s"}]}}, {"identity": {}})
        self.assertEqual(encryption.ensure(k, c), ("rewritten", "3 Secrets written again with secretbox:k1"))
        verbs = [a[0] for a, _ in k.calls]
        self.assertEqual(verbs[-2:], ["replace", "apply"])
        self.assertEqual(k.calls[-2][1], k.answers["secrets"].encode())
        self.assertEqual(json.loads(k.calls[-1][1])["data"], {"rewrittenWith": "secretbox:k1"})

    def test_done_touches_nothing(self):
        k = self.Kubectl("secretbox:k1", ["a"], [pod("a")])
        c = config({"secretbox": {"keys": [{"name": "k1", "secret": "s"}]}})
        self.assertEqual(encryption.ensure(k, c)[0], "done")
        self.assertFalse([a for a, _ in k.calls if a[0] in ("replace", "apply")])


if __name__ == "__main__":
    unittest.main()
