"""lease: the pure decision, and the holder's life against a fake S3 that
keeps ETags and honours If-None-Match / If-Match as S3 does."""
import hashlib
import json
import shutil
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import etcd, lease
from kube_aws_node.awscall import AwsError


class FakeS3(object):
    """`aws s3api get-object` / `put-object` on one dict, with S3's conditional writes."""

    def __init__(self):
        self.objects = {}  # key -> (bytes, etag)
        self.calls = []
        self.fail_next = None

    def __call__(self, args, attempts=None):
        self.calls.append(list(args))
        if self.fail_next is not None:
            e, self.fail_next = self.fail_next, None
            raise e
        op = args[1]
        key = args[args.index("--key") + 1]
        if op == "get-object":
            if key not in self.objects:
                raise AwsError("An error occurred (NoSuchKey) when calling the GetObject operation: "
                               "The specified key does not exist.", "NoSuchKey")
            body, etag = self.objects[key]
            with open(args[-1], "wb") as f:
                f.write(body)
            return {"ETag": etag}
        if op == "put-object":
            with open(args[args.index("--body") + 1], "rb") as f:
                body = f.read()
            have = self.objects.get(key)
            if "--if-none-match" in args and have is not None:
                raise AwsError("An error occurred (PreconditionFailed) when calling the PutObject operation: "
                               "At least one of the pre-conditions you specified did not hold", "PreconditionFailed")
            if "--if-match" in args:
                want = args[args.index("--if-match") + 1]
                if have is None:
                    raise AwsError("An error occurred (NoSuchKey) when calling the PutObject operation", "NoSuchKey")
                if have[1] != want:
                    raise AwsError("An error occurred (PreconditionFailed) when calling the PutObject operation",
                                   "PreconditionFailed")
            etag = '"%s"' % hashlib.md5(body).hexdigest()
            self.objects[key] = (body, etag)
            return {"ETag": etag}
        raise AssertionError(args)

    def body(self, key="p/" + lease.KEY):
        return json.loads(self.objects[key][0].decode())


class Clock(object):
    def __init__(self, t=1000000.0):
        self.t = t

    def __call__(self):
        return self.t


def make(s3, holder, clock, ttl=600, instance="", holder_gone=None):
    logs = []
    l = lease.Lease(s3, "b", "p", holder, ttl=ttl, clock=clock, log=logs.append, instance=instance,
                    holder_gone=holder_gone)
    return l, logs


class Decide(unittest.TestCase):
    def test_no_lease_is_taken(self):
        self.assertEqual(lease.decide(None, 5), lease.TAKE)

    def test_a_live_lease_is_waited_for(self):
        self.assertEqual(lease.decide(lease.State("c1", "r", 100.0, '"e"'), 99.9), lease.WAIT)

    def test_an_expired_lease_is_taken_over(self):
        self.assertEqual(lease.decide(lease.State("c1", "r", 100.0, '"e"'), 100.0), lease.TAKEOVER)

    def test_a_live_lease_whose_holder_is_gone_is_taken_over(self):
        self.assertEqual(lease.decide(lease.State("c1", "r", 100.0, '"e"'), 50.0, True), lease.TAKEOVER)

    def test_a_holder_is_gone_only_when_a_listing_that_holds_this_controller_lacks_it(self):
        listed = ["i-self", "i-b"]
        self.assertTrue(etcd.gone("i-old", listed, "i-self"))
        self.assertFalse(etcd.gone("i-b", listed, "i-self"))
        # A listing without this very controller proves nothing (a wrong filter, an empty answer).
        self.assertIsNone(etcd.gone("i-old", ["i-b"], "i-self"))
        self.assertIsNone(etcd.gone("i-old", [], "i-self"))
        self.assertIsNone(etcd.gone("i-old", listed, ""))
        self.assertIsNone(etcd.gone("", listed, "i-self"))

    def test_ec2_is_asked_for_the_controllers_whose_processes_may_still_run(self):
        calls = []

        def aws(args):
            calls.append(args)
            return {"Reservations": [{"Instances": [{"InstanceId": "i-self"}, {"InstanceId": "i-stopping"}]}]}
        node = etcd.Node(aws, runtime={"cluster": "c"}, etcd_json={})
        self.assertTrue(node.controller_gone("i-old", "i-self"))
        self.assertFalse(node.controller_gone("i-stopping", "i-self"))
        self.assertIn("Name=tag:Name,Values=c-controller", calls[0])
        self.assertIn("Name=instance-state-name,Values=pending,running,shutting-down,stopping", calls[0])

    def test_renewal_is_due_after_a_third_of_the_ttl(self):
        self.assertFalse(lease.renew_due(0, 199, 600))
        self.assertTrue(lease.renew_due(0, 200, 600))


