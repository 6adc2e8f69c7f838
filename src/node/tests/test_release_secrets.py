"""A release's secrets in its identity (addon_record.py `current`,
`attach_secrets`, `outcome`): the plan pointer's per-release hash of the
ciphertexts its values reference (src/render/cfn/release_secrets.rs) makes a
rotated secret upgrade exactly its release, with no new plan and no new
wait condition."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import addon_record


def releases():
    return [{"name": "dex", "waitCondition": "AddonDex0123456789", "namespace": "dex"},
            {"name": "metrics-server", "waitCondition": "AddonMetricsServerabcdef0123", "namespace": "kube-system"}]


def record(dex_secrets):
    dex = {"name": "dex", "namespace": "dex", "waitCondition": "AddonDex0123456789", "signalled": True}
    if dex_secrets:
        dex["secrets"] = dex_secrets
    return {"plan": "sha", "secretsVersions": ["v1"],
            "releases": [dex, {"name": "metrics-server", "namespace": "kube-system",
                               "waitCondition": "AddonMetricsServerabcdef0123", "signalled": True}]}


class ReleaseSecrets(unittest.TestCase):
    def test_the_pointer_hash_is_attached_to_its_release_only(self):
        rs = releases()
        addon_record.attach_secrets(rs, {"dex": "h1", "gone": "x"})
        self.assertEqual(rs[0]["secrets"], "h1")
        self.assertNotIn("secrets", rs[1])
        addon_record.attach_secrets(rs, None)  # a pointer without secrets changes nothing

    def test_the_same_hash_is_done(self):
        rs = releases()
        addon_record.attach_secrets(rs, {"dex": "h1"})
        self.assertEqual(addon_record.outcome(record("h1"), "sha", "v1", rs, 0), addon_record.DONE)

    def test_a_rotated_secret_installs_and_only_its_release_is_not_current(self):
        rs = releases()
        addon_record.attach_secrets(rs, {"dex": "h2"})
        doc = record("h1")
        self.assertEqual(addon_record.outcome(doc, "sha", "v1", rs, 0), addon_record.INSTALL)
        rec = addon_record.recorded(doc)
        self.assertEqual([r["name"] for r in rs if not addon_record.current(rec.get(r["name"]), r)], ["dex"])

    def test_a_record_from_before_release_hashes_installs_once(self):
        rs = releases()
        addon_record.attach_secrets(rs, {"dex": "h1"})
        self.assertEqual(addon_record.outcome(record(""), "sha", "v1", rs, 0), addon_record.INSTALL)

    def test_signals_still_follow_the_wait_condition(self):
        rs = releases()
        addon_record.attach_secrets(rs, {"dex": "h2"})
        doc = record("h1")
        for r in doc["releases"]:
            r.pop("signalled")
        self.assertEqual([n for n, _ in addon_record.due_signals(doc, rs)], ["dex", "metrics-server"])


if __name__ == "__main__":
    unittest.main()
