"""reconcile.Reconciler.install_releases: the parallel driver, with the
per-release work, status and signals stubbed (tests/it/installer.rs runs the
whole reconciler under recording fakes)."""
import io
import json
import re
import threading
import time
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node.console import Console
from kube_aws_node.reconcile import Reconciler


def plan(releases, concurrency):
    return {
        "cluster": "c", "statusURI": "s3://b/status/", "retries": {"attempts": 1, "delaySeconds": 0},
        "helm": {"version": 3, "tiller": {"namespace": "kube-system"}}, "concurrency": concurrency,
        "nodeReadyTimeoutSeconds": 1, "manifests": [],
        "releases": [{"name": n, "dependsOn": list(d), "bootstrap": b, "waitCondition": "Wc" + n,
                      "namespace": "ns"} for n, d, b in releases],
    }


class Driver(Reconciler):
    """The real scheduling loop; installs sleep and record overlap."""

    def __init__(self, p, fail=(), node_ready=True, rollout_code=0):
        self.stream = io.StringIO()
        self.log = Console("kube-aws-addons", stream=self.stream)
        self.plan = p
        self.concurrency = p["concurrency"]
        self.releases = p["releases"]
        self.by_name = dict((r["name"], r) for r in self.releases)
        self.finished = {}
        self.bad = 0
        self.fail = set(fail)
        self.node_ready = node_ready
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.started = []
        self.events = []
        self.rollout_code = rollout_code

    def run(self, args, out=None):
        """Only `kubectl rollout status` reaches a command here."""
        self.events.append(("run", " ".join(args), ""))
        return self.rollout_code, "" if self.rollout_code == 0 else "error: timed out waiting for the condition\n"

    def install(self, r):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.started.append(r["name"])
            self.events.append(("start", r["name"], ""))
        for i in range(20):
            # Many lines from many threads: none may be cut by another.
            self.log("line %d of a long message from %s %s" % (i, r["name"], "x" * 200), r["name"])
        time.sleep(0.05)
        with self.lock:
            self.active -= 1
        return ("failed", "boom\n") if r["name"] in self.fail else ("ready", "")

    def finish(self, name, phase, message=""):
        self.finished[name] = phase
        self.events.append((name, phase, message))

    def apply_manifests(self):
        self.events.append(("manifests", "", ""))

    def wait_until(self, seconds, probe):
        self.events.append(("gate", "", ""))
        return self.node_ready


WIDE = [("cni", (), True)] + [("r%d" % i, ("cni",), False) for i in range(8)] + [("last", ("r0", "r7"), False)]


