"""The weekly test restore: the newest hourly snapshot downloaded, `etcdutl
snapshot status` and `snapshot restore` into a scratch dir (never etcd's),
the result in status/etcd/test-restore.json, the scratch files removed.

etcdutl runs here through a fake runner that plays it (the test bed builds
etcd, not etcdutl): what is not covered is etcdutl's own output on a real
snapshot beyond the documented JSON fields of `snapshot status -w json`
(hash, revision, totalKey, totalSize: etcdutl/snapshot/v3_snapshot.go Status).
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kube_aws_node import etcd, testrestore  # noqa: E402
from etcd_fakes import SETTINGS, FakeAws, FakeClock, Quiet, WithFiles, imds, listing, settings_answer  # noqa: E402

IMAGE = "registry.k8s.io/etcd:3.6.5-0"


class TestRestore(WithFiles):
    def setUp(self):
        WithFiles.setUp(self)
        self.write(etcd.NODE_JSON, json.dumps({"kubernetesVersion": "1.35.4"}))

    def aws(self, *snaps):
        def cp(args):
            with open(args[-1], "wb") as f:
                f.write(b"snapshot bytes")
        return FakeAws({("ssm", "get-parameter"): settings_answer(SETTINGS),
                        ("s3api", "list-objects-v2"): listing(*snaps), ("s3", "cp"): cp})

    def runner(self, leader=True, restores=True, seen=None):
        seen = [] if seen is None else seen

        def run(argv):
            seen.append(list(argv))
            if argv[:3] == ["kubeadm", "config", "images"]:
                return IMAGE + "\n"
            if argv[3:4] == ["ps"]:
                return "c0ffee\n"
            if "endpoint" in argv:
                return json.dumps([{"Status": {"header": {"member_id": 7}, "leader": 7 if leader else 8}}])
            i = argv.index("etcdutl")
            tool = argv[i + 1:]
            self.assertEqual(argv[:i], testrestore.etcdutl(IMAGE, [])[:-1])
            self.assertTrue(os.path.exists(tool[2]), "etcdutl ran before the download")
            if tool[:2] == ["snapshot", "status"]:
                return json.dumps({"hash": 1234, "revision": 42, "totalKey": 7, "totalSize": 20480})
            if tool[:2] == ["snapshot", "restore"] and restores:
                d = tool[tool.index("--data-dir") + 1]
                os.makedirs(os.path.join(d, "member", "snap"))
                open(os.path.join(d, "member", "snap", "db"), "w").close()
            return ""
        return run, seen

    SNAPS = [("p/demo/etcd/hourly/20261201T010000Z-a.db", 5, "2026-12-01T01:00:00Z"),
             ("p/demo/etcd/hourly/20261201T020000Z-a.db", 5, "2026-12-01T02:00:00Z"),
             ("p/demo/etcd/daily/20261201T030000Z-a.db", 5, "2026-12-01T03:00:00Z")]

    def test_the_newest_hourly_snapshot_restores_into_a_scratch_dir(self):
        aws = self.aws(*self.SNAPS)
        run, seen = self.runner()
        with Quiet() as q:
            code = testrestore.test_restore_main([], aws, imds=imds(), run=run, clock=FakeClock())
        self.assertEqual(code, 0)
        out = json.loads(q.out.getvalue())
        self.assertEqual((out["phase"], out["key"], out["revision"], out["totalKey"]),
                         ("ok", "p/demo/etcd/hourly/20261201T020000Z-a.db", 42, 7))
        restore = [a for a in seen if "restore" in a][0]
        scratch = restore[restore.index("--data-dir") + 1]
        self.assertEqual(scratch, etcd.host(testrestore.SCRATCH_DIR))
        self.assertNotEqual(scratch, etcd.host(etcd.DATA_DIR))
        put = aws.ops("s3api", "put-object")[0]
        self.assertEqual(put[put.index("--key") + 1], "p/demo/" + testrestore.STATUS)
        # Nothing is left behind.
        self.assertFalse(os.path.exists(etcd.host(testrestore.SCRATCH_FILE)))
        self.assertFalse(os.path.exists(scratch))

    def test_a_failed_restore_or_no_snapshot_is_reported(self):
        run, _ = self.runner(restores=False)
        with Quiet() as q:
            code = testrestore.test_restore_main([], self.aws(*self.SNAPS), imds=imds(), run=run, clock=FakeClock())
        self.assertEqual(code, 1)
        out = json.loads(q.out.getvalue())
        self.assertEqual(out["phase"], "failed")
        self.assertIn("member/snap/db", out["message"])
        with Quiet() as q:
            code = testrestore.test_restore_main([], self.aws(), imds=imds(), run=self.runner()[0], clock=FakeClock())
        self.assertEqual((code, json.loads(q.out.getvalue())["phase"]), (1, "failed"))

    def test_only_the_leader_tests(self):
        aws = self.aws(*self.SNAPS)
        run, seen = self.runner(leader=False)
        self.assertEqual(testrestore.test_restore_main([], aws, imds=imds(), run=run, clock=FakeClock()), 0)
        self.assertFalse(aws.ops("s3", "cp"))


if __name__ == "__main__":
    unittest.main()
