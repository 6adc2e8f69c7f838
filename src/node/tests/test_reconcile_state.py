"""reconcile: what a tick does from the recorded state (outcome, due
signals), reading and writing the installed record, signalling from it, and
the decryption before each run."""
import base64
import io
import json
import os
import shutil
import tempfile
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import addon_record, reconcile, secrets
from kube_aws_node.awscall import AwsError
from kube_aws_node.console import Console

RELEASES = [{"name": "cni", "waitCondition": "WcCni1", "namespace": "kube-system"},
            {"name": "dns", "waitCondition": "WcDns2", "namespace": "dns"}]


def rec(plan, releases, versions=("v1",), **extra):
    doc = {"plan": plan, "secretsVersions": list(versions),
           "releases": [{"name": n, "namespace": "ns", "waitCondition": w} for n, w in releases]}
    doc.update(extra)
    return doc


class Outcome(unittest.TestCase):
    def test_done_when_every_release_is_recorded_at_its_wait_condition(self):
        doc = rec("p1", [("cni", "WcCni1"), ("dns", "WcDns2")])
        self.assertEqual(addon_record.outcome(doc, "p1", "v1", RELEASES, 0), addon_record.DONE)

    def test_a_release_missing_or_at_another_wait_condition_is_installed(self):
        doc = rec("p1", [("cni", "WcCni1"), ("dns", "WcDnsOld")])
        self.assertEqual(addon_record.outcome(doc, "p1", "v1", RELEASES, 0), addon_record.INSTALL)
        doc = rec("p1", [("cni", "WcCni1")])
        self.assertEqual(addon_record.outcome(doc, "p1", "v1", RELEASES, 0), addon_record.INSTALL)

    def test_a_dropped_release_still_recorded_is_not_done(self):
        doc = rec("p1", [("cni", "WcCni1"), ("dns", "WcDns2"), ("old", "WcOld")])
        self.assertEqual(addon_record.outcome(doc, "p1", "v1", RELEASES, 0), addon_record.INSTALL)

    def test_a_plan_rolled_back_to_is_applied_again(self):
        # CloudFormation put the pointer back on p1; the record is of p2.
        doc = rec("p2", [("cni", "WcCni1"), ("dns", "WcDns2")])
        self.assertEqual(addon_record.outcome(doc, "p1", "v1", RELEASES, 0), addon_record.INSTALL)

    def test_another_secrets_version_runs_once(self):
        doc = rec("p1", [("cni", "WcCni1"), ("dns", "WcDns2")])
        self.assertEqual(addon_record.outcome(doc, "p1", "v2", RELEASES, 0), addon_record.INSTALL)
        doc["secretsVersions"].append("v2")
        self.assertEqual(addon_record.outcome(doc, "p1", "v1", RELEASES, 0), addon_record.DONE)

    def test_failures_wait_for_retry_after(self):
        doc = rec("p1", [("cni", "WcCni1")], retryAfter=100)
        self.assertEqual(addon_record.outcome(doc, "p1", "v1", RELEASES, 99), addon_record.LATER)
        self.assertEqual(addon_record.outcome(doc, "p1", "v1", RELEASES, 100), addon_record.INSTALL)
        # retryAfter is about its own plan only.
        self.assertEqual(addon_record.outcome(doc, "p2", "v1", RELEASES, 99), addon_record.INSTALL)

    def test_nothing_recorded(self):
        self.assertEqual(addon_record.outcome({"releases": []}, "p1", "", RELEASES, 0), addon_record.INSTALL)

    def test_due_signals_are_the_plans_releases_recorded_at_its_wait_condition_not_yet_signalled(self):
        doc = rec("p1", [("cni", "WcCni1"), ("dns", "WcDnsOld")])
        self.assertEqual(addon_record.due_signals(doc, RELEASES), [("cni", "WcCni1")])
        doc["releases"][0]["signalled"] = True
        self.assertEqual(addon_record.due_signals(doc, RELEASES), [])


