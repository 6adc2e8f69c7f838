//! `up`: renders, publishes and creates the root stack, runs the pre/post-up
//! hooks, and with `wait` follows the create to its end.

use std::time::Duration;

use super::{artifacts, stack_outputs, Events, OpsError, WorkTree};
use crate::aws::lifecycle::deploy::{self, rendered_dir};
use crate::aws::services::stack::OnFailureMode;
use crate::aws::wait::Operation;
use crate::aws::{connect, AwsOptions};
use crate::config::load_cluster;
use crate::plugin::exec::{Step, When};

/// What `up` is asked to do.
#[derive(Debug, Clone)]
pub struct UpOptions {
    pub tree: WorkTree,
    pub aws: AwsOptions,
    /// Publish `<dir>/rendered` as it is instead of rendering again.
    pub use_rendered: bool,
    /// What CloudFormation does when the create fails.
    pub on_failure: OnFailureMode,
    /// Follow the create and the addons to their end.
    pub wait: bool,
    /// Give up following after this long (the stack is left as it is).
    pub timeout: Option<Duration>,
}

/// How `up` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpOutcome {
    /// The create was started and not followed.
    Started { stack_id: String },
    /// The stack is CREATE_COMPLETE; `addons` summarises the addons' reports.
    Complete { stack_id: String, addons: String },
}

/// Runs `up`.
pub async fn run(opts: &UpOptions, events: &mut dyn Events) -> Result<UpOutcome, OpsError> {
    let _lock = opts.tree.lock("up", &mut |l| events.note(l))?;
    let cluster = load_cluster(&opts.tree.dir)?;
    let cfg = &cluster.config;
    let rendered = rendered_dir(&opts.tree.dir);
    opts.tree.hooks(&cluster, Step::Up, When::Pre, &rendered, None)?;
    let artifacts = artifacts(&opts.tree, &cluster, opts.use_rendered, &Default::default()).await?;
    let clients = connect(&opts.aws, &cfg.region).await?;
    let (published, stack_id) = deploy::up(&clients, cfg, &artifacts, opts.on_failure).await?;
    let uploaded = published.objects.iter().filter(|o| o.uploaded).count();
    events.note(&format!(
        "published {} object(s) to s3://{}/{} ({uploaded} new)",
        published.objects.len(),
        published.location.bucket,
        published.location.prefix
    ));
    events.say(&format!("creating stack {:?}: {stack_id}", cfg.cluster_name));
    let (outcome, outputs) = if opts.wait {
        let addons = deploy::follow_published(
            &clients,
            &stack_id,
            Operation::Create,
            &published,
            opts.timeout,
            events.progress(),
        )
        .await?;
        events.say(&format!("stack {:?} is CREATE_COMPLETE; {addons}", cfg.cluster_name));
        let outputs = stack_outputs(&clients, &cfg.cluster_name).await?;
        (UpOutcome::Complete { stack_id, addons }, outputs)
    } else {
        events.say("follow it with `kube-aws status --wait`");
        (UpOutcome::Started { stack_id }, None)
    };
    opts.tree.hooks(
        &cluster,
        Step::Up,
        When::Post,
        &artifacts.rendered_dir,
        outputs.as_ref(),
    )?;
    Ok(outcome)
}
