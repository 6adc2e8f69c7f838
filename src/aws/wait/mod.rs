//! The wait logic as a pure function: from what was observed (stack events,
//! stack and nested-stack states, addon status reports) to a progress model
//! and an outcome; `recovery` decides how a stopped update goes on. The loop
//! that polls AWS lives in `watch`; this module never does I/O, so every
//! case (success, rollback cascade, addon failure, timeout, nested failure)
//! is tested from recorded event sequences.

mod progress;
pub mod recovery;
pub mod watch;

pub use progress::{addons_summary, short_duration, utc_time, waiting_on, ProgressLine, StackProgress, WaitingOn};

use serde::{Deserialize, Serialize};

pub use crate::aws::services::stack::{StackEvent, StackState};
pub use crate::aws::state::age_text;
use crate::aws::state::control_plane_status::UpgradeRecord;
pub use crate::aws::state::nodes::NodeReport;
use crate::render::layout::UPGRADE_STATUS;

/// An addon's phase, as the node writes it in its status object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AddonPhase {
    /// No status object yet.
    Pending,
    Installing,
    Ready,
    Failed,
    Skipped,
}

impl AddonPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            AddonPhase::Pending => "pending",
            AddonPhase::Installing => "installing",
            AddonPhase::Ready => "ready",
            AddonPhase::Failed => "failed",
            AddonPhase::Skipped => "skipped",
        }
    }
}

/// The status object `s3URI/<cluster>/status/addons/<release>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddonReport {
    pub release: String,
    pub phase: AddonPhase,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// Which stack operation is being followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Create,
    Update,
    Delete,
}

/// The node reports of the operation that started at `start_ms` (milliseconds;
/// None: unknown, all of them), oldest first. Earlier operations' reports stay
/// in S3 (each instance has its own) but are history.
pub fn node_reports_since(reports: &[NodeReport], start_ms: Option<i64>) -> Vec<NodeReport> {
    let mut out: Vec<NodeReport> = reports
        .iter()
        // Reports carry whole seconds (`date +%s`): one from the start's own second counts.
        .filter(|r| start_ms.is_none_or(|t| r.timestamp >= t.div_euclid(1000)))
        .cloned()
        .collect();
    out.sort_by(|a, b| a.timestamp.cmp(&b.timestamp).then(a.instance_id.cmp(&b.instance_id)));
    out
}

/// When the latest operation began: its user-initiated start event (None when
/// the events do not reach back to it).
pub fn operation_start(events: &[StackEvent]) -> Option<i64> {
    let current = current_operation_events(events);
    current
        .first()
        .filter(|e| e.logical_id == e.stack_name && e.reason.as_deref() == Some("User Initiated"))
        .map(|e| e.timestamp)
}

/// An addon the plan expects, and the WaitCondition that stands for it (if the
/// template has one), so a failed WaitCondition can be named as the addon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpectedAddon {
    pub release: String,
    pub wait_condition: Option<String>,
    /// The wait condition's rendered CreationPolicy timeout (the plan's
    /// `waitTimeoutSeconds`): how long CloudFormation waits for its signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_timeout_secs: Option<u64>,
}

/// Everything observed so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observation {
    pub operation: Operation,
    /// None: the root stack does not exist (gone after a delete, or never created).
    pub root: Option<StackState>,
    pub nested: Vec<StackState>,
    /// Events of the root and nested stacks, any order, possibly older operations too.
    pub events: Vec<StackEvent>,
    pub addons: Vec<ExpectedAddon>,
    pub reports: Vec<AddonReport>,
    /// The failure reports nodes published (any operation's; assess keeps the current one's).
    pub node_reports: Vec<NodeReport>,
    /// The control plane's upgrade record (status/control-plane/upgrade.json),
    /// read once a controller of this operation failed; None otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeRecord>,
    /// Time since the wait started and the caller's limit (None: no limit).
    pub elapsed_secs: u64,
    pub timeout_secs: Option<u64>,
}