class FakeAws(object):
    """S3 (list-objects-v2, get-object, put-object with conditions) and CloudFormation."""

    def __init__(self):
        self.objects = {}
        self.calls = []
        self.deny = set()
        self.stack_status = "UPDATE_IN_PROGRESS"
        self.wc = {}
        self.parameters = {}

    def __call__(self, args, attempts=None):
        self.calls.append(list(args))
        a = list(args)
        if a[0] == "s3api":
            key = a[a.index("--key") + 1] if "--key" in a else a[a.index("--prefix") + 1]
            if key in self.deny:
                raise AwsError("An error occurred (AccessDenied) when calling the %s operation: Access Denied" % a[1],
                               "AccessDenied")
            if a[1] == "list-objects-v2":
                keys = sorted(k for k in self.objects if k.startswith(key))[:1]
                return {"Contents": [{"Key": k} for k in keys]} if keys else {}
            if a[1] == "get-object":
                if key not in self.objects:
                    raise AwsError("An error occurred (NoSuchKey) when calling the GetObject operation", "NoSuchKey")
                with open(a[-1], "wb") as f:
                    f.write(self.objects[key][0])
                return {"ETag": self.objects[key][1]}
            if a[1] == "put-object":
                have = self.objects.get(key)
                if "--if-none-match" in a and have is not None:
                    raise AwsError("An error occurred (PreconditionFailed) when calling the PutObject operation",
                                   "PreconditionFailed")
                if "--if-match" in a and (have is None or have[1] != a[a.index("--if-match") + 1]):
                    raise AwsError("An error occurred (PreconditionFailed) when calling the PutObject operation",
                                   "PreconditionFailed")
                with open(a[a.index("--body") + 1], "rb") as f:
                    body = f.read()
                etag = '"e%d"' % len(self.calls)
                self.objects[key] = (body, etag)
                return {"ETag": etag}
        if a[0] == "cloudformation":
            if a[1] == "describe-stacks":
                return {"Stacks": [{"StackStatus": self.stack_status}]}
            wc = a[a.index("--logical-resource-id") + 1]
            if a[1] == "describe-stack-resource":
                if wc not in self.wc:
                    raise AwsError("Resource %s does not exist for stack s" % wc)
                return {"StackResourceDetail": {"ResourceStatus": self.wc[wc]}}
            if a[1] == "signal-resource":
                self.wc[wc] = "CREATE_COMPLETE"
                return None
        if a[0] == "kms" and a[1] == "decrypt":
            blob = a[a.index("--ciphertext-blob") + 1][len("fileb://"):]
            with open(blob, "rb") as f:
                return base64.b64encode(f.read()).decode()
        if a[:2] == ["ssm", "get-parameter"]:
            return {"Parameter": {"Value": self.parameters[a[a.index("--name") + 1]]}}
        if a[:2] == ["s3", "cp"]:
            body = self.objects[a[-2][len("s3://b/"):]][0]
            with open(a[-1], "wb") as f:
                f.write(body)
            return None
        raise AssertionError(a)

    def signals(self):
        return [c[c.index("--logical-resource-id") + 1] for c in self.calls if c[:2] == ["cloudformation",
                                                                                        "signal-resource"]]


KEY = "k/status/addons/installed.json"


