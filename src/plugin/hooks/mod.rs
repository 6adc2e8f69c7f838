//! The hook contributions of the active plugins, merged per scope: the cluster
//! scope (control-plane flags, manifests, CloudFormation), the controller, and
//! each node pool. This is what `render` consumes. The merging itself is in
//! [`cluster`] (cluster scope), [`node`] (controller and pools) and
//! [`accounts`] (service accounts with IAM roles).

pub(super) mod accounts;
pub(super) mod cluster;
pub(super) mod node;

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::Serialize;

use crate::config::{NodePool, PodAddressing, Release, Taint};

/// Where a plugin was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginSource {
    BuiltIn,
    WorkTree,
}

/// An enabled plugin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActivePlugin {
    pub name: String,
    pub version: String,
    pub description: String,
    pub source: PluginSource,
}

/// A file written on nodes by cloud-init.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeFile {
    pub plugin: String,
    /// Absolute path on the node.
    pub path: String,
    pub content: String,
    /// Octal mode, e.g. "0644".
    pub permissions: String,
    pub owner: String,
}

/// A systemd unit installed on nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SystemdUnit {
    pub plugin: String,
    /// Unit file name, e.g. `foo.service`.
    pub name: String,
    pub content: String,
    /// `systemctl enable --now` it at boot.
    pub enable: bool,
}

/// One IAM policy statement (an object with Effect, Action, Resource, …).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IamStatement {
    pub plugin: String,
    pub statement: serde_json::Value,
}

/// A service account with its own IAM role (`spec.serviceAccounts`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountRole {
    pub plugin: String,
    pub namespace: String,
    pub name: String,
    /// The IAM role's name (src/irsa.rs `role_name`).
    pub role_name: String,
    /// What templates see as `serviceAccounts.<name>.roleArn`.
    pub role_arn: String,
    /// The role's policy statements, rendered.
    pub statements: Vec<serde_json::Value>,
}

/// A Kubernetes manifest applied once the apiserver answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub plugin: String,
    /// File name, unique per plugin, e.g. `rbac.yaml`.
    pub name: String,
    pub content: String,
}

/// CloudFormation resources and outputs a plugin adds to one stack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CfnContribution {
    pub plugin: String,
    /// Target stack: `root`, `network`, `control-plane` or `node-pool-<name>`.
    pub stack: String,
    pub resources: serde_json::Map<String, serde_json::Value>,
    pub outputs: serde_json::Map<String, serde_json::Value>,
}

/// Hooks that apply to one kind of node (the controller, or one pool).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeHooks {
    pub kubelet_flags: BTreeMap<String, String>,
    pub iam_statements: Vec<IamStatement>,
    pub files: Vec<NodeFile>,
    pub systemd_units: Vec<SystemdUnit>,
    pub node_labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Tags for this scope's auto scaling group (e.g. autoscaler discovery).
    pub asg_tags: BTreeMap<String, String>,
    /// Overrides of the pool's auto scaling group MinSize (e.g. cluster-autoscaler).
    pub asg_min_size: Option<u32>,
    /// Overrides of the pool's auto scaling group MaxSize.
    pub asg_max_size: Option<u32>,
    /// The plugin that set `asg_min_size` or `asg_max_size`, for messages.
    #[serde(skip)]
    pub asg_size_plugin: Option<String>,
}

/// Hooks that apply to the whole cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClusterHooks {
    pub api_server_flags: BTreeMap<String, String>,
    pub controller_manager_flags: BTreeMap<String, String>,
    pub scheduler_flags: BTreeMap<String, String>,
    pub manifests: Vec<Manifest>,
    pub cloudformation: Vec<CfnContribution>,
}

/// Values a plugin contributes to one of its releases (rendered YAML text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginValues {
    pub plugin: String,
    /// The template file it came from, relative to the plugin directory.
    pub file: String,
    pub content: String,
}

/// A release declared by a plugin, with the plugin's values layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginRelease {
    pub release: Release,
    pub values: Vec<PluginValues>,
}

/// A parameter marked `secret: true`: templates see a reference, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretRef {
    pub plugin: String,
    pub param: String,
    /// The placeholder templates saw, replaced on the node after KMS decryption.
    pub reference: String,
    /// `cluster`, or the scope that overrides the value (`controller`, `pool-<name>`).
    pub scope: String,
    /// The value to encrypt; never serialized, never printed.
    #[serde(skip)]
    pub value: SecretParamValue,
}

/// A secret parameter's value. `Debug` hides it and serde skips it, so it
/// cannot leak into `-o json`, logs or rendered files by accident.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretParamValue(pub serde_json::Value);

impl SecretParamValue {
    /// The plaintext, for the one place that encrypts it.
    pub fn expose(&self) -> &serde_json::Value {
        &self.0
    }
}

impl std::fmt::Debug for SecretParamValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretParamValue(<hidden>)")
    }
}

