"""addon_record.manifest_objects and gone_objects: which objects of the plugin
manifests a new plan no longer holds (the reconciler deletes those; the
deletion itself runs in tests/it/installer.rs)."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node.addon_record import gone_objects, manifest_objects

WEBHOOK = """apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: pod-identity-webhook
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: pod-identity-webhook
  namespace: kube-system
---
# an empty document
"""
RBAC = """apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: oidc-admins}
"""


class Prune(unittest.TestCase):
    def test_objects_of_several_streams_sorted_and_once(self):
        got = manifest_objects([WEBHOOK, RBAC, RBAC])
        self.assertEqual(got, [
            ["admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "pod-identity-webhook"],
            ["apps/v1", "Deployment", "kube-system", "pod-identity-webhook"],
            ["rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "oidc-admins"],
        ])

    def test_a_list_is_read_item_by_item(self):
        text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: x}}\n"
        self.assertEqual(manifest_objects([text]), [["v1", "ConfigMap", "x", "a"]])

    def test_a_disabled_plugins_objects_are_gone(self):
        old = manifest_objects([WEBHOOK, RBAC])
        new = manifest_objects([RBAC])
        self.assertEqual([o[1] for o in gone_objects(old, new)], ["MutatingWebhookConfiguration", "Deployment"])
        self.assertEqual(gone_objects(new, old), [])

    def test_a_new_api_version_of_the_same_object_is_not_gone(self):
        old = [["autoscaling/v2beta2", "HorizontalPodAutoscaler", "ns", "a"]]
        new = [["autoscaling/v2", "HorizontalPodAutoscaler", "ns", "a"]]
        self.assertEqual(gone_objects(old, new), [])
        self.assertEqual(gone_objects(old, [["autoscaling/v2", "HorizontalPodAutoscaler", "other", "a"]]), old)


if __name__ == "__main__":
    unittest.main()
