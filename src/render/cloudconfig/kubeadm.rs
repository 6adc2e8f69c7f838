//! The kubeadm documents of a node (Init-, Join- and ClusterConfiguration,
//! the KubeletConfiguration): the apiserver's and kubelet's flags the
//! plugins and kube-aws contribute, in the shape of the cluster's kubeadm
//! API version (`v1beta4` from 1.31: `extraArgs` as a list).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::*;

/// kubeadm's `extraArgs` shape: a list of {name, value} from v1beta4 (1.31), a map before.
fn extra_args(v1beta4: bool, args: &BTreeMap<String, String>) -> Value {
    if v1beta4 {
        Value::Array(args.iter().map(|(k, v)| json!({"name": k, "value": v})).collect())
    } else {
        json!(args)
    }
}

/// The apiserver's `extraArgs`: the plugins' flags, then the service-account
/// issuer's (src/irsa.rs `apiserver_flags`; a v1beta3 map keeps one value per
/// flag, so only the new issuer there), then src/render/security.rs's.
fn api_server_args(input: &RenderInput, v1beta4: bool) -> Value {
    let mut args = extra_args(v1beta4, &input.plugins.cluster.api_server_flags);
    let mut owned = crate::irsa::apiserver_flags(&input.cluster);
    // Pod Security admission, encryption at rest, the audit log
    // (src/render/security.rs); plugins may not set them (plugin/merge.rs).
    owned.extend(super::super::security::apiserver_flags());
    match &mut args {
        Value::Array(a) => a.extend(owned.into_iter().map(|(k, v)| json!({"name": k, "value": v}))),
        Value::Object(m) => {
            for (k, v) in owned {
                m.entry(k).or_insert(Value::String(v));
            }
        }
        _ => {}
    }
    args
}

fn taint_json(t: &Taint) -> Value {
    let mut v = json!({"key": t.key, "effect": t.effect.as_str()});
    if !t.value.is_empty() {
        v["value"] = json!(t.value);
    }
    v
}

fn minor_at_least(ctx: &Ctx, want: u32) -> bool {
    let mut parts = ctx.k8s_minor.split('.');
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(1);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    major > 1 || minor >= want
}

/// The kubelet flags of one node kind: the plugins' flags, then what kube-aws
/// owns (the resolver refuses plugins setting these): the node labels,
/// `cloud-provider: external` and max-pods.
fn kubelet_args(input: &RenderInput, spec: &NodeSpec) -> Result<BTreeMap<String, String>, RenderError> {
    let mut kubelet = spec.hooks.kubelet_flags.clone();
    if !spec.labels.is_empty() {
        // Keys and values are Kubernetes-valid (no ',' or '='), checked at load.
        let labels: Vec<String> = spec.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        kubelet.insert("node-labels".into(), labels.join(","));
    }
    // The AWS cloud controller manager initializes nodes (providerID, zone
    // labels, addresses); the kubelet only waits for it with `external`
    // (https://kubernetes.io/docs/tasks/administer-cluster/running-cloud-controller/).
    kubelet.insert("cloud-provider".into(), "external".into());
    let addressing = input.plugins.pod_addressing();
    let max_pods = match spec.pool {
        None => crate::config::kubelet_max_pods(
            addressing,
            &input.cluster.controller.instance_type,
            input.cluster.controller.max_pods,
        ),
        // A mixed pool's smallest over its types (src/config/mixed.rs).
        Some(name) => match input.cluster.worker.node_pools.iter().find(|p| p.name == name) {
            Some(p) => crate::config::pool_max_pods(addressing, p),
            None => return Ok(kubelet),
        },
    };
    // A flag rather than KubeletConfiguration.maxPods: kubeadm shares one
    // KubeletConfiguration cluster-wide (the kubelet-config ConfigMap), and
    // max-pods differs per instance type.
    match max_pods {
        Ok(Some(n)) => {
            kubelet.insert("max-pods".into(), n.to_string());
        }
        Ok(None) => {}
        Err(message) => {
            return Err(RenderError::Network {
                message: format!("{} nodes: {message}", spec.role),
            })
        }
    }
    Ok(kubelet)
}

fn node_registration(ctx: &Ctx, spec: &NodeSpec, kubelet: &BTreeMap<String, String>) -> Value {
    let v1beta4 = minor_at_least(ctx, 31);
    json!({
        "criSocket": "unix:///run/containerd/containerd.sock",
        "taints": spec.taints.iter().map(taint_json).collect::<Vec<_>>(),
        "kubeletExtraArgs": extra_args(v1beta4, kubelet),
    })
}

