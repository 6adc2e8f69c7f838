//! `kube-aws restore [--snapshot KEY]` (the operation: src/ops/restore.rs):
//! restores an etcd snapshot on 1, 3 or 5 controllers. Checks first, then,
//! confirmed, writes the request and replaces every controller; no stack
//! update.

use super::deploy_args::{runtime, AwsArgs};
use super::terminal::Terminal;
use super::{print_json, GlobalOptions, OutputFormat};
use crate::ops::restore::{self, RestoreOptions, RestoreOutcome};

/// Arguments of `kube-aws restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The snapshot: its key as `kube-aws backups` lists it (or s3://…, or
    /// relative to the cluster's etcd/ prefix); default: the newest
    #[arg(long)]
    pub snapshot: Option<String>,
    /// Do not ask before replacing the controllers
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub aws: AwsArgs,
}

pub fn run(global: &GlobalOptions, args: RestoreArgs) -> anyhow::Result<()> {
    let opts = RestoreOptions {
        dir: global.dir.clone(),
        aws: args.aws.options(),
        snapshot: args.snapshot,
    };
    let started = match runtime()?.block_on(restore::run(&opts, &mut Terminal::new(args.yes)))? {
        RestoreOutcome::NotRestored => anyhow::bail!("not restored"),
        RestoreOutcome::Started(s) => s,
    };
    if global.output == OutputFormat::Json {
        return print_json(&started);
    }
    println!(
        "restore {} of s3://{}/{} requested; terminated {} controller(s): {}",
        started.request,
        started.snapshot.bucket,
        started.snapshot.key,
        started.terminated.len(),
        started.terminated.join(", ")
    );
    println!(
        "the controller group replaces them: the first restores the snapshot, the others join it; \
         follow with `kube-aws nodes`, and `kube-aws status` once the API answers"
    );
    Ok(())
}
