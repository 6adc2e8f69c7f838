//! The progress model of a wait: one line per stack, addon and failed node,
//! and the wait conditions CloudFormation waits on with their deadlines
//! (pure, like the rest of `wait`; the verdict is in `wait` itself).

use serde::Serialize;

use super::{
    is_failure_status, is_terminal, stack_name_from_arn, AddonPhase, AddonReport, ExpectedAddon, NodeReport,
    Observation, Operation, StackEvent, StackState, STACK_TYPE,
};

/// A wait condition CloudFormation is waiting on, and for how long at most:
/// it fails the stack at `since_ms` + `timeout_secs` if no signal comes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingOn {
    pub release: String,
    pub wait_condition: String,
    /// The rendered timeout.
    pub timeout_secs: u64,
    /// When CloudFormation began to wait: the wait condition's first
    /// `CREATE_IN_PROGRESS` event of this operation (ms since the epoch).
    pub since_ms: i64,
}

impl WaitingOn {
    /// When CloudFormation gives up on the signal (ms since the epoch).
    pub fn deadline_ms(&self) -> i64 {
        self.since_ms.saturating_add(
            i64::try_from(self.timeout_secs)
                .unwrap_or(i64::MAX / 1000)
                .saturating_mul(1000),
        )
    }

    /// `dex: at most 1h3m, until 18:32:10 UTC`
    pub fn describe(&self) -> String {
        format!(
            "{}: at most {}, until {}",
            self.release,
            short_duration(self.timeout_secs),
            utc_time(self.deadline_ms())
        )
    }
}

/// `1h3m`, `45m`, `1m30s`, `0s`: a wait-condition timeout as people read it.
pub fn short_duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// `18:32:10 UTC` of a time in ms since the epoch.
pub fn utc_time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let stamp = humantime::format_rfc3339_seconds(t).to_string();
    format!("{} UTC", stamp.get(11..19).unwrap_or(&stamp))
}

/// One line of progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProgressLine {
    pub name: String,
    pub status: String,
    /// The latest event or message, for context.
    pub detail: String,
    pub finished: bool,
    pub failed: bool,
}

/// The progress model: one line per stack (root first, then nested) and per addon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StackProgress {
    pub stacks: Vec<ProgressLine>,
    pub addons: Vec<ProgressLine>,
    /// One line per node whose bootstrap failed in this operation.
    pub nodes: Vec<ProgressLine>,
    /// The addons' wait conditions CloudFormation is waiting on now, the
    /// one it gives up on first first.
    pub waiting: Vec<WaitingOn>,
}

pub(super) fn progress(obs: &Observation, events: &[&StackEvent], nodes: &[NodeReport]) -> StackProgress {
    let mut stacks = Vec::new();
    if let Some(root) = &obs.root {
        stacks.push(stack_line(root, events, None));
    } else if obs.operation == Operation::Delete {
        stacks.push(ProgressLine {
            name: "root".into(),
            status: "DELETE_COMPLETE".into(),
            detail: String::new(),
            finished: true,
            failed: false,
        });
    }
    for n in &obs.nested {
        stacks.push(stack_line(n, events, Some(&n.name)));
    }
    let waiting = waiting_on(obs, events);
    let addons = obs
        .addons
        .iter()
        .map(|a| {
            let report = obs.reports.iter().find(|r| r.release == a.release);
            let phase = report.map(|r| r.phase).unwrap_or(AddonPhase::Pending);
            let finished = matches!(phase, AddonPhase::Ready | AddonPhase::Skipped | AddonPhase::Failed);
            let mut detail = report.map(|r| r.message.trim().to_string()).unwrap_or_default();
            // How long CloudFormation waits for its signal: until a time once
            // it waits, the timeout before. Stable between polls (plain output
            // prints a line again only when it changes).
            // A wait condition that completed or failed in this operation waits no more.
            let settled = a.wait_condition.as_deref().is_some_and(|wc| {
                events
                    .iter()
                    .rev()
                    .find(|e| e.logical_id == wc)
                    .is_some_and(|e| is_terminal(&e.status))
            });
            let limit = match (
                finished || settled,
                waiting.iter().find(|w| w.release == a.release),
                a.wait_timeout_secs,
            ) {
                (true, _, _) => None,
                (false, Some(w), _) => Some(format!(
                    "signal awaited until {} at most ({})",
                    utc_time(w.deadline_ms()),
                    short_duration(w.timeout_secs)
                )),
                (false, None, Some(t)) => Some(format!("timeout {} once its wait condition starts", short_duration(t))),
                (false, None, None) => None,
            };
            if let Some(l) = limit {
                if !detail.is_empty() {
                    detail.push_str("; ");
                }
                detail.push_str(&l);
            }
            ProgressLine {
                name: a.release.clone(),
                status: phase.as_str().into(),
                detail,
                finished,
                failed: phase == AddonPhase::Failed,
            }
        })
        .collect();
    let nodes = nodes
        .iter()
        .map(|n| ProgressLine {
            name: if n.node_name.is_empty() {
                n.instance_id.clone()
            } else {
                n.node_name.clone()
            },
            status: "failed".into(),
            detail: format!("{} step {}", n.role, n.step),
            finished: true,
            failed: true,
        })
        .collect();
    StackProgress {
        stacks,
        addons,
        nodes,
        waiting,
    }
}

