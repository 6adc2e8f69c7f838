//! The cluster.yaml model as the user writes it. Unknown keys are rejected;
//! defaults that need no context are filled by serde, the rest by `resolve`.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod etcd;
mod workers;
pub use etcd::{Etcd, EtcdBackup, EtcdRetention};
pub use workers::{
    max_instance_lifetime_seconds, InstancesDistribution, NodePool, SpotAllocationStrategy, Taint, TaintEffect, Worker,
};

/// The whole cluster.yaml.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "kube-aws cluster.yaml")]
pub struct ClusterConfig {
    /// Name of the cluster; also the CloudFormation root stack name. DNS-1123 label.
    pub cluster_name: String,
    /// AWS region, e.g. `us-west-2`.
    pub region: String,
    /// Where templates, user-data parts and charts are published: `s3://bucket/prefix`.
    #[serde(rename = "s3URI")]
    pub s3_uri: String,
    /// KMS key that encrypts bootstrap secrets and secret plugin parameters.
    #[serde(rename = "kmsKeyARN", default, skip_serializing_if = "Option::is_none")]
    pub kms_key_arn: Option<String>,
    /// The service-account issuer, when you host its discovery documents
    /// yourself (`https://…`, no trailing slash). By default it is the bucket
    /// `<s3URI bucket>-oidc-<clusterName>`, which `up` creates and makes
    /// public for those two documents only.
    #[serde(rename = "issuerURL", default, skip_serializing_if = "Option::is_none")]
    pub issuer_url: Option<String>,
    /// Kubernetes version: a supported minor (`"1.35"`, `"1.36"` or `"1.37"`), whose
    /// exact patch kube-aws pins, or an exact `"MAJOR.MINOR.PATCH"` of one.
    #[serde(default = "default_kubernetes_version")]
    pub kubernetes_version: String,
    /// The VPC: a new one (vpcCIDR, availabilityZones) or an existing one (vpcId, subnetIds).
    #[serde(default)]
    pub network: Network,
    /// Who can reach the Kubernetes API, and how.
    #[serde(default)]
    pub api_endpoint: ApiEndpoint,
    /// How operators reach the nodes: SSM Session Manager (default) and SSH.
    #[serde(default)]
    pub node_access: NodeAccess,
    /// The control plane.
    #[serde(default)]
    pub controller: Controller,
    /// The controllers' etcd: snapshots to S3.
    #[serde(default)]
    pub etcd: Etcd,
    /// Pod Security admission: the level enforced in every namespace but the exempted ones.
    #[serde(default)]
    pub pod_security: super::security::PodSecurity,
    /// When the controllers renew kubeadm's control-plane certificates.
    #[serde(default)]
    pub certificates: super::security::Certificates,
    /// The join tokens the controllers mint: how long each authenticates.
    #[serde(default)]
    pub bootstrap_tokens: super::security::BootstrapTokens,
    /// An explicit AMI instead of the pinned Amazon Linux 2023 one: an image ID
    /// (`ami-…`) for every node, or one per architecture
    /// (`{x86_64: ami-…, arm64: ami-…}`; an architecture left out keeps the
    /// pinned image). A changed value replaces the groups using it, one
    /// instance at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami: Option<AmiSetting>,
    /// Worker node pools.
    #[serde(default)]
    pub worker: Worker,
    /// Helm mode for installing charts.
    #[serde(default)]
    pub helm: Helm,
    /// Helm charts installed as addons, listed directly.
    #[serde(default)]
    pub charts: Vec<ChartSpec>,
    /// Plugins by name: `{enabled: true, <parameter>: <value>, …}`.
    #[serde(default)]
    pub plugins: IndexMap<String, PluginSettings>,
    /// Not in cluster.yaml: how the live stack names its service-account
    /// roles (the root stack's `RoleNames` output), which `update` renders
    /// with; None renders a new cluster's names (src/irsa.rs `RoleNames`).
    #[serde(skip)]
    #[schemars(skip)]
    pub recorded_role_names: Option<crate::irsa::RoleNames>,
}

pub fn default_kubernetes_version() -> String {
    super::versions::DEFAULT_MINOR.into()
}

/// The CIDR of a new VPC when network.vpcCIDR is not set.
pub const DEFAULT_VPC_CIDR: &str = "10.0.0.0/16";

