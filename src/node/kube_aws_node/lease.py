"""The addon installer's lease: one S3 object, <keyPrefix>/bootstrap/addons-lease,
holding {holder, run, expiresAt}, that says which controller installs the
current addon plan, and until when.

Taken with a conditional write: PutObject If-None-Match: '*' when there is no
lease; when there is one (that write fails), it is read (GetObject, its ETag
kept) and taken over only once its expiresAt has passed, with PutObject If-Match: <that ETag>, an
atomic compare-and-swap (S3 conditional writes, "How to prevent object
overwrites with conditional writes", S3 user guide): of two controllers that
read the same expired lease, S3 takes one write and answers the other 412
PreconditionFailed (or 409 ConditionalRequestConflict while the first is in
flight). The holder renews it every ttl/3 from a thread (If-Match its own
last ETag) and releases it, on success and on failure, by writing an expired
body with If-Match. A holder that dies leaves a lease that expires within
ttl; another controller then takes it over and resumes from the recorded
state (reconcile.py). The lease also names its holder's instance: a lease
whose holder's instance EC2 lists as gone (terminated or stopped: a
controller lost, or every one of them before a restore) is taken over at
once rather than at its expiry, up to ttl later; a listing that proves
nothing (etcd.gone) leaves the wait to the expiry. Controllers' clocks are kept by chrony against the
Amazon Time Sync Service (AL2023's default), far closer than ttl.

Invariant: `decide` is a pure function of (the lease as read, now, whether
EC2 lists its holder's instance as gone); the lease
is held only after S3 accepted this holder's conditional write, and each
later write of it is conditional on the ETag S3 returned for the previous
one; PreconditionFailed, ConditionalRequestConflict or NoSuchKey on such a
write means "not held (any more)"; any other answer raises LeaseError, never
guessed.
"""
import collections
import datetime
import json
import os
import tempfile
import threading
import time

from . import jsonio, paths
from .awscall import AwsError

KEY = "bootstrap/addons-lease"
LOST = ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey")
DEFAULT_TTL = 600

# The lease as read: holder and run (informational), expires_at (seconds
# since the epoch), the ETag S3 gave it, whether its holder released it, and
# the holder's EC2 instance ("" in a lease written before it was recorded).
State = collections.namedtuple("State", "holder run expires_at etag released instance")
State.__new__.__defaults__ = (False, "")

TAKE, TAKEOVER, WAIT = "take", "takeover", "wait"


class LeaseError(Exception):
    pass


def decide(state, now, holder_gone=False):
    """TAKE when there is no lease, TAKEOVER when it has expired (or was
    released: released leases are written expired) or its holder's instance
    is gone, else WAIT."""
    if state is None:
        return TAKE
    if now >= state.expires_at or holder_gone:
        return TAKEOVER
    return WAIT


def renew_due(renewed_at, now, ttl):
    """The holder renews once a third of the ttl has passed since its last write."""
    return now - renewed_at >= ttl / 3.0


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(s):
    """Seconds since the epoch of `s` (ISO 8601, UTC), or None."""
    try:
        at = datetime.datetime.fromisoformat(str(s).replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.timezone.utc)
    return at.timestamp()


def lost(e):
    return isinstance(e, AwsError) and any(code in e.message for code in LOST)