/// Everything the active plugins contribute, merged per scope.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResolvedPlugins {
    pub plugins: Vec<ActivePlugin>,
    pub cluster: ClusterHooks,
    pub controller: NodeHooks,
    /// One entry per node pool, in cluster.yaml order.
    pub pools: IndexMap<String, NodeHooks>,
    pub releases: Vec<PluginRelease>,
    pub secrets: Vec<SecretRef>,
    /// Service accounts with their own IAM roles, in plugin order.
    pub service_accounts: Vec<ServiceAccountRole>,
    /// The VPC CNI delegates /28 prefixes to the ENIs (its
    /// `enablePrefixDelegation`): max-pods follows the prefix formula.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub vpc_cni_prefix_delegation: bool,
}

/// The plugin whose pods take VPC addresses from the nodes' ENIs: with it the
/// kubelet's max-pods follows the ENI limits and kubeadm gets no pod CIDR.
pub const VPC_CNI_PLUGIN: &str = "aws-vpc-cni";

impl ResolvedPlugins {
    /// Is the plugin `name` active in the cluster?
    pub fn is_active(&self, name: &str) -> bool {
        self.plugins.iter().any(|p| p.name == name)
    }

    /// Is the Amazon VPC CNI the cluster's pod network?
    pub fn vpc_cni(&self) -> bool {
        self.is_active(VPC_CNI_PLUGIN)
    }

    /// How pods get their addresses: the kubelet's max-pods follows it.
    pub fn pod_addressing(&self) -> PodAddressing {
        match (self.vpc_cni(), self.vpc_cni_prefix_delegation) {
            (false, _) => PodAddressing::Overlay,
            (true, false) => PodAddressing::VpcSecondaryIps,
            (true, true) => PodAddressing::VpcPrefixes,
        }
    }
}

/// The tag the cluster-autoscaler's ASG auto-discovery looks for; a pool
/// carrying it is sized by the autoscaler.
pub const AUTOSCALER_ENABLED_TAG: &str = "k8s.io/cluster-autoscaler/enabled";
/// Prefix of the tags that describe a pool's nodes to the autoscaler, so it
/// can scale a group up from zero (kubernetes/autoscaler
/// cluster-autoscaler/cloudprovider/aws/README.md, "Auto-Discovery Setup":
/// `…/node-template/label/<key>: <value>`, `…/node-template/taint/<key>: <value>:<Effect>`).
pub const NODE_TEMPLATE_TAG: &str = "k8s.io/cluster-autoscaler/node-template";
/// Prefix of the tag aws-node-termination-handler drains by (its `managedTag`,
/// `aws-node-termination-handler/<clusterName>`): a pool carrying it gets a
/// termination lifecycle hook, and the tag reaches its instances.
pub const NTH_MANAGED_TAG_PREFIX: &str = "aws-node-termination-handler/";
/// AWS's limit on a tag key's length.
pub const TAG_KEY_LIMIT: usize = 128;

impl NodeHooks {
    /// The tag of aws-node-termination-handler on this scope's group, when the
    /// handler drains its nodes.
    pub fn nth_managed_tag(&self) -> Option<&str> {
        self.asg_tags
            .keys()
            .find(|k| k.starts_with(NTH_MANAGED_TAG_PREFIX))
            .map(String::as_str)
    }

    /// Is this scope's group sized by the cluster-autoscaler?
    pub fn autoscaled(&self) -> bool {
        self.asg_tags.contains_key(AUTOSCALER_ENABLED_TAG)
    }

    /// A pool's node labels and taints: plugin labels first, the pool's own
    /// labels in cluster.yaml win; the pool's taints, then the plugins' others.
    /// The kubelet registers exactly these, and the node templates describe the same.
    pub fn pool_labels_and_taints(&self, pool: &NodePool) -> (BTreeMap<String, String>, Vec<Taint>) {
        let mut labels = self.node_labels.clone();
        labels.extend(pool.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut taints = pool.taints.clone();
        taints.extend(self.taints.iter().filter(|t| !pool.taints.contains(t)).cloned());
        (labels, taints)
    }

    /// The node-template tags of an autoscaled pool, one per label and taint;
    /// none when the autoscaler does not size the pool.
    pub fn node_template_tags(&self, pool: &NodePool) -> Vec<(String, String)> {
        if !self.autoscaled() {
            return Vec::new();
        }
        let (labels, taints) = self.pool_labels_and_taints(pool);
        let mut tags: Vec<(String, String)> = labels
            .into_iter()
            .map(|(k, v)| (format!("{NODE_TEMPLATE_TAG}/label/{k}"), v))
            .collect();
        for t in taints {
            tags.push((
                format!("{NODE_TEMPLATE_TAG}/taint/{}", t.key),
                format!("{}:{}", t.value, t.effect.as_str()),
            ));
        }
        tags
    }
}
