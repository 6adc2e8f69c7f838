"""etcd's snapshots to S3: the tiers of snapshot keys (hourly, daily),
when one is due, and the backup itself (on the leader when due, or `--now`
from this member), uploaded SSE-KMS. Python 3.9, standard library only.

Invariant: the decisions are pure; no node deletes a snapshot (the bucket's
lifecycle rules expire them, src/aws/services/retention.rs).
"""
import datetime
import json
import os
import sys

from . import metrics
from .etcd import (CA, CLIENT_CERT, CLIENT_KEY, CRI, DAILY, DAY_SECONDS, HOURLY, SNAPSHOT_PATH, SNAPSHOT_SUFFIX,
                   UPLOAD_ATTEMPTS, Clock, Node, host, imds_get, is_leader, local_endpoint, parse_time, run_command,
                   status_of)


def snapshot_tier(key, prefix):
    """"hourly/", "daily/" or "" (the older flat layout) for a snapshot key
    under `prefix`; None for anything else."""
    if not key.startswith(prefix) or not key.endswith(SNAPSHOT_SUFFIX):
        return None
    rest = key[len(prefix):]
    for tier in (HOURLY, DAILY):
        if rest.startswith(tier) and "/" not in rest[len(tier):]:
            return tier
    return "" if "/" not in rest else None


def snapshots(listing, prefix, tiers=(HOURLY, DAILY, "")):
    """The snapshot objects of a list-objects-v2 answer in `tiers`, oldest
    first: [{"key", "size", "time", "tier"}]."""
    out = []
    for o in (listing or {}).get("Contents") or []:
        key = o.get("Key", "")
        tier = snapshot_tier(key, prefix)
        if tier is not None and tier in tiers:
            out.append({"key": key, "size": int(o.get("Size", 0)), "time": parse_time(o["LastModified"]),
                        "tier": tier})
    out.sort(key=lambda o: (o["time"], o["key"]))
    return out


def backup_due(snaps, now, interval):
    """A snapshot is due when none is younger than the interval (a minute's
    slack for the timer's jitter)."""
    if not snaps:
        return True
    return now - snaps[-1]["time"] >= interval - 60


def snapshot_key(prefix, now, member_name):
    stamp = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-." else "-" for c in member_name) or "member"
    return "%s%s-%s%s" % (prefix, stamp, safe, SNAPSHOT_SUFFIX)


def daily_key(prefix, hourly_key):
    """The daily tier's copy of an hourly snapshot: same name, daily/ prefix."""
    return prefix + DAILY + hourly_key.rsplit("/", 1)[-1]


def etcdctl_in_container(run, args):
    """etcdctl inside the running etcd static pod's container (the etcd image
    ships it; the pod mounts /etc/kubernetes/pki/etcd and /var/lib/etcd)."""
    ids = run(["crictl", "--runtime-endpoint", CRI, "ps", "--state", "Running", "-q",
               "--label", "io.kubernetes.container.name=etcd"]).split()
    if not ids:
        raise RuntimeError("no running etcd container")
    return run(["crictl", "--runtime-endpoint", CRI, "exec", ids[0], "etcdctl",
                "--endpoints", local_endpoint(), "--cacert", CA, "--cert", CLIENT_CERT, "--key", CLIENT_KEY]
               + list(args))


def upload_snapshot(aws, path, bucket, key, kms, clock, attempts=UPLOAD_ATTEMPTS):
    """Uploads with SSE-KMS (the cluster's key), retried with a growing pause.
    Returns None, or the last error."""
    sse = ["--sse", "aws:kms", "--sse-kms-key-id", kms] if kms else ["--sse", "AES256"]
    last = None
    for i in range(attempts):
        try:
            aws(["s3", "cp", "--only-show-errors", path, "s3://%s/%s" % (bucket, key)] + sse)
            return None
        except Exception as e:
            last = str(e)
            if i + 1 < attempts:
                clock.sleep(10 * (i + 1))
    return last


# The key a follower's `etcd-backup --now` reads linearizably before its
# snapshot (any key does; none needs to exist).
SNAPSHOT_BARRIER = "/kube-aws/snapshot-barrier"


