//! `destroy` as a library call, after the CLI has asked: delete the root
//! stack, follow it when asked to, then sweep what is still tagged with the
//! cluster (src/aws/lifecycle/sweep.rs). A stack that ends `DELETE_FAILED` (a load
//! balancer or an ENI the cloud left in a subnet keeps the VPC, the
//! `DependencyViolation` the issue describes) is swept and deleted once more,
//! as kops's `delete cluster` deletes what holds the VPC before the VPC.
//! Notes go to a callback; nothing here draws on a terminal.

use std::time::Duration;

use crate::aws::lifecycle::deploy::{self, ProgressSink};
use crate::aws::lifecycle::destroy_api::{cleanup, ApiCleanup, ApiOptions};
use crate::aws::lifecycle::kubeconfig::{mint, MintRequest};
use crate::aws::lifecycle::sweep::calls::{sweep, SweepOptions};
use crate::aws::lifecycle::sweep::{external_dns_zone, Report};
use crate::aws::services::s3::Location;
use crate::aws::services::stack::{delete_stack, describe_stack};
use crate::aws::wait::Operation;
use crate::aws::{AwsError, Clients};
use crate::config::ClusterConfig;

/// How `destroy` runs once confirmed.
pub struct DestroyPlan<'a> {
    pub cfg: &'a ClusterConfig,
    pub location: &'a Location,
    /// Follow the delete (and then sweep); without it the command returns
    /// once CloudFormation accepted the delete, and nothing is swept.
    pub wait: bool,
    pub timeout: Option<Duration>,
    pub sweep: SweepOptions,
    /// Delete LoadBalancer Services and PVCs through the API first (None: skip).
    pub api: Option<ApiOptions>,
}

/// What happened.
#[derive(Debug, Default)]
pub struct Destroyed {
    /// The stack existed and its delete was requested.
    pub stack_deleted: bool,
    /// The sweep's report, when it ran.
    pub swept: Option<Report>,
}

/// The sweep's lines: what was removed, then what could not be and why.
pub fn report_lines(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = report
        .removed
        .iter()
        .map(|f| format!("removed {}", f.describe()))
        .collect();
    out.extend(
        report
            .kept
            .iter()
            .map(|f| format!("kept {} (--keep-volumes)", f.describe())),
    );
    out.extend(
        report
            .left
            .iter()
            .map(|(f, why)| format!("could not remove {}: {why}", f.describe())),
    );
    out
}

/// The API part, best effort: a cluster whose API cannot be reached (no
/// endpoint output, credentials refused, not answering) is still swept.
async fn api_cleanup(clients: &Clients, cfg: &ClusterConfig, opts: ApiOptions, note: &mut dyn FnMut(String)) {
    let req = MintRequest {
        user: crate::pki::DEFAULT_USER.into(),
        group: Some(crate::pki::DEFAULT_GROUP.into()),
        ttl: Duration::from_secs(3600),
        context: None,
    };
    let entry = match mint(clients, cfg, &req).await {
        Ok(m) => m.entry,
        Err(e) => {
            note(format!(
                "not deleting load balancer Services and volumes through the API ({e}); the sweep cleans what it can"
            ));
            return;
        }
    };
    match cleanup(&entry, opts, note).await {
        Ok(ApiCleanup::Unreachable(why)) => note(format!(
            "the API server does not answer ({why}); the sweep cleans what it can"
        )),
        Ok(ApiCleanup::Done { left, .. }) if !left.is_empty() => note(format!(
            "still there after the wait (the sweep takes what is tagged): {}",
            left.join(", ")
        )),
        Ok(ApiCleanup::Done { .. }) => {}
        Err(e) => note(format!("{e}; the sweep cleans what it can")),
    }
}

async fn follow_delete(
    clients: &Clients,
    stack_id: &str,
    plan: &DestroyPlan<'_>,
    view: &mut dyn ProgressSink,
) -> Result<(), AwsError> {
    deploy::follow(
        clients,
        stack_id,
        Operation::Delete,
        plan.location,
        &[],
        plan.timeout,
        view,
    )
    .await
}

/// Deletes the stack (when there is one), follows it and sweeps. The stack
/// may already be gone: then only the sweep runs. Errors when a tagged
/// resource is left ([`AwsError::SweepIncomplete`]).
pub async fn destroy(
    clients: &Clients,
    plan: &DestroyPlan<'_>,
    view: &mut dyn ProgressSink,
    note: &mut dyn FnMut(String),
) -> Result<Destroyed, AwsError> {
    let name = &plan.cfg.cluster_name;
    let mut out = Destroyed::default();
    let stack = describe_stack(clients, name).await?;
    if let (Some(_), Some(opts)) = (&stack, plan.api) {
        api_cleanup(clients, plan.cfg, opts, note).await;
    }
    if let Some(s) = &stack {
        delete_stack(clients, &s.stack_id).await?;
        out.stack_deleted = true;
        note(format!("deleting stack {name:?}"));
    }
    if !plan.wait {
        note("not sweeping what the cluster left: pass --wait, which sweeps once the stack is gone".into());
        return Ok(out);
    }
    let zone = external_dns_zone(plan.cfg);
    if let Some(s) = &stack {
        match follow_delete(clients, &s.stack_id, plan, view).await {
            Ok(()) => note(format!("stack {name:?} is deleted")),
            Err(AwsError::Failed(f)) => {
                // Sweep what holds the stack's resources, then delete again.
                note(format!(
                    "{f}; sweeping what the cluster left, then deleting the stack again"
                ));
                let first = sweep(clients, name, zone.as_deref(), plan.sweep).await?;
                for line in report_lines(&first) {
                    note(line);
                }
                delete_stack(clients, &s.stack_id).await?;
                follow_delete(clients, &s.stack_id, plan, view).await?;
                note(format!("stack {name:?} is deleted"));
            }
            Err(e) => return Err(e),
        }
    } else {
        note(format!(
            "no stack {name:?}; sweeping what is still tagged with the cluster"
        ));
    }
    let report = sweep(clients, name, zone.as_deref(), plan.sweep).await?;
    let lines = report_lines(&report);
    if lines.is_empty() {
        note(format!("nothing tagged with cluster {name:?} is left"));
    }
    for line in lines {
        note(line);
    }
    out.swept = Some(report);
    Ok(out)
}

/// The error for what the sweep left, if anything.
pub fn incomplete(report: &Report) -> Result<(), AwsError> {
    if report.left.is_empty() {
        return Ok(());
    }
    Err(AwsError::SweepIncomplete {
        left: report.left.iter().map(|(f, _)| f.describe()).collect(),
    })
}
