"""kube_aws_node.defrag against real etcd: three members of the test bed's
etcd (3.6) with kubeadm's certificates, as test_etcd_real.py starts them,
but with a tiny `--quota-backend-bytes` (16 MiB; kube-aws's default is
8 GiB) so that the space alarm can be raised in seconds.

It shows, on the real members: after a large delete and a compaction the
pass defragments every member one at a time, the followers first and the
leader last, each member's database shrinking and every member answering
between two defragmentations; writing past the quota raises etcd's own
NOSPACE alarm, which the status object reports (and does not disarm while a
member is near the quota); once the space is freed again the pass
defragments and disarms it, and writes work again.

Needs KUBE_AWS_TESTBED_BIN (etcd and kubeadm); skipped, saying so, without it.
"""
import base64
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kube_aws_node import defrag, etcd  # noqa: E402
from test_etcd_real import HAVE, EtcdMembers  # noqa: E402

QUOTA = 16 * 1024 * 1024
MiB = 1024 * 1024


def b64(s):
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


class Clock(object):
    def now(self):
        return time.time()

    def sleep(self, s):
        time.sleep(min(s, 1))


class Watched(defrag.Maintenance):
    """The real calls, recording the order and checking that every other
    member answers while one is defragmented."""

    def __init__(self, gw, endpoints):
        defrag.Maintenance.__init__(self, gw)
        self.endpoints = endpoints
        self.order = []
        self.sizes = []

    def defragment(self, endpoint):
        for other in self.endpoints:
            if other != endpoint:
                self.gw.status(other)
        before = int(self.gw.status(endpoint).get("dbSize", 0))
        defrag.Maintenance.defragment(self, endpoint)
        after = int(self.gw.status(endpoint).get("dbSize", 0))
        self.order.append(endpoint)
        self.sizes.append((before, after))


@unittest.skipUnless(HAVE, "KUBE_AWS_TESTBED_BIN with etcd and kubeadm is not set: real etcd tests skipped")
class RealDefrag(EtcdMembers, unittest.TestCase):
    EXTRA_ARGS = ["--quota-backend-bytes", str(QUOTA)]
    BASE = 90

    def kv(self, path, body):
        return self.client.call(self.endpoints, path, body)[1]

    def fill(self, n, size, prefix="k/"):
        """Puts n values of `size` bytes; returns how many went in before etcd refused."""
        value = b64(os.urandom(size))
        for i in range(n):
            try:
                self.kv("/v3/kv/put", {"key": b64("%s%06d" % (prefix, i)), "value": value})
            except RuntimeError:
                return i
        return n

    def clear(self):
        r = self.kv("/v3/kv/deleterange", {"key": b64("k/"), "range_end": b64("k0")})
        rev = int(r["header"]["revision"])
        self.kv("/v3/kv/compaction", {"revision": rev, "physical": True})
        # Each member frees the compacted pages at a later write of its own
        # (bbolt's pending pages; a cluster with an API server writes all the
        # time): write a little until every member shows the space as free.
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                self.kv("/v3/kv/put", {"key": b64("tick"), "value": b64(str(time.time()))})
            except RuntimeError:
                # Under NOSPACE only deletes are written: one of the spare keys.
                self.spare -= 1
                self.kv("/v3/kv/deleterange", {"key": b64("t/%03d" % self.spare)})
            if all(int(self.client.status(e).get("dbSizeInUse", 0)) < 2 * MiB for e in self.endpoints):
                return
            time.sleep(0.5)
        self.fail("the members did not apply the compaction in 60 s")

    def leader(self):
        return [e for e in self.endpoints if etcd.is_leader(self.client.status(e))][0]

    def test_defragmentation_one_member_at_a_time_and_the_nospace_alarm(self):
        gw = etcd.EtcdGateway(ca=os.path.join(self.pki, "ca.crt"), cert=os.path.join(self.pki, "healthcheck-client.crt"),
                              key=os.path.join(self.pki, "healthcheck-client.key"), timeout=120)
        # Small keys to delete later, when etcd takes nothing but deletes.
        self.spare = 200
        for i in range(self.spare):
            self.kv("/v3/kv/put", {"key": b64("t/%03d" % i), "value": b64("x")})
        # About 6 MiB written, then deleted and compacted: free space in every member.
        self.assertEqual(self.fill(60, 100 * 1024), 60)
        self.clear()
        leader = self.leader()
        m = Watched(gw, self.endpoints)
        out = defrag.maintain(m, self.endpoints, QUOTA, Clock(), 0.5, 1 * MiB, leader_only=leader)
        self.assertEqual(len(m.order), 3, out)
        self.assertEqual(m.order[-1], leader, "the leader is not last")
        self.assertEqual(sorted(m.order[:2]), sorted(e for e in self.endpoints if e != leader))
        for before, after in m.sizes:
            self.assertLess(after, before / 2, m.sizes)
        self.assertEqual(out["defragmented"], m.order)
        self.assertEqual((out["alarms"], out["problems"]), ([], []))
        # Another member's node does nothing.
        follower = next(e for e in self.endpoints if e != leader)
        self.assertIsNone(defrag.maintain(Watched(gw, self.endpoints), self.endpoints, QUOTA, Clock(),
                                          leader_only=follower))

        # Past the quota: etcd refuses writes and raises NOSPACE; the report says so.
        went_in = self.fill(400, 100 * 1024)
        self.assertLess(went_in, 400, "etcd took more than its quota")
        out = defrag.maintain(defrag.Maintenance(gw), self.endpoints, QUOTA, Clock(), 0.5, 1 * MiB,
                              leader_only=self.leader())
        self.assertIn("NOSPACE", [a["alarm"] for a in out["alarms"]], out)
        self.assertTrue(any(x["dbSize"] >= defrag.DISARM_BELOW * QUOTA for x in out["members"]), out)
        with self.assertRaises(RuntimeError):
            self.kv("/v3/kv/put", {"key": b64("x"), "value": b64("y")})

        # Freed: the pass defragments, then disarms, and writes work again.
        self.clear()
        out = defrag.maintain(defrag.Maintenance(gw), self.endpoints, QUOTA, Clock(), 0.5, 1 * MiB,
                              leader_only=self.leader())
        self.assertEqual(len(out["defragmented"]), 3, out)
        self.assertEqual(out["alarms"], [], out)
        self.kv("/v3/kv/put", {"key": b64("x"), "value": b64("y")})


if __name__ == "__main__":
    unittest.main()
