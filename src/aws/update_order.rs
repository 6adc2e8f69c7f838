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

/// The releases whose version follows the cluster's minor
/// (src/config/versions.rs): the reconciler installs a plan only once every
/// controller runs its minor (src/node/kube_aws_node/upgrade.py), so these
/// come after the control plane.
pub const MINOR_PINNED: &[&str] = &["aws-cloud-controller-manager", "cluster-autoscaler"];

impl VersionMove {
    /// The preview's line for a version change; None when the version stays.
    pub fn describe(&self) -> Option<String> {
        (self.change != VersionChange::Same).then(|| format!("Kubernetes {} → {}", self.from, self.to))
    }

    /// The order an upgrade takes, in words; None when the version stays.
    /// `addons` are the new plan's releases.
    pub fn order(&self, cluster: &ClusterConfig, addons: &[String]) -> Option<String> {
        if self.change == VersionChange::Same {
            return None;
        }
        let n = cluster.controller.count;
        let mut out = format!(
            "control plane {} → {} ({n} controller{}, one at a time: the first runs kubeadm upgrade apply)",
            self.from,
            self.to,
            if n == 1 { "" } else { "s" }
        );
        let pools: Vec<&str> = cluster.worker.node_pools.iter().map(|p| p.name.as_str()).collect();
        if !pools.is_empty() {
            out.push_str(&format!(
                ", then pools {} (each node replaced, one at a time)",
                pools.join(", ")
            ));
        }
        let pinned: Vec<&str> = MINOR_PINNED
            .iter()
            .copied()
            .filter(|p| addons.iter().any(|a| a == p))
            .collect();
        if pinned.is_empty() {
            out.push_str(", then the addons");
        } else {
            out.push_str(&format!(
                ", then the addons, with {} at {}",
                pinned.join(", "),
                self.to_minor()
            ));
        }
        Some(out)
    }

    fn to_minor(&self) -> String {
        crate::config::minor_of(&self.to).unwrap_or_else(|| self.to.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(yaml: &str) -> ClusterConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn an_upgrade_is_said_in_order() {
        let c = cluster(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://b/p\ncontroller: {count: 3}\n\
             worker: {nodePools: [{name: general}, {name: spot}]}\n",
        );
        let m = VersionMove {
            from: "1.35.4".into(),
            to: "1.36.3".into(),
            change: VersionChange::Minor,
        };
        assert_eq!(
            m.order(&c, &["calico".into(), "cluster-autoscaler".into()]).unwrap(),
            "control plane 1.35.4 → 1.36.3 (3 controllers, one at a time: the first runs kubeadm upgrade apply), \
             then pools general, spot (each node replaced, one at a time), then the addons, with cluster-autoscaler at 1.36"
        );
        let same = VersionMove {
            change: VersionChange::Same,
            to: "1.35.4".into(),
            ..m
        };
        assert_eq!(same.order(&c, &[]), None);
        assert_eq!(same.describe(), None);
    }
}
