"""The kubeadm config a node runs with: the rendered documents
(/etc/kube-aws/kubeadm.json) plus what only exists at boot.

Invariant: `documents` is pure. `init` gets Init-, Cluster- and
KubeletConfiguration (the bundle's token, expiring after the join token TTL:
nodes join later with the tokens the controllers mint, join_token.py); joins
get only JoinConfiguration (a token of None: no bootstrapTokens, for the
phases of `kube-aws-node reconfigure`, which mint none), with the current join token and the CA hash kube-aws computed (runtime.json caCertHash), waiting up
to 30 minutes for discovery (nodes boot together with the first controller's
init; kubeadm's default is 5); a joining controller gets `controlPlane: {}`
(the shared CAs are already in /etc/kubernetes/pki: no certificate key).

`patch` merges the documents of plugin files under /etc/kube-aws/kubeadm.d
(a plugin's `nodes.<role>.files`) into them, by kind: the real-node bed's
settings (docs/testing.md, "The real-node bed") come this way.

`upgrade_documents` is the UpgradeConfiguration `kubeadm upgrade apply` and
`kubeadm upgrade node` read (`--config`; kubeadm v1beta4, since 1.31: its
`apply` and `node` sections carry what their flags would, such as
ignorePreflightErrors; cmd/kubeadm/app/cmd/upgrade/apply.go@v1.35.8
newApplyData), with the kubeadm.d patches of its kind merged in: the
preflight checks a node skips at init it skips at an upgrade too.
"""
import copy
import json

MODES = ("init", "control-plane", "worker")


def kubelet_arg(registration, name, value, v1beta4):
    """Sets the kubelet flag `name` in a nodeRegistration (v1beta4's list of
    {name, value}, v1beta3's map), unless the render or a plugin set it."""
    args = registration.setdefault("kubeletExtraArgs", [] if v1beta4 else {})
    if isinstance(args, list):
        if not any(a.get("name") == name for a in args):
            args.append({"name": name, "value": value})
    elif isinstance(args, dict):
        args.setdefault(name, value)


def documents(docs, runtime, node_name, mode, token, version, ttl_seconds=24 * 3600, node_ip=""):
    # A load balancer's DNS name as AWS gives it keeps the capitals of its
    # name (CloudFormation's generated names have some); kubeadm refuses an
    # endpoint that is not a lowercase RFC 1123 name, and DNS ignores case.
    host = runtime["apiEndpoint"].lower()
    endpoint = host + ":6443"
    out = []
    for d in copy.deepcopy(docs):
        kind = d["kind"]
        if kind in ("InitConfiguration", "JoinConfiguration") and node_name:
            # The EC2 private DNS name: the cloud controller manager finds the
            # instance by it, and gives the node its providerID and zone labels.
            d.setdefault("nodeRegistration", {})["name"] = node_name
        if kind in ("InitConfiguration", "JoinConfiguration") and node_ip:
            # The instance's private address as the kubelet's node IP (as
            # eksctl's nodes take IMDS local-ipv4). With an external cloud
            # provider and no --node-ip the kubelet posts no InternalIP until
            # the cloud controller manager sets it (kubelet 1.35
            # pkg/kubelet/nodestatus/setters.go NodeAddress), kube-proxy waits
            # 30 s for one before it writes the Services' rules (pkg/proxy/node.go
            # newNodeManager), and the cloud controller manager, on the host
            # network, cannot reach the API through the kubernetes Service
            # until then: every addon waited those 30 s on the real-node bed.
            # The cloud controller manager still checks the address against
            # the instance's (the kubelet's provided-node-ip annotation).
            kubelet_arg(d.setdefault("nodeRegistration", {}), "node-ip", node_ip, d["apiVersion"].endswith("/v1beta4"))
        if kind == "InitConfiguration" and token is not None:
            d["bootstrapTokens"] = [{"token": token, "ttl": "%ds" % int(ttl_seconds), "usages": ["signing", "authentication"],
                                     "groups": ["system:bootstrappers:kubeadm:default-node-token"]}]
        if kind == "ClusterConfiguration":
            d["controlPlaneEndpoint"] = endpoint
            d["kubernetesVersion"] = version
            d.setdefault("apiServer", {})["certSANs"] = [host]
        # KubeletConfiguration is cluster-wide: init stores it in the kubelet-config
        # ConfigMap, which joining kubelets download; join takes only JoinConfiguration.
        if kind in ("InitConfiguration", "ClusterConfiguration", "KubeletConfiguration") and mode != "init":
            continue
        if kind == "JoinConfiguration":
            if mode == "init":
                continue
            d["discovery"] = {"bootstrapToken": {"apiServerEndpoint": endpoint, "token": token,
                                                 "caCertHashes": [runtime["caCertHash"]]}}
            if d["apiVersion"].endswith("/v1beta4"):
                d.setdefault("timeouts", {})["discovery"] = "30m0s"
            else:
                d["discovery"]["timeout"] = "30m0s"
            if mode == "control-plane":
                d["controlPlane"] = {}
                if d["apiVersion"].endswith("/v1beta4"):
                    # kubeadm adds the member as a learner, then waits
                    # timeouts.etcdAPICall (2 minutes by default) for it to
                    # start before promoting it (MemberPromote,
                    # cmd/kubeadm/app/util/etcd/etcd.go at v1.36.5); a kubelet
                    # slow to start the new etcd pod failed a join on the
                    # real-node bed ("the etcd member ... is not started").
                    # Five minutes, under the join lock; a plugin's kubeadm.d
                    # value is kept.
                    d.setdefault("timeouts", {}).setdefault("etcdAPICall", "5m0s")
        out.append(d)
    return out


def text(docs):
    """The multi-document file kubeadm reads (JSON documents are YAML)."""
    return "\n---\n".join(json.dumps(d) for d in docs) + "\n"


def _merge(base, over):
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)


# Kinds a patch may add when the documents lack them: only `kubeadm init`
# takes them (joining nodes download the cluster's).
ADDABLE = ("KubeletConfiguration", "KubeProxyConfiguration")


def patch(docs, patches, mode):
    """`docs` with each patch document (a dict with `kind`) deep-merged into the
    document of the same kind (dicts merge, anything else replaces); a patch of
    a kind `docs` lacks is added in init mode when it is in ADDABLE, otherwise
    left out (a joining node takes only JoinConfiguration)."""
    out = copy.deepcopy(docs)
    for p in patches:
        if not isinstance(p, dict) or not isinstance(p.get("kind"), str):
            raise ValueError("a kubeadm patch document must be an object with a kind")
        same = [d for d in out if d["kind"] == p["kind"]]
        for d in same:
            _merge(d, {k: v for k, v in p.items() if k not in ("kind", "apiVersion")})
        if not same and mode == "init" and p["kind"] in ADDABLE and "apiVersion" in p:
            out.append(copy.deepcopy(p))
    return out


def upgrade_documents(version, patches):
    """The UpgradeConfiguration for an upgrade to `version` (`1.35.8`), the
    kubeadm.d patches of that kind merged in (`patch`)."""
    base = [{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "UpgradeConfiguration",
             "apply": {"kubernetesVersion": "v" + version.lstrip("v")}, "node": {}}]
    return patch(base, [p for p in patches if isinstance(p, dict) and p.get("kind") == "UpgradeConfiguration"],
                 "upgrade")
