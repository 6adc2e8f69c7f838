"""bootstrap: the packages step recognises a baked image, the kernel and
containerd steps' decisions, and kubeadm.d patches (kubeadmcfg.patch)."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import kubeadmcfg
from kube_aws_node.host_checks import baked_packages, containerd_config, version_matches

SPECS = ["kubelet-1.35.4", "kubeadm-1.35.4", "kubectl-1.35.4", "cri-tools-1.35.*"]
BAKED = {
    "kubelet": "Kubernetes v1.35.4\n",
    "kubeadm": "v1.35.4\n",
    "kubectl": "Client Version: v1.35.4\nKustomize Version: v5.7.1\n",
    "crictl": "crictl version v1.34.0\n",
}


def runner(answers):
    calls = []

    def run(args):
        calls.append(args)
        return answers.get(args[0])
    return run, calls


class Packages(unittest.TestCase):
    def test_a_baked_image_at_the_pinned_versions_needs_no_package_manager(self):
        run, calls = runner(BAKED)
        baked, notes = baked_packages(SPECS, run)
        self.assertTrue(baked, notes)
        self.assertEqual([c[0] for c in calls], ["kubelet", "kubeadm", "kubectl", "crictl"])
        self.assertIn("kubelet 1.35.4 is installed (kubelet-1.35.4)", notes)

    def test_al2023_without_them_installs(self):
        run, _ = runner({})
        baked, notes = baked_packages(SPECS, run)
        self.assertFalse(baked)
        self.assertIn("kubelet: not installed", notes)

    def test_another_patch_is_not_the_pinned_one(self):
        run, _ = runner(dict(BAKED, kubeadm="v1.35.3\n"))
        baked, notes = baked_packages(SPECS, run)
        self.assertFalse(baked)
        self.assertIn("kubeadm 1.35.3 is installed, not kubeadm-1.35.4", notes)
        run, _ = runner(dict(BAKED, kubelet="Kubernetes v1.35.40\n"))
        self.assertFalse(baked_packages(SPECS, run)[0])

    def test_a_package_it_cannot_check_is_installed(self):
        run, _ = runner(BAKED)
        baked, notes = baked_packages(SPECS + ["kubernetes-cni-1.7.*"], run)
        self.assertFalse(baked)
        self.assertEqual(notes, ["no way to tell the installed version of kubernetes-cni-1.7.*"])

    def test_cri_tools_is_pinned_to_the_minor_or_the_one_kubernetes_pairs_it_with(self):
        self.assertTrue(version_matches("1.35.*", "1.35.0", "cri-tools"))
        self.assertTrue(version_matches("1.35.*", "1.34.0", "cri-tools"))
        self.assertFalse(version_matches("1.35.*", "1.33.0", "cri-tools"))
        self.assertFalse(version_matches("1.35.*", "1.36.0", "cri-tools"))
        self.assertFalse(version_matches("1.35.*", "1.34.0", "kubelet"))
        self.assertTrue(version_matches("1.35.4", "1.35.4", "kubelet"))
        self.assertFalse(version_matches("1.35.4", "1.35.5", "kubelet"))


DEFAULT_16 = '''version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = false
    sandbox_image = "registry.k8s.io/pause:3.6"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
'''


class Containerd(unittest.TestCase):
    def test_systemd_cgroups_and_kubeadms_pause_image(self):
        c = containerd_config(DEFAULT_16, "registry.k8s.io/pause:3.10.1", True)
        self.assertIn("SystemdCgroup = true", c)
        self.assertIn('    sandbox_image = "registry.k8s.io/pause:3.10.1"\n', c)
        self.assertIn("restrict_oom_score_adj = false", c)

    def test_no_cap_sys_resource_keeps_pods_oom_scores_at_containerds(self):
        c = containerd_config(DEFAULT_16, "", False)
        self.assertIn("restrict_oom_score_adj = true", c)
        self.assertIn('sandbox_image = "registry.k8s.io/pause:3.6"', c)

    def test_containerd_2s_pinned_sandbox(self):
        c = containerd_config("      sandbox = 'registry.k8s.io/pause:3.10'\n", "registry.k8s.io/pause:3.10.1", True)
        self.assertEqual(c, '      sandbox = "registry.k8s.io/pause:3.10.1"\n')


class KubeadmPatches(unittest.TestCase):
    DOCS = [
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
         "nodeRegistration": {"name": "n", "taints": []}},
        {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "serverTLSBootstrap": True},
    ]
    PATCHES = [
        {"kind": "InitConfiguration", "nodeRegistration": {"ignorePreflightErrors": ["SystemVerification"]}},
        {"kind": "KubeletConfiguration", "failCgroupV1": False},
        {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
         "conntrack": {"maxPerCore": 0}},
        {"kind": "JoinConfiguration", "nodeRegistration": {"ignorePreflightErrors": ["SystemVerification"]}},
    ]

    def test_patches_merge_by_kind_and_add_what_init_takes(self):
        out = kubeadmcfg.patch(self.DOCS, self.PATCHES, "init")
        self.assertEqual(out[0]["nodeRegistration"],
                         {"name": "n", "taints": [], "ignorePreflightErrors": ["SystemVerification"]})
        self.assertEqual(out[1], {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                                  "serverTLSBootstrap": True, "failCgroupV1": False})
        self.assertEqual(out[2]["kind"], "KubeProxyConfiguration")
        self.assertEqual(len(out), 3, "no JoinConfiguration for init")
        self.assertNotIn("failCgroupV1", self.DOCS[1], "the input is not changed")

    def test_a_join_adds_no_cluster_wide_documents(self):
        join = [{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration", "nodeRegistration": {}}]
        out = kubeadmcfg.patch(join, self.PATCHES, "worker")
        self.assertEqual(out, [{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
                                "nodeRegistration": {"ignorePreflightErrors": ["SystemVerification"]}}])

    def test_a_patch_without_a_kind_is_refused(self):
        with self.assertRaises(ValueError):
            kubeadmcfg.patch(self.DOCS, [{"failCgroupV1": False}], "init")


if __name__ == "__main__":
    unittest.main()
