"""locks: S3 conditional-write locks, stale ones broken, held ones waited for."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import locks
from kube_aws_node.awscall import AwsError


class FakeS3(object):
    """put-object If-None-Match, list-objects-v2 and delete-object on one key."""

    def __init__(self, age=None, put_error=None):
        self.held_since = None if age is None else 1000.0 - age
        self.put_error = put_error
        self.calls = []
        self.now = 1000.0

    def __call__(self, args, attempts=None):
        self.calls.append(args[1])
        if args[1] == "put-object":
            if self.put_error:
                raise AwsError(self.put_error)
            if self.held_since is not None:
                raise AwsError("An error occurred (PreconditionFailed) when calling the PutObject operation")
            self.held_since = self.now
            return {"ETag": "x"}
        if args[1] == "list-objects-v2":
            key = args[args.index("--prefix") + 1]
            if self.held_since is None:
                return {"KeyCount": 0}
            import datetime
            t = datetime.datetime.fromtimestamp(self.held_since, datetime.timezone.utc)
            # A key that only starts with the lock's name is not the lock.
            return {"Contents": [{"Key": key, "LastModified": t.strftime("%Y-%m-%dT%H:%M:%S.000Z")},
                                 {"Key": key + "-other", "LastModified": "2020-01-01T00:00:00.000Z"}]}
        if args[1] == "delete-object":
            self.held_since = None
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
            s3.held_since = None

        locks.acquire(s3, "b", "k", "me", wait_seconds=100, stale_seconds=3600, poll_seconds=1,
                      clock=lambda: s3.now, sleep=sleep)
        self.assertEqual(s3.calls[-1], "put-object")

    def test_both_time_formats(self):
        self.assertEqual(locks.parse_time("2026-12-01T03:01:56+00:00"), locks.parse_time("Tue, 01 Dec 2026 03:01:56 GMT"))
        self.assertIsNone(locks.parse_time("yesterday"))


if __name__ == "__main__":
    unittest.main()
