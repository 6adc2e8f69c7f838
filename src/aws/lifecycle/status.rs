//! `status`'s AWS half: the stack, its nested stacks, the addons' status
//! objects, failed nodes and the control plane's records, composed from the
//! state readers (src/aws/state/), and the operation a stack status belongs to.

use std::path::Path;

use serde::Serialize;

use crate::aws::publish;
use crate::aws::services::s3::Location;
use crate::aws::services::stack::{self, NestedStack, StackInfo};
use crate::aws::wait::recovery::Recovery;
use crate::aws::wait::watch::{self, AwsSource};
use crate::aws::wait::{AddonReport, ExpectedAddon, NodeReport, Operation};
use crate::aws::{AwsError, Clients};
use crate::config::ClusterConfig;

/// Everything `status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub stack: StackInfo,
    pub nested: Vec<NestedStack>,
    pub addons: Vec<AddonStatus>,
    /// Nodes whose bootstrap failed during the stack's latest operation.
    pub nodes: Vec<NodeReport>,
    /// The controllers' certificate expiry (issue 27, src/aws/state/expiry.rs).
    pub certificates: crate::aws::state::expiry::CertificateStatus,
    /// The published join token's id and age (src/aws/state/join_token.rs).
    #[serde(rename = "bootstrapToken")]
    pub bootstrap_token: crate::aws::state::join_token::TokenStatus,
    /// The newest etcd snapshot's age (src/aws/state/expiry.rs).
    #[serde(rename = "etcdSnapshot")]
    pub etcd_snapshot: crate::aws::state::expiry::SnapshotStatus,
    /// etcd's alarms and last maintenance pass (src/aws/state/etcd_status.rs).
    pub etcd: crate::aws::state::etcd_status::EtcdStatus,
    /// The control plane's recorded version, last upgrade and last
    /// reconfiguration (issue 26, src/aws/state/control_plane_status.rs).
    #[serde(rename = "controlPlane")]
    pub control_plane: crate::aws::state::control_plane_status::ControlPlaneStatus,
    /// The state of each KMS key the cluster uses (src/aws/state/kms_keys.rs).
    #[serde(rename = "kmsKeys")]
    pub kms_keys: Vec<crate::aws::state::kms_keys::KeyState>,
    /// A stopped update (`UPDATE_FAILED`, `UPDATE_ROLLBACK_FAILED`): what
    /// failed and the command that continues (src/aws/wait/recovery.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

/// What a stopped update left, when the root or a nested stack is
/// `UPDATE_FAILED` or `UPDATE_ROLLBACK_FAILED`: the latest operation's
/// events of the root and its nested stacks, judged by
/// [`crate::aws::wait::recovery::recovery`]. None (and no events read) otherwise.
pub async fn stopped_update(
    clients: &Clients,
    live: &StackInfo,
    nested: &[NestedStack],
    location: &Location,
) -> Result<Option<Recovery>, AwsError> {
    let states: Vec<_> = nested.iter().map(NestedStack::state).collect();
    if crate::aws::wait::recovery::stopped_state(&live.status, &states).is_none() {
        return Ok(None);
    }
    let mut source = AwsSource::new(
        clients,
        live.stack_id.clone(),
        Operation::Update,
        location.clone(),
        Vec::new(),
    );
    let (obs, _) = watch::Source::observe(&mut source).await?;
    Ok(crate::aws::wait::recovery::recovery(
        &live.name,
        &clients.region,
        &live.status,
        &obs.nested,
        &obs.events,
    ))
}