class Lease(object):
    """This controller's side of the lease. `aws` is the node's Aws helper;
    `clock` and `sleep` are injected for tests. `instance` is this
    controller's EC2 instance; `holder_gone(instance_id)` answers whether EC2
    lists another holder's instance as gone (True, False, or None: unknown)."""

    def __init__(self, aws, bucket, prefix, holder, ttl=None, clock=time.time, sleep=time.sleep, log=None,
                 instance="", holder_gone=None):
        self.aws = aws
        self.bucket = bucket
        self.key = "%s/%s" % (prefix, KEY) if prefix else KEY
        self.holder = holder
        self.ttl = ttl if ttl is not None else paths.knob("LEASE_TTL", DEFAULT_TTL)
        self.clock = clock
        self.sleep = sleep
        self.log = log or (lambda *a: None)
        self.instance = instance or ""
        self.holder_gone = holder_gone
        self.run = ""
        self.etag = None  # set while held
        self.renewed_at = 0.0
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        self._mutex = threading.Lock()

    def where(self):
        return "s3://%s/%s" % (self.bucket, self.key)

    # --- S3 ----------------------------------------------------------------
    def read(self):
        """The lease as S3 has it, or None when there is none."""
        fd, path = tempfile.mkstemp(prefix="kube-aws-lease-")
        os.close(fd)
        try:
            try:
                meta = self.aws(["s3api", "get-object", "--bucket", self.bucket, "--key", self.key, path],
                                attempts=3)
            except AwsError as e:
                if "NoSuchKey" in e.message:
                    return None
                raise LeaseError("cannot read the lease %s: %s" % (self.where(), e))
            try:
                doc = jsonio.read(path)
            except jsonio.JsonError:
                doc = None
        finally:
            os.unlink(path)
        etag = (meta or {}).get("ETag")
        if not etag:
            raise LeaseError("S3 gave no ETag for the lease %s" % self.where())
        at = parse_iso(doc.get("expiresAt")) if isinstance(doc, dict) else None
        if at is None:
            # Not a lease this program wrote: taken to be expired, so it is replaced (If-Match).
            self.log("the lease %s is unreadable: taken to be expired" % self.where())
            return State("", "", 0.0, etag, True)
        return State(str(doc.get("holder", "")), str(doc.get("run", "")), at, etag, bool(doc.get("released")),
                     str(doc.get("instance", "")))

    def write(self, expires_at, condition, released=False):
        """Writes the lease on `condition` (["--if-none-match", "*"] or
        ["--if-match", etag]); its new ETag, or None when the condition failed."""
        fd, body = tempfile.mkstemp(prefix="kube-aws-lease-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"holder": self.holder, "instance": self.instance, "run": self.run,
                           "expiresAt": iso(expires_at), "released": released}, f)
            out = self.aws(["s3api", "put-object", "--bucket", self.bucket, "--key", self.key, "--body", body,
                            "--content-type", "application/json"] + condition, attempts=3)
        except AwsError as e:
            if lost(e):
                return None
            raise LeaseError("cannot write the lease %s: %s" % (self.where(), e))
        finally:
            os.unlink(body)
        etag = (out or {}).get("ETag")
        if not etag:
            raise LeaseError("S3 gave no ETag for the lease %s" % self.where())
        return etag

    # --- the holder's life -----------------------------------------------------
    def acquire(self, run):
        """True when this controller now holds the lease for `run`; False when
        another holds it (logged with its holder and expiry) or won the race.

        It first tries to create it (If-None-Match), so it reads the lease
        only once it exists: a GetObject of a missing key is 403, not 404,
        without s3:ListBucket (S3 API reference, GetObject)."""
        self.run = run
        now = self.clock()
        etag = self.write(now + self.ttl, ["--if-none-match", "*"])
        if etag is None:
            state = self.read()
            now = self.clock()
            gone = self.gone(state, now)
            d = decide(state, now, gone)
            if d == WAIT:
                self.log("the addon installer's lease is held by %s (run %s) until %s"
                         % (state.holder or "another controller", state.run or "?", iso(state.expires_at)))
                return False
            if d == TAKE:
                return False  # removed since (destroy --purge): the next tick creates it
            if gone:
                self.log("the addon installer's lease of %s (run %s) runs until %s, but EC2 lists its instance %s "
                         "as gone: taking it over" % (state.holder, state.run or "?", iso(state.expires_at),
                                                      state.instance))
            elif not state.released:
                self.log("the addon installer's lease of %s (run %s) expired at %s: taking it over"
                         % (state.holder, state.run or "?", iso(state.expires_at)))
            etag = self.write(now + self.ttl, ["--if-match", state.etag])
            if etag is None:
                self.log("another controller took the addon installer's lease first")
                return False
        self.etag = etag
        self.renewed_at = now
        return True

    def gone(self, state, now):
        """Whether the unexpired lease `state` is held by another instance EC2
        lists as gone. False when it cannot tell (the look failed, or no
        instance is named): the lease is then waited out."""
        if (state is None or now >= state.expires_at or self.holder_gone is None or not state.instance
                or state.instance == self.instance):
            return False
        try:
            return self.holder_gone(state.instance) is True
        except Exception as e:  # noqa: BLE001 - unknown means wait for the expiry
            self.log("cannot tell whether the lease holder's instance %s is gone (%s): waiting for its expiry"
                     % (state.instance, getattr(e, "message", "") or e))
            return False

    def renew(self):
        """Extends the lease (If-Match its last ETag); False when it is lost."""
        with self._mutex:
            if self.etag is None or self.lost.is_set():
                return False
            now = self.clock()
            try:
                etag = self.write(now + self.ttl, ["--if-match", self.etag])
            except LeaseError as e:
                # Not lost yet: it holds until its expiry; the next tick tries again.
                self.log(str(e))
                return True
            if etag is None:
                self.lost.set()
                self.etag = None
                self.log("the addon installer's lease was taken over by another controller")
                return False
            self.etag = etag
            self.renewed_at = now
            return True

    def renew_loop(self, poll):
        while not self._stop.is_set():
            if renew_due(self.renewed_at, self.clock(), self.ttl):
                if not self.renew():
                    return
            self._stop.wait(poll)

    def start_renewing(self):
        poll = max(0.05, min(self.ttl / 9.0, 20.0))
        self._thread = threading.Thread(target=self.renew_loop, args=(poll,), daemon=True)
        self._thread.start()

    def release(self):
        """Stops renewing and writes the lease expired (If-Match), so the next
        tick of any controller takes it at once. Never raises."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._mutex:
            etag, self.etag = self.etag, None
        try:
            if etag is not None and not self.lost.is_set():
                if self.write(self.clock() - 1, ["--if-match", etag], released=True) is None:
                    self.log("the addon installer's lease was taken over before it was released")
        except LeaseError as e:
            self.log("cannot release the lease (it expires by itself): %s" % e)

    def held(self):
        return self.etag is not None and not self.lost.is_set()
