//! Spot and mixed instance types in one pool (issue 28): the pool's types,
//! their checks (at least two, each in kube-aws's instance table, one
//! architecture, no repeats, a percentage), and the kubelet's max-pods over
//! all of them (the smallest: a node of any of the types must address every
//! pod it admits). The render side is src/render/cfn/nodes.rs
//! (`MixedInstancesPolicy`).

use super::maxpods::{eni_limits, kubelet_max_pods, PodAddressing, FAMILIES};
use super::model::{is_arm64, ClusterConfig, NodePool};
use crate::located::did_you_mean;

impl NodePool {
    /// The pool's instance types: `instancesDistribution.instanceTypes`, or
    /// `instanceType` alone.
    pub fn instance_types(&self) -> Vec<&str> {
        match &self.instances_distribution {
            Some(d) if !d.instance_types.is_empty() => d.instance_types.iter().map(String::as_str).collect(),
            _ => vec![self.instance_type.as_str()],
        }
    }
}

fn architecture(instance_type: &str) -> &'static str {
    if is_arm64(instance_type) {
        "arm64"
    } else {
        "x86_64"
    }
}

/// The problems of one pool's `instancesDistribution`, as (key path, message);
/// `base` is the pool's path, `instance_type_set` whether cluster.yaml sets
/// `instanceType` too.
pub fn check_instances_distribution(pool: &NodePool, base: &str, instance_type_set: bool) -> Vec<(String, String)> {
    let Some(d) = &pool.instances_distribution else {
        return Vec::new();
    };
    let path = format!("{base}.instancesDistribution");
    let mut out = Vec::new();
    if instance_type_set {
        out.push((
            format!("{base}.instanceType"),
            "set the pool's types in instancesDistribution.instanceTypes only (the first is the launch template's); \
             remove instanceType"
                .to_string(),
        ));
    }
    let types = &d.instance_types;
    if types.len() < 2 {
        out.push((
            format!("{path}.instanceTypes"),
            format!(
                "spot and mixed instances need at least two instance types, got {}{}: add types of the same size \
                 (e.g. m6i.large, m5.large, m6a.large), or remove instancesDistribution and set instanceType",
                types.len(),
                types.first().map(|t| format!(" ({t:?})")).unwrap_or_default()
            ),
        ));
    }
    let known: Vec<String> = FAMILIES
        .iter()
        .flat_map(|(f, sizes)| sizes.iter().map(move |s| format!("{f}.{s}")))
        .collect();
    for (j, t) in types.iter().enumerate() {
        let at = format!("{path}.instanceTypes[{j}]");
        if types[..j].contains(t) {
            out.push((at.clone(), format!("{t:?} is listed twice; list each type once")));
        }
        if eni_limits(t).is_none() {
            out.push((
                at,
                format!(
                    "instance type {t:?} is not in kube-aws's instance table{}: a mixed pool's types must be known \
                     (their architecture and max-pods come from it); use a listed type",
                    did_you_mean(t, &known)
                ),
            ));
            continue;
        }
        if let Some(first) = types.first().filter(|f| architecture(f) != architecture(t)) {
            out.push((
                at,
                format!(
                    "{t:?} is {} but {first:?} is {}: a pool's instance types must share one architecture (one AMI); \
                     put them in separate pools",
                    architecture(t),
                    architecture(first)
                ),
            ));
        }
    }
    if d.on_demand_percentage_above_base_capacity > 100 {
        out.push((
            format!("{path}.onDemandPercentageAboveBaseCapacity"),
            format!(
                "{} is not a percentage (use 0 to 100; 0 is all spot above the base)",
                d.on_demand_percentage_above_base_capacity
            ),
        ));
    }
    out
}

/// The launch template's type is the first of a mixed pool's types.
pub fn apply_instances_distribution(cfg: &mut ClusterConfig) {
    for pool in &mut cfg.worker.node_pools {
        if let Some(first) = pool
            .instances_distribution
            .as_ref()
            .and_then(|d| d.instance_types.first())
        {
            pool.instance_type = first.clone();
        }
    }
}