/// The addons whose wait condition CloudFormation is waiting on now: its
/// latest event of this operation is `CREATE_IN_PROGRESS` (a received signal
/// is one too, until the `CREATE_COMPLETE`) and its status object does not
/// say it is done. The clock starts at its first `CREATE_IN_PROGRESS`. The
/// one CloudFormation gives up on first comes first.
pub fn waiting_on(obs: &Observation, events: &[&StackEvent]) -> Vec<WaitingOn> {
    let mut out: Vec<WaitingOn> = obs
        .addons
        .iter()
        .filter_map(|a| {
            let wc = a.wait_condition.as_deref()?;
            let timeout = a.wait_timeout_secs?;
            let done = obs.reports.iter().any(|r| {
                r.release == a.release
                    && matches!(r.phase, AddonPhase::Ready | AddonPhase::Skipped | AddonPhase::Failed)
            });
            let mine: Vec<&&StackEvent> = events.iter().filter(|e| e.logical_id == wc).collect();
            let last = mine.last()?;
            if done || last.status != "CREATE_IN_PROGRESS" {
                return None;
            }
            let since = mine.iter().find(|e| e.status == "CREATE_IN_PROGRESS")?.timestamp;
            Some(WaitingOn {
                release: a.release.clone(),
                wait_condition: wc.to_string(),
                timeout_secs: timeout,
                since_ms: since,
            })
        })
        .collect();
    out.sort_by(|a, b| a.deadline_ms().cmp(&b.deadline_ms()).then(a.release.cmp(&b.release)));
    out
}

fn stack_line(state: &StackState, events: &[&StackEvent], logical: Option<&str>) -> ProgressLine {
    // The latest resource event inside this stack, for context.
    let stack_name = stack_name_of(state, events, logical);
    let latest = events
        .iter()
        .rev()
        .find(|e| Some(e.stack_name.as_str()) == stack_name.as_deref() && e.logical_id != e.stack_name);
    let detail = latest
        .map(|e| format!("{} {}", e.logical_id, e.status))
        .unwrap_or_default();
    ProgressLine {
        name: state.name.clone(),
        status: state.status.clone(),
        detail,
        finished: is_terminal(&state.status),
        failed: is_failure_status(&state.status),
    }
}

/// The CloudFormation stack name a state's events carry: the root's events name
/// the root, a nested stack's events carry its generated name, which the root's
/// event for the nested resource gives as physical id (an ARN `…:stack/NAME/ID`).
fn stack_name_of(state: &StackState, events: &[&StackEvent], logical: Option<&str>) -> Option<String> {
    match logical {
        None => events
            .iter()
            .find(|e| e.resource_type == STACK_TYPE && e.logical_id == e.stack_name)
            .map(|e| e.stack_name.clone())
            .or_else(|| Some(state.name.clone())),
        Some(l) => events
            .iter()
            .find(|e| e.resource_type == STACK_TYPE && e.logical_id == l && !e.physical_id.is_empty())
            .and_then(|e| stack_name_from_arn(&e.physical_id)),
    }
}

/// What a finished operation can honestly say of the addons: those whose
/// status object says ready, and the others, by name. A completed stack means
/// every wait condition was signalled, but only a status object shows the
/// installer's own word (and moto completes wait conditions unsignalled).
pub fn addons_summary(expected: &[ExpectedAddon], reports: &[AddonReport]) -> String {
    if expected.is_empty() {
        return "no addons to install".into();
    }
    let phase = |name: &str| {
        reports
            .iter()
            .find(|r| r.release == name)
            .map(|r| r.phase)
            .unwrap_or(AddonPhase::Pending)
    };
    let (ready, other): (Vec<&ExpectedAddon>, Vec<&ExpectedAddon>) =
        expected.iter().partition(|a| phase(&a.release) == AddonPhase::Ready);
    if other.is_empty() {
        let names: Vec<&str> = ready.iter().map(|a| a.release.as_str()).collect();
        return format!("every addon is ready ({}): {}", ready.len(), names.join(", "));
    }
    let others: Vec<String> = other
        .iter()
        .map(|a| format!("{} ({})", a.release, phase(&a.release).as_str()))
        .collect();
    format!(
        "{} of {} addon(s) report ready; not reported ready: {} (see `kube-aws status`)",
        ready.len(),
        expected.len(),
        others.join(", ")
    )
}
