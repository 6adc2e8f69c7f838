//! `backups`: the cluster's etcd snapshots in S3 and the last backup run
//! (src/aws/state/backups.rs).

use super::{ClusterOptions, OpsError};
use crate::aws::connect;
use crate::aws::state::backups::{self, Backups};
use crate::config::load_cluster;

/// Runs `backups`.
pub async fn list(opts: &ClusterOptions) -> Result<Backups, OpsError> {
    let cluster = load_cluster(&opts.dir)?;
    let clients = connect(&opts.aws, &cluster.config.region).await?;
    Ok(backups::list_backups(&clients, &cluster.config).await?)
}