/// The kubelet's max-pods on a pool's nodes: the smallest over its types
/// (see `kubelet_max_pods`), so a `maxPods` above any type's limit is refused.
pub fn pool_max_pods(addressing: PodAddressing, pool: &NodePool) -> Result<Option<u32>, String> {
    let mut least: Option<u32> = None;
    for t in pool.instance_types() {
        if let Some(n) = kubelet_max_pods(addressing, t, pool.max_pods)? {
            least = Some(least.map_or(n, |l| l.min(n)));
        }
    }
    Ok(least)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(yaml: &str) -> NodePool {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn messages(yaml: &str) -> Vec<(String, String)> {
        check_instances_distribution(&pool(yaml), "worker.nodePools[0]", false)
    }

    #[test]
    fn a_good_distribution_passes_and_defaults_to_price_capacity_optimized() {
        let p = pool("{name: a, instancesDistribution: {instanceTypes: [m6i.large, m5.large, m6a.large]}}");
        assert!(check_instances_distribution(&p, "x", false).is_empty());
        let d = p.instances_distribution.as_ref().unwrap();
        assert_eq!(d.spot_allocation_strategy.as_str(), "price-capacity-optimized");
        assert!(d.capacity_rebalance);
        assert_eq!(p.instance_types(), ["m6i.large", "m5.large", "m6a.large"]);
    }

    #[test]
    fn bad_distributions_are_refused_with_the_fix() {
        let one = messages("{name: a, instancesDistribution: {instanceTypes: [m6i.large]}}");
        assert_eq!(one[0].0, "worker.nodePools[0].instancesDistribution.instanceTypes");
        assert!(
            one[0].1.contains("at least two instance types, got 1 (\"m6i.large\")"),
            "{one:?}"
        );
        let unknown = messages("{name: a, instancesDistribution: {instanceTypes: [m6i.large, m6i.larg]}}");
        assert_eq!(
            unknown[0].0,
            "worker.nodePools[0].instancesDistribution.instanceTypes[1]"
        );
        assert!(unknown[0].1.contains("did you mean \"m6i.large\""), "{unknown:?}");
        let arch = messages("{name: a, instancesDistribution: {instanceTypes: [m6i.large, m7g.large]}}");
        assert!(
            arch[0].1.contains("\"m7g.large\" is arm64 but \"m6i.large\" is x86_64"),
            "{arch:?}"
        );
        let twice = messages("{name: a, instancesDistribution: {instanceTypes: [m6i.large, m6i.large]}}");
        assert!(twice[0].1.contains("listed twice"), "{twice:?}");
        let pct = messages(
            "{name: a, instancesDistribution: {instanceTypes: [m6i.large, m5.large], onDemandPercentageAboveBaseCapacity: 101}}",
        );
        assert!(pct[0].1.contains("101 is not a percentage"), "{pct:?}");
        let both = check_instances_distribution(
            &pool("{name: a, instanceType: m6i.large, instancesDistribution: {instanceTypes: [m6i.large, m5.large]}}"),
            "p",
            true,
        );
        assert_eq!(both[0].0, "p.instanceType");
    }

    #[test]
    fn max_pods_is_the_smallest_over_the_types() {
        // t3.medium addresses 17 pods, m6i.large 29 (VPC CNI secondary addresses).
        let p = pool("{name: a, instancesDistribution: {instanceTypes: [m6i.large, t3.medium]}}");
        assert_eq!(pool_max_pods(PodAddressing::VpcSecondaryIps, &p), Ok(Some(17)));
        let single = pool("{name: a, instanceType: m6i.large}");
        assert_eq!(pool_max_pods(PodAddressing::VpcSecondaryIps, &single), Ok(Some(29)));
        // A wanted value above one type's limit is refused.
        let too_many = pool("{name: a, maxPods: 20, instancesDistribution: {instanceTypes: [m6i.large, t3.medium]}}");
        assert!(pool_max_pods(PodAddressing::VpcSecondaryIps, &too_many).is_err());
        assert_eq!(pool_max_pods(PodAddressing::Overlay, &p), Ok(None));
    }
}
