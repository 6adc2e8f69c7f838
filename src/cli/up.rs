//! `kube-aws up`: renders, publishes and creates the root stack, runs the
//! pre/post-up hooks, and with `--wait` follows the create to its end
//! (the operation: src/ops/up.rs).

use super::deploy_args::{runtime, AwsArgs, PublishArgs, WaitArgs};
use super::terminal::Terminal;
use super::GlobalOptions;
use crate::aws::services::stack::OnFailureMode;
use crate::ops::up::{self, UpOptions};

/// Arguments of `kube-aws up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub publish: PublishArgs,
    /// What CloudFormation does when the create fails
    #[arg(long, value_enum, default_value_t = OnFailureMode::Rollback)]
    pub on_failure: OnFailureMode,
}

pub fn run(global: &GlobalOptions, args: UpArgs) -> anyhow::Result<()> {
    let opts = UpOptions {
        tree: global.work_tree(),
        aws: args.aws.options(),
        use_rendered: args.publish.use_rendered,
        on_failure: args.on_failure,
        wait: args.wait.wait,
        timeout: args.wait.timeout,
    };
    // The operation says its report as it goes (stdout, stderr, the
    // progress view): its outcome needs no more printing.
    runtime()?.block_on(up::run(&opts, &mut Terminal::new(false)))?;
    Ok(())
}
