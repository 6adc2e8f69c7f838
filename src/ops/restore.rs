//! `restore`: restores an etcd snapshot on 1, 3 or 5 controllers
//! (src/aws/lifecycle/restore.rs). Checks first: a stack that is missing or busy, and
//! a key that does not exist, is another cluster's or cannot be read, are
//! refused before anything changes. Then, once confirmed, it writes the
//! request and replaces every controller; there is no stack update.

use std::path::PathBuf;

use super::{Events, OpsError};
use crate::aws::lifecycle::restore::{self, Started};
use crate::aws::services::stack;
use crate::aws::state::nodes;
use crate::aws::{connect, AwsError, AwsOptions};
use crate::config::load_cluster;

/// What `restore` is asked to do.
#[derive(Debug, Clone)]
pub struct RestoreOptions {
    pub dir: PathBuf,
    pub aws: AwsOptions,
    /// The snapshot's key as `backups` lists it (or s3://…, or relative to
    /// the cluster's etcd/ prefix); None: the newest.
    pub snapshot: Option<String>,
}

/// How `restore` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreOutcome {
    /// The answer was no: nothing was written or terminated.
    NotRestored,
    /// The request is written and the controllers are terminated.
    Started(Started),
}

/// Runs `restore`.
pub async fn run(opts: &RestoreOptions, events: &mut dyn Events) -> Result<RestoreOutcome, OpsError> {
    let cluster = load_cluster(&opts.dir)?;
    let cfg = &cluster.config;
    let clients = connect(&opts.aws, &cfg.region).await?;
    let name = &cfg.cluster_name;
    stack::settled_stack(&clients, name).await?;
    let chosen = restore::check(&clients, cfg, opts.snapshot.as_deref())
        .await?
        .map_err(AwsError::from)?;
    let controllers: Vec<String> = nodes::list_nodes(&clients, cfg)
        .await?
        .into_iter()
        .filter(|n| n.role == "controller" && matches!(n.state.as_str(), "pending" | "running"))
        .map(|n| n.instance_id)
        .collect();
    let question = format!(
        "restore etcd of cluster {name:?} from s3://{}/{} ({} bytes)? Every controller ({}) is terminated \
         and replaced; writes since the snapshot are lost; workers and subnets are not touched",
        chosen.bucket,
        chosen.key,
        chosen.size,
        if controllers.is_empty() {
            "none running".to_string()
        } else {
            controllers.join(", ")
        }
    );
    if !events.confirm(&question)? {
        return Ok(RestoreOutcome::NotRestored);
    }
    Ok(RestoreOutcome::Started(
        restore::start(&clients, cfg, chosen, controllers).await?,
    ))
}