def backup_once(node, run, clock, host_snapshot=None, force=False, anywhere=False):
    """One timer tick: a snapshot when one is due and this member leads
    (`force`: due or not; `anywhere`: on a follower too, after a
    linearizable read through it). Returns (exit code, status object or None)."""
    s = node.settings()
    status = json.loads(etcdctl_in_container(run, ["endpoint", "status", "-w", "json"]))
    cluster = node.runtime.get("cluster", "")
    leads = is_leader(status)
    if not leads:
        # Every controller records the raft term it saw (metrics.py).
        metrics.tick(node.aws, cluster, status_of(status), False, None, clock.now(), host(metrics.TERM_STATE))
        if not anywhere:
            return 0, None
    bucket, prefix = s["bucket"], s["backupPrefix"]
    listing = node.aws(["s3api", "list-objects-v2", "--bucket", bucket, "--prefix", prefix]) or {}
    hourly = snapshots(listing, prefix, (HOURLY, ""))
    daily = snapshots(listing, prefix, (DAILY,))
    now = clock.now()
    if leads:
        metrics.tick(node.aws, cluster, status_of(status), True, hourly[-1]["time"] if hourly else None, now,
                     host(metrics.TERM_STATE))
    if not force and not backup_due(hourly, now, int(s["intervalSeconds"])):
        return 0, None
    instance = node.instance()
    key = snapshot_key(prefix + HOURLY, now, instance.get("nodeName") or instance.get("instanceId", ""))
    report = {"phase": "failed", "key": key, "instanceId": instance.get("instanceId", ""),
              "startedAt": int(now)}
    local = host_snapshot or host(SNAPSHOT_PATH)
    try:
        if not leads:
            # A follower may not yet have applied the newest committed writes.
            # A linearizable read through it first (etcd's ReadIndex: the
            # member waits until it has applied up to the leader's commit
            # index; etcd server/etcdserver/v3_server.go,
            # linearizableReadNotify) puts every write acknowledged before
            # this call into the snapshot.
            etcdctl_in_container(run, ["get", "--consistency=l", "--keys-only", "--limit=1", SNAPSHOT_BARRIER])
        etcdctl_in_container(run, ["snapshot", "save", SNAPSHOT_PATH])
        size = os.path.getsize(local)
        err = upload_snapshot(node.aws, local, bucket, key, s.get("kmsKeyARN", ""), clock)
        # One snapshot a day also goes to the daily tier, kept longer.
        if not err and backup_due(daily, now, DAY_SECONDS):
            err = upload_snapshot(node.aws, local, bucket, daily_key(prefix, key), s.get("kmsKeyARN", ""), clock)
            if not err:
                report["daily"] = daily_key(prefix, key)
    except Exception as e:
        err, size = str(e), 0
    finally:
        if os.path.exists(local):
            os.unlink(local)
    report["updatedAt"] = int(clock.now())
    if err:
        report["message"] = err
        return 1, report
    report.update({"phase": "ok", "size": size})
    return 0, report


# The backup status object `kube-aws backups` prints.
BACKUP_STATUS = "status/etcd/backup.json"


def etcd_backup_main(argv, aws, imds=imds_get, run=run_command, clock=None):
    if argv not in ([], ["--now"]):
        print("usage: kube-aws-node etcd-backup [--now]", file=sys.stderr)
        return 2
    now = argv == ["--now"]
    clock = clock or Clock()
    node = Node(aws, imds)
    try:
        code, report = backup_once(node, run, clock, force=now, anywhere=now)
    except Exception as e:
        code, report = 1, {"phase": "failed", "message": str(e), "updatedAt": int(clock.now())}
    if report is not None:
        try:
            node.put_json(BACKUP_STATUS, report)
        except Exception as e:
            print("kube-aws: could not write %s: %s" % (BACKUP_STATUS, e), file=sys.stderr)
        print("kube-aws: etcd backup %s: %s" % (report["phase"], report.get("key", report.get("message", ""))))
    return code
