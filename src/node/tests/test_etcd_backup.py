"""Unit tests of etcd's snapshots and restores (kube_aws_node.etcd_backup,
etcd_restore): the leader's snapshot, the listing, the backup driver and
the restore decision and steps, under the recording fakes of
etcd_fakes.py. Nothing here talks to AWS or etcd. Python 3.9, standard
library only.
"""
import io
import json
import os
import sys
import unittest
from contextlib import redirect_stdout, redirect_stderr

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kube_aws_node import etcd, etcd_backup, etcd_restore  # noqa: E402
from etcd_fakes import (  # noqa: E402,F401
    FakeAws,
    FakeClock,
    Quiet,
    RUNTIME,
    SETTINGS,
    START,
    WithFiles,
    imds,
    listing,
    node,
    settings_answer,
)


class Leader(unittest.TestCase):
    def test_etcdctl_and_gateway_status_shapes(self):
        leader = [{"Endpoint": "https://127.0.0.1:2379",
                   "Status": {"header": {"cluster_id": 1, "member_id": 10276657743932975437},
                              "leader": 10276657743932975437, "version": "3.6.5"}}]
        follower = [{"Endpoint": "x", "Status": {"header": {"member_id": 5}, "leader": 7}}]
        gateway = {"header": {"member_id": "10276657743932975437"}, "leader": "10276657743932975437"}
        self.assertTrue(etcd.is_leader(leader))
        self.assertFalse(etcd.is_leader(follower))
        self.assertTrue(etcd.is_leader(gateway))
        # No leader (an election under way) and nonsense: nobody writes.
        self.assertFalse(etcd.is_leader({"header": {"member_id": "0"}, "leader": "0"}))
        self.assertFalse(etcd.is_leader([]))
        self.assertFalse(etcd.is_leader({"header": {}}))


class Snapshots(unittest.TestCase):
    PREFIX = "p/demo/etcd/"

    def test_listing_both_tiers_and_due(self):
        got = etcd_backup.snapshots(listing(
            (self.PREFIX + "hourly/20261201T010000Z-a.db", 10, "2026-12-01T01:00:00+00:00"),
            (self.PREFIX + "hourly/20261201T000000Z-a.db", 9, "2026-12-01T00:00:00.000Z"),
            (self.PREFIX + "daily/20261130T000000Z-a.db", 8, "2026-11-30T00:00:00Z"),
            (self.PREFIX + "20261129T000000Z-a.db", 7, "2026-11-29T00:00:00Z"),
            (self.PREFIX + "notes.txt", 1, "2026-12-01T02:00:00Z"),
            (self.PREFIX + "old/x.db", 1, "2026-12-01T02:00:00Z"),
            (self.PREFIX + "hourly/deeper/x.db", 1, "2026-12-01T02:00:00Z"),
        ), self.PREFIX)
        self.assertEqual([(s["tier"], s["size"]) for s in got], [("", 7), ("daily/", 8), ("hourly/", 9), ("hourly/", 10)])
        hourly = [s for s in got if s["tier"] in ("hourly/", "")]
        newest = hourly[-1]["time"]
        self.assertFalse(etcd_backup.backup_due(hourly, newest + 1800, 3600))
        self.assertTrue(etcd_backup.backup_due(hourly, newest + 3590, 3600))
        self.assertTrue(etcd_backup.backup_due([], 0, 3600))
        self.assertEqual(etcd_backup.daily_key(self.PREFIX, self.PREFIX + "hourly/20261201T010000Z-a.db"),
                         self.PREFIX + "daily/20261201T010000Z-a.db")

    def test_keys_sort_by_time(self):
        a = etcd_backup.snapshot_key(self.PREFIX, 1764558000, "ip-10-0-1-5.ec2.internal")
        b = etcd_backup.snapshot_key(self.PREFIX, 1764561600, "ip-10-0-1-5.ec2.internal")
        self.assertTrue(a.startswith(self.PREFIX) and a.endswith(".db"))
        self.assertLess(a, b)
        self.assertNotIn("/", a[len(self.PREFIX):])


