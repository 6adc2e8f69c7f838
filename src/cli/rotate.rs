//! `kube-aws rotate bootstrap-token` (the operation: src/ops/rotate.rs): ask the controllers for a new join token now,
//! revoking the published one (src/aws/state/join_token.rs).

use super::deploy_args::{runtime, AwsArgs};
use super::{print_json, GlobalOptions, OutputFormat};
use crate::ops::{rotate, ClusterOptions};

/// Arguments of `kube-aws rotate`.
#[derive(Debug, clap::Args)]
pub struct RotateArgs {
    #[command(subcommand)]
    pub what: Rotated,
}

#[derive(Debug, clap::Subcommand)]
pub enum Rotated {
    /// A new join token (kubeadm bootstrap token) within 10 minutes; the current one is revoked
    BootstrapToken {
        #[command(flatten)]
        aws: AwsArgs,
    },
}

pub fn run(global: &GlobalOptions, args: RotateArgs) -> anyhow::Result<()> {
    let Rotated::BootstrapToken { aws } = args.what;
    let opts = ClusterOptions {
        dir: global.dir.clone(),
        aws: aws.options(),
    };
    let request = runtime()?.block_on(rotate::join_token(&opts))?;
    if global.output == OutputFormat::Json {
        return print_json(&request);
    }
    println!(
        "asked for a new join token at {} ({}): the controllers mint it and revoke the current one within \
         10 minutes; `kube-aws status` shows the token's age",
        request.requested_at, request.request
    );
    Ok(())
}
