//! `kube-aws status` (the operation: src/ops/status.rs): the stack, its nested stacks, addons, failed nodes and
//! the control plane's version, last upgrade and reconfiguration;
//! with `--wait`, follows an operation in progress first.

use super::deploy_args::{runtime, AwsArgs, WaitArgs};
use super::terminal::Terminal;
use super::{print_json, GlobalOptions, OutputFormat};
use crate::ops::status::{self, report_lines, StatusOptions, StatusOutcome};

/// Arguments of `kube-aws status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
}

pub fn run(global: &GlobalOptions, args: StatusArgs) -> anyhow::Result<()> {
    let opts = StatusOptions {
        dir: global.dir.clone(),
        aws: args.aws.options(),
        wait: args.wait.wait,
        timeout: args.wait.timeout,
    };
    match runtime()?.block_on(status::run(&opts, &mut Terminal::new(false)))? {
        StatusOutcome::Deleted { stack } => println!("stack {stack:?} is deleted"),
        StatusOutcome::Report(r) if global.output == OutputFormat::Json => print_json(&r)?,
        StatusOutcome::Report(r) => report_lines(&r).iter().for_each(|l| println!("{l}")),
    }
    Ok(())
}
