"""S3 lock objects, created with If-None-Match: '*' (a conditional write).

Invariant: a lock is held only when S3 says this node created the object;
PreconditionFailed (or ConditionalRequestConflict) means another node holds
it; any other answer raises, never guessed. A lock older than its stale
timeout is taken to be left by a dead node and is removed, then taken anew.
Every delete is conditional on an ETag (DeleteObject If-Match, the compare
part of the addon lease's compare-and-swap, lease.py): a stale lock is
removed only while it is still the object the listing showed (its ETag),
and a holder releases only the object it created. So of two waiters that
found the same stale lock, the one whose delete comes second gets
PreconditionFailed (the first has put its own lock since) or NoSuchKey (not
yet), removes nothing and goes back to taking it with If-None-Match: the two
never both hold it, and a live holder's lock is never deleted.
"""
import datetime
import email.utils
import json
import os
import tempfile
import time

from . import paths
from .awscall import AwsError, listed_object

# The control plane's one lock, under the cluster's prefix: a controller
# takes it for every change that restarts its static pods or changes etcd's
# membership: a join (and the upgrade it carries, upgrade.py), a
# reconfiguration (reconfigure.py) and a certificate renewal (certs.py). So
# two controllers never restart etcd at once: a renewal's etcd restart beside
# another controller's `kubeadm upgrade apply` (which restarts its etcd too)
# would leave one of three members, and etcd without its quorum.
JOIN_LOCK = "bootstrap/join-lock"

HELD = ("PreconditionFailed", "ConditionalRequestConflict")
# A conditional delete that removed nothing: the object changed or is gone.
GONE = HELD + ("NoSuchKey",)


class LockError(Exception):
    pass


def put_lock(aws, bucket, key, holder=""):
    """The ETag of s3://bucket/key when this node created it ("" when S3 gave
    none), None when another node holds it."""
    fd, body = tempfile.mkstemp(prefix="kube-aws-lock-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"holder": holder, "takenAt": int(time.time())}, f)
        out = aws(["s3api", "put-object", "--bucket", bucket, "--key", key, "--body", body, "--if-none-match", "*"])
        return str((out or {}).get("ETag") or "")
    except AwsError as e:
        if any(h in e.message for h in HELD):
            return None
        raise LockError("cannot take the lock s3://%s/%s: %s" % (bucket, key, e))
    finally:
        os.unlink(body)


def take(aws, bucket, key, holder=""):
    """True when this node created s3://bucket/key, False when another node holds it."""
    return put_lock(aws, bucket, key, holder) is not None


def delete_if(aws, bucket, key, etag):
    """Deletes the lock only while its ETag is `etag`: True when it did, False
    when the object changed or is gone (another node took or removed it).
    An empty `etag` (S3 gave none when this node put it) deletes it as it is."""
    args = ["s3api", "delete-object", "--bucket", bucket, "--key", key]
    try:
        aws(args + (["--if-match", etag] if etag else []))
    except AwsError as e:
        if etag and any(h in e.message for h in GONE):
            return False
        raise
    return True


def release(aws, bucket, key, etag):
    """Deletes the lock this node holds, only while it is still the object
    this node put (`etag`, what put_lock or acquire returned), so a lock
    another node took after this one's went stale stays; False when it was
    no longer this node's."""
    return delete_if(aws, bucket, key, etag)


def decide_stale(age, etag, stale_seconds):
    """What a waiter does with the lock it listed: "take" when it is gone,
    "remove" when it is older than `stale_seconds` and has an ETag to make
    the delete conditional on, "wait" otherwise. Pure."""
    if age is None:
        return "take"
    if age > stale_seconds and etag:
        return "remove"
    return "wait"


def listed(aws, bucket, key, now):
    """(age in seconds, ETag) of the lock as listed, or None when it is gone."""
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
    return now - at, str(found.get("ETag") or "")


def age_seconds(aws, bucket, key, now):
    """How old the lock object is, or None when it is gone (awscall.listed_object)."""
    found = listed(aws, bucket, key, now)
    return None if found is None else found[0]


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
    """Waits until this node holds the lock and returns its ETag (for
    `release`); a lock older than `stale_seconds` is removed, conditional on
    the ETag the listing showed. Raises LockError after `wait_seconds`."""
    end = clock() + wait_seconds
    while True:
        etag = put_lock(aws, bucket, key, holder)
        if etag is not None:
            return etag
        found = listed(aws, bucket, key, clock())
        age, seen = found if found is not None else (None, "")
        action = decide_stale(age, seen, stale_seconds)
        if action == "remove":
            if log is not None:
                log("the lock s3://%s/%s is %ds old (stale after %ds): removing it" % (bucket, key, age,
                                                                                       stale_seconds))
            if not delete_if(aws, bucket, key, seen) and log is not None:
                log("the lock s3://%s/%s changed before it was removed: another node took it" % (bucket, key))
            continue
        if age is not None and age > stale_seconds and log is not None:
            log("the lock s3://%s/%s is stale but was listed without an ETag: not removed" % (bucket, key))
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
        self.etag = None

    def __enter__(self):
        wait, stale, poll = self.times
        try:
            self.etag = acquire(self.aws, self.bucket, self.key, self.holder,
                    wait_seconds=paths.knob(self.knob + "_WAIT", wait),
                    stale_seconds=paths.knob(self.knob + "_STALE", stale),
                    poll_seconds=paths.knob(self.knob + "_POLL", poll), log=self.say)
        except LockError as e:
            raise self.error(str(e))
        return self

    def __exit__(self, *exc):
        try:
            if not release(self.aws, self.bucket, self.key, self.etag):
                self.say("%s was taken over after it went stale: left to its new holder" % self.key)
        except Exception as e:  # noqa: BLE001 - the lock goes stale
            self.say("cannot release %s (it goes stale): %s" % (self.key, e))
        return False
