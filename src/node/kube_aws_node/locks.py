"""S3 lock objects, created with If-None-Match: '*' (a conditional write).

Invariant: a lock is held only when S3 says this node created the object;
PreconditionFailed (or ConditionalRequestConflict) means another node holds
it; any other answer raises, never guessed. A lock older than its stale
timeout is taken to be left by a dead node and is removed, then taken anew.
"""
import datetime
import email.utils
import json
import os
import tempfile
import time

from . import paths
from .awscall import AwsError, listed_object

HELD = ("PreconditionFailed", "ConditionalRequestConflict")


class LockError(Exception):
    pass


def take(aws, bucket, key, holder=""):
    """True when this node created s3://bucket/key, False when another node holds it."""
    fd, body = tempfile.mkstemp(prefix="kube-aws-lock-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"holder": holder, "takenAt": int(time.time())}, f)
        aws(["s3api", "put-object", "--bucket", bucket, "--key", key, "--body", body, "--if-none-match", "*"])
        return True
    except AwsError as e:
        if any(h in e.message for h in HELD):
            return False
        raise LockError("cannot take the lock s3://%s/%s: %s" % (bucket, key, e))
    finally:
        os.unlink(body)


def release(aws, bucket, key):
    aws(["s3api", "delete-object", "--bucket", bucket, "--key", key])


def age_seconds(aws, bucket, key, now):
    """How old the lock object is, or None when it is gone (awscall.listed_object)."""
    try:
        found = listed_object(aws, bucket, key, attempts=1)
    except AwsError as e:
        raise LockError("cannot read the lock s3://%s/%s: %s" % (bucket, key, e))
    if found is None:
        return None
    stamp = found.get("LastModified", "")
    at = parse_time(stamp)
    if at is None:
        raise LockError("the lock s3://%s/%s has no readable LastModified (%r)" % (bucket, key, stamp))
    return now - at


def parse_time(stamp):
    """Seconds since the epoch of S3's LastModified: ISO 8601 (awscli v2) or
    RFC 1123 (awscli v1: 'Tue, 01 Dec 2026 03:01:56 GMT'); None if neither."""
    try:
        at = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        try:
            at = email.utils.parsedate_to_datetime(stamp)
        except (TypeError, ValueError, IndexError):
            return None
    if at is None:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.timezone.utc)
    return at.timestamp()


def acquire(aws, bucket, key, holder, wait_seconds, stale_seconds, poll_seconds, clock=time.time,
            sleep=time.sleep, log=None):
    """Waits until this node holds the lock; a lock older than `stale_seconds` is removed.
    Raises LockError after `wait_seconds`."""
    end = clock() + wait_seconds
    while True:
        if take(aws, bucket, key, holder):
            return
        age = age_seconds(aws, bucket, key, clock())
        if age is not None and age > stale_seconds:
            if log is not None:
                log("the lock s3://%s/%s is %ds old (stale after %ds): removing it" % (bucket, key, age,
                                                                                       stale_seconds))
            release(aws, bucket, key)
            continue
        if clock() >= end:
            raise LockError("the lock s3://%s/%s is still held by another node after %ds"
                            % (bucket, key, wait_seconds))
        sleep(poll_seconds)


class Held(object):
    """`with Held(...)`: the lock at `key` (under the cluster's prefix)
    acquired, and released however the block ends; a release that fails is
    said, and the lock goes stale. `error(message)` builds the caller's
    exception for a lock that cannot be taken; `knob` names the
    KUBE_AWS_<knob>_{WAIT,STALE,POLL} test settings, `times` their defaults."""

    def __init__(self, aws, rt, name, holder, say, error, knob, times):
        self.aws, self.bucket, self.holder, self.say = aws, rt["bucket"], holder, say
        self.key = "%s/%s" % (rt["keyPrefix"], name)
        self.error, self.knob, self.times = error, knob, times

    def __enter__(self):
        wait, stale, poll = self.times
        try:
            acquire(self.aws, self.bucket, self.key, self.holder,
                    wait_seconds=paths.knob(self.knob + "_WAIT", wait),
                    stale_seconds=paths.knob(self.knob + "_STALE", stale),
                    poll_seconds=paths.knob(self.knob + "_POLL", poll), log=self.say)
        except LockError as e:
            raise self.error(str(e))
        return self

    def __exit__(self, *exc):
        try:
            release(self.aws, self.bucket, self.key)
        except Exception as e:  # noqa: BLE001 - the lock goes stale
            self.say("cannot release %s (it goes stale): %s" % (self.key, e))
        return False
