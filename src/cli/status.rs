//! `kube-aws status`: the stack, its nested stacks, addons, failed nodes and
//! the control plane's version, last upgrade and reconfiguration;
//! with `--wait`, follows an operation in progress first.

use super::deploy_args::{runtime, AwsArgs, WaitArgs};
use super::progress_view::ProgressView;
use super::{print_json, GlobalOptions, OutputFormat};
use crate::aws::connect;
use crate::aws::deploy::{self, expected_addons, operation_in_progress, rendered_dir, StatusReport};
use crate::aws::publish::Location;
use crate::config::load_cluster;

/// Arguments of `kube-aws status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub fn run(global: &GlobalOptions, args: StatusArgs) -> anyhow::Result<()> {
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let addons = expected_addons(&rendered_dir(&global.dir));
    runtime()?.block_on(async {
        let clients = connect(&args.aws.options(), &cfg.region).await?;
        let mut report = deploy::status(&clients, cfg, &addons).await?;
        if args.wait.wait {
            if let Some(op) = operation_in_progress(&report.stack.status) {
                let location = Location::new(cfg)?;
                let result = deploy::follow(
                    &clients,
                    &report.stack.stack_id,
                    op,
                    &location,
                    &addons,
                    args.wait.timeout,
                    &mut ProgressView::for_stderr(),
                )
                .await;
                if let Err(e) = result {
                    return Err(e.into());
                }
                if op == crate::aws::wait::Operation::Delete {
                    println!("stack {:?} is deleted", cfg.cluster_name);
                    return Ok(());
                }
                report = deploy::status(&clients, cfg, &addons).await?;
            }
        }
        print_report(global.output, &report)
    })
}

fn print_report(format: OutputFormat, r: &StatusReport) -> anyhow::Result<()> {
    if format == OutputFormat::Json {
        return print_json(r);
    }
    let s = &r.stack;
    match &s.reason {
        Some(reason) if !reason.is_empty() => println!("stack {}: {} ({reason})", s.name, s.status),
        _ => println!("stack {}: {}", s.name, s.status),
    }
    for n in &r.nested {
        match &n.reason {
            Some(reason) if !reason.is_empty() => println!("  {}: {} ({reason})", n.logical_id, n.status),
            _ => println!("  {}: {}", n.logical_id, n.status),
        }
    }
    if let Some(recovery) = &r.recovery {
        for l in recovery.lines() {
            println!("{l}");
        }
    }
    if !s.outputs.is_empty() {
        println!("outputs:");
        for o in &s.outputs {
            println!("  {}: {}", o.key, o.value);
        }
    }
    if !r.nodes.is_empty() {
        // A controller holding its termination (etcd's quorum) is not a failure.
        if r.nodes.iter().any(|n| n.holds()) {
            println!("nodes that failed or hold:");
        } else {
            println!("failed nodes:");
        }
        for n in &r.nodes {
            println!("  {}", n.headline());
            for l in n.log_tail(crate::aws::wait::NODE_LOG_LINES) {
                println!("    | {l}");
            }
        }
    }
    let c = &r.certificates;
    if let Some(e) = &c.earliest_leaf {
        println!(
            "certificates: earliest {} on {} expires {} ({} days)",
            e.certificate, e.node, e.expires, e.days_left
        );
    }
    if let Some(e) = &c.earliest_ca {
        println!(
            "certificate authorities: earliest {} expires {} ({} days)",
            e.certificate, e.expires, e.days_left
        );
    }
    let t = &r.bootstrap_token;
    if let (Some(id), Some(age)) = (&t.token_id, t.age_seconds) {
        println!(
            "join token: {id}, minted {} ago, expires {}",
            crate::aws::wait::age_text(age),
            t.expires.as_deref().unwrap_or("?")
        );
    }
    let e = &r.etcd_snapshot;
    if let (Some(key), Some(age)) = (&e.newest, e.age_seconds) {
        println!("etcd: newest snapshot {} old ({key})", crate::aws::wait::age_text(age));
    }
    for w in c.warnings.iter().chain(&t.warnings).chain(&e.warnings) {
        println!("warning: {w}");
    }
    let etcd = crate::aws::etcd_status::lines(&r.etcd);
    if !etcd.is_empty() {
        println!("etcd:");
        for l in etcd {
            println!("  {l}");
        }
    }
    for w in crate::aws::etcd_status::warnings(&r.etcd) {
        println!("warning: {w}");
    }
    println!("control plane:");
    for l in crate::aws::control_plane_status::lines(&r.control_plane) {
        println!("  {l}");
    }
    for w in &r.control_plane.warnings {
        println!("warning: {w}");
    }
    for w in r.kms_keys.iter().filter_map(crate::aws::kms_keys::warning) {
        println!("warning: {w}");
    }
    if !r.addons.is_empty() {
        println!("addons:");
        for a in &r.addons {
            if a.message.is_empty() {
                println!("  {}: {}", a.release, a.phase);
            } else {
                println!("  {}: {} ({})", a.release, a.phase, a.message);
            }
        }
    }
    Ok(())
}
