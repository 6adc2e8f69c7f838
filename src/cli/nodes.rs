//! `kube-aws nodes` and `kube-aws logs NODE` (the operations:
//! src/ops/nodes.rs): the cluster's instances with their bootstrap status,
//! and one node's published bootstrap report.

use super::deploy_args::{runtime, AwsArgs};
use super::{print_json, GlobalOptions, OutputFormat};
use crate::aws::state::nodes::table;
use crate::ops::{nodes, ClusterOptions};

/// Arguments of `kube-aws nodes`.
#[derive(Debug, clap::Args)]
pub struct NodesArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// Arguments of `kube-aws logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The node: its instance id (i-…) or private DNS name (ip-….compute.internal)
    pub node: String,
    #[command(flatten)]
    pub aws: AwsArgs,
}

fn options(global: &GlobalOptions, aws: &AwsArgs) -> ClusterOptions {
    ClusterOptions {
        dir: global.dir.clone(),
        aws: aws.options(),
    }
}

pub fn run_nodes(global: &GlobalOptions, args: NodesArgs) -> anyhow::Result<()> {
    let list = runtime()?.block_on(nodes::list(&options(global, &args.aws)))?;
    if global.output == OutputFormat::Json {
        return print_json(&list.nodes);
    }
    if list.nodes.is_empty() {
        println!("cluster {:?} has no nodes (is it up? `kube-aws status`)", list.cluster);
        return Ok(());
    }
    print!("{}", table(&list.nodes));
    Ok(())
}

pub fn run_logs(global: &GlobalOptions, args: LogsArgs) -> anyhow::Result<()> {
    let found = runtime()?.block_on(nodes::logs(&options(global, &args.aws), &args.node))?;
    let node = &found.node;
    if global.output == OutputFormat::Json {
        return print_json(&node.report);
    }
    let Some(r) = &node.report else {
        println!(
            "node {} ({}) has published no bootstrap report: a node publishes one only when a bootstrap step fails",
            node.instance_id,
            if node.private_dns_name.is_empty() {
                "-"
            } else {
                &node.private_dns_name
            },
        );
        if found.ssm {
            println!(
                "to look around on it: aws ssm start-session --target {}",
                node.instance_id
            );
        }
        return Ok(());
    };
    println!("{}", r.headline());
    if r.timestamp > 0 {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(r.timestamp.unsigned_abs());
        println!("reported at {}", humantime::format_rfc3339_seconds(at));
    }
    println!("log (secrets blanked by the node):");
    for l in r.log.lines() {
        println!("  | {l}");
    }
    Ok(())
}
