"""The one AWS call helper: the aws CLI (AL2023 ships awscli v2) with an
argument list, one retry policy, JSON out; the calls sdkcall.py handles run
in this process when botocore is here (the same argument list and answer).

Invariant: `Aws(region)(args)` returns the parsed JSON answer, or None when
the CLI printed nothing; it raises AwsError whose message is the CLI's last
stderr line (passed through `scrub`), never its stdout (which may hold a
plaintext) and never an argument. Answers retrying cannot change are not
retried.
"""
import re
import os
import subprocess
import time

from . import jsonio, paths
from .retry import retry

# Answers that retrying cannot change.
FINAL = (
    "AccessDenied",
    "InvalidCiphertext",
    "IncorrectKey",
    "NotFound",
    "NoSuchKey",
    "NoSuchBucket",
    "Disabled",
    "PreconditionFailed",
    "ConditionalRequestConflict",
    "ValidationError",
    "does not exist",
)

_CODE = re.compile(r"An error occurred \(([A-Za-z0-9.]+)\)")


class AwsError(Exception):
    def __init__(self, message, code=""):
        Exception.__init__(self, message)
        self.message = message
        self.code = code

    def final(self):
        return any(f in self.message for f in FINAL)


# The aws CLI asks IMDS for the role's credentials with a 1-second timeout
# and a single attempt by default (botocore's InstanceMetadataFetcher); IMDS
# is throttled per instance and a busy node's first seconds are slow, so one
# slow answer became "Unable to locate credentials" (seen on the real-node bed
# under load, all five of a call's attempts). The CLI's own settings
# metadata_service_timeout and metadata_service_num_attempts (AWS CLI user
# guide, "Configuration and credential file settings") widen both; an
# operator's own values win.
IMDS_ENV = {"AWS_METADATA_SERVICE_TIMEOUT": "5", "AWS_METADATA_SERVICE_NUM_ATTEMPTS": "3"}


def cli_env():
    env = dict(os.environ)
    for k, v in IMDS_ENV.items():
        env.setdefault(k, v)
    return env


def in_process_wanted(runner):
    """Whether calls that sdkcall.py handles run in this process: yes,
    unless a runner was injected (the unit tests' recorded CLI) or
    KUBE_AWS_AWS_CALLS=cli (a harness whose fake aws CLI must see every
    call, or an operator's choice)."""
    return runner is subprocess.run and os.environ.get("KUBE_AWS_AWS_CALLS", "") != "cli"


class Aws(object):
    def __init__(self, region, attempts=5, delay=None, scrub=None, runner=subprocess.run, sleep=time.sleep):
        self.region = region
        self.attempts = attempts
        self.delay = delay
        self.scrub = scrub
        self.runner = runner
        self.sleep = sleep
        self._sdk = None if in_process_wanted(runner) else False

    def sdk(self):
        """sdkcall.InProcess, loaded at the first call it could answer; False
        when there is no botocore here (or in-process calls are off)."""
        if self._sdk is None:
            from . import sdkcall
            session = sdkcall.load()
            self._sdk = sdkcall.InProcess(session, self.region, self.scrub) if session is not None else False
        return self._sdk

    def backend(self):
        """What runs the calls sdkcall.py handles, for the node's log."""
        sdk = self.sdk()
        return ("this process (botocore %s)" % sdk.version) if sdk else "the aws CLI"

    def once(self, args):
        sdk = self.sdk()
        if sdk:
            handled, out = sdk.answer(args)
            if handled:
                return out
        p = self.runner(
            ["aws", "--region", self.region, "--output", "json"] + list(args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            env=cli_env(),
        )
        if p.returncode != 0:
            lines = [l for l in (p.stderr or "").strip().splitlines() if l.strip()]
            err = lines[-1].strip() if lines else "exit %d" % p.returncode
            if self.scrub is not None:
                err = self.scrub(err)
            m = _CODE.search(err)
            raise AwsError(err[:2000], m.group(1) if m else "")
        out = (p.stdout or "").strip()
        if not out:
            return None
        try:
            return jsonio.parse(out, "the aws CLI's answer")
        except jsonio.JsonError:
            # `s3 cp` and friends print text; callers of those want no value.
            return None

    def __call__(self, args, attempts=None):
        delay = self.delay if self.delay is not None else paths.knob("RETRY_DELAY", 2)
        return retry(
            lambda: self.once(args),
            attempts if attempts is not None else self.attempts,
            delay,
            final=lambda e: isinstance(e, AwsError) and e.final(),
            sleep=self.sleep,
        )


def listed_object(aws, bucket, key, attempts=None):
    """The entry (Key, LastModified, ETag, ...) S3 lists at exactly `key`, or
    None when there is no such object. A listing, not HeadObject or
    GetObject: S3 answers those with 403, not 404, for a missing key unless
    the caller may list the bucket (S3 API reference, HeadObject,
    "Permissions"), so "missing" and "denied" could not be told apart; a
    listing under a prefix-conditioned s3:ListBucket tells them apart with
    one permission. Raises AwsError."""
    out = aws(["s3api", "list-objects-v2", "--bucket", bucket, "--prefix", key, "--max-keys", "1"],
              attempts=attempts)
    for o in (out or {}).get("Contents") or []:
        if isinstance(o, dict) and o.get("Key") == key:
            return o
    return None