class Backup(WithFiles):
    def setUp(self):
        WithFiles.setUp(self)
        self.snap = os.path.join(self.root, "snapshot.db")

    def runner(self, leader=True):
        calls = []

        def run(argv):
            calls.append(list(argv))
            if argv[3:4] == ["ps"]:
                return "c0ffee\n"
            if "status" in argv:
                me = 7 if leader else 8
                return json.dumps([{"Endpoint": "e", "Status": {"header": {"member_id": me}, "leader": 7}}])
            if "save" in argv:
                with open(self.snap, "wb") as f:
                    f.write(b"x" * 123)
            return ""
        return run, calls

    def aws(self, existing, **failing):
        return FakeAws({("ssm", "get-parameter"): settings_answer(SETTINGS),
                        ("s3api", "list-objects-v2"): listing(*existing)}, failing)

    OLD = [("p/demo/etcd/2026110%dT000000Z-a.db" % i, 5, "2026-11-0%dT00:00:00Z" % i) for i in (1, 2, 3)]

    def test_only_the_leader_writes(self):
        run, calls = self.runner(leader=False)
        aws = self.aws(self.OLD)
        code, report = etcd_backup.backup_once(node(aws), run, FakeClock(), self.snap)
        self.assertEqual((code, report), (0, None))
        self.assertFalse([c for c in calls if "save" in c])
        self.assertFalse(aws.ops("s3", "cp"))
        # A follower publishes no metric (it records the raft term only).
        self.assertFalse(aws.ops("cloudwatch", "put-metric-data"))

    def test_the_leader_snapshots_encrypts_and_deletes_nothing(self):
        run, calls = self.runner()
        aws = self.aws(self.OLD)
        code, report = etcd_backup.backup_once(node(aws), run, FakeClock(), self.snap)
        self.assertEqual(code, 0)
        self.assertEqual((report["phase"], report["size"]), ("ok", 123))
        save = [c for c in calls if "save" in c][0]
        self.assertEqual(save[:5], ["crictl", "--runtime-endpoint", etcd.CRI, "exec", "c0ffee"])
        self.assertIn("/etc/kubernetes/pki/etcd/healthcheck-client.crt", save)
        # The hourly snapshot, and (no daily one yet) the same file to the daily tier.
        cps = aws.ops("s3", "cp")
        self.assertEqual(len(cps), 2, cps)
        self.assertTrue(cps[0][4].startswith("s3://b/p/demo/etcd/hourly/") and cps[0][4].endswith(".db"), cps)
        self.assertEqual(cps[1][4], "s3://b/" + etcd_backup.daily_key("p/demo/etcd/", cps[0][4][len("s3://b/"):]))
        self.assertEqual(report["daily"], cps[1][4][len("s3://b/"):])
        for cp in cps:
            self.assertEqual(cp[-4:], ["--sse", "aws:kms", "--sse-kms-key-id", SETTINGS["kmsKeyARN"]])
        # Retention is the bucket's lifecycle rules: no node deletes a snapshot.
        self.assertFalse(aws.ops("s3api", "delete-object"))
        self.assertFalse(os.path.exists(self.snap), "the local snapshot is left behind")
        # The leader's tick published etcd's metrics (metrics.py), in its namespace.
        put = aws.ops("cloudwatch", "put-metric-data")
        self.assertEqual([p[2:4] for p in put], [["--namespace", "kube-aws/etcd"]])

    def test_a_daily_snapshot_once_a_day(self):
        run, _ = self.runner()
        recent_daily = [("p/demo/etcd/daily/20261102T000000Z-a.db", 5, "2026-11-03T00:00:00Z")]
        clock = FakeClock(etcd.parse_time("2026-11-03T20:00:00Z"))
        aws = self.aws(self.OLD + recent_daily)
        code, report = etcd_backup.backup_once(node(aws), run, clock, self.snap)
        self.assertEqual(code, 0)
        self.assertEqual(len(aws.ops("s3", "cp")), 1, "a second daily snapshot within a day")
        self.assertNotIn("daily", report)

    def test_not_due_writes_nothing(self):
        run, calls = self.runner()
        clock = FakeClock(etcd.parse_time("2026-11-03T00:30:00Z"))
        code, report = etcd_backup.backup_once(node(self.aws(self.OLD)), run, clock, self.snap)
        self.assertEqual((code, report), (0, None))
        self.assertFalse([c for c in calls if "save" in c])

    def test_a_failed_upload_is_retried_then_reported(self):
        run, _ = self.runner()
        aws = self.aws(self.OLD)
        aws.failing = {("s3", "cp"): 3}
        clock = FakeClock()
        code, report = etcd_backup.backup_once(node(aws), run, clock, self.snap)
        self.assertEqual(code, 1)
        self.assertEqual(len(aws.ops("s3", "cp")), etcd.UPLOAD_ATTEMPTS)
        self.assertEqual(clock.slept, [10, 20])
        self.assertEqual(report["phase"], "failed")
        self.assertIn("SlowDown", report["message"])
        self.assertFalse(aws.ops("s3api", "delete-object"), "retention ran after a failed upload")
        # The main entry point writes the report where `kube-aws backups` reads it.
        aws2 = self.aws(self.OLD)
        aws2.failing = {("s3", "cp"): 3}
        saved = etcd_backup.backup_once
        try:
            etcd_backup.backup_once = lambda n, r, c, **kw: saved(n, r, c, self.snap, **kw)
            with Quiet():
                code = etcd_backup.etcd_backup_main([], aws2, imds=imds(), run=run, clock=FakeClock())
        finally:
            etcd_backup.backup_once = saved
        self.assertEqual(code, 1)
        put = aws2.ops("s3api", "put-object")
        self.assertEqual(len(put), 1)
        self.assertIn("p/demo/status/etcd/backup.json", put[0])

    def test_now_snapshots_on_a_follower_when_none_is_due_and_says_the_key(self):
        # `kube-aws-node etcd-backup --now`: the operator's snapshot before a
        # risky change. The timer's tick on the same follower, at the same
        # time, writes nothing (test_only_the_leader_writes, test_not_due_writes_nothing).
        run, calls = self.runner(leader=False)
        aws = self.aws(self.OLD)
        clock = FakeClock(etcd.parse_time("2026-11-03T00:30:00Z"))
        saved = etcd_backup.backup_once
        out = io.StringIO()
        try:
            etcd_backup.backup_once = lambda n, r, c, **kw: saved(n, r, c, self.snap, **kw)
            with redirect_stdout(out):
                code = etcd_backup.etcd_backup_main(["--now"], aws, imds=imds(), run=run, clock=clock)
        finally:
            etcd_backup.backup_once = saved
        self.assertEqual(code, 0)
        self.assertEqual(len([c for c in calls if "save" in c]), 1)
        # The follower first reads linearizably (it then has every committed write).
        barrier = [i for i, c in enumerate(calls) if "--consistency=l" in c]
        save = [i for i, c in enumerate(calls) if "save" in c]
        self.assertTrue(barrier and barrier[0] < save[0], calls)
        cps = aws.ops("s3", "cp")
        self.assertTrue(cps and cps[0][4].startswith("s3://b/p/demo/etcd/hourly/"), cps)
        self.assertIn("etcd backup ok: " + cps[0][4][len("s3://b/"):], out.getvalue())
        # A follower publishes no leader metric, --now or not.
        self.assertFalse(aws.ops("cloudwatch", "put-metric-data"))

    def test_a_bad_argument_is_refused_before_anything_runs(self):
        run, calls = self.runner()
        aws = self.aws(self.OLD)
        err = io.StringIO()
        with redirect_stderr(err):
            code = etcd_backup.etcd_backup_main(["--force"], aws, imds=imds(), run=run, clock=FakeClock())
        self.assertEqual(code, 2)
        self.assertIn("usage: kube-aws-node etcd-backup [--now]", err.getvalue())
        self.assertEqual((calls, aws.calls), ([], []))

    def test_a_retry_that_succeeds_is_not_a_failure(self):
        run, _ = self.runner()
        aws = self.aws(self.OLD)
        aws.failing = {("s3", "cp"): 1}
        code, report = etcd_backup.backup_once(node(aws), run, FakeClock(), self.snap)
        self.assertEqual((code, report["phase"]), (0, "ok"))


