//! `kube-aws backups`: the cluster's etcd snapshots in S3 (key, size, time)
//! and the last backup run.

use super::deploy_args::{runtime, AwsArgs};
use super::{print_json, GlobalOptions, OutputFormat};
use crate::aws::{backups, connect};
use crate::config::load_cluster;

/// Arguments of `kube-aws backups`.
#[derive(Debug, clap::Args)]
pub struct BackupsArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
}

pub fn run(global: &GlobalOptions, args: BackupsArgs) -> anyhow::Result<()> {
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let list = runtime()?.block_on(async {
        let clients = connect(&args.aws.options(), &cfg.region).await?;
        backups::list_backups(&clients, cfg).await
    })?;
    if global.output == OutputFormat::Json {
        return print_json(&list);
    }
    print!("{}", backups::table(&list));
    Ok(())
}
