"""etcd's CloudWatch metrics, published by the etcd leader's backup tick
(every 5 minutes, `etcd-backup`): the database size and its in-use size (the
leader's member, as `etcdctl endpoint status` gives them), the age of the
newest hourly snapshot, and the leader changes since the previous tick. The
control-plane stack's alarms watch the first and the third
(src/render/cfn/etcd.rs: size at 70 % of etcd.quotaBackendBytes, backup age
over twice etcd.backup.interval).

Leader changes are counted by etcd's raft term: every election that makes a
leader starts a new term, the term is the same on every member and survives
restarts, and with pre-vote (on by default from etcd 3.5, `--pre-vote`) a
partitioned member does not raise it by campaigning alone (etcd docs,
"Learning: etcd raft"; raft thesis 9.6). Every controller's tick records the
term it saw (a leader or not, `TERM_STATE`), and the leader publishes the
increase since its own previous record, so a new leader counts the election
that made it. (etcd's own `etcd_server_leader_changes_seen_total` counts per
member since its start, and resets with it.)

Invariant: `datums` and `leader_changes` are pure; `tick` never raises (a
metric is not worth a failed backup), and writes only to the namespace the
controllers' role may write (`cloudwatch:namespace` = kube-aws/etcd).
"""
import json
import os

from .awscall import AwsError

NAMESPACE = "kube-aws/etcd"
# The raft term this node saw at its previous tick ({"term": n, "at": epoch}).
TERM_STATE = "/var/lib/kube-aws/etcd-term.json"
# A record older than this is no baseline: the node was off or not ticking,
# and its increase would count elections another leader published already.
TERM_STALE_AFTER = 30 * 60


def leader_changes(previous, term, now):
    """Elections since the previous record: None without a usable one (no
    record, too old, or a term that went back: a restored cluster)."""
    if not previous or term is None:
        return None
    try:
        before, at = int(previous["term"]), float(previous["at"])
    except (KeyError, TypeError, ValueError):
        return None
    if now - at > TERM_STALE_AFTER or term < before:
        return None
    return term - before


def datums(cluster, status, newest_snapshot_time, now, changes=None):
    """The metric data: DbSizeBytes, DbSizeInUseBytes, BackupAgeSeconds (left
    out while no snapshot exists: the alarm treats missing data as
    breaching) and LeaderChanges (left out without a baseline)."""
    dims = [{"Name": "ClusterName", "Value": cluster}]
    out = [{"MetricName": "DbSizeBytes", "Dimensions": dims, "Unit": "Bytes",
            "Value": float(status.get("dbSize", 0) or 0)},
           {"MetricName": "DbSizeInUseBytes", "Dimensions": dims, "Unit": "Bytes",
            "Value": float(status.get("dbSizeInUse", 0) or 0)}]
    if newest_snapshot_time is not None:
        out.append({"MetricName": "BackupAgeSeconds", "Dimensions": dims, "Unit": "Seconds",
                    "Value": float(max(0, now - newest_snapshot_time))})
    if changes is not None:
        out.append({"MetricName": "LeaderChanges", "Dimensions": dims, "Unit": "Count",
                    "Value": float(changes)})
    return out


def publish(aws, data):
    """PutMetricData; True when CloudWatch took it."""
    try:
        aws(["cloudwatch", "put-metric-data", "--namespace", NAMESPACE, "--metric-data", json.dumps(data)])
        return True
    except (AwsError, RuntimeError, OSError, ValueError):
        return False


def raft_term(status):
    try:
        return int(status.get("raftTerm"))
    except (TypeError, ValueError):
        return None


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write(path, value):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(value, f)
        os.replace(tmp, path)
    except OSError:
        pass


def tick(aws, cluster, status, leader, newest_snapshot_time, now, state_path):
    """One backup tick's part: record the term (every controller); on the
    leader, publish. Returns the data published (None when not the leader
    or CloudWatch refused)."""
    term = raft_term(status)
    previous = _read(state_path)
    if term is not None:
        _write(state_path, {"term": term, "at": now})
    if not leader:
        return None
    data = datums(cluster, status, newest_snapshot_time, now, leader_changes(previous, term, now))
    return data if publish(aws, data) else None
