//! `status`: the stack, its nested stacks, addons, failed nodes and the
//! control plane's version, last upgrade and reconfiguration; with `wait`,
//! follows an operation in progress first. `report_lines` is the report as
//! text (pure).

use std::time::Duration;

use super::{Events, OpsError};
use crate::aws::lifecycle::deploy::{self, rendered_dir};
use crate::aws::lifecycle::status::{self, expected_addons, operation_in_progress, StatusReport};
use crate::aws::services::s3::Location;
use crate::aws::wait::{age_text, Operation, NODE_LOG_LINES};
use crate::aws::{connect, AwsOptions};
use crate::config::load_cluster;

/// What `status` is asked to do.
#[derive(Debug, Clone)]
pub struct StatusOptions {
    /// The work tree (cluster.yaml, and `rendered/` for the addons to expect).
    pub dir: std::path::PathBuf,
    pub aws: AwsOptions,
    /// Follow an operation in progress to its end first.
    pub wait: bool,
    /// Give up following after this long.
    pub timeout: Option<Duration>,
}

/// What `status` found.
#[derive(Debug)]
pub enum StatusOutcome {
    /// The stack was being deleted, and `wait` followed it to its end.
    Deleted { stack: String },
    /// The stack as it is (after the wait, with `wait`).
    Report(Box<StatusReport>),
}

/// Runs `status`.
pub async fn run(opts: &StatusOptions, events: &mut dyn Events) -> Result<StatusOutcome, OpsError> {
    let cluster = load_cluster(&opts.dir)?;
    let cfg = &cluster.config;
    let addons = expected_addons(&rendered_dir(&opts.dir));
    let clients = connect(&opts.aws, &cfg.region).await?;
    let mut report = status::status(&clients, cfg, &addons).await?;
    if opts.wait {
        if let Some(op) = operation_in_progress(&report.stack.status) {
            let location = Location::new(cfg)?;
            let stack_id = report.stack.stack_id.clone();
            deploy::follow(
                &clients,
                &stack_id,
                op,
                &location,
                &addons,
                opts.timeout,
                events.progress(),
            )
            .await?;
            if op == Operation::Delete {
                return Ok(StatusOutcome::Deleted {
                    stack: cfg.cluster_name.clone(),
                });
            }
            report = status::status(&clients, cfg, &addons).await?;
        }
    }
    Ok(StatusOutcome::Report(Box::new(report)))
}

/// The report as `kube-aws status` prints it, a line each.
pub fn report_lines(r: &StatusReport) -> Vec<String> {
    let mut out = Vec::new();
    let with_reason = |head: String, status: &str, reason: &Option<String>| match reason {
        Some(reason) if !reason.is_empty() => format!("{head}: {status} ({reason})"),
        _ => format!("{head}: {status}"),
    };
    let s = &r.stack;
    out.push(with_reason(format!("stack {}", s.name), &s.status, &s.reason));
    for n in &r.nested {
        out.push(with_reason(format!("  {}", n.logical_id), &n.status, &n.reason));
    }
    if let Some(recovery) = &r.recovery {
        out.extend(recovery.lines());
    }
    if !s.outputs.is_empty() {
        out.push("outputs:".into());
        out.extend(s.outputs.iter().map(|o| format!("  {}: {}", o.key, o.value)));
    }
    if !r.nodes.is_empty() {
        // A controller holding its termination (etcd's quorum) is not a failure.
        out.push(
            if r.nodes.iter().any(|n| n.holds()) {
                "nodes that failed or hold:"
            } else {
                "failed nodes:"
            }
            .into(),
        );
        for n in &r.nodes {
            out.push(format!("  {}", n.headline()));
            out.extend(n.log_tail(NODE_LOG_LINES).iter().map(|l| format!("    | {l}")));
        }
    }
    let c = &r.certificates;
    if let Some(e) = &c.earliest_leaf {
        out.push(format!(
            "certificates: earliest {} on {} expires {} ({} days)",
            e.certificate, e.node, e.expires, e.days_left
        ));
    }
    if let Some(e) = &c.earliest_ca {
        out.push(format!(
            "certificate authorities: earliest {} expires {} ({} days)",
            e.certificate, e.expires, e.days_left
        ));
    }
    let t = &r.bootstrap_token;
    if let (Some(id), Some(age)) = (&t.token_id, t.age_seconds) {
        out.push(format!(
            "join token: {id}, minted {} ago, expires {}",
            age_text(age),
            t.expires.as_deref().unwrap_or("?")
        ));
    }
    let e = &r.etcd_snapshot;
    if let (Some(key), Some(age)) = (&e.newest, e.age_seconds) {
        out.push(format!("etcd: newest snapshot {} old ({key})", age_text(age)));
    }
    out.extend(
        c.warnings
            .iter()
            .chain(&t.warnings)
            .chain(&e.warnings)
            .map(|w| format!("warning: {w}")),
    );
    let etcd = crate::aws::state::etcd_status::lines(&r.etcd);
    if !etcd.is_empty() {
        out.push("etcd:".into());
        out.extend(etcd.iter().map(|l| format!("  {l}")));
    }
    out.extend(
        crate::aws::state::etcd_status::warnings(&r.etcd)
            .iter()
            .map(|w| format!("warning: {w}")),
    );
    out.push("control plane:".into());
    out.extend(
        crate::aws::state::control_plane_status::lines(&r.control_plane)
            .iter()
            .map(|l| format!("  {l}")),
    );
    out.extend(r.control_plane.warnings.iter().map(|w| format!("warning: {w}")));
    out.extend(
        r.kms_keys
            .iter()
            .filter_map(crate::aws::state::kms_keys::warning)
            .map(|w| format!("warning: {w}")),
    );
    if !r.addons.is_empty() {
        out.push("addons:".into());
        for a in &r.addons {
            if a.message.is_empty() {
                out.push(format!("  {}: {}", a.release, a.phase));
            } else {
                out.push(format!("  {}: {} ({})", a.release, a.phase, a.message));
            }
        }
    }
    out
}
