//! Zonal pools (issue 28): `zonal: true` renders one auto scaling group per
//! zone instead of one group over every zone's subnet. The cluster-autoscaler's
//! AWS README recommends it for pods that use EBS volumes ("either use a single
//! AZ ASG for this use case, or an ASG-per-AZ while enabling
//! --balance-similar-node-groups", kubernetes/autoscaler
//! cluster-autoscaler/cloudprovider/aws/README.md): a volume lives in one
//! zone, and the autoscaler's template of a multi-zone group names only its
//! first zone (aws_manager.go getAsgTemplate), so it may grow a group whose
//! new node lands in a zone the pending pod cannot use. The render side is
//! src/render/cfn/nodes.rs (`zonal_groups`).

use super::model::{ClusterConfig, NodePool};

/// How many zones a new VPC without `network.availabilityZones` spans: the
/// region's first two, or its first three with 3 or 5 controllers. etcd keeps
/// quorum while a majority of members is up: 3 controllers on 2 zones split
/// 2+1, and losing the zone holding 2 loses quorum; on 3 zones (1+1+1, or
/// 2+2+1 for 5) losing any one zone keeps a majority. Regions with two zones
/// (us-west-1 for most accounts) must list them in availabilityZones: a third
/// `Fn::GetAZs` index does not exist there and the network stack fails.
pub fn default_zone_count(controllers: u32) -> usize {
    if controllers >= 3 {
        3
    } else {
        2
    }
}

impl ClusterConfig {
    /// The node subnets every node stack gets (its `SubnetIds`, in this
    /// order): one per zone of a new VPC, or the listed `network.subnetIds`
    /// of an existing one (one per zone, as the reference asks).
    pub fn node_subnet_count(&self) -> usize {
        let net = &self.network;
        if net.vpc_id.is_some() {
            net.subnet_ids.len()
        } else if net.availability_zones.is_empty() {
            // `update` renders with the count the live stack recorded at `up`
            // (the root stack's ZoneCount output, src/aws/zones.rs), so that
            // a changed controller.count adds or deletes no subnet.
            net.recorded_zone_count
                .unwrap_or_else(|| default_zone_count(self.controller.count))
        } else {
            net.availability_zones.len()
        }
    }

    /// How many groups a pool renders: one per node subnet when it is zonal.
    pub fn pool_group_count(&self, pool: &NodePool) -> usize {
        if pool.zonal {
            self.node_subnet_count().max(1)
        } else {
            1
        }
    }
}

/// The problem of a zonal pool in a cluster of one zone, as (key path,
/// message); `base` is the pool's path.
pub fn check_zonal(cfg: &ClusterConfig, pool: &NodePool, base: &str) -> Option<(String, String)> {
    if !pool.zonal || cfg.node_subnet_count() >= 2 {
        return None;
    }
    let net = &cfg.network;
    let (where_, fix) = if net.vpc_id.is_some() {
        (
            format!("network.subnetIds lists {:?}", net.subnet_ids),
            "list a subnet of each further zone in network.subnetIds",
        )
    } else {
        (
            format!("network.availabilityZones is {:?}", net.availability_zones),
            "list two or more zones in network.availabilityZones",
        )
    };
    Some((
        format!("{base}.zonal"),
        format!(
            "a zonal pool renders one group per zone, and this cluster has one zone ({where_}): {fix}, \
             or remove `zonal: true`"
        ),
    ))
}