class InstallReleases(unittest.TestCase):
    def test_independent_releases_run_side_by_side_up_to_the_bound(self):
        d = Driver(plan(WIDE, 3))
        d.install_releases({})
        self.assertEqual(d.peak, 3)
        self.assertEqual(d.started[0], "cni")
        self.assertEqual(d.started[-1], "last")
        self.assertTrue(all(p == "ready" for p in d.finished.values()))
        self.assertEqual(len(d.finished), 10)
        # The manifests and the Ready gate come once, after the bootstrap addon, before the rest.
        kinds = [e[0] for e in d.events]
        self.assertEqual(kinds.count("gate"), 1)
        self.assertLess(kinds.index("cni"), kinds.index("manifests"))
        self.assertLess(kinds.index("manifests"), kinds.index("r0"))

    def test_log_lines_are_whole_and_name_their_release(self):
        d = Driver(plan(WIDE, 4))
        d.install_releases({})
        line = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ kube-aws-addons: (\S+): line \d+ of a long message "
                          r"from (\S+) x{200}$")
        lines = d.stream.getvalue().splitlines()
        self.assertEqual(len(lines), 200)
        for l in lines:
            m = line.match(l)
            self.assertIsNotNone(m, l)
            self.assertEqual(m.group(1), m.group(2))

    def test_one_at_a_time_with_concurrency_one(self):
        d = Driver(plan(WIDE, 1))
        d.install_releases({})
        self.assertEqual(d.peak, 1)
        self.assertEqual(d.started, ["cni"] + ["r%d" % i for i in range(8)] + ["last"])

    def test_dependants_of_a_failure_are_skipped_and_the_rest_goes_on(self):
        d = Driver(plan(WIDE, 4), fail={"r7"})
        d.install_releases({})
        self.assertEqual(d.finished["r7"], "failed")
        self.assertEqual(d.finished["last"], "skipped")
        self.assertIn(("last", "skipped", "skipped: it depends on r7, which is failed\n"), d.events)
        self.assertEqual(sum(1 for p in d.finished.values() if p == "ready"), 8)

    def test_unchanged_releases_are_not_installed_again(self):
        d = Driver(plan(WIDE, 4))
        d.install_releases({"cni": {"waitCondition": "Wccni"}, "r3": {"waitCondition": "old"}})
        self.assertNotIn("cni", d.started)
        self.assertIn("r3", d.started)
        self.assertNotIn("cni", [e[0] for e in d.events])

    def test_no_ready_node_fails_every_non_bootstrap_release(self):
        d = Driver(plan(WIDE, 4), node_ready=False)
        d.install_releases({})
        self.assertEqual(d.started, ["cni"])
        self.assertTrue(all(d.finished["r%d" % i] == "failed" for i in range(8)))
        self.assertEqual(d.finished["last"], "skipped")

    def test_manifest_rollouts_are_waited_for_after_the_gate_and_before_other_releases(self):
        p = plan(WIDE, 4)
        p["manifestRollouts"] = [{"manifest": "manifests/pod-identity-webhook/webhook.yaml", "kind": "Deployment",
                                  "namespace": "kube-system", "name": "pod-identity-webhook",
                                  "timeoutSeconds": 300}]
        d = Driver(p)
        d.install_releases({})
        kinds = [e[0] if e[0] != "start" else "start " + e[1] for e in d.events
                 if e[0] in ("manifests", "gate", "run", "start")]
        self.assertEqual(kinds[:4], ["start cni", "manifests", "gate", "run"], kinds)
        self.assertIn("kubectl -n kube-system rollout status deployment/pod-identity-webhook --timeout=300s",
                      [e[1] for e in d.events if e[0] == "run"])
        self.assertEqual(sum(1 for e in d.events if e[0] == "run"), 1, "waited once per plan")
        self.assertTrue(all(ph == "ready" for ph in d.finished.values()))

    def test_a_rollout_that_does_not_finish_is_logged_and_the_releases_go_on(self):
        p = plan(WIDE, 4)
        p["manifestRollouts"] = [{"manifest": "m", "kind": "Deployment", "namespace": "kube-system",
                                  "name": "pod-identity-webhook", "timeoutSeconds": 1}]
        d = Driver(p, rollout_code=1)
        d.install_releases({})
        self.assertIn("did not roll out within 1s", d.stream.getvalue())
        self.assertTrue(all(ph == "ready" for ph in d.finished.values()))

    def test_no_rollouts_no_wait(self):
        d = Driver(plan(WIDE, 4))
        d.install_releases({})
        self.assertFalse([e for e in d.events if e[0] == "run"])


if __name__ == "__main__":
    unittest.main()


class AfterRestore(unittest.TestCase):
    """The record a restore leaves (etcd_restore.py reset_installed_record): nothing current, nothing forgotten."""

    def test_every_release_is_brought_to_the_plan_again_and_dropped_ones_still_go(self):
        from kube_aws_node import addon_record
        plan = [{"name": "dex", "waitCondition": "wc-dex-2"}, {"name": "metrics", "waitCondition": "wc-m-1"}]
        doc = {"plan": "sha", "secretsVersions": ["v1"], "retryAfter": 5,
               "releases": [{"name": "dex", "namespace": "dex", "waitCondition": "wc-dex-2"},
                            {"name": "metrics", "namespace": "kube-system", "waitCondition": "wc-m-1"},
                            {"name": "gone", "namespace": "kube-system", "waitCondition": "wc-g-1"}]}
        self.assertEqual(addon_record.outcome(doc, "sha", "v1", plan, 0), addon_record.LATER)
        after = addon_record.after_restore(doc, "p/demo/etcd/hourly/x.db")
        self.assertEqual(addon_record.outcome(after, "sha", "v1", plan, 0), addon_record.INSTALL)
        rec = addon_record.recorded(after)
        self.assertFalse([r for r in plan if addon_record.current(rec.get(r["name"]), r)])
        self.assertEqual(rec["gone"]["namespace"], "kube-system", "a dropped release is still uninstalled")
        self.assertNotIn("retryAfter", after)
        self.assertEqual(doc["releases"][0]["waitCondition"], "wc-dex-2", "the input is not changed")