/// The cluster-wide KubeletConfiguration, passed to `kubeadm init`, which
/// stores it in the kubelet-config ConfigMap every joining kubelet downloads.
/// `serverTLSBootstrap` makes kubelets request their serving certificate from
/// the cluster CA (a kubernetes.io/kubelet-serving CSR, approved on the
/// controllers) instead of signing one themselves, so metrics-server and
/// `kubectl logs` can verify it
/// (https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/#certificate-rotation).
///
/// Graceful node shutdown is the backstop for a termination that no drainer
/// saw (a console terminate, a spot reclaim without notice, a `poweroff`):
/// kubelet holds a logind delay lock and, on PrepareForShutdown, terminates
/// ordinary pods through the API within the first 40 s and critical pods
/// (system-cluster-critical, system-node-critical) in the last 20 s
/// (https://kubernetes.io/docs/concepts/cluster-administration/node-shutdown/).
/// 40 s covers the default terminationGracePeriodSeconds (30 s); logind's
/// limit is raised above the total by a node file (templates/logind-kube-aws.conf).
fn kubelet_configuration() -> Value {
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "serverTLSBootstrap": true,
        "shutdownGracePeriod": "60s",
        "shutdownGracePeriodCriticalPods": "20s",
    })
}

/// kubeadm's `networking` section. With the VPC CNI pods get VPC addresses,
/// so no pod CIDR is set: kubeadm would hand it to kube-proxy as
/// `clusterCIDR`, and kube-proxy masquerades Service traffic from sources
/// outside clusterCIDR, i.e. every pod's, hiding pod IPs from the backends
/// (https://kubernetes.io/docs/reference/command-line-tools-reference/kube-proxy/, `--cluster-cidr`).
/// Other CNIs (cilium's overlay) keep kubeadm's pod subnet.
fn networking(input: &RenderInput) -> Value {
    if input.plugins.vpc_cni() {
        json!({})
    } else {
        json!({"podSubnet": POD_SUBNET})
    }
}

fn kubeadm_api(ctx: &Ctx) -> &'static str {
    if minor_at_least(ctx, 31) {
        "kubeadm.k8s.io/v1beta4"
    } else {
        "kubeadm.k8s.io/v1beta3"
    }
}

/// The cluster-wide kubeadm documents: the ClusterConfiguration (`kubeadm
/// init` stores it in kubeadm-config, and the controllers write their static
/// pods from it) and the KubeletConfiguration (kubelet-config). They are in
/// the addon bundle (`addons/kubeadm/cluster.json`), not in a node's user
/// data, so a change of a plugin's apiserver, controller-manager or
/// scheduler flag, the issuer or a kubelet setting changes no launch
/// template: the controllers' reconfigure timer applies it in place
/// (src/node/kube_aws_node/reconfigure.py).
pub fn cluster_kubeadm_json(input: &RenderInput, ctx: &Ctx) -> String {
    let v1beta4 = minor_at_least(ctx, 31);
    let hooks = &input.plugins.cluster;
    // No cloud-provider flag on the controller-manager: with an external
    // cloud provider the cloud controller manager runs the cloud loops.
    let cluster = json!({
        "apiVersion": kubeadm_api(ctx),
        "kind": "ClusterConfiguration",
        "clusterName": ctx.cluster,
        "networking": networking(input),
        "apiServer": {"extraArgs": api_server_args(input, v1beta4),
            "extraVolumes": super::super::security::apiserver_volumes()},
        "controllerManager": {"extraArgs": extra_args(v1beta4, &hooks.controller_manager_flags)},
        "scheduler": {"extraArgs": extra_args(v1beta4, &hooks.scheduler_flags)},
        // etcd's space quota (cluster.yaml etcd.quotaBackendBytes). Joining
        // controllers take the ClusterConfiguration `kubeadm init` stored.
        "etcd": {"local": {"extraArgs": extra_args(v1beta4, &BTreeMap::from([(
            "quota-backend-bytes".to_string(),
            input.cluster.etcd.quota_backend_bytes.to_string(),
        )]))}},
    });
    pretty(&json!({"documents": [cluster, kubelet_configuration()]}))
}

/// A node's own kubeadm documents (`/etc/kube-aws/kubeadm.json`): a
/// controller's InitConfiguration (the first one's `kubeadm init` adds the
/// cluster-wide documents, `cluster_kubeadm_json`) and every node's
/// JoinConfiguration.
pub(super) fn kubeadm_documents(input: &RenderInput, ctx: &Ctx, spec: &NodeSpec) -> Result<Value, RenderError> {
    let api = kubeadm_api(ctx);
    let kubelet = kubelet_args(input, spec)?;
    let reg = node_registration(ctx, spec, &kubelet);
    let mut docs = Vec::new();
    if spec.pool.is_none() {
        docs.push(json!({"apiVersion": api, "kind": "InitConfiguration", "nodeRegistration": reg}));
    }
    // Controllers after the first, and workers, join with this one.
    docs.push(json!({"apiVersion": api, "kind": "JoinConfiguration", "nodeRegistration": reg}));
    Ok(json!({ "documents": docs }))
}
