//! `destroy`: asks first, runs the pre-destroy hooks, deletes the root stack,
//! and with `wait` follows the delete and sweeps what is still tagged with
//! the cluster (src/aws/lifecycle/destroy.rs); with `purge` removes the published
//! objects. A tagged resource left is an error (after the report).

use std::cell::RefCell;
use std::time::Duration;

use super::{Events, OpsError, WorkTree};
use crate::aws::lifecycle::deploy::{self, rendered_dir, ProgressSink};
use crate::aws::lifecycle::destroy::{destroy, incomplete, DestroyPlan};
use crate::aws::lifecycle::destroy_api::ApiOptions;
use crate::aws::lifecycle::sweep::calls::SweepOptions;
use crate::aws::services::s3::Location;
use crate::aws::services::stack::describe_stack;
use crate::aws::wait::StackProgress;
use crate::aws::{connect, AwsError, AwsOptions};
use crate::config::load_cluster;
use crate::plugin::exec::{Step, When};

/// What `destroy` is asked to do.
#[derive(Debug, Clone)]
pub struct DestroyOptions {
    pub tree: WorkTree,
    pub aws: AwsOptions,
    /// Follow the delete, then sweep what is still tagged with the cluster.
    pub wait: bool,
    /// Give up following after this long.
    pub timeout: Option<Duration>,
    /// Also delete the published objects under s3URI/<cluster>/.
    pub purge: bool,
    /// Keep the volumes of PersistentVolumeClaims.
    pub keep_volumes: bool,
    /// How long to wait for what the cluster made in AWS to go.
    pub sweep_timeout: Duration,
}

/// How `destroy` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestroyOutcome {
    /// The answer was no: nothing was deleted and no hook ran.
    NotDeleted,
    /// The stack was deleted (and, with `wait`, the cluster's leftovers swept).
    Deleted,
}

/// Runs `destroy`.
pub async fn run(opts: &DestroyOptions, events: &mut dyn Events) -> Result<DestroyOutcome, OpsError> {
    let cluster = load_cluster(&opts.tree.dir)?;
    let cfg = &cluster.config;
    let location = Location::new(cfg)?;
    let rendered = rendered_dir(&opts.tree.dir);
    let clients = connect(&opts.aws, &cfg.region).await?;
    let stack = describe_stack(&clients, &cfg.cluster_name).await?;
    let question = match &stack {
        Some(s) => format!(
            "delete stack {:?} ({}) and every resource in it?",
            cfg.cluster_name, s.status
        ),
        // The stack is gone; what the cluster left can still be swept.
        None if opts.wait => format!(
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
    if !events.confirm(&question)? {
        events.say("not deleted");
        return Ok(DestroyOutcome::NotDeleted);
    }
    // Asked first, so a declined destroy runs no hook.
    opts.tree.hooks(&cluster, Step::Destroy, When::Pre, &rendered, None)?;
    let plan = DestroyPlan {
        cfg,
        location: &location,
        wait: opts.wait,
        timeout: opts.timeout,
        sweep: SweepOptions {
            deadline: opts.sweep_timeout,
            pause: Duration::from_secs(10).min(opts.sweep_timeout),
            keep_volumes: opts.keep_volumes,
        },
        api: Some(ApiOptions {
            keep_volumes: opts.keep_volumes,
            wait: opts.sweep_timeout,
            poll: Duration::from_secs(5).min(opts.sweep_timeout),
        }),
    };
    // The delete's progress and its lines go to the same events, one call
    // at a time.
    let shared = RefCell::new(events);
    let done = destroy(&clients, &plan, &mut Shared(&shared), &mut |l| {
        shared.borrow_mut().say(&l)
    })
    .await;
    let events = shared.into_inner();
    let done = done?;
    if opts.purge {
        let purged = deploy::purge(&clients, cfg, &location).await?;
        events.say(&format!(
            "purged {} object(s) under {}",
            purged.objects,
            location.s3_uri()
        ));
        if let Some(b) = purged.issuer_bucket {
            events.say(&format!("deleted the service-account issuer's bucket {b:?}"));
        }
    } else {
        events.say(&format!(
            "published objects are kept under {} (use --purge to delete them)",
            location.s3_uri()
        ));
    }
    if let Some(report) = &done.swept {
        incomplete(report)?;
    }
    opts.tree.hooks(&cluster, Step::Destroy, When::Post, &rendered, None)?;
    Ok(DestroyOutcome::Deleted)
}

/// The events' progress sink, borrowed per call beside their lines.
struct Shared<'a, 'b>(&'a RefCell<&'b mut dyn Events>);

impl ProgressSink for Shared<'_, '_> {
    fn draw(&mut self, progress: &StackProgress) {
        self.0.borrow_mut().progress().draw(progress);
    }

    fn finish(&mut self) {
        self.0.borrow_mut().progress().finish();
    }
}
