//! One auto scaling group of nodes as the stack renderers see it: what the
//! node resources (nodes.rs) and the node role's statements (iam.rs) are
//! built from.

use serde_json::Value;

use crate::config::InstancesDistribution;
use crate::plugin::NodeHooks;

pub(super) struct Group<'a> {
    pub(super) prefix: &'a str,
    pub(super) role: &'a str,
    pub(super) controller: bool,
    pub(super) instance_type: &'a str,
    pub(super) root_volume: u32,
    pub(super) min: u32,
    pub(super) max: u32,
    /// None for groups the cluster-autoscaler sizes: see `PoolBounds`.
    pub(super) desired: Option<u32>,
    /// Extra group tags (the autoscaler's node templates), not propagated.
    pub(super) template_tags: Vec<(String, String)>,
    pub(super) security_group: &'a str,
    pub(super) hooks: &'a NodeHooks,
    /// Bundle entries this role may decrypt.
    pub(super) secrets: &'a [String],
    pub(super) extra_target_groups: Vec<Value>,
    /// A mixed pool's types and spot split (None: `instance_type` alone).
    pub(super) distribution: Option<&'a InstancesDistribution>,
    /// A zonal pool's zone count: one group per node subnet (None: one
    /// group over all of them). See [`zonal_suffix`].
    pub(super) zones: Option<usize>,
    /// The group's MaxInstanceLifetime in seconds (validated), if any.
    pub(super) max_lifetime: Option<i32>,
    /// The drain hook's heartbeat timeout in seconds (workers drained by
    /// aws-node-termination-handler).
    pub(super) drain_timeout: u32,
}