/// Network settings.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Network {
    /// CIDR of a new VPC (default 10.0.0.0/16). Not allowed with vpcId.
    #[serde(rename = "vpcCIDR", default, skip_serializing_if = "Option::is_none")]
    pub vpc_cidr: Option<String>,
    /// Availability zones for the new VPC's subnets, one node subnet each
    /// (default: the region's first two, or first three with 3 or 5
    /// controllers, so that losing one zone keeps etcd's quorum). The
    /// controllers spread over them: 3 controllers on 2 zones split 2+1, and
    /// losing the zone with 2 loses quorum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub availability_zones: Vec<String>,
    /// An existing VPC to use instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_id: Option<String>,
    /// Subnets of the existing VPC; required with vpcId.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnet_ids: Vec<String>,
    /// Put the nodes in private subnets (no public IPs, no route to the internet
    /// gateway) reaching out through NAT gateways, with an S3 gateway endpoint.
    /// Public subnets remain for the NAT gateways and an internet-facing API
    /// load balancer. New VPCs only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private_subnets: bool,
    /// With privateSubnets: one NAT gateway per zone (`perZone`, default: a
    /// zone's outage leaves the others their way out) or one `single` shared one
    /// (cheaper; its zone is a single point of failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_gateways: Option<NatGateways>,
    /// Not in cluster.yaml: the zone count the live stack recorded when `up`
    /// created it (the root stack's `ZoneCount` output), which `update`
    /// renders with, so that a new VPC without availabilityZones keeps its
    /// subnets whatever controller.count becomes (src/render/cfn/network.rs).
    #[serde(skip)]
    #[schemars(skip)]
    pub recorded_zone_count: Option<usize>,
}

/// How many NAT gateways private subnets get.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum NatGateways {
    #[default]
    PerZone,
    Single,
}

/// The Kubernetes API endpoint: a network load balancer on port 6443.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiEndpoint {
    /// IPv4 CIDRs allowed to reach the API on port 6443 (the nodes always may).
    /// Default `0.0.0.0/0`: the API is open to the internet (kubeconfig
    /// certificates still guard it). Narrow it to your own networks; a narrowed
    /// internet-facing API needs privateSubnets (the nodes then reach it from
    /// their NAT gateways' addresses, which are admitted).
    #[serde(rename = "allowedCIDRs", default = "open_to_all")]
    pub allowed_cidrs: Vec<String>,
    /// An internal load balancer (private IPs only), reachable from the VPC and
    /// the networks connected to it, or through a node with SSM port forwarding.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub internal: bool,
}

impl Default for ApiEndpoint {
    fn default() -> Self {
        ApiEndpoint {
            allowed_cidrs: open_to_all(),
            internal: false,
        }
    }
}

/// The CIDR that means "anyone".
pub const ANYWHERE: &str = "0.0.0.0/0";

fn open_to_all() -> Vec<String> {
    vec![ANYWHERE.into()]
}

/// Operator access to the nodes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAccess {
    /// SSM Session Manager: every node role gets the AWS managed policy
    /// AmazonSSMManagedInstanceCore (`aws ssm start-session --target i-…`; no
    /// open port, no key). Turn off to grant nodes no Systems Manager access.
    #[serde(default = "yes")]
    pub ssm: bool,
    /// An existing EC2 key pair put on every node for SSH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
    /// IPv4 CIDRs allowed to reach the nodes on port 22. Empty (default): no
    /// SSH ingress at all, even with keyName. Needs keyName.
    #[serde(rename = "sshAllowedCIDRs", default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_allowed_cidrs: Vec<String>,
}

impl Default for NodeAccess {
    fn default() -> Self {
        NodeAccess {
            ssm: true,
            key_name: None,
            ssh_allowed_cidrs: Vec::new(),
        }
    }
}

/// The control plane nodes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Controller {
    /// Number of controller nodes: 1, 3 or 5 (etcd keeps quorum with an odd
    /// count; they spread over the subnets' zones and are replaced one at a time).
    #[serde(default = "one")]
    pub count: u32,
    /// EC2 instance type.
    #[serde(default = "default_instance_type")]
    pub instance_type: String,
    /// Root volume size in GiB.
    #[serde(default = "default_root_volume")]
    pub root_volume_size: u32,
    /// The kubelet's max-pods. Default with the VPC CNI: the instance type's
    /// `ENIs * (IPv4 per ENI - 1) + 2` (kube-aws's table); a value above it is
    /// refused. With its prefix delegation: `ENIs * ((IPv4 per ENI - 1) * 16) + 2`,
    /// capped at 110 (30 vCPUs or fewer) or 250, as the EKS AMI's calculator
    /// recommends; a value up to the uncapped number is allowed. Required with
    /// the VPC CNI for an instance type outside the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
    /// Plugin parameter overrides for the controller scope.
    #[serde(default)]
    pub plugins: IndexMap<String, PluginSettings>,
}

impl Default for Controller {
    fn default() -> Self {
        Controller {
            count: 1,
            instance_type: default_instance_type(),
            root_volume_size: default_root_volume(),
            max_pods: None,
            plugins: IndexMap::new(),
        }
    }
}

fn one() -> u32 {
    1
}
fn default_instance_type() -> String {
    "m6i.large".into()
}
fn default_root_volume() -> u32 {
    30
}

