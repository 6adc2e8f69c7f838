"""kubeadmcfg.documents: what each mode gets."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node.kubeadmcfg import documents

DOCS = [
    {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration", "nodeRegistration": {}},
    {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration"},
    {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"},
    {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration", "nodeRegistration": {}},
]
RT = {"apiEndpoint": "api.example.com", "caCertHash": "sha256:ab"}


class Documents(unittest.TestCase):
    def test_init(self):
        d = documents(DOCS, RT, "ip-1", "init", "t.0123", "v1.31.2", 7200)
        self.assertEqual([x["kind"] for x in d], ["InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"])
        self.assertEqual(d[0]["bootstrapTokens"][0]["token"], "t.0123")
        # The init token expires too: joins use the tokens the controllers mint.
        self.assertEqual(d[0]["bootstrapTokens"][0]["ttl"], "7200s")
        self.assertEqual(d[0]["nodeRegistration"]["name"], "ip-1")
        self.assertEqual(d[1]["controlPlaneEndpoint"], "api.example.com:6443")
        self.assertEqual(d[1]["kubernetesVersion"], "v1.31.2")
        self.assertNotIn("certificateKey", d[0])

    def test_a_load_balancer_name_with_capitals_is_lowercased(self):
        # AWS keeps the capitals of a generated load balancer name in its DNS
        # name; kubeadm refuses them (found booting a real node against moto).
        rt = dict(RT, apiEndpoint="bed-Network-BT84ABM-QFCL8I5FEF3U-1.us-west-2.elb.amazonaws.com")
        d = documents(DOCS, rt, "ip-1", "init", "t.0123", "v1.35.4")
        self.assertEqual(d[1]["controlPlaneEndpoint"], "bed-network-bt84abm-qfcl8i5fef3u-1.us-west-2.elb.amazonaws.com:6443")
        self.assertEqual(d[1]["apiServer"]["certSANs"], ["bed-network-bt84abm-qfcl8i5fef3u-1.us-west-2.elb.amazonaws.com"])
        w = documents(DOCS, rt, "ip-3", "worker", "t.0123", "v1.35.4")
        self.assertEqual(w[0]["discovery"]["bootstrapToken"]["apiServerEndpoint"],
                         "bed-network-bt84abm-qfcl8i5fef3u-1.us-west-2.elb.amazonaws.com:6443")

    def test_joins(self):
        cp = documents(DOCS, RT, "ip-2", "control-plane", "t.0123", "v1.31.2")
        self.assertEqual(len(cp), 1)
        self.assertEqual(cp[0]["controlPlane"], {})
        self.assertEqual(cp[0]["discovery"]["bootstrapToken"]["caCertHashes"], ["sha256:ab"])
        self.assertEqual(cp[0]["timeouts"]["discovery"], "30m0s")
        self.assertEqual(cp[0]["timeouts"]["etcdAPICall"], "5m0s")
        w = documents(DOCS, RT, "ip-3", "worker", "t.0123", "v1.31.2")
        self.assertNotIn("controlPlane", w[0])
        self.assertNotIn("etcdAPICall", w[0]["timeouts"])
        self.assertEqual(w[0]["nodeRegistration"]["name"], "ip-3")
        # v1beta3 keeps the discovery timeout inside discovery; the input is not changed.
        old = [dict(DOCS[3], apiVersion="kubeadm.k8s.io/v1beta3")]
        self.assertEqual(documents(old, RT, "", "worker", "t", "v")[0]["discovery"]["timeout"], "30m0s")
        self.assertNotIn("discovery", DOCS[3])

    def test_the_node_ip_goes_to_the_kubelet_unless_set(self):
        d = documents(DOCS, RT, "ip-1", "init", "t", "v1.35.8", node_ip="10.0.1.23")
        self.assertEqual(d[0]["nodeRegistration"]["kubeletExtraArgs"], [{"name": "node-ip", "value": "10.0.1.23"}])
        rendered = [dict(DOCS[3], nodeRegistration={"kubeletExtraArgs": [{"name": "cloud-provider", "value": "external"}]})]
        w = documents(rendered, RT, "ip-3", "worker", "t", "v1.35.8", node_ip="10.0.1.24")
        self.assertEqual(w[0]["nodeRegistration"]["kubeletExtraArgs"],
                         [{"name": "cloud-provider", "value": "external"}, {"name": "node-ip", "value": "10.0.1.24"}])
        # A plugin's (or the render's) node-ip is kept; v1beta3 takes a map.
        mine = [dict(DOCS[3], nodeRegistration={"kubeletExtraArgs": [{"name": "node-ip", "value": "10.9.9.9"}]})]
        self.assertEqual(documents(mine, RT, "", "worker", "t", "v", node_ip="10.0.1.24")[0]["nodeRegistration"]
                         ["kubeletExtraArgs"], [{"name": "node-ip", "value": "10.9.9.9"}])
        old = [dict(DOCS[3], apiVersion="kubeadm.k8s.io/v1beta3", nodeRegistration={})]
        self.assertEqual(documents(old, RT, "", "worker", "t", "v", node_ip="10.0.1.24")[0]["nodeRegistration"]
                         ["kubeletExtraArgs"], {"node-ip": "10.0.1.24"})
        # Without an address nothing is added, and the input is not changed.
        self.assertNotIn("kubeletExtraArgs", documents(DOCS, RT, "ip-1", "init", "t", "v")[0]["nodeRegistration"])
        self.assertEqual(DOCS[0]["nodeRegistration"], {})

    def test_only_an_ipv4_address_from_imds_becomes_the_node_ip(self):
        from kube_aws_node.bootstrap import node_ip
        self.assertEqual(node_ip("10.0.1.23\n"), "10.0.1.23")
        for bad in ("", "10.0.1", "10.0.1.23; rm -rf /", "fe80::1", None):
            self.assertEqual(node_ip(bad), "")

    def test_the_upgrade_configuration_takes_its_kind_of_patch_only(self):
        from kube_aws_node.kubeadmcfg import upgrade_documents
        bare = upgrade_documents("1.35.8", [])
        self.assertEqual(bare, [{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "UpgradeConfiguration",
                                 "apply": {"kubernetesVersion": "v1.35.8"}, "node": {}}])
        # The real-node bed's patch (cgroup v1 host): merged; other kinds ignored.
        patches = [{"kind": "JoinConfiguration", "nodeRegistration": {"ignorePreflightErrors": ["SystemVerification"]}},
                   {"kind": "UpgradeConfiguration", "apply": {"ignorePreflightErrors": ["SystemVerification"]},
                    "node": {"ignorePreflightErrors": ["SystemVerification"]}}]
        d = upgrade_documents("v1.36.5", patches)
        self.assertEqual(len(d), 1)
        self.assertEqual(d[0]["apply"], {"kubernetesVersion": "v1.36.5", "ignorePreflightErrors": ["SystemVerification"]})
        self.assertEqual(d[0]["node"], {"ignorePreflightErrors": ["SystemVerification"]})


if __name__ == "__main__":
    unittest.main()
