//! The simulated nodes of the control-plane test bed
//! (tests/it/common/testbed.rs): a node as kubeadm would register it
//! (from a rendered cloud-config's kubeadm documents: labels, taints, the
//! kubelet's version), the rendered cluster's three (a controller and two
//! pools), and kwok started with its stages to run them until they are
//! Ready.

use super::*;

/// A simulated node: its name and what kubeadm would register it with.
#[derive(Debug, Clone)]
pub struct SimNode {
    pub name: String,
    pub labels: Vec<(String, String)>,
    /// (key, value, effect)
    pub taints: Vec<(String, String, String)>,
    /// `1.35.8`: the cluster's pinned Kubernetes version, which a real
    /// node's kubelet reports (status.nodeInfo.kubeletVersion); the
    /// reconciler's upgrade gate reads it from the Nodes.
    pub kubelet_version: String,
}

/// A list of kubeadm v1beta4 `extraArgs` ({name, value}) or a v1beta3 map, as pairs.
pub fn extra_args(v: &serde_json::Value) -> Vec<(String, String)> {
    match v {
        serde_json::Value::Array(a) => a
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or_default().to_string(),
                    e["value"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect(),
        _ => vec![],
    }
}

/// The kubeadm documents (`/etc/kube-aws/kubeadm.json`) a node's cloud-config writes.
pub fn kubeadm_json(cloud_config: &str) -> serde_json::Value {
    let root = tempfile::tempdir().unwrap();
    crate::common::write_cloud_config_files(cloud_config, root.path());
    let text = std::fs::read_to_string(root.path().join("etc/kube-aws/kubeadm.json"))
        .expect("the cloud-config writes /etc/kube-aws/kubeadm.json");
    serde_json::from_str(&text).unwrap()
}

impl SimNode {
    /// The node a rendered kubeadm document set registers: the labels in its
    /// kubelet `node-labels` and its taints; a controller also gets the label
    /// `kubeadm init`'s mark-control-plane phase adds.
    pub fn from_kubeadm(name: &str, kubeadm: &serde_json::Value) -> SimNode {
        let docs = kubeadm["documents"].as_array().expect("kubeadm.json has documents");
        let join = docs
            .iter()
            .find(|d| d["kind"] == "JoinConfiguration")
            .expect("a JoinConfiguration");
        let reg = &join["nodeRegistration"];
        let mut labels: Vec<(String, String)> = extra_args(&reg["kubeletExtraArgs"])
            .into_iter()
            .filter(|(k, _)| k == "node-labels")
            .flat_map(|(_, v)| {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                        (k.to_string(), v.to_string())
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        if docs.iter().any(|d| d["kind"] == "InitConfiguration") {
            labels.push(("node-role.kubernetes.io/control-plane".into(), String::new()));
        }
        let taints = reg["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                (
                    t["key"].as_str().unwrap_or_default().to_string(),
                    t["value"].as_str().unwrap_or_default().to_string(),
                    t["effect"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        // Workers' documents hold no ClusterConfiguration: rendered_nodes
        // sets theirs from the cluster's resolved version.
        let kubelet_version = docs
            .iter()
            .find(|d| d["kind"] == "ClusterConfiguration")
            .and_then(|d| d["kubernetesVersion"].as_str())
            .unwrap_or_default()
            .to_string();
        SimNode {
            name: name.into(),
            labels,
            taints,
            kubelet_version,
        }
    }

    /// The Node object kwok manages (annotation `kwok.x-k8s.io/node: fake`).
    pub fn manifest(&self) -> serde_json::Value {
        let labels: serde_json::Map<String, serde_json::Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            // What every kubelet registers its node with (kubelet's
            // initialNode: hostname, os, arch), which charts select on.
            .chain([
                ("kubernetes.io/hostname".to_string(), serde_json::json!(self.name)),
                ("kubernetes.io/os".to_string(), serde_json::json!("linux")),
                ("kubernetes.io/arch".to_string(), serde_json::json!("amd64")),
                ("type".to_string(), serde_json::json!("kwok")),
            ])
            .collect();
        let taints: Vec<serde_json::Value> = self
            .taints
            .iter()
            .map(|(k, v, e)| {
                let mut t = serde_json::json!({"key": k, "effect": e});
                if !v.is_empty() {
                    t["value"] = serde_json::json!(v);
                }
                t
            })
            .collect();
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"taints": taints},
            // A Node's status is kept on create (a kubelet registers with it);
            // kwok's status template keeps a nodeInfo it finds
            // (kubernetes-sigs/kwok pkg/controllers/templates/node.status.tpl)
            // and otherwise reports none, so the version is set here.
            // The schema requires every field; the rest are kwok's defaults.
            "status": {"nodeInfo": {
                "kubeletVersion": self.kubelet_version, "kubeProxyVersion": self.kubelet_version,
                "architecture": "amd64", "operatingSystem": "linux", "machineID": "", "systemUUID": "",
                "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": ""}},
        })
    }
}

/// The cluster whose nodes the shared control plane simulates: a controller
/// and two pools, one tainted and labelled in cluster.yaml.
pub const NODES_CLUSTER_YAML: &str = r#"
clusterName: testbed
region: us-west-2
s3URI: s3://kube-aws-testbed
worker:
  nodePools:
    - name: general
      count: 1
    - name: batch
      count: 1
      labels:
        workload: batch
      taints:
        - key: dedicated
          value: batch
          effect: NoSchedule
"#;

/// The controller and pool nodes of [`NODES_CLUSTER_YAML`], from its rendered
/// kubeadm documents (so they carry exactly what render gives them).
pub fn rendered_nodes() -> Vec<SimNode> {
    use kube_aws::config::parse_cluster;
    use kube_aws::render::{render, RenderInput};
    let c = parse_cluster(Path::new("."), Path::new("cluster.yaml"), NODES_CLUSTER_YAML)
        .unwrap_or_else(|e| panic!("test bed cluster: {e}"));
    let version = kube_aws::config::resolve_version(&c.config.kubernetes_version)
        .unwrap_or_else(|e| panic!("test bed cluster's kubernetesVersion: {e}"));
    let r = render(&RenderInput::new(c.config, vec![])).unwrap_or_else(|e| panic!("test bed render: {e}"));
    let mut nodes = Vec::new();
    for (path, _) in r.files.iter() {
        let Some(role) = path
            .strip_prefix("userdata/")
            .and_then(|p| p.strip_suffix(".cloud-config"))
        else {
            continue;
        };
        let kubeadm = kubeadm_json(r.text(path).unwrap());
        let mut node = SimNode::from_kubeadm(&format!("{role}-0"), &kubeadm);
        node.kubelet_version = format!("v{}", version.version);
        nodes.push(node);
    }
    assert_eq!(nodes.len(), 3, "a controller and two pools: {nodes:?}");
    nodes
}

impl ControlPlane {
    /// kwok with the pinned stages (fast node and pod lifecycles, node leases),
    /// managing the nodes annotated `kwok.x-k8s.io/node: fake`; creates the
    /// nodes and waits until they are Ready.
    pub(super) fn start_kwok(&self, stages: &Path) {
        let mut c = Command::new(self.bin.join("kwok"));
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--config")
            .arg(stages)
            .args([
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--node-lease-duration-seconds=40",
                "--cidr=10.0.0.1/24",
                "--node-ip=10.0.0.1",
                &format!("--server-address=127.0.0.1:{}", free_port()),
            ]);
        let proc = Proc::spawn("kwok", c, self.path("kwok.log"));
        self.push(proc);
        let manifests: Vec<serde_json::Value> = self.nodes.iter().map(SimNode::manifest).collect();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": manifests});
        self.kubectl_stdin(&["apply", "-f", "-"], &list.to_string())
            .unwrap_or_else(|e| panic!("creating the simulated nodes: {e}"));
        self.kubectl(&[
            "wait",
            "--for=condition=Ready",
            "node",
            "--all",
            &format!("--timeout={}s", READY_LIMIT.as_secs()),
        ])
        .unwrap_or_else(|e| {
            let procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
            let kwok = procs.iter().find(|p| p.name == "kwok").map(|p| p.log_tail(30));
            panic!(
                "the simulated nodes never became Ready: {e}\nkwok log:\n{}",
                kwok.unwrap_or_default()
            )
        });
    }
}
