//! `rotate bootstrap-token`: a request to the controllers for a new join
//! token now; they mint it and revoke the published one (src/aws/state/join_token.rs).

use super::{ClusterOptions, OpsError};
use crate::aws::connect;
use crate::aws::state::join_token::{self, RotationRequest};
use crate::config::load_cluster;

/// Runs `rotate bootstrap-token`.
pub async fn join_token(opts: &ClusterOptions) -> Result<RotationRequest, OpsError> {
    let cluster = load_cluster(&opts.dir)?;
    let clients = connect(&opts.aws, &cluster.config.region).await?;
    Ok(join_token::request_rotation(&clients, &cluster.config).await?)
}
