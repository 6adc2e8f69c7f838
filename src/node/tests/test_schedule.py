"""schedule.decide: the reconciler's pure scheduling decision."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node.schedule import Release, decide

CNI = Release("cni", (), True)
CM = Release("cert-manager", (), False)
MS = Release("metrics-server", ("cert-manager",), False)
DEX = Release("dex", ("cert-manager",), False)
DNS = Release("external-dns", (), False)
PLAN = [CNI, CM, MS, DEX, DNS]


class Decide(unittest.TestCase):
    def test_bootstrap_addons_go_first_alone(self):
        d = decide(PLAN, {}, set(), 4)
        self.assertEqual(d.start, ["cni"])
        self.assertEqual(d.skip, [])
        self.assertEqual(decide(PLAN, {}, {"cni"}, 4).start, [])

    def test_every_release_whose_dependencies_are_ready_starts_at_once(self):
        d = decide(PLAN, {"cni": "ready"}, set(), 4)
        self.assertEqual(d.start, ["cert-manager", "external-dns"])
        d = decide(PLAN, {"cni": "ready", "cert-manager": "ready"}, {"external-dns"}, 4)
        self.assertEqual(d.start, ["metrics-server", "dex"])

    def test_concurrency_bounds_the_starts_in_plan_order(self):
        d = decide(PLAN, {"cni": "ready", "cert-manager": "ready"}, {"external-dns"}, 2)
        self.assertEqual(d.start, ["metrics-server"])
        self.assertEqual(decide(PLAN, {"cni": "ready"}, {"cert-manager"}, 1).start, [])

    def test_dependants_of_a_failure_are_skipped_with_the_reason(self):
        d = decide(PLAN, {"cni": "ready", "cert-manager": "failed"}, set(), 4)
        self.assertEqual(d.skip, [("metrics-server", "cert-manager", "failed"), ("dex", "cert-manager", "failed")])
        self.assertEqual(d.start, ["external-dns"])
        # A skip cascades: a dependant of a skipped release is skipped too.
        chain = [CM, MS, Release("x", ("metrics-server",), False)]
        d = decide(chain, {"cert-manager": "ready", "metrics-server": "skipped"}, set(), 4)
        self.assertEqual(d.skip, [("x", "metrics-server", "skipped")])

    def test_a_dependency_outside_the_plan_is_not_installed(self):
        d = decide([Release("a", ("ghost",), False)], {}, set(), 4)
        self.assertEqual(d.skip, [("a", "ghost", "not installed")])

    def test_a_failed_bootstrap_addon_still_lets_the_others_start(self):
        # Today's rule: the bootstrap addons are done (one way or the other)
        # before any other starts; only dependants of the failure are skipped.
        d = decide(PLAN, {"cni": "failed"}, set(), 4)
        self.assertEqual(d.start, ["cert-manager", "external-dns"])

    def test_unchanged_releases_count_as_ready(self):
        d = decide(PLAN, {"cni": "ready", "cert-manager": "ready", "metrics-server": "ready"}, set(), 4)
        self.assertEqual(d.start, ["dex", "external-dns"])

    def test_nothing_left(self):
        done = dict((r.name, "ready") for r in PLAN)
        self.assertEqual(decide(PLAN, done, set(), 4), ([], []))


if __name__ == "__main__":
    unittest.main()