def storage_item(name, ns, version, status, major=3):
    if major == 3:
        labels = {"owner": "helm", "name": name, "status": status, "version": str(version)}
    else:
        labels = {"OWNER": "TILLER", "NAME": name, "STATUS": status, "VERSION": str(version)}
    return {"metadata": {"name": "sh.helm.release.v1.%s.v%d" % (name, version), "namespace": ns, "labels": labels}}


class PresentReleases(unittest.TestCase):
    """What helm's storage says is installed, and the record matched to it after a restore."""

    def test_helm3_takes_each_releases_latest_revision(self):
        from kube_aws_node import helm_release
        listing = {"items": [
            storage_item("dex", "dex", 1, "superseded"), storage_item("dex", "dex", 2, "deployed"),
            storage_item("gone", "kube-system", 1, "deployed"), storage_item("gone", "kube-system", 2, "uninstalled"),
            storage_item("failed", "kube-system", 3, "failed"),
            storage_item("dex", "other", 1, "deployed"),
            {"metadata": {"namespace": "x", "labels": {"owner": "helm", "name": "bad", "version": "v1"}}},
            "not an object"]}
        self.assertEqual(helm_release.present_releases(listing, 3),
                         {("dex", "dex"), ("failed", "kube-system"), ("dex", "other")})
        self.assertEqual(helm_release.present_releases({}, 3), set())

    def test_helm2_names_are_cluster_wide_and_deleted_is_gone(self):
        from kube_aws_node import helm_release
        listing = {"items": [storage_item("dex", "kube-system", 1, "DEPLOYED", 2),
                             storage_item("old", "kube-system", 1, "DELETED", 2)]}
        self.assertEqual(helm_release.present_releases(listing, 2), {("dex", None)})
        self.assertEqual(helm_release.storage_listing(2, "tiller-ns"),
                         ["kubectl", "get", "configmaps", "-n", "tiller-ns", "-l", "OWNER=TILLER", "-o", "json"])
        self.assertIn("--all-namespaces", helm_release.storage_listing(3, "kube-system"))

    def test_the_record_keeps_only_what_is_present_in_its_namespace(self):
        from kube_aws_node import addon_record
        rec = {"dex": {"name": "dex", "namespace": "dex"}, "ghost": {"name": "ghost", "namespace": "ghost"},
               "moved": {"name": "moved", "namespace": "a"}}
        struck = addon_record.match_present(rec, {("dex", "dex"), ("moved", "b")}, 3)
        self.assertEqual(struck, ["ghost", "moved"])
        self.assertEqual(sorted(rec), ["dex"])
        rec2 = {"dex": {"name": "dex", "namespace": "dex"}}
        self.assertEqual(addon_record.match_present(rec2, {("dex", None)}, 2), [])

    class Restored(Reconciler):
        def __init__(self, answer, major=3):
            self.stream = io.StringIO()
            self.log = Console("kube-aws-addons", stream=self.stream)
            self.helm_major, self.tiller_ns = major, "kube-system"
            self.answer, self.calls, self.written = answer, [], []
            self.rec = {"demo": {"name": "demo", "namespace": "demo", "waitCondition": ""},
                        "ghost": {"name": "ghost", "namespace": "ghost", "waitCondition": ""}}

        def run(self, args, out=None):
            self.calls.append(args)
            return self.answer

        def record(self, final=False):
            self.written.append(sorted(self.rec))

    def test_after_a_restore_the_record_is_written_with_the_present_releases_only(self):
        listing = json.dumps({"items": [storage_item("demo", "demo", 1, "deployed")]})
        r = self.Restored((0, "Warning: something kubectl says first\n" + listing))
        r.match_restored("clusters/c/etcd/x.db")
        self.assertEqual(r.written, [["demo"]])
        self.assertIn("ghost", r.stream.getvalue())
        self.assertIn("not in the restored snapshot clusters/c/etcd/x.db", r.stream.getvalue())

    def test_a_listing_that_fails_changes_nothing(self):
        for answer in [(1, "error: the server doesn't have a resource type"), (0, "not json")]:
            r = self.Restored(answer)
            r.match_restored("k")
            self.assertEqual(r.written, [])
            self.assertEqual(sorted(r.rec), ["demo", "ghost"])
            self.assertIn("going on from the record", r.stream.getvalue())


