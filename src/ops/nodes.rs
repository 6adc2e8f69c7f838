//! `nodes` and `logs`: the cluster's instances with their bootstrap status
//! (src/aws/state/nodes.rs), and one node's published bootstrap report.

use super::{ClusterOptions, OpsError};
use crate::aws::connect;
use crate::aws::state::nodes::{self, NodeInfo};
use crate::config::{load_cluster, ClusterConfig};

/// The cluster's instances, as `nodes` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeList {
    pub cluster: String,
    pub nodes: Vec<NodeInfo>,
}

/// One node, as `logs` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLogs {
    pub node: NodeInfo,
    /// Whether a shell can be had with Session Manager (the cluster allows
    /// it and the node runs): what `logs` suggests without a report.
    pub ssm: bool,
}

/// Runs `nodes`.
pub async fn list(opts: &ClusterOptions) -> Result<NodeList, OpsError> {
    let (cfg, nodes) = listed(opts).await?;
    Ok(NodeList {
        nodes,
        cluster: cfg.cluster_name,
    })
}

/// Runs `logs` for `query`: an instance id (i-…) or private DNS name.
pub async fn logs(opts: &ClusterOptions, query: &str) -> Result<NodeLogs, OpsError> {
    let (cfg, list) = listed(opts).await?;
    let node = nodes::find(&cfg.cluster_name, &list, query)?.clone();
    Ok(NodeLogs {
        ssm: cfg.node_access.ssm && node.state == "running",
        node,
    })
}

/// The cluster's configuration and its instances, as both commands start.
async fn listed(opts: &ClusterOptions) -> Result<(ClusterConfig, Vec<NodeInfo>), OpsError> {
    let cluster = load_cluster(&opts.dir)?;
    let cfg = cluster.config;
    let clients = connect(&opts.aws, &cfg.region).await?;
    let list = nodes::list_nodes(&clients, &cfg).await?;
    Ok((cfg, list))
}
