//! `kube-aws nodes` and `kube-aws logs NODE`: the cluster's instances with
//! their bootstrap status, and one node's published bootstrap report.

use super::deploy_args::{runtime, AwsArgs};
use super::{print_json, GlobalOptions, OutputFormat};
use crate::aws::connect;
use crate::aws::nodes::{self, NodeInfo};
use crate::config::load_cluster;

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

fn list(global: &GlobalOptions, aws: &AwsArgs) -> anyhow::Result<(crate::config::Cluster, Vec<NodeInfo>)> {
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let list = runtime()?.block_on(async {
        let clients = connect(&aws.options(), &cfg.region).await?;
        nodes::list_nodes(&clients, cfg).await
    })?;
    Ok((cluster, list))
}

pub fn run_nodes(global: &GlobalOptions, args: NodesArgs) -> anyhow::Result<()> {
    let (cluster, list) = list(global, &args.aws)?;
    if global.output == OutputFormat::Json {
        return print_json(&list);
    }
    if list.is_empty() {
        println!(
            "cluster {:?} has no nodes (is it up? `kube-aws status`)",
            cluster.config.cluster_name
        );
        return Ok(());
    }
    print!("{}", nodes::table(&list));
    Ok(())
}

pub fn run_logs(global: &GlobalOptions, args: LogsArgs) -> anyhow::Result<()> {
    let (cluster, list) = list(global, &args.aws)?;
    let node = nodes::find(&cluster.config.cluster_name, &list, &args.node)?;
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
        if cluster.config.node_access.ssm && node.state == "running" {
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