/// What went wrong, root cause first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The stack holding the failed resource ("root" or a nested stack's logical id).
    pub stack: String,
    pub resource: String,
    pub resource_type: String,
    pub status: String,
    pub reason: String,
    /// The addon, when the failure is an addon's.
    pub addon: Option<String>,
    /// The addon's message from its status object.
    pub addon_message: Option<String>,
    /// The failure reports of the nodes behind it: those of the failed group
    /// when it is one, else every node that failed in this operation.
    pub nodes: Vec<NodeReport>,
    /// A failed controller's upgrade record, when it says failed or refused
    /// in this operation: `failed at step kubeadm-upgrade-apply: <message>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<String>,
    /// What the stopped update left and the command that continues it
    /// (src/aws/wait/recovery.rs), when the stack ended `UPDATE_FAILED` or
    /// `UPDATE_ROLLBACK_FAILED`; filled by the caller, which reads the
    /// nested stacks' events once more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Box<crate::aws::wait::recovery::Recovery>>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(addon) = &self.addon {
            write!(f, "addon {addon:?} failed")?;
            match &self.addon_message {
                Some(m) if !m.is_empty() => write!(f, ": {m}")?,
                _ => write!(f, ": {}", self.reason)?,
            }
            if !self.resource.is_empty() {
                write!(f, " (resource {} in stack {})", self.resource, self.stack)?;
            }
        } else {
            write!(
                f,
                "{} {} ({}) in stack {}: {}",
                self.resource, self.status, self.resource_type, self.stack, self.reason
            )?;
        }
        for n in &self.nodes {
            write!(f, "\n  {}", n.headline())?;
            let tail = n.log_tail(NODE_LOG_LINES);
            if !tail.is_empty() {
                write!(f, "\n  the last lines of its log:")?;
                for l in tail {
                    write!(f, "\n    {l}")?;
                }
            }
        }
        if let Some(u) = &self.upgrade {
            write!(f, "\n  the control-plane upgrade record ({UPGRADE_STATUS}): {u}")?;
        }
        if let Some(r) = &self.recovery {
            for l in r.lines() {
                write!(f, "\n  {l}")?;
            }
        }
        Ok(())
    }
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    InProgress,
    Done,
    Failed(Failure),
    /// The caller's limit passed; names what was still in progress.
    TimedOut {
        pending: Vec<String>,
    },
}

/// Progress and outcome together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub progress: StackProgress,
    pub outcome: Outcome,
}

pub(super) const STACK_TYPE: &str = "AWS::CloudFormation::Stack";
/// How many lines of a node's log a failure shows (the report keeps more).
pub const NODE_LOG_LINES: usize = 20;
const WAIT_CONDITION: &str = "AWS::CloudFormation::WaitCondition";

/// Assesses an observation.
pub fn assess(obs: &Observation) -> Assessment {
    let events = current_operation_events(&obs.events);
    let nodes = node_reports_since(&obs.node_reports, operation_start(&obs.events));
    let progress = progress::progress(obs, &events, &nodes);
    let mut outcome = outcome(obs, &events);
    match &mut outcome {
        Outcome::Failed(f) => {
            f.nodes = nodes_behind(f, &events, &nodes);
            f.upgrade = upgrade_behind(&f.nodes, obs.upgrade.as_ref(), operation_start(&obs.events));
        }
        Outcome::TimedOut { pending } => pending.extend(nodes.iter().map(NodeReport::headline)),
        _ => {}
    }
    Assessment { progress, outcome }
}

