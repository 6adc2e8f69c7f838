"""locks: S3 conditional-write locks, stale ones broken, held ones waited for."""
import datetime
import json
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import locks
from kube_aws_node.awscall import AwsError


class S3Object(object):
    """One key of a bucket as S3 keeps it: its ETag, LastModified and body's holder."""

    def __init__(self):
        self.etag = None  # None: no object
        self.modified = None
        self.holder = None
        self.count = 0


class FakeS3(object):
    """put-object If-None-Match, list-objects-v2 and delete-object (If-Match
    as S3 answers it: PreconditionFailed on another ETag, NoSuchKey when
    gone) on one key, shared by the clients of several nodes. `before`
    maps an operation to a function run once just before it (a race)."""

    def __init__(self, age=None, put_error=None, obj=None, name="me", before=None):
        self.obj = obj or S3Object()
        self.now = 1000.0
        if age is not None:
            self.obj.etag, self.obj.modified, self.obj.holder = '"e0"', self.now - age, "dead"
        self.put_error = put_error
        self.name = name
        self.before = dict(before or {})
        self.calls = []
        self.deletes = []

    def __call__(self, args, attempts=None):
        op = args[1]
        self.calls.append(op)
        if op in self.before:
            self.before.pop(op)()
        o = self.obj
        if op == "put-object":
            if self.put_error:
                raise AwsError(self.put_error)
            if o.etag is not None:
                raise AwsError("An error occurred (PreconditionFailed) when calling the PutObject operation")
            o.count += 1
            o.etag, o.modified = '"e%d"' % o.count, self.now
            body = args[args.index("--body") + 1]
            with open(body) as f:
                o.holder = json.load(f)["holder"]
            return {"ETag": o.etag}
        if op == "list-objects-v2":
            key = args[args.index("--prefix") + 1]
            if o.etag is None:
                return {"KeyCount": 0}
            t = datetime.datetime.fromtimestamp(o.modified, datetime.timezone.utc)
            # A key that only starts with the lock's name is not the lock.
            return {"Contents": [{"Key": key, "LastModified": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"), "ETag": o.etag},
                                 {"Key": key + "-other", "LastModified": "2020-01-01T00:00:00.000Z",
                                  "ETag": '"x"'}]}
        if op == "delete-object":
            match = args[args.index("--if-match") + 1] if "--if-match" in args else None
            self.deletes.append(match)
            if match is not None:
                if o.etag is None:
                    raise AwsError("An error occurred (NoSuchKey) when calling the DeleteObject operation")
                if match != o.etag:
                    raise AwsError("An error occurred (PreconditionFailed) when calling the DeleteObject operation")
            o.etag = o.modified = o.holder = None
            return None
        raise AssertionError(args)


class Locks(unittest.TestCase):
    def test_take(self):
        s3 = FakeS3()
        self.assertTrue(locks.take(s3, "b", "k"))
        self.assertFalse(locks.take(s3, "b", "k"))
        with self.assertRaises(locks.LockError) as e:
            locks.take(FakeS3(put_error="An error occurred (NoSuchBucket)"), "b", "k")
        self.assertIn("cannot take the lock s3://b/k", str(e.exception))

    def test_a_stale_lock_is_removed_then_taken(self):
        s3 = FakeS3(age=120)
        logged = []
        locks.acquire(s3, "b", "k", "me", wait_seconds=0, stale_seconds=60, poll_seconds=0,
                      clock=lambda: s3.now, sleep=lambda s: None, log=logged.append)
        self.assertEqual(s3.calls, ["put-object", "list-objects-v2", "delete-object", "put-object"])
        self.assertIn("stale after 60s", logged[0])
        # Only with If-Match on the ETag the listing returned.
        self.assertEqual(s3.deletes, ['"e0"'])
        self.assertEqual(s3.obj.holder, "me")

    def test_a_held_lock_is_waited_for_then_refused(self):
        s3 = FakeS3(age=10)
        t = [s3.now]

        def sleep(s):
            t[0] += 30

        with self.assertRaises(locks.LockError) as e:
            locks.acquire(s3, "b", "k", "me", wait_seconds=100, stale_seconds=3600, poll_seconds=30,
                          clock=lambda: t[0], sleep=sleep)
        self.assertIn("still held by another node after 100s", str(e.exception))
        self.assertNotIn("delete-object", s3.calls)
        self.assertGreater(s3.calls.count("put-object"), 2)

    def test_a_released_lock_is_taken_on_the_next_try(self):
        s3 = FakeS3(age=10)

        def sleep(s):
            s3.obj.etag = None

        locks.acquire(s3, "b", "k", "me", wait_seconds=100, stale_seconds=3600, poll_seconds=1,
                      clock=lambda: s3.now, sleep=sleep)
        self.assertEqual(s3.calls[-1], "put-object")

    def test_two_waiters_on_one_stale_lock_never_both_hold_it(self):
        """B lists the stale lock (ETag e0); before B deletes it, A lists it
        too, removes it (If-Match e0) and takes it (e1). B's delete, If-Match
        e0, is refused: B removes nothing, finds A's fresh lock and waits."""
        obj = S3Object()
        logged = []

        def a_wins():
            a = FakeS3(obj=obj, name="a")
            got = locks.acquire(a, "b", "k", "a", wait_seconds=0, stale_seconds=60, poll_seconds=0,
                                clock=lambda: a.now, sleep=lambda s: None)
            self.assertEqual(got, '"e1"')
            self.assertEqual(a.deletes, ['"e0"'])

        b = FakeS3(age=120, obj=obj, name="b", before={"delete-object": a_wins})
        with self.assertRaises(locks.LockError) as e:
            locks.acquire(b, "b", "k", "b", wait_seconds=0, stale_seconds=60, poll_seconds=0,
                          clock=lambda: b.now, sleep=lambda s: None, log=logged.append)
        self.assertIn("still held by another node", str(e.exception))
        self.assertEqual(b.deletes, ['"e0"'], "B deleted without If-Match, or deleted A's lock")
        self.assertEqual((obj.holder, obj.etag), ("a", '"e1"'), "A's lock was removed")
        self.assertIn("changed before it was removed", logged[-1])
        self.assertEqual(b.calls, ["put-object", "list-objects-v2", "delete-object", "put-object",
                                   "list-objects-v2"])

    def test_a_lock_that_went_stale_is_released_only_while_it_is_still_ours(self):
        obj = S3Object()
        a = FakeS3(obj=obj)
        etag = locks.acquire(a, "b", "k", "a", wait_seconds=0, stale_seconds=60, poll_seconds=0,
                             clock=lambda: a.now, sleep=lambda s: None)
        # A is slow past the stale timeout: B removes A's lock and takes it.
        b = FakeS3(obj=obj)
        b.now += 120
        locks.acquire(b, "b", "k", "b", wait_seconds=0, stale_seconds=60, poll_seconds=0,
                      clock=lambda: b.now, sleep=lambda s: None)
        self.assertEqual(obj.holder, "b")
        # A's release leaves B's lock.
        self.assertFalse(locks.release(a, "b", "k", etag))
        self.assertEqual(obj.holder, "b")
        self.assertTrue(locks.release(b, "b", "k", obj.etag))
        self.assertIsNone(obj.etag)
        # A stale lock listed without an ETag is never removed unconditionally.
        self.assertEqual(locks.decide_stale(120, "", 60), "wait")
        self.assertEqual(locks.decide_stale(120, '"e"', 60), "remove")
        self.assertEqual(locks.decide_stale(10, '"e"', 60), "wait")
        self.assertEqual(locks.decide_stale(None, "", 60), "take")

    def test_held_releases_with_its_etag(self):
        obj = S3Object()
        s3 = FakeS3(obj=obj)
        said = []
        with locks.Held(s3, {"bucket": "b", "keyPrefix": "p"}, "bootstrap/x-lock", "me", said.append,
                        RuntimeError, "X_LOCK", (0, 60, 0)) as held:
            self.assertEqual(held.etag, '"e1"')
            obj.etag = '"other"'  # taken over meanwhile
        self.assertEqual(s3.deletes, ['"e1"'])
        self.assertEqual(obj.etag, '"other"')
        self.assertIn("taken over", said[-1])

    def test_both_time_formats(self):
        self.assertEqual(locks.parse_time("2026-12-01T03:01:56+00:00"), locks.parse_time("Tue, 01 Dec 2026 03:01:56 GMT"))
        self.assertIsNone(locks.parse_time("yesterday"))


if __name__ == "__main__":
    unittest.main()
