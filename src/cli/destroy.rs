//! `kube-aws destroy` (the operation: src/ops/destroy.rs): asks first (or `--yes`), runs the pre-destroy hooks,
//! deletes the root stack, and with `--wait` follows the delete and sweeps
//! what is still tagged with the cluster (src/aws/lifecycle/destroy.rs); with
//! `--purge` removes the published objects. Exits non-zero when a tagged
//! resource is left.

use super::deploy_args::{runtime, AwsArgs, WaitArgs};
use super::terminal::Terminal;
use super::GlobalOptions;
use std::time::Duration;

use crate::ops::destroy::{self, DestroyOptions};

/// Arguments of `kube-aws destroy`.
#[derive(Debug, clap::Args)]
pub struct DestroyArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    /// Delete without asking (required when standard input is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Also delete the published objects under s3URI/<cluster>/ (kept by default)
    #[arg(long)]
    pub purge: bool,
    /// Keep the volumes of PersistentVolumeClaims: delete no claim through the
    /// API, and leave the EBS volumes tagged with the cluster (reported as kept)
    #[arg(long)]
    pub keep_volumes: bool,
    /// How long destroy waits for what the cluster made in AWS to go: the
    /// load balancers and volumes of the Services and claims it deletes
    /// first, and (with --wait) the sweep's retries of what another deletion
    /// may free
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub sweep_timeout: Duration,
}

pub fn run(global: &GlobalOptions, args: DestroyArgs) -> anyhow::Result<()> {
    let opts = DestroyOptions {
        tree: global.work_tree(),
        aws: args.aws.options(),
        wait: args.wait.wait,
        timeout: args.wait.timeout,
        purge: args.purge,
        keep_volumes: args.keep_volumes,
        sweep_timeout: args.sweep_timeout,
    };
    // The operation says its report as it goes: its outcome needs no more printing.
    runtime()?.block_on(destroy::run(&opts, &mut Terminal::new(args.yes)))?;
    Ok(())
}
