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

/// The zone count `update` renders a new VPC with, given the live stack's
/// record: the record, so that scaling the controllers adds or deletes no
/// subnet; except that growing to 3 or more controllers on a record of
/// fewer zones re-spreads them over [`default_zone_count`]'s three (a new
/// subnet; every group's subnets change, each rolled one instance at a
/// time), because 3 controllers on 2 zones split 2+1 and losing the zone
/// holding 2 loses etcd's quorum. Shrinking keeps the record. One rule for
/// the render and for `update`'s check of a render (src/aws/state/zones.rs).
pub fn zone_count_with_record(recorded: usize, controllers: u32) -> usize {
    recorded.max(if controllers >= 3 {
        default_zone_count(controllers)
    } else {
        0
    })
}

/// A warning when the controllers cannot survive the loss of one zone: 3 or
/// more controllers whose zones (listed, or an existing VPC's subnets) are
/// fewer than 3, so that one zone holds a majority of etcd's members.
pub fn controller_zone_warning(cfg: &ClusterConfig) -> Option<String> {
    let count = cfg.controller.count;
    let zones = cfg.node_subnet_count();
    if count < 3 || zones >= 3 || zones == 0 {
        return None;
    }
    let (what, fix) = if cfg.network.vpc_id.is_some() {
        (
            "network.subnetIds",
            "list a subnet in a third zone in network.subnetIds",
        )
    } else {
        (
            "network.availabilityZones",
            "list a third zone in network.availabilityZones (in a region with two zones, no layout survives \
             the loss of either)",
        )
    };
    Some(format!(
        "controller.count is {count} over {zones} zone(s) ({what}): one zone holds a majority of etcd's \
         members, and losing it loses quorum (the API stops accepting writes); {fix}"
    ))
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
            // (the root stack's ZoneCount output, src/aws/state/zones.rs), so that
            // a changed controller.count adds or deletes no subnet, unless
            // the controllers grow past what one zone's loss survives.
            match net.recorded_zone_count {
                Some(recorded) => zone_count_with_record(recorded, self.controller.count),
                None => default_zone_count(self.controller.count),
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(extra: &str) -> ClusterConfig {
        crate::config::cluster_for_tests(extra)
    }

    #[test]
    fn growing_past_two_controllers_re_spreads_and_shrinking_keeps_the_record() {
        assert_eq!(zone_count_with_record(2, 1), 2);
        assert_eq!(zone_count_with_record(2, 3), 3);
        assert_eq!(zone_count_with_record(2, 5), 3);
        assert_eq!(zone_count_with_record(3, 1), 3, "3 → 1 in an outage deletes no subnet");
        assert_eq!(zone_count_with_record(4, 3), 4);
        let mut c = cluster("controller: {count: 3}\n");
        c.network.recorded_zone_count = Some(2);
        assert_eq!(c.node_subnet_count(), 3);
    }

    #[test]
    fn one_zone_holding_a_majority_is_warned_about() {
        assert!(
            controller_zone_warning(&cluster("controller: {count: 3}\n")).is_none(),
            "default: 3 zones"
        );
        assert!(controller_zone_warning(&cluster("controller: {count: 1}\n")).is_none());
        let w = controller_zone_warning(&cluster(
            "controller: {count: 3}\nnetwork: {availabilityZones: [us-west-2a, us-west-2b]}\n",
        ))
        .expect("3 controllers on 2 listed zones");
        assert!(w.contains("3 over 2 zone(s) (network.availabilityZones)"), "{w}");
        assert!(w.contains("list a third zone"), "{w}");
        assert!(controller_zone_warning(&cluster(
            "controller: {count: 3}\nnetwork: {availabilityZones: [us-west-2a, us-west-2b, us-west-2c]}\n"
        ))
        .is_none());
    }
}