class Uninstall(unittest.TestCase):
    """Reconciler.uninstall: a release helm does not know is gone already."""

    class Helm(Reconciler):
        def __init__(self, history, major=3):
            self.stream = io.StringIO()
            self.log = Console("kube-aws-addons", stream=self.stream)
            self.helm, self.helm_major, self.tiller_ns, self.scratch = "helm", major, "kube-system", "/nonexistent"
            self.history, self.calls = history, []

        def run(self, args, out=None):
            self.calls.append(" ".join(args))
            return self.history

        def retried(self, args, out=None):
            self.calls.append(" ".join(args))

    def test_a_release_helm_does_not_know_is_not_asked_to_go(self):
        for major, said in [(3, "Error: release: not found\n"), (2, 'Error: release: "gone" not found\n')]:
            r = self.Helm((1, said), major)
            self.assertTrue(r.uninstall("gone", "kube-system"))
            self.assertEqual(len(r.calls), 1, r.calls)
            self.assertIn("history gone", r.calls[0])
            self.assertIn("nothing to uninstall", r.stream.getvalue())

    def test_a_present_release_or_an_unreachable_cluster_is_uninstalled_as_before(self):
        for history in [(0, '[{"revision": 1, "status": "deployed"}]'),
                        (1, "Error: Kubernetes cluster unreachable: connection refused\n")]:
            r = self.Helm(history)
            self.assertTrue(r.uninstall("dex", "dex"))
            self.assertEqual(r.calls[-1], "helm uninstall dex --namespace dex --wait")


class Gate(Reconciler):
    """service_route_gate alone: kubectl's answers and the connections given."""

    def __init__(self, proxy="daemonset.apps/kube-proxy\n", ip="10.96.0.1", opens_after=0):
        self.calls = []
        self.proxy, self.ip, self.opens_after = proxy, ip, opens_after

    def run(self, args, out=None):
        self.calls.append(" ".join(args))
        if "daemonset" in args:
            return 0, self.proxy
        if "service" in args:
            return 0, self.ip
        return 1, "unexpected\n"

    def connect(self, host, port, timeout):
        self.calls.append("connect %s:%d" % (host, port))
        self.opens_after -= 1
        return self.opens_after < 0


class ServiceRouteGate(unittest.TestCase):
    def setUp(self):
        self.sleep = time.sleep
        time.sleep = lambda s: None

    def tearDown(self):
        time.sleep = self.sleep

    def test_waits_until_the_service_address_opens(self):
        g = Gate(opens_after=3)
        self.assertEqual(g.service_route_gate(), "the kubernetes Service (10.96.0.1:443) answers")
        self.assertEqual([c for c in g.calls if c.startswith("connect")], ["connect 10.96.0.1:443"] * 4)

    def test_without_kube_proxy_it_does_not_wait(self):
        g = Gate(proxy="")
        self.assertEqual(g.service_route_gate(), "no kube-proxy DaemonSet")
        self.assertFalse([c for c in g.calls if c.startswith("connect")])

    def test_without_the_service_address_it_does_not_wait(self):
        g = Gate(ip="")
        self.assertEqual(g.service_route_gate(), "no kubernetes Service address")

    def test_past_the_bound_it_goes_on(self):
        import os
        os.environ["KUBE_AWS_SERVICE_ROUTE_TIMEOUT"] = "0"
        try:
            g = Gate(opens_after=10 ** 6)
            said = g.service_route_gate()
        finally:
            del os.environ["KUBE_AWS_SERVICE_ROUTE_TIMEOUT"]
        self.assertIn("did not answer within 0s; going on", said)
