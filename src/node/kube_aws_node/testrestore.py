"""The weekly test restore (`etcd-test-restore`, kube-aws-etcd-test-restore.timer):
a backup is only as good as a restore from it. On the etcd leader's node (the
others skip), the newest hourly snapshot is downloaded, `etcdutl snapshot
status` reads its hash, revision and key count, and `etcdutl snapshot restore`
restores it into a scratch data dir (never etcd's own), as a one-member
cluster; the restore is good when etcdutl exits 0 and the scratch dir holds
a member database. The result goes to status/etcd/test-restore.json, which
`kube-aws backups` shows. Python 3.9, standard library only.

etcdutl runs from the etcd image kubeadm runs (`ctr run`, /var/lib mounted),
as the real restore does (etcd_restore.restore_commands): etcdutl is the snapshot
tool from etcd 3.5 (`etcdctl snapshot status|restore` are deprecated there:
etcd docs, op-guide/recovery.md). The decisions (`summary`, `report`) are
pure, tested in src/node/tests/test_testrestore.py with the etcdutl argv;
etcdutl itself is not run by any test here (the test bed builds etcd, not
etcdutl): the real-node bed is where it runs.
"""
import json
import os
import shutil
import sys

from . import etcd, etcd_backup, etcd_restore

STATUS = "status/etcd/test-restore.json"
SCRATCH_FILE = "/var/lib/kube-aws/etcd-test-restore.db"
SCRATCH_DIR = "/var/lib/kube-aws/etcd-test-restore.d"
MEMBER_DB = "member/snap/db"


def etcdutl(image, args):
    """argv running etcdutl `args` in the etcd image, /var/lib mounted."""
    return (["ctr", "-n", "k8s.io", "run", "--rm",
             "--mount", "type=bind,src=/var/lib,dst=/var/lib,options=rbind:rw",
             image, "kube-aws-etcd-test-restore", "etcdutl"] + list(args))


def status_args(snapshot):
    return ["snapshot", "status", snapshot, "-w", "json"]


def restore_args(snapshot, data_dir):
    # A name and peer URL of its own: nothing ever starts on this data dir.
    return ["snapshot", "restore", snapshot, "--data-dir", data_dir, "--name", "kube-aws-test-restore",
            "--initial-cluster", "kube-aws-test-restore=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls", "http://127.0.0.1:2380"]


def summary(status_json):
    """`etcdutl snapshot status -w json`: {"hash", "revision", "totalKey", "totalSize"}."""
    s = json.loads(status_json)
    return {k: s.get(k) for k in ("hash", "revision", "totalKey", "totalSize")}


def report(snap, phase, now, message="", facts=None):
    out = {"phase": phase, "key": snap.get("key", "") if snap else "",
           "snapshotTime": int(snap["time"]) if snap else 0, "testedAt": int(now)}
    out.update(facts or {})
    if message:
        out["message"] = message
    return out


def test_restore(node, run, clock, image=None):
    """Downloads and test-restores the newest hourly snapshot; the status object."""
    s = node.settings()
    bucket, prefix = s["bucket"], s["backupPrefix"]
    listing = node.aws(["s3api", "list-objects-v2", "--bucket", bucket, "--prefix", prefix]) or {}
    hourly = etcd_backup.snapshots(listing, prefix, (etcd.HOURLY, ""))
    now = clock.now()
    if not hourly:
        return report(None, "failed", now, "no snapshot under s3://%s/%s to test" % (bucket, prefix))
    snap = hourly[-1]
    # On a node KUBE_AWS_ROOT is empty: the host paths are the container's
    # (/var/lib is mounted at the same place).
    local, data_dir = etcd.host(SCRATCH_FILE), etcd.host(SCRATCH_DIR)
    if image is None:
        version = etcd.read_json(etcd.host(etcd.NODE_JSON), {}).get("kubernetesVersion", "")
        image = etcd_restore.etcd_image(run(["kubeadm", "config", "images", "list", "--kubernetes-version", version]))
        if not image:
            return report(snap, "failed", now, "kubeadm lists no etcd image for %s" % version)
    shutil.rmtree(data_dir, ignore_errors=True)
    os.makedirs(os.path.dirname(local), exist_ok=True)
    try:
        node.aws(["s3", "cp", "--only-show-errors", "s3://%s/%s" % (bucket, snap["key"]), local])
        facts = summary(run(etcdutl(image, status_args(local))))
        run(etcdutl(image, restore_args(local, data_dir)))
        if not os.path.exists(os.path.join(data_dir, MEMBER_DB)):
            return report(snap, "failed", clock.now(), "etcdutl restored no %s" % MEMBER_DB, facts)
        return report(snap, "ok", clock.now(), facts=facts)
    except Exception as e:  # noqa: BLE001 - any failure is the test's result
        return report(snap, "failed", clock.now(), str(e))
    finally:
        if os.path.exists(local):
            os.unlink(local)
        shutil.rmtree(data_dir, ignore_errors=True)


def test_restore_main(argv, aws, imds=etcd.imds_get, run=etcd.run_command, clock=None):
    """`etcd-test-restore`: on the leader's node only. Exit 1 when it failed."""
    clock = clock or etcd.Clock()
    node = etcd.Node(aws, imds)
    status = json.loads(etcd_backup.etcdctl_in_container(run, ["endpoint", "status", "-w", "json"]))
    if not etcd.is_leader(status):
        return 0
    out = test_restore(node, run, clock)
    try:
        node.put_json(STATUS, out)
    except Exception as e:  # noqa: BLE001
        print("kube-aws: could not write %s: %s" % (STATUS, e), file=sys.stderr)
    print(json.dumps(out))
    return 0 if out["phase"] == "ok" else 1
