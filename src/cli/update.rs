//! `kube-aws update`: renders and publishes, shows the change set (and the
//! AMIs and releases it changes), asks, applies it, and runs the hooks (the
//! operation: src/ops/update.rs).

use super::deploy_args::{runtime, AwsArgs, PublishArgs, WaitArgs};
use super::terminal::Terminal;
use super::GlobalOptions;
use crate::ops::update::{self, UpdateOptions};

/// Arguments of `kube-aws update`.
#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub publish: PublishArgs,
    /// Apply without asking (required when standard input is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Resolve the Amazon Linux 2023 AMI again (it is pinned at `up`): a newer
    /// one replaces the nodes, one at a time
    #[arg(long)]
    pub refresh_ami: bool,
    /// Mint a new cluster PKI (CAs, service-account key): every node is
    /// replaced and every kubeconfig must be minted again. Without it, an
    /// update that would change the cluster CA, or whose previous secret
    /// bundle is missing, is refused (docs/deploy.md)
    #[arg(long)]
    pub rotate_ca: bool,
}

pub fn run(global: &GlobalOptions, args: UpdateArgs) -> anyhow::Result<()> {
    let opts = UpdateOptions {
        tree: global.work_tree(),
        aws: args.aws.options(),
        use_rendered: args.publish.use_rendered,
        refresh_ami: args.refresh_ami,
        rotate_ca: args.rotate_ca,
        wait: args.wait.wait,
        timeout: args.wait.timeout,
    };
    // The operation says its report as it goes: its outcome needs no more printing.
    runtime()?.block_on(update::run(&opts, &mut Terminal::new(args.yes)))?;
    Ok(())
}
