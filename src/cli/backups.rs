//! `kube-aws backups` (the operation: src/ops/backups.rs): the cluster's
//! etcd snapshots in S3 (key, size, time) and the last backup run.

use super::deploy_args::{runtime, AwsArgs};
use super::{print_json, GlobalOptions, OutputFormat};
use crate::aws::state::backups::table;
use crate::ops::{backups, ClusterOptions};

/// Arguments of `kube-aws backups`.
#[derive(Debug, clap::Args)]
pub struct BackupsArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
}

pub fn run(global: &GlobalOptions, args: BackupsArgs) -> anyhow::Result<()> {
    let opts = ClusterOptions {
        dir: global.dir.clone(),
        aws: args.aws.options(),
    };
    let list = runtime()?.block_on(backups::list(&opts))?;
    if global.output == OutputFormat::Json {
        return print_json(&list);
    }
    print!("{}", table(&list));
    Ok(())
}
