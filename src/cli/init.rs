//! `kube-aws init`: creates a work tree (cluster.yaml and its directories)
//! and warns when the API is left open to the internet.

use std::path::PathBuf;

use super::GlobalOptions;
use crate::config::{init_work_tree, InitOptions};

/// Arguments of `kube-aws init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Directory to create the work tree in
    pub dir: PathBuf,
    /// Cluster name (default: the directory's name when valid, else "demo")
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// AWS region
    #[arg(long, default_value = "us-west-2")]
    pub region: String,
    /// Where to publish artifacts, s3://bucket/prefix
    #[arg(long)]
    pub s3_uri: Option<String>,
    /// Overwrite an existing cluster.yaml
    #[arg(long)]
    pub force: bool,
    /// Write the example cluster: every built-in plugin enabled, two values files
    #[arg(long, conflicts_with_all = ["cluster_name", "s3_uri", "api_allowed_cidr"])]
    pub example: bool,
    /// Allow this IPv4 CIDR to reach the API (repeatable; default 0.0.0.0/0: open to the internet)
    #[arg(long, value_name = "CIDR")]
    pub api_allowed_cidr: Vec<String>,
}

pub fn run(_global: &GlobalOptions, args: InitArgs) -> anyhow::Result<()> {
    let report = init_work_tree(&InitOptions {
        dir: args.dir.clone(),
        cluster_name: args.cluster_name,
        region: args.region,
        s3_uri: args.s3_uri,
        force: args.force,
        example: args.example,
        api_allowed_cidrs: args.api_allowed_cidr,
    })?;
    println!(
        "created {} for cluster {:?}\nnext: edit it, then run `kube-aws --dir {} validate`",
        report.cluster_file.display(),
        report.cluster_name,
        args.dir.display()
    );
    if report.api_allowed_cidrs.iter().any(|c| c == crate::config::ANYWHERE) {
        println!(
            "warning: the Kubernetes API is open to the internet (apiEndpoint.allowedCIDRs: [0.0.0.0/0]); \
             narrow it with --api-allowed-cidr or in cluster.yaml"
        );
    } else {
        println!(
            "the Kubernetes API is open only to {} (apiEndpoint.allowedCIDRs)",
            report.api_allowed_cidrs.join(", ")
        );
        if report.private_subnets {
            println!(
                "the nodes go in private subnets behind NAT gateways (network.privateSubnets), \
                 so that they reach the API from addresses it admits"
            );
        }
    }
    Ok(())
}