/// The events of the latest operation: those from the root stack's latest
/// user-initiated `*_IN_PROGRESS` event on (nested stacks' events included by
/// time), sorted by time, each once. This is what lets `status --wait` resume
/// without knowing when the operation began.
pub fn current_operation_events(events: &[StackEvent]) -> Vec<&StackEvent> {
    let mut sorted: Vec<&StackEvent> = events.iter().collect();
    sorted.sort_by(|a, b| a.timestamp.cmp(&b.timestamp).then(a.event_id.cmp(&b.event_id)));
    sorted.dedup_by(|a, b| a.event_id == b.event_id);
    // Nested stacks are those some stack names as a resource; the root is the rest.
    let nested: std::collections::HashSet<String> = sorted
        .iter()
        .filter(|e| e.resource_type == STACK_TYPE && e.logical_id != e.stack_name)
        .filter_map(|e| stack_name_from_arn(&e.physical_id))
        .collect();
    let start = sorted
        .iter()
        .filter(|e| {
            e.resource_type == STACK_TYPE
                && e.logical_id == e.stack_name
                && !nested.contains(&e.stack_name)
                && matches!(
                    e.status.as_str(),
                    "CREATE_IN_PROGRESS" | "UPDATE_IN_PROGRESS" | "DELETE_IN_PROGRESS"
                )
                && !is_cleanup_or_rollback(e)
        })
        .map(|e| e.timestamp)
        .max();
    sorted
        .into_iter()
        .filter(|e| start.is_none_or(|t| e.timestamp >= t))
        .collect()
}

fn is_cleanup_or_rollback(e: &StackEvent) -> bool {
    // A DELETE_IN_PROGRESS of the stack itself after a failed create is the
    // cascade of --on-failure delete, not a new operation.
    e.status == "DELETE_IN_PROGRESS" && e.reason.as_deref().is_some_and(|r| !r.contains("User Initiated"))
}

/// Whether a controller failed among `nodes`: the upgrade record may say why.
pub fn controller_failed(nodes: &[NodeReport]) -> bool {
    nodes.iter().any(|n| n.role == "controller")
}

/// The upgrade record's one line for a failure whose nodes include a
/// controller: only a failed or refused record written in this operation
/// (from `start_ms` on, whole seconds as the node reports; None: unknown,
/// any), so an earlier operation's failure is not blamed.
fn upgrade_behind(nodes: &[NodeReport], record: Option<&UpgradeRecord>, start_ms: Option<i64>) -> Option<String> {
    let r = record?;
    (controller_failed(nodes) && r.is_failure() && start_ms.is_none_or(|t| r.updated_at >= t.div_euclid(1000)))
        .then(|| r.failure_line())
}

/// The node reports behind a failure: those whose group is the failed resource
/// (the FAILURE signal's sender), else every node that failed in this operation.
fn nodes_behind(f: &Failure, events: &[&StackEvent], nodes: &[NodeReport]) -> Vec<NodeReport> {
    let group_of = |r: &NodeReport| {
        r.asg_logical_id == f.resource
            && events
                .iter()
                .any(|e| e.logical_id == f.resource && e.stack_name == r.stack && e.status == f.status)
    };
    let matched: Vec<NodeReport> = nodes.iter().filter(|r| group_of(r)).cloned().collect();
    if matched.is_empty() {
        nodes.to_vec()
    } else {
        matched
    }
}

/// `arn:aws:cloudformation:REGION:ACCOUNT:stack/NAME/ID` → NAME; a bare name
/// (moto gives nested stacks' physical ids as names) stays as it is.
pub fn stack_name_from_arn(arn: &str) -> Option<String> {
    if arn.is_empty() {
        return None;
    }
    if !arn.starts_with("arn:") {
        return Some(arn.to_string());
    }
    let rest = arn.split(":stack/").nth(1)?;
    Some(rest.split('/').next()?.to_string())
}

fn is_terminal(status: &str) -> bool {
    status.ends_with("_COMPLETE") || status.ends_with("_FAILED")
}

fn is_failure_status(status: &str) -> bool {
    status.ends_with("_FAILED") || status.contains("ROLLBACK")
}

