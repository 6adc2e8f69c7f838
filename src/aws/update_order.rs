//! What an `update` does to the cluster's Kubernetes version: the running
//! version the root stack records (`KubernetesVersion`, src/render/cfn/root.rs)
//! checked against cluster.yaml's, and the preview's words for the order an
//! upgrade takes (control plane, then pools, then the addons pinned to the
//! minor). Pure, apart from reading the live stack's parameters.

use super::stack::StackInfo;
use super::AwsError;
use crate::config::{check_upgrade, ClusterConfig, VersionChange};
use crate::render::cfn::KUBERNETES_VERSION;

/// The version the live stack records; None for a stack rendered before the
/// record existed (nothing to check against).
pub fn running_version(live: &StackInfo) -> Option<&str> {
    live.parameters
        .iter()
        .find(|(k, _)| k == KUBERNETES_VERSION)
        .map(|(_, v)| v.as_str())
}

/// A version move of the cluster: from the running version to cluster.yaml's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionMove {
    pub from: String,
    pub to: String,
    pub change: VersionChange,
}

/// Checks cluster.yaml's `kubernetesVersion` against the live stack's record:
/// refuses a downgrade, a skipped minor and a patch the table does not list.
pub fn check_version(live: &StackInfo, cluster: &ClusterConfig) -> Result<Option<VersionMove>, AwsError> {
    let Some(running) = running_version(live) else {
        return Ok(None);
    };
    let (change, want) =
        check_upgrade(running, &cluster.kubernetes_version).map_err(|why| AwsError::VersionRefused { why })?;
    Ok(Some(VersionMove {
        from: running.to_string(),
        to: want.version,
        change,
    }))
}

/// What `validate --stack` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackVersion {
    /// No stack of the cluster's name: nothing runs yet.
    NoStack,
    /// A stack without the record (rendered by an older kube-aws).
    NotRecorded,
    /// The move `update` would make (`from == to` when there is none).
    Move(VersionMove),
}

/// `validate --stack`: the live root stack's record against cluster.yaml.
pub async fn check_against_stack(clients: &super::Clients, cluster: &ClusterConfig) -> Result<StackVersion, AwsError> {
    let Some(live) = super::stack::describe_stack(clients, &cluster.cluster_name).await? else {
        return Ok(StackVersion::NoStack);
    };
    Ok(match check_version(&live, cluster)? {
        None => StackVersion::NotRecorded,
        Some(m) => StackVersion::Move(m),
    })
}

impl VersionMove {
    /// The preview's line for a version change; None when the version stays.
    pub fn describe(&self) -> Option<String> {
        (self.change != VersionChange::Same).then(|| format!("Kubernetes {} → {}", self.from, self.to))
    }
}