class Life(unittest.TestCase):
    def setUp(self):
        self.s3 = FakeS3()
        self.clock = Clock()

    def test_take_when_absent_with_if_none_match(self):
        l, _ = make(self.s3, "c1", self.clock)
        self.assertTrue(l.acquire("plan-1"))
        # Created without a read: a GetObject of a missing key is a 403 without s3:ListBucket.
        self.assertEqual([c[1] for c in self.s3.calls], ["put-object"])
        put = self.s3.calls[-1]
        self.assertEqual(put[put.index("--if-none-match") + 1], "*")
        self.assertEqual(put[put.index("--key") + 1], "p/bootstrap/addons-lease")
        b = self.s3.body()
        self.assertEqual((b["holder"], b["run"]), ("c1", "plan-1"))
        self.assertEqual(lease.parse_iso(b["expiresAt"]), self.clock.t + 600)
        self.assertTrue(l.held())

    def test_a_held_lease_is_not_taken_and_its_holder_is_named(self):
        a, _ = make(self.s3, "c1", self.clock)
        self.assertTrue(a.acquire("plan-1"))
        self.clock.t += 599
        b, logs = make(self.s3, "c2", self.clock)
        self.assertFalse(b.acquire("plan-1"))
        self.assertFalse(b.held())
        self.assertIn("held by c1 (run plan-1) until", logs[-1])
        self.assertEqual(self.s3.body()["holder"], "c1")

    def test_an_expired_lease_is_taken_over_with_if_match_its_etag(self):
        a, _ = make(self.s3, "c1", self.clock)
        self.assertTrue(a.acquire("plan-1"))
        old_etag = self.s3.objects["p/" + lease.KEY][1]
        self.clock.t += 601  # c1 died without releasing
        b, logs = make(self.s3, "c2", self.clock)
        self.assertTrue(b.acquire("plan-1"))
        put = self.s3.calls[-1]
        self.assertEqual(put[put.index("--if-match") + 1], old_etag)
        self.assertEqual(self.s3.body()["holder"], "c2")
        self.assertTrue(any("expired at" in m and "taking it over" in m for m in logs), logs)
        # The dead holder, were it to wake, cannot renew: its ETag is stale.
        self.assertFalse(a.renew())
        self.assertTrue(a.lost.is_set())
        self.assertEqual(self.s3.body()["holder"], "c2")

    def test_a_live_lease_of_an_instance_ec2_lists_as_gone_is_taken_over_at_once(self):
        # A controller lost while it held the lease (or every controller,
        # before a restore): no wait for the expiry, up to ttl away.
        a, _ = make(self.s3, "c1", self.clock, instance="i-old")
        self.assertTrue(a.acquire("plan-1"))
        self.assertEqual(self.s3.body()["instance"], "i-old")
        old_etag = self.s3.objects["p/" + lease.KEY][1]
        self.clock.t += 30
        asked = []
        b, logs = make(self.s3, "c2", self.clock, instance="i-new",
                       holder_gone=lambda i: asked.append(i) or i == "i-old")
        self.assertTrue(b.acquire("plan-1"))
        self.assertEqual(asked, ["i-old"])
        put = self.s3.calls[-1]
        self.assertEqual(put[put.index("--if-match") + 1], old_etag)
        self.assertEqual((self.s3.body()["holder"], self.s3.body()["instance"]), ("c2", "i-new"))
        self.assertIn("EC2 lists its instance i-old as gone: taking it over", logs[-1])

    def test_a_live_lease_of_a_live_or_unknown_instance_is_waited_for(self):
        a, _ = make(self.s3, "c1", self.clock, instance="i-a")
        self.assertTrue(a.acquire("plan-1"))
        for answer in (False, None):
            b, logs = make(self.s3, "c2", self.clock, instance="i-b", holder_gone=lambda i, x=answer: x)
            self.assertFalse(b.acquire("plan-1"))
            self.assertIn("held by c1 (run plan-1) until", logs[-1])

        def fails(_):
            raise AwsError("An error occurred (UnauthorizedOperation) when calling DescribeInstances", "")
        b, logs = make(self.s3, "c2", self.clock, instance="i-b", holder_gone=fails)
        self.assertFalse(b.acquire("plan-1"))
        self.assertIn("cannot tell whether the lease holder's instance i-a is gone", logs[-2])
        self.assertEqual(self.s3.body()["holder"], "c1")

    def test_a_lease_without_an_instance_or_of_this_instance_asks_ec2_nothing(self):
        a, _ = make(self.s3, "c1", self.clock)  # a lease written before it named its instance
        self.assertTrue(a.acquire("plan-1"))
        asked = []
        b, _ = make(self.s3, "c2", self.clock, instance="i-b", holder_gone=lambda i: asked.append(i) or True)
        self.assertFalse(b.acquire("plan-1"))
        a2, _ = make(self.s3, "c1b", self.clock, instance="i-a")
        self.clock.t += 601
        self.assertTrue(a2.acquire("plan-2"))
        self.clock.t += 1
        c, _ = make(self.s3, "c1c", self.clock, instance="i-a", holder_gone=lambda i: asked.append(i) or True)
        self.assertFalse(c.acquire("plan-2"))  # its own instance's other process: never gone
        self.assertEqual(asked, [])

    def test_of_two_takers_of_one_expired_lease_only_one_wins(self):
        a, _ = make(self.s3, "c1", self.clock)
        a.acquire("r")
        self.clock.t += 700
        b, _ = make(self.s3, "c2", self.clock)
        c, logs = make(self.s3, "c3", self.clock)
        sb, sc = b.read(), c.read()  # both read the same expired lease
        self.assertEqual(lease.decide(sb, self.clock()), lease.TAKEOVER)
        self.assertIsNotNone(b.write(self.clock() + 600, ["--if-match", sb.etag]))
        self.assertIsNone(c.write(self.clock() + 600, ["--if-match", sc.etag]))
        self.assertEqual(self.s3.body()["holder"], "c2")

    def test_renew_extends_the_expiry_with_if_match_its_own_etag(self):
        l, _ = make(self.s3, "c1", self.clock)
        l.acquire("r")
        etag = l.etag
        self.clock.t += 200
        self.assertTrue(l.renew())
        put = self.s3.calls[-1]
        self.assertEqual(put[put.index("--if-match") + 1], etag)
        self.assertEqual(lease.parse_iso(self.s3.body()["expiresAt"]), self.clock.t + 600)
        self.assertNotEqual(l.etag, etag)

    def test_a_transient_renewal_error_keeps_the_lease(self):
        l, logs = make(self.s3, "c1", self.clock)
        l.acquire("r")
        self.s3.fail_next = AwsError("An error occurred (SlowDown) when calling the PutObject operation", "SlowDown")
        self.assertTrue(l.renew())
        self.assertTrue(l.held())
        self.assertIn("cannot write the lease", logs[-1])

    def test_release_writes_it_expired_so_the_next_tick_takes_it_at_once(self):
        l, _ = make(self.s3, "c1", self.clock)
        l.acquire("r")
        l.release()
        self.assertFalse(l.held())
        self.assertLess(lease.parse_iso(self.s3.body()["expiresAt"]), self.clock.t)
        self.assertTrue(self.s3.body()["released"])
        other, logs = make(self.s3, "c2", self.clock)
        self.assertTrue(other.acquire("r2"))
        self.assertFalse(any("taking it over" in m for m in logs), logs)

    def test_release_on_failure_too_and_after_a_takeover_writes_nothing(self):
        l, _ = make(self.s3, "c1", self.clock)
        l.acquire("r")
        try:
            try:
                raise RuntimeError("the run failed")
            finally:
                l.release()
        except RuntimeError:
            pass
        self.assertLess(lease.parse_iso(self.s3.body()["expiresAt"]), self.clock.t)
        # Taken over while it ran: its release must not clobber the new holder's lease.
        a, _ = make(self.s3, "c1", self.clock)
        a.acquire("r")
        self.clock.t += 601
        b, _ = make(self.s3, "c2", self.clock)
        b.acquire("r")
        self.assertFalse(a.renew())
        a.release()
        self.assertEqual(self.s3.body()["holder"], "c2")
        self.assertGreater(lease.parse_iso(self.s3.body()["expiresAt"]), self.clock.t)

    def test_an_unreadable_lease_is_replaced_only_by_if_match(self):
        self.s3.objects["p/" + lease.KEY] = (b"not json", '"x"')
        l, logs = make(self.s3, "c1", self.clock)
        self.assertTrue(l.acquire("r"))
        put = self.s3.calls[-1]
        self.assertEqual(put[put.index("--if-match") + 1], '"x"')

    def test_an_access_denied_read_raises(self):
        self.s3.fail_next = AwsError("An error occurred (AccessDenied) when calling the GetObject operation",
                                     "AccessDenied")
        l, _ = make(self.s3, "c1", self.clock)
        with self.assertRaises(lease.LeaseError):
            l.acquire("r")

    def test_the_renewing_thread_renews_and_stops_on_release(self):
        # A real clock with a short ttl: the thread writes at least once more.
        import time
        l = lease.Lease(self.s3, "b", "p", "c1", ttl=0.3)
        self.assertTrue(l.acquire("r"))
        l.start_renewing()
        time.sleep(0.5)
        renewals = [c for c in self.s3.calls if "--if-match" in c]
        self.assertGreaterEqual(len(renewals), 2, self.s3.calls)
        l.release()
        self.assertFalse(l._thread.is_alive())
        self.assertLess(lease.parse_iso(self.s3.body()["expiresAt"]), time.time())


if __name__ == "__main__":
    unittest.main()