class Base(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.old_root = os.environ.get("KUBE_AWS_ROOT")
        os.environ["KUBE_AWS_ROOT"] = self.root
        self.aws = FakeAws()
        self.stream = io.StringIO()
        self.r = reconcile.Reconciler(Console("kube-aws-addons", stream=self.stream, timestamps=False), self.aws,
                                      {"stackName": "s", "bucket": "b", "keyPrefix": "k", "secretsVersion": "v1",
                                       "cluster": "c", "secretBundleParameter": "/kube-aws/c/secret-bundle/controller"},
                                      {"planParameter": "/p", "installedURI": "s3://b/" + KEY})
        os.makedirs(self.r.work)
        self.r.releases = RELEASES
        self.r.by_name = dict((x["name"], x) for x in RELEASES)
        self.r.plan_sha = "p1"

    def tearDown(self):
        shutil.rmtree(self.root)
        if self.old_root is None:
            del os.environ["KUBE_AWS_ROOT"]
        else:
            os.environ["KUBE_AWS_ROOT"] = self.old_root


class InstalledRecord(Base):
    def test_only_a_missing_record_is_nothing_installed(self):
        self.aws.objects[KEY + ".bak"] = (b"{}", '"x"')  # a key beside it is not it
        got = self.r.load_installed()
        self.assertEqual(got, addon_record.Record({"releases": []}, None))
        ops = [c[1] for c in self.aws.calls]
        self.assertEqual(ops, ["list-objects-v2"])

    def test_a_denied_read_stops_the_run(self):
        self.aws.deny.add(KEY)
        with self.assertRaises(addon_record.Stop) as e:
            self.r.load_installed()
        self.assertIn("AccessDenied", str(e.exception))

    def test_a_record_that_is_not_json_stops_the_run(self):
        self.aws.objects[KEY] = (b"{not json", '"x"')
        with self.assertRaises(addon_record.Stop):
            self.r.load_installed()

    def test_a_record_is_read_with_its_etag(self):
        self.aws.objects[KEY] = (json.dumps(rec("p1", [("cni", "WcCni1")])).encode(), '"x"')
        got = self.r.load_installed()
        self.assertEqual(got.etag, '"x"')
        self.assertEqual(addon_record.recorded(got.doc)["cni"]["waitCondition"], "WcCni1")

    def test_the_record_is_written_if_none_match_then_if_match_and_a_foreign_write_stops_the_run(self):
        self.r.rec = {"cni": {"name": "cni", "namespace": "kube-system", "waitCondition": "WcCni1"}}
        self.r.record()
        first = self.aws.calls[-1]
        self.assertEqual(first[first.index("--if-none-match") + 1], "*")
        etag = self.aws.objects[KEY][1]
        self.r.record()
        second = self.aws.calls[-1]
        self.assertEqual(second[second.index("--if-match") + 1], etag)
        doc = json.loads(self.aws.objects[KEY][0])
        self.assertEqual(doc["plan"], "p1")
        self.assertEqual(doc["releases"], [{"name": "cni", "namespace": "kube-system", "waitCondition": "WcCni1"}])
        # Another controller wrote it since (it took the lease over): this run stops.
        self.aws.objects[KEY] = (b"{}", '"theirs"')
        with self.assertRaises(addon_record.Stop) as e:
            self.r.record()
        self.assertIn("written by another controller", str(e.exception))
        self.assertEqual(self.aws.objects[KEY][0], b"{}")


class SignalFromRecord(Base):
    def test_a_recorded_release_whose_wait_condition_waits_is_signalled_by_any_controller(self):
        self.aws.wc = {"WcCni1": "CREATE_IN_PROGRESS", "WcDns2": "CREATE_IN_PROGRESS"}
        doc = rec("p1", [("cni", "WcCni1"), ("dns", "WcDnsOld")])
        settled = self.r.signal_recorded(doc)
        self.assertEqual(self.aws.signals(), ["WcCni1"])
        self.assertEqual(settled, [("cni", "WcCni1")])
        self.assertIn("WcCni1 (cni) signalled SUCCESS", self.stream.getvalue())
        sig = [c for c in self.aws.calls if c[1] == "signal-resource"][0]
        self.assertEqual(sig[sig.index("--status") + 1], "SUCCESS")

    def test_complete_missing_or_signalled_ones_are_not_and_a_settled_stack_is_not_asked(self):
        self.aws.wc = {"WcCni1": "CREATE_COMPLETE"}
        doc = rec("p1", [("cni", "WcCni1"), ("dns", "WcDns2")])
        self.assertEqual(self.r.signal_recorded(doc), [("cni", "WcCni1")])
        self.assertEqual(self.aws.signals(), [])
        self.aws.calls = []
        self.aws.stack_status = "UPDATE_COMPLETE"
        self.assertEqual(self.r.signal_recorded(doc), [])
        self.assertEqual([c[1] for c in self.aws.calls], ["describe-stacks"])
        self.aws.calls = []
        for e in doc["releases"]:
            e["signalled"] = True
        self.r.signal_recorded(doc)
        self.assertEqual(self.aws.calls, [])


class HeldByVersions(Base):
    """The minor upgrade's phases as the reconciler keeps them: controllers,
    then pools, then the plan (upgrade.py `nodes_behind` decides who is
    behind; this is when it holds the plan)."""

    def nodes(self, *kubelets):
        items = [{"metadata": {"name": name,
                               "labels": {"node-role.kubernetes.io/control-plane": ""} if name.startswith("c") else {}},
                  "status": {"nodeInfo": {"kubeletVersion": v}, "conditions": [{"type": "Ready", "status": "True"}]}}
                 for name, v in kubelets]
        self.r.run = lambda cmd, **kw: (0, json.dumps({"items": items})) if cmd[:3] == ["kubectl", "get", "nodes"] \
            else (1, "unexpected")

    def test_a_controller_behind_holds_the_plan_without_asking_the_stack(self):
        self.r.plan = {"kubernetesVersion": "1.36.3"}
        self.nodes(("c1", "v1.36.3"), ("c2", "v1.35.8"), ("w1", "v1.35.8"))
        self.assertIn("waits until every controller runs it (behind: c2)", self.r.held_by_versions())
        self.assertEqual(self.aws.calls, [])

    def test_a_worker_behind_holds_the_plan_while_the_update_rolls_the_pools(self):
        self.r.plan = {"kubernetesVersion": "1.36.3"}
        self.nodes(("c1", "v1.36.3"), ("w1", "v1.35.8"), ("w2", "v1.36.3"))
        self.aws.stack_status = "UPDATE_IN_PROGRESS"
        self.assertIn("waits until the update has rolled the pools (behind: w1)", self.r.held_by_versions())
        self.assertEqual([c[:2] for c in self.aws.calls], [["cloudformation", "describe-stacks"]])

    def test_outside_an_update_a_worker_behind_holds_nothing(self):
        # A pool whose roll failed (UPDATE_FAILED, rollback disabled), or a node
        # kube-aws does not manage: the skew policy allows older kubelets.
        self.r.plan = {"kubernetesVersion": "1.36.3"}
        self.nodes(("c1", "v1.36.3"), ("w1", "v1.35.8"))
        for status in ("UPDATE_FAILED", "UPDATE_COMPLETE"):
            self.aws.stack_status = status
            self.assertIsNone(self.r.held_by_versions())

    def test_nodes_at_the_minor_or_no_version_hold_nothing(self):
        self.r.plan = {"kubernetesVersion": "1.36.3"}
        self.nodes(("c1", "v1.36.1"), ("w1", "v1.36.3"))
        self.aws.stack_status = "UPDATE_IN_PROGRESS"
        self.assertIsNone(self.r.held_by_versions())
        self.r.plan = {}
        self.assertIsNone(self.r.held_by_versions())
        self.assertEqual(self.aws.calls, [])


class DecryptBeforeEachRun(Base):
    def test_only_the_plugin_secrets_are_decrypted_into_the_store(self):
        bundle = {"encryptionContext": {"kube-aws:cluster": "c"},
                  "secrets": {"kube-aws-secret.dex.pw": base64.b64encode(b"pw-value").decode(),
                              "pki/ca.key": base64.b64encode(b"ca").decode()}}
        key = "secrets/%s/bundle.json" % ("0" * 64)
        self.aws.parameters["/kube-aws/c/secret-bundle/controller"] = key
        self.aws.objects["k/" + key] = (json.dumps(bundle).encode(), '"b"')
        node = {"secrets": {"names": ["kube-aws-secret.dex.pw", "pki/ca.key"],
                            "pki": {"dir": "/etc/kubernetes/pki", "keys": ["pki/ca.key"], "certificates": []},
                            "files": [{"path": "/etc/x.yaml", "format": "yaml"}]}}
        secrets.decrypt_plugin_secrets(self.aws, self.r.runtime, node)
        store = secrets.store_dir()
        with open(os.path.join(store, "kube-aws-secret.dex.pw")) as f:
            self.assertEqual(f.read(), "pw-value")
        self.assertFalse(os.path.exists(os.path.join(store, "pki")))
        self.assertFalse(os.path.exists(os.path.join(self.root, "etc/kubernetes/pki")))
        decrypts = [c for c in self.aws.calls if c[:2] == ["kms", "decrypt"]]
        self.assertEqual(len(decrypts), 1)


class Unstick(Base):
    """A release a stopped installer left pending is undone before helm runs again."""

    def setUp(self):
        Base.setUp(self)
        self.r.helm_major = 3
        self.r.tiller_ns = "kube-system"
        self.r.attempts = 1
        self.r.delay = 0
        self.r.scratch = os.path.join(self.root, "scratch")
        os.makedirs(self.r.scratch)
        self.ran = []
        self.history = (1, "")

        def run(args, out=None):
            self.ran.append(list(args))
            if args[1] == "history":
                return self.history
            return 0, ""
        self.r.run = run

    def test_a_pending_install_is_uninstalled(self):
        self.history = (0, '[{"revision":1,"status":"pending-install"}]')
        self.r.unstick("dns", "dns", 60)
        self.assertEqual(self.ran[-1][1:], ["uninstall", "dns", "--namespace", "dns", "--wait"])
        self.assertIn("left pending-install at revision 1", self.stream.getvalue())

    def test_a_pending_upgrade_is_rolled_back_to_the_revision_before_it(self):
        self.history = (0, 'WARNING: something\n[{"revision":4,"status":"pending-upgrade"}]')
        self.r.unstick("dns", "dns", 60)
        self.assertEqual(self.ran[-1][1:], ["rollback", "dns", "3", "--wait", "--namespace", "dns", "--timeout", "60s"])

    def test_helm_v2_statuses_and_flags(self):
        self.r.helm_major = 2
        self.history = (0, '[{"revision":2,"status":"PENDING_ROLLBACK"}]')
        self.r.unstick("dns", "dns", 60)
        self.assertEqual(self.ran[-1][1:], ["rollback", "dns", "1", "--wait", "--tiller-namespace", "kube-system",
                                            "--timeout", "60"])

    def test_a_deployed_or_unknown_release_is_left_alone(self):
        for h in [(0, '[{"revision":2,"status":"deployed"}]'), (1, "Error: release: not found"), (0, "garbage")]:
            self.ran = []
            self.history = h
            self.r.unstick("dns", "dns", 60)
            self.assertEqual([a[1] for a in self.ran], ["history"], h)


if __name__ == "__main__":
    unittest.main()