/// One addon: its phase and message, "pending" without a status object.
#[derive(Debug, Clone, Serialize)]
pub struct AddonStatus {
    pub release: String,
    pub phase: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// The addons of the latest render (empty when there is none).
pub fn expected_addons(rendered: &Path) -> Vec<ExpectedAddon> {
    let Ok(bytes) = std::fs::read(rendered.join(publish::ADDON_PLAN)) else {
        return Vec::new();
    };
    crate::render::plan::Plan::from_json(&bytes)
        .map(|p| publish::addons_of(&p))
        .unwrap_or_default()
}

/// `status`: the stack, its nested stacks and outputs, each addon.
pub async fn status(
    clients: &Clients,
    cluster: &ClusterConfig,
    addons: &[ExpectedAddon],
) -> Result<StatusReport, AwsError> {
    let name = &cluster.cluster_name;
    let stack = stack::describe_stack(clients, name)
        .await?
        .ok_or_else(|| AwsError::StackMissing { stack: name.clone() })?;
    let nested = stack::nested_stacks(clients, &stack.stack_id).await?;
    let location = Location::new(cluster)?;
    let recovery = stopped_update(clients, &stack, &nested, &location).await?;
    let reports: Vec<AddonReport> = watch::read_addon_reports(clients, &location, addons).await?;
    let mut out: Vec<AddonStatus> = addons
        .iter()
        .map(|a| {
            let r = reports.iter().find(|r| r.release == a.release);
            AddonStatus {
                release: a.release.clone(),
                phase: r.map(|r| r.phase.as_str()).unwrap_or("pending").to_string(),
                message: r.map(|r| r.message.clone()).unwrap_or_default(),
                updated_at: r.and_then(|r| r.updated_at.clone()),
            }
        })
        .collect();
    // Reports for addons the local render does not know (another machine's render).
    for r in &reports {
        if !out.iter().any(|a| a.release == r.release) {
            out.push(AddonStatus {
                release: r.release.clone(),
                phase: r.phase.as_str().into(),
                message: r.message.clone(),
                updated_at: r.updated_at.clone(),
            });
        }
    }
    // Node failure reports of the latest operation (its start is on the root's
    // newest page of events; when it is not, every report is shown).
    let (events, _) = stack::events_page(clients, &stack.stack_id, None).await?;
    let all = crate::aws::state::nodes::read_node_reports(clients, &location).await?;
    let nodes = crate::aws::wait::node_reports_since(&all, crate::aws::wait::operation_start(&events));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let certificates = crate::aws::state::expiry::summarize(
        &crate::aws::state::expiry::read_certificate_reports(clients, &location).await?,
        now,
    );
    let bootstrap_token = crate::aws::state::join_token::summarize(
        crate::aws::state::join_token::read_report(clients, &location)
            .await?
            .as_ref(),
        now,
    );
    let backups = crate::aws::state::backups::list_backups(clients, cluster).await?;
    let interval = humantime::parse_duration(cluster.etcd.backup.interval.trim())
        .map(|d| d.as_secs() as i64)
        .unwrap_or(3600);
    let etcd_snapshot = crate::aws::state::expiry::snapshot_status(
        backups.snapshots.first().map(|s| (s.key.as_str(), s.time.as_str())),
        interval,
        now,
    );
    let etcd = crate::aws::state::etcd_status::read(clients, cluster).await?;
    let control_plane = crate::aws::state::control_plane_status::read(clients, &location, now).await;
    let kms_keys = crate::aws::state::kms_keys::describe_all(
        clients,
        &crate::aws::state::kms_keys::keys_of_stack(&stack.parameters, cluster.kms_key_arn.as_deref()),
    )
    .await;
    Ok(StatusReport {
        stack,
        nested,
        addons: out,
        nodes,
        certificates,
        bootstrap_token,
        etcd_snapshot,
        etcd,
        control_plane,
        kms_keys,
        recovery,
    })
}

/// The operation a stack status belongs to, when one is in progress.
pub fn operation_in_progress(status: &str) -> Option<Operation> {
    if !status.ends_with("_IN_PROGRESS") {
        return None;
    }
    Some(if status.starts_with("CREATE") || status.starts_with("ROLLBACK") {
        Operation::Create
    } else if status.starts_with("DELETE") {
        Operation::Delete
    } else {
        Operation::Update
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_in_progress() {
        assert_eq!(operation_in_progress("CREATE_IN_PROGRESS"), Some(Operation::Create));
        assert_eq!(operation_in_progress("ROLLBACK_IN_PROGRESS"), Some(Operation::Create));
        assert_eq!(
            operation_in_progress("UPDATE_ROLLBACK_IN_PROGRESS"),
            Some(Operation::Update)
        );
        assert_eq!(operation_in_progress("DELETE_IN_PROGRESS"), Some(Operation::Delete));
        assert_eq!(operation_in_progress("CREATE_COMPLETE"), None);
    }
}