fn outcome(obs: &Observation, events: &[&StackEvent]) -> Outcome {
    // An addon that reported failure is the answer, even before the stack notices.
    if let Some(r) = obs
        .reports
        .iter()
        .find(|r| r.phase == AddonPhase::Failed && obs.addons.iter().any(|a| a.release == r.release))
    {
        let mut failure = root_cause(obs, events).unwrap_or(Failure {
            stack: String::new(),
            resource: String::new(),
            resource_type: String::new(),
            status: String::new(),
            reason: r.message.clone(),
            addon: None,
            addon_message: None,
            nodes: vec![],
            upgrade: None,
            recovery: None,
        });
        failure.addon = Some(r.release.clone());
        failure.addon_message = Some(r.message.clone());
        return Outcome::Failed(failure);
    }

    let root_status = obs.root.as_ref().map(|r| r.status.as_str());
    let done = matches!(
        (obs.operation, root_status),
        (Operation::Delete, None | Some("DELETE_COMPLETE"))
            | (Operation::Create, Some("CREATE_COMPLETE"))
            | (Operation::Update, Some("UPDATE_COMPLETE"))
    );
    if done {
        return Outcome::Done;
    }
    let failed = match (obs.operation, root_status) {
        (_, None) => true,
        (Operation::Create, Some(s)) => s.contains("ROLLBACK") || s.ends_with("_FAILED") || s.starts_with("DELETE"),
        (Operation::Update, Some(s)) => s.contains("ROLLBACK") || s.ends_with("_FAILED"),
        (Operation::Delete, Some(s)) => s == "DELETE_FAILED",
    };
    if failed {
        let failure = root_cause(obs, events).unwrap_or_else(|| {
            let (status, reason) = match &obs.root {
                Some(r) => (r.status.clone(), r.reason.clone().unwrap_or_default()),
                None => ("MISSING".into(), "the stack does not exist".into()),
            };
            Failure {
                stack: "root".into(),
                resource: "root".into(),
                resource_type: STACK_TYPE.into(),
                status,
                reason,
                addon: None,
                addon_message: None,
                nodes: vec![],
                upgrade: None,
                recovery: None,
            }
        });
        return Outcome::Failed(failure);
    }
    if let Some(limit) = obs.timeout_secs {
        if obs.elapsed_secs >= limit {
            return Outcome::TimedOut {
                pending: pending(obs, events),
            };
        }
    }
    Outcome::InProgress
}

/// What is still in progress: nested stacks not finished, resources whose last
/// event is `*_IN_PROGRESS`, addons not finished.
fn pending(obs: &Observation, events: &[&StackEvent]) -> Vec<String> {
    let mut out = Vec::new();
    let mut last: indexmap::IndexMap<(&str, &str), &StackEvent> = indexmap::IndexMap::new();
    for e in events {
        if e.logical_id != e.stack_name {
            last.insert((e.stack_name.as_str(), e.logical_id.as_str()), e);
        }
    }
    let waiting = waiting_on(obs, events);
    for e in last.values() {
        if e.status.ends_with("_IN_PROGRESS") && e.resource_type != STACK_TYPE {
            match waiting.iter().find(|w| w.wait_condition == e.logical_id) {
                Some(w) => out.push(format!(
                    "{} ({}, addon {}): CloudFormation waits for its signal until {} at most",
                    e.logical_id,
                    e.resource_type,
                    w.release,
                    utc_time(w.deadline_ms())
                )),
                None => out.push(format!("{} ({})", e.logical_id, e.resource_type)),
            }
        }
    }
    for n in &obs.nested {
        if !is_terminal(&n.status) {
            out.push(format!("stack {}", n.name));
        }
    }
    for a in &obs.addons {
        let phase = obs
            .reports
            .iter()
            .find(|r| r.release == a.release)
            .map(|r| r.phase)
            .unwrap_or(AddonPhase::Pending);
        if matches!(phase, AddonPhase::Pending | AddonPhase::Installing) {
            out.push(format!("addon {} ({})", a.release, phase.as_str()));
        }
    }
    out
}

