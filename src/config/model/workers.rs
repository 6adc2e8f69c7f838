//! cluster.yaml's `worker`: the node pools, their instances, spot mix and
//! taints.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// Worker settings.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Worker {
    /// Node pools, each its own auto scaling group and stack.
    #[serde(default)]
    pub node_pools: Vec<NodePool>,
}

/// One node pool.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePool {
    /// Pool name, DNS-1123 label, unique.
    pub name: String,
    /// Fixed size. Use either count or minSize/maxSize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Lower bound of the group's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<u32>,
    /// Upper bound of the group's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<u32>,
    /// EC2 instance type.
    #[serde(default = "default_instance_type")]
    pub instance_type: String,
    /// Root volume size in GiB.
    #[serde(default = "default_root_volume")]
    pub root_volume_size: u32,
    /// The kubelet's max-pods. Default with the VPC CNI: the instance type's
    /// `ENIs * (IPv4 per ENI - 1) + 2` (kube-aws's table); a value above it is
    /// refused. With its prefix delegation: `ENIs * ((IPv4 per ENI - 1) * 16) + 2`,
    /// capped at 110 (30 vCPUs or fewer) or 250, as the EKS AMI's calculator
    /// recommends; a value up to the uncapped number is allowed. Required with
    /// the VPC CNI for an instance type outside the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
    /// Kubernetes node labels.
    #[serde(default)]
    pub labels: IndexMap<String, String>,
    /// Kubernetes node taints.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Plugin parameter overrides for this pool's scope.
    #[serde(default)]
    pub plugins: IndexMap<String, PluginSettings>,
    /// Several instance types and a spot/on-demand split, rendered as the
    /// group's MixedInstancesPolicy (eksctl's `instancesDistribution`). The
    /// types replace `instanceType`; the first is the launch template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances_distribution: Option<InstancesDistribution>,
    /// One auto scaling group per zone instead of one over every zone, each
    /// with the pool's `count` (or `minSize`/`maxSize`) and the same tags, so
    /// the cluster-autoscaler (`--balance-similar-node-groups`) balances them
    /// and grows the zone a pending pod's EBS volume is in. Needs two or more
    /// zones (`network.availabilityZones`, or one subnet per zone in
    /// `network.subnetIds`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub zonal: bool,
    /// Days an instance of this pool may run before EC2 Auto Scaling replaces
    /// it (the group's MaxInstanceLifetime; at least 1). Replacements go
    /// through the group's termination handling, as a scale-in does: with the
    /// node termination handler the node is drained first. Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instance_lifetime_days: Option<u32>,
    /// Seconds a terminating instance of this pool waits for its drain (the
    /// termination lifecycle hook's heartbeat timeout; 300 to 7200, default
    /// 300). aws-node-termination-handler drains it through the Eviction API:
    /// a PodDisruptionBudget that allows no disruption holds the node until
    /// this runs out, and the instance then terminates with the pods still on
    /// it. See docs/deploy.md, "Drains".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout_seconds: Option<u32>,
}

/// MaxInstanceLifetime in seconds for `days`: EC2 Auto Scaling takes 0 (none)
/// or at least 86,400 seconds (one day), an Integer (EC2 Auto Scaling API
/// reference, CreateAutoScalingGroup `MaxInstanceLifetime`; user guide,
/// "Replace Auto Scaling instances based on maximum instance lifetime").
pub fn max_instance_lifetime_seconds(days: u32) -> Result<i32, String> {
    const MAX_DAYS: u32 = (i32::MAX / 86_400) as u32;
    match days {
        0 => Err("\"0\": EC2 Auto Scaling replaces an instance after 1 day at the earliest (use at least 1, or leave it out)".into()),
        d if d > MAX_DAYS => Err(format!(
            "\"{d}\" days is more than EC2 Auto Scaling takes (at most {MAX_DAYS}); leave it out for no limit"
        )),
        d => Ok((d * 86_400) as i32),
    }
}

/// A pool's instance types and how its capacity splits between on-demand and
/// spot (AWS::AutoScaling::AutoScalingGroup InstancesDistribution).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstancesDistribution {
    /// Two or more instance types of one architecture, of similar size (the
    /// autoscaler sizes the group by the first).
    pub instance_types: Vec<String>,
    /// Instances that are always on-demand, before any spot.
    #[serde(default)]
    pub on_demand_base_capacity: u32,
    /// The on-demand share (0 to 100) above the base; 0 is all spot.
    #[serde(default)]
    pub on_demand_percentage_above_base_capacity: u32,
    /// How spot capacity is chosen.
    #[serde(default)]
    pub spot_allocation_strategy: SpotAllocationStrategy,
    /// Replace a spot instance on a rebalance recommendation, before its interruption.
    #[serde(default = "yes")]
    pub capacity_rebalance: bool,
}

/// The spot allocation strategies EC2 Auto Scaling offers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SpotAllocationStrategy {
    /// AWS's recommendation: the lowest-priced pools among those least likely to be interrupted.
    #[default]
    PriceCapacityOptimized,
    CapacityOptimized,
    LowestPrice,
}

impl SpotAllocationStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            SpotAllocationStrategy::PriceCapacityOptimized => "price-capacity-optimized",
            SpotAllocationStrategy::CapacityOptimized => "capacity-optimized",
            SpotAllocationStrategy::LowestPrice => "lowest-price",
        }
    }
}

/// A node taint.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    /// The effect as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}
