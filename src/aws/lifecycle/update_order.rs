//! What an `update` does to the cluster's Kubernetes version: the running
//! version the root stack records (`KubernetesVersion`, src/render/cfn/root.rs)
//! checked against cluster.yaml's, and the preview's words for the order an
//! upgrade takes (control plane, then pools, then the addons pinned to the
//! minor), and for what any update rolls, group by group in the same order
//! (decided by src/aws/lifecycle/rolls.rs). Pure, apart from reading the live stack's
//! parameters.

use crate::aws::lifecycle::rolls::{GroupRoll, Replacement, Size};
use crate::aws::services::stack::StackInfo;
use crate::aws::AwsError;
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
pub async fn check_against_stack(
    clients: &crate::aws::Clients,
    cluster: &ClusterConfig,
) -> Result<StackVersion, AwsError> {
    let Some(live) = crate::aws::services::stack::describe_stack(clients, &cluster.cluster_name).await? else {
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
        let how = if n == 1 {
            // src/node/kube_aws_node/upgrade.py after_init: the group
            // terminates the old controller first.
            "1 controller, replaced: its replacement restores etcd's snapshot, then runs kubeadm upgrade apply"
                .to_string()
        } else {
            format!("{n} controllers, one at a time: the first runs kubeadm upgrade apply")
        };
        let mut out = format!("control plane {} → {} ({how})", self.from, self.to);
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

/// How many instances a group has: its desired capacity, or the range the
/// cluster-autoscaler picks from.
fn instances(s: &Size) -> String {
    let n = s.desired.unwrap_or(s.min);
    if s.desired.is_some() || s.min == s.max {
        format!("{n} instance{}", if n == 1 { "" } else { "s" })
    } else {
        format!("{}–{} instances", s.min, s.max)
    }
}

fn count(s: &Size) -> String {
    match s.desired {
        Some(n) => n.to_string(),
        None if s.min == s.max => s.min.to_string(),
        None => format!("{}–{}", s.min, s.max),
    }
}

/// One group, in words: "ControlPlane/ControllerGroup: 3 instances replaced, one at a time (launch template (UserData))".
pub fn roll_in_words(r: &GroupRoll) -> String {
    let name = if r.stack.is_empty() {
        r.group.clone()
    } else {
        format!("{}/{}", r.stack, r.group)
    };
    let why = if r.because.is_empty() {
        String::new()
    } else {
        format!(" ({})", r.because.join(", "))
    };
    let size = match (&r.before, &r.after) {
        (Some(b), Some(a)) if b != a && r.replacement == Replacement::None => {
            format!("{} → {} instances", count(b), count(a))
        }
        (Some(b), Some(a)) if b != a => format!("{} → {} instances, the {} running", count(b), count(a), count(b)),
        (Some(b), _) => instances(b),
        (None, Some(a)) => instances(a),
        (None, None) => String::new(),
    };
    let what = match (&r.before, &r.after, &r.replacement) {
        (None, Some(a), _) => format!("new group, {} launched", instances(a)),
        (Some(b), None, _) => format!("removed, {} terminated", instances(b)),
        (_, _, Replacement::Rolling { batch: 1 }) => format!("{size} replaced, one at a time"),
        (_, _, Replacement::Rolling { batch }) => format!("{size} replaced, {batch} at a time"),
        (_, _, Replacement::NewGroup) => format!("{size} replaced by a new group"),
        (_, _, Replacement::NotReplaced) => {
            format!("{size} kept as they run (no rolling update policy): only new instances get the change")
        }
        (_, _, Replacement::None) => format!("{size}, none replaced"),
    };
    format!("{name}: {what}{why}")
}

/// What an update rolls, in the order CloudFormation updates the groups: the
/// control plane's before the pools' (src/aws/lifecycle/rolls.rs reads the order from
/// the root's dependencies); groups updated side by side joined by "and".
pub fn rolls_in_words(rolls: &[GroupRoll]) -> String {
    if rolls.is_empty() {
        return "nothing: no instance is replaced, launched or terminated".to_string();
    }
    let mut out = String::new();
    for (i, r) in rolls.iter().enumerate() {
        if i > 0 {
            out.push_str(if rolls[i - 1].wave == r.wave {
                "; and "
            } else {
                "; then "
            });
        }
        out.push_str(&roll_in_words(r));
    }
    out
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
        let one = cluster("clusterName: demo\nregion: us-west-2\ns3URI: s3://b/p\n");
        let patch = VersionMove {
            from: "1.35.4".into(),
            to: "1.35.8".into(),
            change: VersionChange::Patch,
        };
        assert_eq!(
            patch.order(&one, &[]).unwrap(),
            "control plane 1.35.4 → 1.35.8 (1 controller, replaced: its replacement restores etcd's snapshot, \
             then runs kubeadm upgrade apply), then the addons"
        );
        assert_eq!(same.describe(), None);
    }

    fn roll(
        stack: &str,
        group: &str,
        wave: usize,
        before: Option<u64>,
        after: Option<u64>,
        r: Replacement,
    ) -> GroupRoll {
        let size = |n: u64| Size {
            min: n,
            max: n,
            desired: Some(n),
        };
        GroupRoll {
            stack: stack.into(),
            group: group.into(),
            wave,
            before: before.map(size),
            after: after.map(size),
            replacement: r,
            because: vec!["launch template (UserData)".into()],
        }
    }

    #[test]
    fn what_rolls_is_said_in_the_update_order() {
        assert_eq!(
            rolls_in_words(&[]),
            "nothing: no instance is replaced, launched or terminated"
        );
        let one = Replacement::Rolling { batch: 1 };
        assert_eq!(
            rolls_in_words(&[
                roll("ControlPlane", "ControllerGroup", 1, Some(3), Some(3), one.clone()),
                roll("NodePoolA", "WorkerGroup", 2, Some(1), Some(1), one.clone()),
                roll(
                    "NodePoolB",
                    "WorkerGroup",
                    2,
                    Some(4),
                    Some(4),
                    Replacement::Rolling { batch: 2 }
                ),
            ]),
            "ControlPlane/ControllerGroup: 3 instances replaced, one at a time (launch template (UserData)); \
             then NodePoolA/WorkerGroup: 1 instance replaced, one at a time (launch template (UserData)); \
             and NodePoolB/WorkerGroup: 4 instances replaced, 2 at a time (launch template (UserData))"
        );
        assert_eq!(
            roll_in_words(&roll(
                "ControlPlane",
                "ControllerGroup",
                1,
                Some(1),
                Some(3),
                one.clone()
            )),
            "ControlPlane/ControllerGroup: 1 → 3 instances, the 1 running replaced, one at a time \
             (launch template (UserData))"
        );
        let mut resized = roll(
            "ControlPlane",
            "ControllerGroup",
            1,
            Some(3),
            Some(5),
            Replacement::None,
        );
        resized.because.clear();
        assert_eq!(
            roll_in_words(&resized),
            "ControlPlane/ControllerGroup: 3 → 5 instances, none replaced"
        );
        assert_eq!(
            roll_in_words(&roll("NodePoolC", "WorkerGroup", 2, None, Some(2), Replacement::None)),
            "NodePoolC/WorkerGroup: new group, 2 instances launched (launch template (UserData))"
        );
        assert_eq!(
            roll_in_words(&roll("NodePoolC", "WorkerGroup", 2, Some(1), None, Replacement::None)),
            "NodePoolC/WorkerGroup: removed, 1 instance terminated (launch template (UserData))"
        );
        let mut autoscaled = roll(
            "NodePoolA",
            "WorkerGroup",
            2,
            Some(1),
            Some(1),
            Replacement::NotReplaced,
        );
        let range = Size {
            min: 2,
            max: 6,
            desired: None,
        };
        (autoscaled.before, autoscaled.after) = (Some(range), Some(range));
        assert_eq!(
            roll_in_words(&autoscaled),
            "NodePoolA/WorkerGroup: 2–6 instances kept as they run (no rolling update policy): \
             only new instances get the change (launch template (UserData))"
        );
    }
}
