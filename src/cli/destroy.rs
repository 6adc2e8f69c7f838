//! `kube-aws destroy`: asks first (or `--yes`), runs the pre-destroy hooks,
//! deletes the root stack, optionally follows the delete, and with `--purge`
//! removes the published objects.

use super::confirm::confirm;
use super::deploy_args::{runtime, AwsArgs, WaitArgs};
use super::progress_view::ProgressView;
use super::{hooks, GlobalOptions};
use crate::aws::deploy;
use crate::aws::publish::Location;
use crate::aws::stack::{delete_stack, describe_stack};
use crate::aws::wait::Operation;
use crate::aws::{connect, AwsError};
use crate::config::load_cluster;
use crate::plugin::exec::{Step, When};

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
}

pub fn run(global: &GlobalOptions, args: DestroyArgs) -> anyhow::Result<()> {
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let location = Location::new(cfg)?;
    let rendered = crate::aws::deploy::rendered_dir(&global.dir);
    let rt = runtime()?;
    let clients = rt.block_on(connect(&args.aws.options(), &cfg.region))?;
    let deleted = rt.block_on(async {
        let stack = describe_stack(&clients, &cfg.cluster_name)
            .await?
            .ok_or_else(|| AwsError::StackMissing {
                stack: cfg.cluster_name.clone(),
            })?;
        let question = format!(
            "delete stack {:?} ({}) and every resource in it?",
            cfg.cluster_name, stack.status
        );
        if !confirm(&question, args.yes)? {
            println!("not deleted");
            return Ok::<bool, anyhow::Error>(false);
        }
        // Asked first, so a declined destroy runs no hook.
        tokio::task::block_in_place(|| hooks(global, &cluster, Step::Destroy, When::Pre, &rendered, None))?;
        delete_stack(&clients, &stack.stack_id).await?;
        println!("deleting stack {:?}", cfg.cluster_name);
        if args.wait.wait {
            deploy::follow(
                &clients,
                &stack.stack_id,
                Operation::Delete,
                &location,
                &[],
                args.wait.timeout,
                &mut ProgressView::for_stderr(),
            )
            .await?;
            println!("stack {:?} is deleted", cfg.cluster_name);
        }
        if args.purge {
            let purged = deploy::purge(&clients, cfg, &location).await?;
            println!("purged {} object(s) under {}", purged.objects, location.s3_uri());
            if let Some(b) = purged.issuer_bucket {
                println!("deleted the service-account issuer's bucket {b:?}");
            }
        } else {
            println!(
                "published objects are kept under {} (use --purge to delete them)",
                location.s3_uri()
            );
        }
        Ok(true)
    })?;
    if deleted {
        hooks(global, &cluster, Step::Destroy, When::Post, &rendered, None)?;
    }
    Ok(())
}