class Restore(WithFiles):
    SNAPS = [{"key": "p/demo/etcd/a.db", "size": 1, "time": 1.0}, {"key": "p/demo/etcd/b.db", "size": 1, "time": 2.0}]

    def test_decisions(self):
        d = etcd_restore.restore_decision
        self.assertEqual(d(True, False, 1, self.SNAPS)["action"], "init")
        self.assertEqual(d(False, True, 1, self.SNAPS)["action"], "join")
        r = d(False, False, 1, self.SNAPS)
        self.assertEqual((r["action"], r["key"]), ("restore", "p/demo/etcd/b.db"))
        self.assertEqual(d(False, False, 1, [])["action"], "fail")
        self.assertIn("no etcd snapshot", d(False, False, 1, [])["reason"])
        # Several controllers: never a one-member restore beside the others.
        self.assertEqual(d(False, False, 3, self.SNAPS)["action"], "join")

    def test_restore_commands_use_the_kubeadm_etcd_image_and_the_node_name(self):
        image = etcd_restore.etcd_image("registry.k8s.io/kube-apiserver:v1.35.4\nregistry.k8s.io/etcd:3.6.5-0\n"
                                "registry.k8s.io/coredns/coredns:v1.12.1\n")
        self.assertEqual(image, "registry.k8s.io/etcd:3.6.5-0")
        cmds = etcd_restore.restore_commands(image, "/var/lib/kube-aws/etcd-restore.db", "ip-10-0-1-5.ec2.internal",
                                     "10.0.1.5")
        self.assertEqual(cmds[0], ["ctr", "-n", "k8s.io", "images", "pull", image])
        # Already in containerd's store (a baked AMI): no pull, no registry.
        baked = etcd_restore.restore_commands(image, "/var/lib/kube-aws/etcd-restore.db", "ip-10-0-1-5.ec2.internal",
                                      "10.0.1.5", present=True)
        self.assertEqual(baked, cmds[1:])
        restore = cmds[1]
        i = restore.index("etcdutl")
        self.assertEqual(restore[i:i + 4], ["etcdutl", "snapshot", "restore", "/var/lib/kube-aws/etcd-restore.db"])
        self.assertIn("ip-10-0-1-5.ec2.internal=https://10.0.1.5:2380", restore)
        self.assertEqual(restore[restore.index("--data-dir") + 1], "/var/lib/etcd")

    def test_a_replaced_single_controller_restores_the_newest_snapshot(self):
        self.write(etcd.NODE_JSON, json.dumps({"kubernetesVersion": "1.35.4"}))
        os.makedirs(etcd.host("/var/lib/kube-aws"))
        single = dict(SETTINGS, controllerCount=1)

        def cp(args):
            with open(args[-1], "w") as f:
                f.write("snapshot")
        # The addon installer's record, as the reconciler left it before the loss.
        self.write(etcd.RECONCILER_JSON, json.dumps({"installedURI": "s3://b/p/demo/addons/installed.json"}))
        record = {"plan": "sha-now", "secretsVersions": ["v9"], "releases": [
            {"name": "dex", "namespace": "dex", "waitCondition": "wc-dex-2", "secrets": "h1"},
            {"name": "old-addon", "namespace": "kube-system", "waitCondition": "wc-old-1"}]}
        snaps = listing(("p/demo/etcd/20261201T000000Z-a.db", 5, "2026-12-01T00:00:00Z"),
                        ("p/demo/etcd/20261201T010000Z-a.db", 5, "2026-12-01T01:00:00Z"))
        put = {}

        def listed(args):
            prefix = args[args.index("--prefix") + 1]
            if prefix == "p/demo/addons/installed.json":
                return {"Contents": [{"Key": prefix, "ETag": '"e1"'}]}
            return snaps

        def get(args):
            with open(args[-1], "w") as f:
                json.dump(record, f)
            return {"ETag": '"e1"'}

        def put_object(args):
            with open(args[args.index("--body") + 1]) as f:
                put[args[args.index("--key") + 1]] = json.load(f)
            return {"ETag": '"e2"'}
        aws = FakeAws({("ssm", "get-parameter"): settings_answer(single),
                       ("s3api", "list-objects-v2"): listed, ("s3api", "get-object"): get,
                       ("s3api", "put-object"): put_object, ("s3", "cp"): cp})
        ran = []

        def run(argv):
            ran.append(argv)
            return "registry.k8s.io/etcd:3.6.5-0\n" if argv[:3] == ["kubeadm", "config", "images"] else ""
        with Quiet() as q:
            code = etcd_restore.etcd_restore_main([], aws, imds=imds(), run=run, clock=FakeClock(), answers=lambda e: False)
        self.assertEqual(code, 0)
        lines = [json.loads(l) for l in q.out.getvalue().splitlines()]
        self.assertEqual([l["action"] for l in lines], ["restore", "restored"])
        # The record says nothing is current: every release is brought to the plan again.
        reset = put["p/demo/addons/installed.json"]
        self.assertIsNone(reset["plan"])
        self.assertEqual(reset["restoredFrom"], "p/demo/etcd/20261201T010000Z-a.db")
        self.assertEqual([(r["name"], r["namespace"], r["waitCondition"]) for r in reset["releases"]],
                         [("dex", "dex", ""), ("old-addon", "kube-system", "")])
        self.assertEqual(put["p/demo/" + etcd_restore.RESTORE_STATUS]["addonRecord"], "reset")
        self.assertEqual(lines[1]["key"], "p/demo/etcd/20261201T010000Z-a.db")
        self.assertEqual(ran[0], ["kubeadm", "config", "images", "list", "--kubernetes-version", "1.35.4"])
        # Not in containerd's store yet (ls answers nothing): pulled, then run.
        self.assertEqual([a[:5] for a in ran[1:]], [["ctr", "-n", "k8s.io", "images", "ls"],
                                                    ["ctr", "-n", "k8s.io", "images", "pull"],
                                                    ["ctr", "-n", "k8s.io", "run", "--rm"]])
        self.assertIn("s3://b/p/demo/etcd/20261201T010000Z-a.db", aws.ops("s3", "cp")[0])
        self.assertIn("p/demo/status/etcd/restore.json", aws.ops("s3api", "put-object")[-1])

    def test_a_requested_restore_decides_first(self):
        d = etcd_restore.requested_restore_decision
        req = {"id": "r1", "key": "p/demo/etcd/hourly/20261201T000000Z-a.db"}
        r = d(req, True, "p/demo/etcd/")
        self.assertEqual((r["action"], r["key"], r["request"]), ("restore", req["key"], "r1"))
        self.assertEqual(d(req, False, "p/demo/etcd/")["action"], "join")
        # A key outside the cluster's snapshots is refused on the node too.
        self.assertEqual(d(dict(req, key="p/prod/etcd/hourly/x.db"), True, "p/demo/etcd/")["action"], "fail")

    def requested(self, lock_held, served=False, clean_after=0):
        """Three controllers, the API still answering, a request pending
        (served: the restorer's status object names it; from `clean_after`
        seconds on, or never when None, it says the old controllers are gone
        from the API). No addon was installed yet (no installed record)."""
        clock = FakeClock()
        self.write(etcd.NODE_JSON, json.dumps({"kubernetesVersion": "1.35.4"}))
        self.write(etcd.RECONCILER_JSON, json.dumps({"installedURI": "s3://b/p/demo/addons/installed.json"}))
        os.makedirs(etcd.host("/var/lib/kube-aws"))
        key = "p/demo/etcd/hourly/20261201T000000Z-a.db"

        def listed(args):
            prefix = args[args.index("--prefix") + 1]
            return listing((prefix, 5, "2026-12-01T00:00:00Z")) if prefix.endswith(etcd_restore.RESTORE_REQUEST) else {}

        def get(args):
            if args[args.index("--key") + 1].endswith(etcd_restore.RESTORE_STATUS):
                if not served:
                    raise etcd.AwsError("An error occurred (NoSuchKey) when calling the GetObject operation")
                clean = clean_after is not None and clock.now() >= START + clean_after
                with open(args[-1], "w") as f:
                    json.dump({"key": key, "request": "r1", "restoredAt": 1, "clean": clean}, f)
                return
            with open(args[-1], "w") as f:
                json.dump({"id": "r1", "key": key}, f)

        def put(args):
            if "--if-none-match" in args and lock_held:
                raise etcd_restore.locks.AwsError("An error occurred (PreconditionFailed) when calling the PutObject")

        def cp(args):
            with open(args[-1], "w") as f:
                f.write("snapshot")
        aws = FakeAws({("ssm", "get-parameter"): settings_answer(SETTINGS),
                       ("s3api", "list-objects-v2"): listed, ("s3api", "get-object"): get,
                       ("s3api", "put-object"): put, ("s3", "cp"): cp})
        run = lambda a: "registry.k8s.io/etcd:3.6.5-0\n" if a[:3] == ["kubeadm", "config", "images"] else ""  # noqa
        with Quiet() as q:
            code = etcd_restore.etcd_restore_main([], aws, imds=imds(), run=run, clock=clock, answers=lambda e: True)
        self.slept = sum(clock.slept)
        return code, [json.loads(l) for l in q.out.getvalue().splitlines()], aws, key

    def test_the_controller_that_takes_the_restore_lock_restores_the_requested_key(self):
        code, lines, aws, key = self.requested(lock_held=False)
        self.assertEqual(code, 0)
        self.assertEqual([l["action"] for l in lines], ["restore", "restored"])
        self.assertEqual(lines[1]["key"], key)
        lock = [c for c in aws.ops("s3api", "put-object") if "--if-none-match" in c][0]
        self.assertEqual(lock[lock.index("--key") + 1], "p/demo/" + etcd_restore.RESTORE_LOCK)
        self.assertIn("s3://b/" + key, aws.ops("s3", "cp")[0])

    def test_the_others_join_the_restored_one_once_its_old_controllers_are_gone(self):
        # The restorer serves the request and, 30 s later, says the
        # snapshot's old controllers are out of the API: the others wait for
        # that, then join.
        code, lines, aws, _ = self.requested(lock_held=True, served=True, clean_after=30)
        self.assertEqual(code, 0)
        self.assertEqual([l["action"] for l in lines], ["wait", "join"])
        self.assertEqual(self.slept, 30)
        self.assertFalse(aws.ops("s3", "cp"))

    def test_a_restorer_that_never_says_clean_is_waited_for_then_joined(self):
        code, lines, _, _ = self.requested(lock_held=True, served=False, clean_after=None)
        self.assertEqual(code, 0)
        self.assertEqual([l["action"] for l in lines], ["wait", "warning", "join"])
        self.assertEqual(self.slept, etcd_restore.RESTORE_CLEAN_WAIT)
        self.assertIn("did not say the old controllers are gone", lines[1]["reason"])

    def test_the_restorer_removes_the_old_controllers_then_says_clean(self):
        nodes = {"items": [
            {"metadata": {"name": "ip-10-0-1-5", "labels": {"node-role.kubernetes.io/control-plane": ""}}},
            {"metadata": {"name": "ip-10-0-1-9", "labels": {"node-role.kubernetes.io/control-plane": ""}}},
            {"metadata": {"name": "ip-10-0-2-7", "labels": {}}},
        ]}
        ran, written = [], []

        def run(argv):
            ran.append(argv)
            return json.dumps(nodes) if argv[3:5] == ["get", "nodes"] else ""

        def get(args):
            with open(args[-1], "w") as f:
                json.dump({"key": "k", "request": "r1", "restoredAt": 1}, f)

        def put(args):
            with open(args[args.index("--body") + 1]) as f:
                written.append(json.load(f))
        aws = FakeAws({("s3api", "get-object"): get, ("s3api", "put-object"): put})
        node = etcd.Node(aws, imds(), runtime=RUNTIME, etcd_json={})
        with Quiet():
            gone = etcd_restore.finish_restore(node, {"action": "restored", "key": "k"}, "ip-10-0-1-5", run=run,
                                       clock=FakeClock())
        # Only the other controller (not this one, not the worker), its pods first.
        self.assertEqual(gone, ["ip-10-0-1-9"])
        self.assertEqual([a[3:6] for a in ran[1:]], [["delete", "pods", "-n"], ["delete", "node", "ip-10-0-1-9"]])
        self.assertIn("spec.nodeName=ip-10-0-1-9", ran[1])
        self.assertEqual(written[-1]["request"], "r1")
        self.assertTrue(written[-1]["clean"])
        self.assertEqual(written[-1]["removedControllers"], ["ip-10-0-1-9"])

    def test_a_failed_cleanup_still_says_clean_so_no_joiner_waits_it_out(self):
        written = []

        def run(argv):
            raise RuntimeError("kubectl exited 1: the connection was refused")

        def put(args):
            with open(args[args.index("--body") + 1]) as f:
                written.append(json.load(f))
        aws = FakeAws({("s3api", "get-object"): None, ("s3api", "put-object"): put})
        node = etcd.Node(aws, imds(), runtime=RUNTIME, etcd_json={})
        with Quiet() as q:
            self.assertEqual(etcd_restore.finish_restore(node, {"action": "restored", "key": "k", "request": "r1"},
                                                 "ip-10-0-1-5", run=run, clock=FakeClock()), [])
        self.assertTrue(written[-1]["clean"])
        self.assertIn("connection was refused", written[-1]["cleanProblem"])
        self.assertIn("warning", q.out.getvalue())

    def test_a_served_request_is_over(self):
        # A controller booting after the restore (a rolling update) decides as
        # if no request were pending: three controllers join, and it neither
        # restores nor reads a snapshot.
        code, lines, aws, _ = self.requested(lock_held=True, served=True)
        self.assertEqual(code, 0)
        self.assertEqual([l["action"] for l in lines], ["join"])
        self.assertNotIn("request", lines[0])
        self.assertFalse(aws.ops("s3", "cp"))
        # Read once: clean, so served (nothing to wait for).
        status = [c for c in aws.ops("s3api", "get-object") if c[c.index("--key") + 1].endswith(etcd_restore.RESTORE_STATUS)]
        self.assertEqual(len(status), 1)

    def test_no_snapshot_fails_the_boot_with_the_reason(self):
        aws = FakeAws({("ssm", "get-parameter"): settings_answer(dict(SETTINGS, controllerCount=1)),
                       ("s3api", "list-objects-v2"): {}})
        with Quiet() as q:
            code = etcd_restore.etcd_restore_main([], aws, imds=imds(), run=lambda a: "", clock=FakeClock(),
                                          answers=lambda e: False)
        self.assertEqual(code, 1)
        lines = q.out.getvalue().splitlines()
        self.assertEqual(len(lines), 1)
        self.assertEqual(json.loads(lines[0])["action"], "fail")
        plan = etcd_restore.restore_if_needed(aws, False, imds(), lambda a: "", FakeClock(), lambda e: False,
                                      say=lambda line: None)
        self.assertIn("no etcd snapshot", plan["reason"])

    def test_an_answering_api_or_a_new_cluster_touches_no_snapshot(self):
        aws = FakeAws({("ssm", "get-parameter"): settings_answer(dict(SETTINGS, controllerCount=1))})
        for argv, answers, want in (([], lambda e: True, "join"), (["--took-init-lock"], lambda e: False, "init")):
            with Quiet() as q:
                code = etcd_restore.etcd_restore_main(argv, aws, imds=imds(), run=lambda a: "", clock=FakeClock(),
                                              answers=answers)
            self.assertEqual((code, json.loads(q.out.getvalue())["action"]), (0, want))
        # Only the restore request's exact key is listed (no request pending), no snapshot.
        self.assertEqual([c[c.index("--prefix") + 1] for c in aws.ops("s3api", "list-objects-v2")],
                         ["p/demo/" + etcd_restore.RESTORE_REQUEST])
        self.assertFalse(aws.ops("s3", "cp"))


if __name__ == "__main__":
    unittest.main()