/// Graviton instance families (`m7g`, `c6gn`, `t4g`) need the arm64 AMI.
pub fn is_arm64(instance_type: &str) -> bool {
    let family = instance_type.split('.').next().unwrap_or("");
    let letters = family.trim_start_matches(|c: char| c.is_ascii_lowercase());
    let rest = letters.trim_start_matches(|c: char| c.is_ascii_digit());
    letters.len() < family.len() && rest.len() < letters.len() && rest.starts_with('g')
}

impl ClusterConfig {
    /// The instance types of every node group: the controllers', then each pool's.
    pub fn instance_types(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.controller.instance_type.as_str())
            .chain(self.worker.node_pools.iter().map(|p| p.instance_type.as_str()))
    }

    /// The explicit AMI for an instance type's architecture, if cluster.yaml gives one.
    pub fn explicit_ami(&self, instance_type: &str) -> Option<&str> {
        match self.ami.as_ref()? {
            AmiSetting::Id(id) => Some(id),
            AmiSetting::PerArchitecture(p) => {
                if is_arm64(instance_type) {
                    p.arm64.as_deref()
                } else {
                    p.x86_64.as_deref()
                }
            }
        }
    }
}

/// An explicit AMI: one image for every node, or one per architecture.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum AmiSetting {
    /// One image ID for every node (all of them x86_64, or all arm64).
    Id(String),
    /// Per architecture.
    PerArchitecture(AmiPerArchitecture),
}

/// An image ID per architecture.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct AmiPerArchitecture {
    /// The image of x86_64 instance types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x86_64: Option<String>,
    /// The image of Graviton (arm64) instance types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm64: Option<String>,
}

/// Helm settings.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Helm {
    /// 3 (default), or 2 for Helm v2 with Tiller.
    #[serde(default = "helm_three")]
    pub version: u32,
    /// Tiller settings (Helm v2 only).
    #[serde(default)]
    pub tiller: Tiller,
    /// The helm client the controllers install with, instead of the pinned
    /// upstream release: a `.tar.gz` holding `linux-amd64/helm` (a mirror for
    /// an airgapped account, or another version). `up` and `update` download
    /// it, check its sha256 and publish it to the cluster's bucket with the
    /// charts; the nodes read it from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<HelmBinarySetting>,
}

impl Default for Helm {
    fn default() -> Self {
        Helm {
            version: 3,
            tiller: Tiller::default(),
            binary: None,
        }
    }
}

/// A helm client tarball: where to download it and its sha256.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HelmBinarySetting {
    /// `https://…` (or `http://…` inside your network) URL of the tarball.
    pub url: String,
    /// sha256 of the tarball, 64 lowercase hex digits (get.helm.sh publishes
    /// one beside each tarball, `<tarball>.sha256sum`).
    pub sha256: String,
    /// The helm version it holds, for the plan and the logs (e.g. `v3.19.2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

fn helm_three() -> u32 {
    3
}

/// Tiller, Helm v2's in-cluster server.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tiller {
    /// Install Tiller (Helm v2 only; installed if and only if charts are listed).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Namespace Tiller runs in.
    #[serde(default = "kube_system")]
    pub namespace: String,
    /// Release history kept per release (`tiller --history-max`).
    #[serde(default = "history_max")]
    pub history_max: u32,
}

impl Default for Tiller {
    fn default() -> Self {
        Tiller {
            enabled: true,
            namespace: kube_system(),
            history_max: history_max(),
        }
    }
}

fn yes() -> bool {
    true
}
fn kube_system() -> String {
    "kube-system".into()
}
fn history_max() -> u32 {
    10
}

/// A Helm chart release.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChartSpec {
    /// Release name, DNS-1123, unique.
    pub name: String,
    /// Chart name in the repository (default: the release name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
    /// An HTTP(S) Helm repository URL. One of repo, oci, path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// An OCI reference `oci://host/path/name`. One of repo, oci, path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<String>,
    /// A chart directory or .tgz in the work tree. One of repo, oci, path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Exact version or semver constraint (`~3.12`, `>=1.2 <2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Namespace of the release (default: `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Values files, relative to the work tree (default: values/<name>.yaml when it exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    /// Inline values; highest precedence.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub set: serde_json::Map<String, serde_json::Value>,
    /// Releases that must be ready before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// How long `helm --wait` may take, e.g. `5m`, `90s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Create the namespace when missing (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_namespace: Option<bool>,
    /// Install right after the apiserver answers, before nodes are Ready (CNI charts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bootstrap: bool,
    /// The chart value that sets its Deployments' replicas (e.g. `replicaCount`): a release paused by `update --wait` is upgraded with it at 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_value: Option<String>,
}

/// Settings for one plugin: `enabled` plus the plugin's parameters.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PluginSettings {
    /// Turn the plugin on or off (default: the plugin's enabledByDefault).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The plugin's parameters.
    #[serde(flatten)]
    pub params: IndexMap<String, serde_json::Value>,
}
