//! `kube-aws destroy`: asks first (or `--yes`), runs the pre-destroy hooks,
//! deletes the root stack, and with `--wait` follows the delete and sweeps
//! what is still tagged with the cluster (src/aws/destroy.rs); with
//! `--purge` removes the published objects. Exits non-zero when a tagged
//! resource is left.

use super::confirm::confirm;
use super::deploy_args::{runtime, AwsArgs, WaitArgs};
use super::progress_view::ProgressView;
use super::{hooks, GlobalOptions};
use std::time::Duration;

use crate::aws::deploy;
use crate::aws::destroy::{destroy, incomplete, DestroyPlan};
use crate::aws::destroy_api::ApiOptions;
use crate::aws::publish::Location;
use crate::aws::stack::describe_stack;
use crate::aws::sweep::calls::SweepOptions;
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
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let location = Location::new(cfg)?;
    let rendered = crate::aws::deploy::rendered_dir(&global.dir);
    let rt = runtime()?;
    let clients = rt.block_on(connect(&args.aws.options(), &cfg.region))?;
    let deleted = rt.block_on(async {
        let stack = describe_stack(&clients, &cfg.cluster_name).await?;
        let question = match &stack {
            Some(s) => format!(
                "delete stack {:?} ({}) and every resource in it?",
                cfg.cluster_name, s.status
            ),
            // The stack is gone; what the cluster left can still be swept.
            None if args.wait.wait => format!(
                "the stack {:?} does not exist; delete what is still tagged with the cluster?",
                cfg.cluster_name
            ),
            None => {
                return Err(AwsError::StackMissing {
                    stack: cfg.cluster_name.clone(),
                }
                .into())
            }
        };
        if !confirm(&question, args.yes)? {
            println!("not deleted");
            return Ok::<bool, anyhow::Error>(false);
        }
        // Asked first, so a declined destroy runs no hook.
        tokio::task::block_in_place(|| hooks(global, &cluster, Step::Destroy, When::Pre, &rendered, None))?;
        let plan = DestroyPlan {
            cfg,
            location: &location,
            wait: args.wait.wait,
            timeout: args.wait.timeout,
            sweep: SweepOptions {
                deadline: args.sweep_timeout,
                pause: Duration::from_secs(10).min(args.sweep_timeout),
                keep_volumes: args.keep_volumes,
            },
            api: Some(ApiOptions {
                keep_volumes: args.keep_volumes,
                wait: args.sweep_timeout,
                poll: Duration::from_secs(5).min(args.sweep_timeout),
            }),
        };
        let done = destroy(&clients, &plan, &mut ProgressView::for_stderr(), &mut |l| {
            println!("{l}")
        })
        .await?;
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
        if let Some(report) = &done.swept {
            incomplete(report)?;
        }
        Ok(true)
    })?;
    if deleted {
        hooks(global, &cluster, Step::Destroy, When::Post, &rendered, None)?;
    }
    Ok(())
}