/// A failure reason that only reports another failure: the rollback cascade.
pub(super) fn is_cascade(e: &StackEvent) -> bool {
    let r = e.reason.as_deref().unwrap_or("");
    r.contains("Resource creation cancelled")
        || r.contains("Resource update cancelled")
        || r.contains("The following resource(s) failed")
        || r.contains("was not successfully")
        || r.starts_with("Stack creation time exceeded")
}

/// The first failed resource, as a root cause: the earliest `*_FAILED` event of
/// a real resource whose reason is not a cancellation caused by another failure.
/// Nested stacks' own failure events only point inside; their resources' events
/// are preferred.
fn root_cause(obs: &Observation, events: &[&StackEvent]) -> Option<Failure> {
    let failed: Vec<&&StackEvent> = events
        .iter()
        .filter(|e| e.status.ends_with("_FAILED") && e.logical_id != e.stack_name)
        .collect();
    let pick = failed
        .iter()
        .find(|e| e.resource_type != STACK_TYPE && !is_cascade(e))
        .or_else(|| failed.iter().find(|e| !is_cascade(e)))
        .or_else(|| failed.first())?;
    let stack = nested_logical_id(&obs.nested, events, &pick.stack_name).unwrap_or_else(|| "root".into());
    let reason = pick.reason.clone().unwrap_or_default();
    let addon = addon_for(obs, pick);
    let addon_message = addon.as_ref().and_then(|a| {
        obs.reports
            .iter()
            .find(|r| &r.release == a)
            .map(|r| r.message.clone())
            .filter(|m| !m.is_empty())
    });
    Some(Failure {
        stack,
        resource: pick.logical_id.clone(),
        resource_type: pick.resource_type.clone(),
        status: pick.status.clone(),
        reason,
        addon,
        addon_message,
        nodes: vec![],
        upgrade: None,
        recovery: None,
    })
}

/// The nested stack's logical id whose generated stack name is `stack_name`.
pub(super) fn nested_logical_id(nested: &[StackState], events: &[&StackEvent], stack_name: &str) -> Option<String> {
    nested
        .iter()
        .find(|n| {
            events.iter().any(|e| {
                e.logical_id == n.name
                    && e.resource_type == STACK_TYPE
                    && stack_name_from_arn(&e.physical_id).as_deref() == Some(stack_name)
            })
        })
        .map(|n| n.name.clone())
}

/// The addon a failed resource stands for: a WaitCondition mapped in the plan,
/// or the `UniqueId` of the FAILURE signal named in the reason.
fn addon_for(obs: &Observation, e: &StackEvent) -> Option<String> {
    if let Some(a) = obs
        .addons
        .iter()
        .find(|a| a.wait_condition.as_deref() == Some(e.logical_id.as_str()))
    {
        return Some(a.release.clone());
    }
    let reason = e.reason.as_deref().unwrap_or("");
    if e.resource_type == WAIT_CONDITION || reason.contains("FAILURE signal") || reason.contains("failed message") {
        // "WaitCondition received failed message: 'x' for uniqueId: dex"
        if let Some(id) = reason
            .split("uniqueId:")
            .nth(1)
            .or_else(|| reason.split("UniqueId").nth(1))
        {
            let id = id.trim().trim_start_matches(':').trim();
            let id: String = id
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if obs.addons.iter().any(|a| a.release == id) {
                return Some(id);
            }
        }
        // The only addon that is not ready is the one.
        let not_ready: Vec<&ExpectedAddon> = obs
            .addons
            .iter()
            .filter(|a| {
                !obs.reports
                    .iter()
                    .any(|r| r.release == a.release && matches!(r.phase, AddonPhase::Ready | AddonPhase::Skipped))
            })
            .collect();
        if let [one] = not_ready.as_slice() {
            return Some(one.release.clone());
        }
    }
    None
}

#[cfg(test)]
pub(super) mod tests;
