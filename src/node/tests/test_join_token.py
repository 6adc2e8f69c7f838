"""Unit tests of the join tokens (src/node/kube_aws_node/join_token.py): the
decision, the Secret's shape, minting under the lock with a fake AWS (SSM and
S3 in memory, the aws CLI's argument lists checked) and a fake cluster, the
revocation after a requested rotation, and a joining node's wait.

Not covered here: the real API server's authenticator honouring the Secret's
expiration and real SSM/S3 under the roles' IAM; tests/it/join_token.rs runs
the command against the control-plane test bed and moto with IAM enforced.
"""
import json
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import join_token as jt
from kube_aws_node.awscall import AwsError

NOW = jt.parse_time("2026-12-01T20:00:00Z")
TTL = 4 * 3600
RT = {"bucket": "b", "keyPrefix": "p", "cluster": "c"}
CFG = {"parameter": "/kube-aws/c/bootstrap-token", "ttl": TTL, "kms": "arn:aws:kms:r:1:key/k"}


class FakeAws(object):
    """SSM parameters and S3 objects in memory, through the aws CLI's arguments."""

    def __init__(self):
        self.params = {}
        self.objects = {}
        self.calls = []

    def __call__(self, args, attempts=None):
        self.calls.append(list(args))
        op = tuple(args[:2])
        if op == ("ssm", "get-parameter"):
            name = args[args.index("--name") + 1]
            if self.params.get(name) == "UNDER-OLD-KEY":
                raise AwsError("An error occurred (AccessDeniedException) when calling the GetParameter operation: "
                               "not authorized to perform: kms:Decrypt on the resource")
            if name not in self.params:
                raise AwsError("An error occurred (ParameterNotFound) when calling the GetParameter operation")
            return {"Parameter": {"Name": name, "Value": self.params[name]}}
        if op == ("ssm", "put-parameter"):
            path = args[args.index("--cli-input-json") + 1][len("file://"):]
            with open(path) as f:
                doc = json.load(f)
            assert doc["Type"] == "SecureString" and doc["Overwrite"] is True
            assert doc.get("KeyId") == CFG["kms"], doc
            self.params[doc["Name"]] = doc["Value"]
            return {"Version": 1}
        if op == ("s3api", "list-objects-v2"):
            key = args[args.index("--prefix") + 1]
            if key in self.objects:
                return {"Contents": [{"Key": key, "LastModified": self.objects[key]}]}
            return {}
        if op == ("s3api", "put-object"):
            key = args[args.index("--key") + 1]
            if "--if-none-match" in args and key in self.objects:
                raise AwsError("An error occurred (PreconditionFailed) when calling the PutObject operation")
            self.objects[key] = "2026-12-01T00:00:00Z"
            return {}
        if op == ("s3api", "delete-object"):
            self.objects.pop(args[args.index("--key") + 1], None)
            return {}
        raise AssertionError("unexpected call %r" % (args,))


class FakeCluster(object):
    def __init__(self):
        self.secrets = {}
        self.deleted = []

    def token_ids(self):
        return set(self.secrets)

    def create(self, secret):
        self.secrets[secret["stringData"]["token-id"]] = secret

    def delete(self, tid):
        self.deleted.append(tid)
        self.secrets.pop(tid, None)


