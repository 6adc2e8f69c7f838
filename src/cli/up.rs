//! `kube-aws up`: renders, publishes and creates the root stack, runs the
//! pre/post-up hooks, and with `--wait` follows the create to its end.

use super::deploy_args::{artifacts, runtime, AwsArgs, PublishArgs, WaitArgs};
use super::progress_view::ProgressView;
use super::{hooks, stack_outputs, GlobalOptions};
use crate::aws::stack::OnFailureMode;
use crate::aws::wait::Operation;
use crate::aws::{connect, deploy};
use crate::config::load_cluster;
use crate::plugin::exec::{Step, When};

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
    let _lock = super::lock_work_tree(global, "up")?;
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let rendered = crate::aws::deploy::rendered_dir(&global.dir);
    hooks(global, &cluster, Step::Up, When::Pre, &rendered, None)?;
    let artifacts = artifacts(global, &cluster, &args.publish, &Default::default())?;
    let outputs = runtime()?.block_on(async {
        let clients = connect(&args.aws.options(), &cfg.region).await?;
        let (published, stack_id) = deploy::up(&clients, cfg, &artifacts, args.on_failure).await?;
        let uploaded = published.objects.iter().filter(|o| o.uploaded).count();
        eprintln!(
            "published {} object(s) to s3://{}/{} ({uploaded} new)",
            published.objects.len(),
            published.location.bucket,
            published.location.prefix
        );
        println!("creating stack {:?}: {stack_id}", cfg.cluster_name);
        if args.wait.wait {
            let addons = deploy::follow_published(
                &clients,
                &stack_id,
                Operation::Create,
                &published,
                args.wait.timeout,
                &mut ProgressView::for_stderr(),
            )
            .await?;
            println!("stack {:?} is CREATE_COMPLETE; {addons}", cfg.cluster_name);
            stack_outputs(&clients, &cfg.cluster_name).await
        } else {
            println!("follow it with `kube-aws status --wait`");
            Ok(None)
        }
    })?;
    hooks(
        global,
        &cluster,
        Step::Up,
        When::Post,
        &artifacts.rendered_dir,
        outputs.as_ref(),
    )
}