class Clock(object):
    def __init__(self, t=NOW):
        self.t = t

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class Pure(unittest.TestCase):
    def test_tokens_have_kubeadms_shape_and_differ(self):
        a, b = jt.new_token(), jt.new_token()
        self.assertRegex(a, r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
        self.assertNotEqual(a, b)

    def test_the_secret_is_the_documented_bootstrap_token_secret(self):
        s = jt.token_secret("abcdef.0123456789abcdef", NOW + 60, "d")
        self.assertEqual(s["type"], "bootstrap.kubernetes.io/token")
        self.assertEqual(s["metadata"], {"name": "bootstrap-token-abcdef", "namespace": "kube-system",
                                         "labels": {"app.kubernetes.io/managed-by": "kube-aws"}})
        d = s["stringData"]
        self.assertEqual((d["token-id"], d["token-secret"]), ("abcdef", "0123456789abcdef"))
        self.assertEqual(d["expiration"], "2026-12-01T20:01:00Z")
        self.assertEqual(d["auth-extra-groups"], "system:bootstrappers:kubeadm:default-node-token")
        self.assertEqual((d["usage-bootstrap-authentication"], d["usage-bootstrap-signing"]), ("true", "true"))

    def test_decide(self):
        rec = jt.parse_record(json.dumps(jt.make_record("abcdef.0123456789abcdef", NOW, TTL)))
        ids = {"abcdef"}
        self.assertEqual(jt.decide(None, NOW, TTL, ids, None), "no token is published")
        self.assertEqual(jt.decide(rec, NOW, TTL, set(), None), "the published token is not in the cluster")
        self.assertEqual(jt.decide(rec, NOW + 1, TTL, ids, None), "")
        self.assertEqual(jt.decide(rec, NOW + TTL / 2 - 1, TTL, ids, None), "")
        self.assertIn("expires at 2026-12-02T00:00:00Z", jt.decide(rec, NOW + TTL / 2 + 1, TTL, ids, None))
        self.assertEqual(jt.decide(rec, NOW + 1, TTL, ids, NOW - 5), "")
        self.assertEqual(jt.decide(rec, NOW + 1, TTL, ids, NOW), "")
        self.assertIn("rotation was requested", jt.decide(rec, NOW + 10, TTL, ids, NOW + 5))

    def test_a_value_that_is_not_a_record_is_none(self):
        for text in ("", "x", "{}", '{"token": "ABC.def"}', '{"token": "abcdef.0123456789abcdef"}', "[1]"):
            self.assertIsNone(jt.parse_record(text), text)


class Ensure(unittest.TestCase):
    def setUp(self):
        self.aws, self.cluster, self.clock, self.said = FakeAws(), FakeCluster(), Clock(), []
        self.locked = 0

    def lock(self):
        test = self

        class L(object):
            def __enter__(self):
                test.locked += 1

            def __exit__(self, *a):
                return False
        return L()

    def go(self, force=False):
        return jt.ensure(self.aws, RT, CFG, self.cluster, self.lock, self.said.append, clock=self.clock,
                         force=force, who="i-1")

    def published(self):
        return jt.parse_record(self.aws.params[CFG["parameter"]])

    def test_first_run_mints_publishes_and_keeps_the_token_out_of_arguments(self):
        r = self.go()
        self.assertEqual((r["action"], r["reason"]), ("minted", "no token is published"))
        rec = self.published()
        self.assertEqual(rec["expires"], NOW + TTL)
        self.assertEqual(set(self.cluster.secrets), {jt.token_id(rec["token"])})
        self.assertEqual(self.locked, 1)
        self.assertFalse([c for c in self.aws.calls if any(rec["token"] in a for a in c)], self.aws.calls)
        self.assertFalse([s for s in self.said if rec["token"] in s])

    def test_a_fresh_token_is_kept_without_the_lock(self):
        self.go()
        first = self.published()["token"]
        self.clock.t += TTL / 2 - 60
        self.assertEqual(self.go()["action"], "kept")
        self.assertEqual(self.published()["token"], first)
        self.assertEqual(self.locked, 1)

    def test_past_half_its_ttl_a_new_one_is_minted_and_the_old_lives_on(self):
        self.go()
        first = self.published()["token"]
        self.clock.t += TTL / 2 + 60
        r = self.go()
        self.assertEqual(r["action"], "minted")
        self.assertNotEqual(self.published()["token"], first)
        self.assertIn(jt.token_id(first), self.cluster.secrets)  # until the tokencleaner removes it
        self.assertEqual(self.cluster.deleted, [])

    def test_a_requested_rotation_mints_and_revokes_the_old_token(self):
        self.go()
        first = self.published()["token"]
        self.clock.t += 60
        self.aws.objects["p/bootstrap/token-rotate"] = jt.iso(self.clock.t - 10)
        r = self.go()
        self.assertIn("rotation was requested", r["reason"])
        self.assertEqual(self.cluster.deleted, [jt.token_id(first)])
        self.assertNotIn(jt.token_id(first), self.cluster.secrets)
        # The request is older than the new token now: the next run keeps it.
        self.clock.t += 60
        self.assertEqual(self.go()["action"], "kept")

    def test_a_published_token_missing_from_the_cluster_is_replaced(self):
        self.go()
        self.cluster.secrets.clear()  # e.g. an etcd restore from before it was minted
        self.assertEqual(self.go()["reason"], "the published token is not in the cluster")
        self.assertEqual(len(self.cluster.secrets), 1)

    def test_a_token_under_a_previous_key_is_minted_over(self):
        # A token under a key the roles no longer keep (retired past the snapshots).
        self.aws.params[CFG["parameter"]] = "UNDER-OLD-KEY"
        r = self.go()
        self.assertEqual(r["action"], "minted")
        self.assertTrue(any("does not decrypt" in m for m in self.said), self.said)
        self.assertIsNotNone(self.published())

    def test_another_controller_minted_while_this_one_waited(self):
        self.go()
        self.clock.t += TTL / 2 + 60
        other = jt.new_token()
        original_lock = self.lock

        def lock():
            # Another controller mints before this one gets the lock.
            self.cluster.create(jt.token_secret(other, self.clock.t + TTL, "o"))
            self.aws.params[CFG["parameter"]] = json.dumps(jt.make_record(other, self.clock.t, TTL))
            return original_lock()
        r = jt.ensure(self.aws, RT, CFG, self.cluster, lock, self.said.append, clock=self.clock)
        self.assertEqual(r["action"], "kept")
        self.assertEqual(self.published()["token"], other)


class Current(unittest.TestCase):
    def test_a_joining_node_waits_for_a_token_with_time_left(self):
        aws, clock = FakeAws(), Clock()
        name = CFG["parameter"]
        polls = []

        def sleep(s):
            polls.append(s)
            clock.sleep(s)
            if len(polls) == 2:
                aws.params[name] = json.dumps(jt.make_record("abcdef.0123456789abcdef", clock.t - TTL + 30, TTL))
            if len(polls) == 4:
                aws.params[name] = json.dumps(jt.make_record("ghijkl.0123456789abcdef", clock.t, TTL))
        self.assertEqual(jt.current(aws, name, clock=clock, sleep=sleep), "ghijkl.0123456789abcdef")
        self.assertEqual(len(polls), 4)  # the nearly expired token was not taken

    def test_a_joining_node_waits_out_a_token_it_cannot_decrypt(self):
        aws, clock = FakeAws(), Clock()
        name = CFG["parameter"]
        aws.params[name] = "UNDER-OLD-KEY"

        def sleep(s):
            clock.sleep(s)
            aws.params[name] = json.dumps(jt.make_record("ghijkl.0123456789abcdef", clock.t, TTL))
        self.assertEqual(jt.current(aws, name, clock=clock, sleep=sleep), "ghijkl.0123456789abcdef")

    def test_no_token_at_all_fails_after_the_wait(self):
        aws, clock = FakeAws(), Clock()
        with self.assertRaises(jt.TokenError) as e:
            jt.current(aws, CFG["parameter"], clock=clock, sleep=clock.sleep)
        self.assertIn("kube-aws-bootstrap-token", e.exception.message)


class Settings(unittest.TestCase):
    def test_settings(self):
        s = jt.settings({"bootstrapToken": {"parameter": "/kube-aws/c/bootstrap-token", "ttlSeconds": 3600},
                         "kmsKeyARN": "k"})
        # The key is not node.json's (user data): cluster_key reads it from the etcd settings.
        self.assertEqual(s, {"parameter": "/kube-aws/c/bootstrap-token", "ttl": 3600, "kms": ""})
        for bad in ({}, {"bootstrapToken": {"parameter": "x"}},
                    {"bootstrapToken": {"parameter": "/x", "ttlSeconds": 5}}):
            with self.assertRaises(jt.TokenError):
                jt.settings(bad)


if __name__ == "__main__":
    unittest.main()
