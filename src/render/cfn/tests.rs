//! Unit tests of the stacks' pure parts: pool sizes, node-template tags,
//! subnet CIDRs, durations.

use super::nodes::surge_max;
use super::subnets::subnet_cidrs;
use super::{is_arm64, iso_duration, pool_bounds};
use crate::config::NodePool;
use crate::plugin::{NodeHooks, AUTOSCALER_ENABLED_TAG};

#[test]
fn arm64_families() {
    for t in ["m7g.large", "c6gn.xlarge", "t4g.small", "g5g.xlarge", "r7gd.large"] {
        assert!(is_arm64(t), "{t}");
    }
    for t in ["m6i.large", "g5.xlarge", "c5n.large", "t3.micro", "inf1.xlarge"] {
        assert!(!is_arm64(t), "{t}");
    }
}

fn pool(yaml: &str) -> NodePool {
    serde_yaml::from_str(yaml).unwrap()
}

fn autoscaled(min: Option<u32>, max: Option<u32>) -> NodeHooks {
    NodeHooks {
        asg_min_size: min,
        asg_max_size: max,
        asg_tags: [(AUTOSCALER_ENABLED_TAG.to_string(), "true".to_string())].into(),
        ..NodeHooks::default()
    }
}

#[test]
fn plugin_bounds_reach_the_group_and_leave_its_size_alone() {
    // A plugin bound replaces the pool's own (the resolver refuses one that
    // widens it: src/plugin/checks.rs check_pool_bounds; pool_bounds only sizes).
    let general = pool("{name: general, minSize: 2, maxSize: 4}");
    let b = pool_bounds(&general, &autoscaled(Some(2), Some(10)));
    assert_eq!((b.min, b.max, b.desired), (2, 10, None));
    // A bound the plugin leaves unset keeps the pool's own.
    let b = pool_bounds(&general, &autoscaled(None, Some(6)));
    assert_eq!((b.min, b.max, b.desired), (2, 6, None));
    let b = pool_bounds(
        &pool("{name: b, minSize: 0, maxSize: 2}"),
        &autoscaled(Some(0), Some(20)),
    );
    assert_eq!((b.min, b.max, b.desired), (0, 20, None));
}

#[test]
fn fixed_pools_keep_their_desired_capacity() {
    let none = NodeHooks::default();
    let b = pool_bounds(&pool("{name: a, count: 3}"), &none);
    assert_eq!((b.min, b.max, b.desired), (3, 3, Some(3)));
    let b = pool_bounds(&pool("{name: a, minSize: 1, maxSize: 5}"), &none);
    assert_eq!((b.min, b.max, b.desired), (1, 5, Some(1)));
    let b = pool_bounds(&pool("{name: a}"), &none);
    assert_eq!((b.min, b.max, b.desired), (1, 1, Some(1)));
    // A max below the min is raised to it rather than rejected by AWS.
    let h = NodeHooks {
        asg_max_size: Some(1),
        asg_min_size: Some(3),
        ..NodeHooks::default()
    };
    let b = pool_bounds(&pool("{name: a, count: 2}"), &h);
    assert_eq!((b.min, b.max), (3, 3));
}

#[test]
fn node_template_tags_describe_labels_and_taints() {
    let p = pool(
        "{name: batch, labels: {kube-aws.io/pool: batch}, \
         taints: [{key: dedicated, value: batch, effect: NoSchedule}, {key: gpu, effect: NoExecute}]}",
    );
    let mut hooks = autoscaled(Some(0), Some(20));
    hooks
        .node_labels
        .insert("kube-aws.io/pool".into(), "from-plugin".into());
    hooks.node_labels.insert("plugin.example.com/x".into(), "y".into());
    let tags = hooks.node_template_tags(&p);
    let want = [
        (
            "k8s.io/cluster-autoscaler/node-template/label/kube-aws.io/pool",
            "batch",
        ),
        (
            "k8s.io/cluster-autoscaler/node-template/label/plugin.example.com/x",
            "y",
        ),
        (
            "k8s.io/cluster-autoscaler/node-template/taint/dedicated",
            "batch:NoSchedule",
        ),
        ("k8s.io/cluster-autoscaler/node-template/taint/gpu", ":NoExecute"),
    ];
    let got: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(got, want);
    assert!(NodeHooks::default().node_template_tags(&p).is_empty());
}

#[test]
fn subnets_and_durations() {
    assert_eq!(
        subnet_cidrs("10.0.0.0/16", 3).unwrap(),
        ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"]
    );
    assert!(subnet_cidrs("10.0.0.0/28", 2).is_err());
    // Host bits are cleared; a /24 holds 16 /28s, the most asked for.
    assert_eq!(
        subnet_cidrs("172.16.5.9/16", 2).unwrap(),
        ["172.16.0.0/20", "172.16.16.0/20"]
    );
    let all = subnet_cidrs("192.168.7.0/24", 16).unwrap();
    assert_eq!(
        (all[0].as_str(), all[15].as_str()),
        ("192.168.7.0/28", "192.168.7.240/28")
    );
    assert!(subnet_cidrs("10.0.0.0/16", 17).is_err());
    assert_eq!(subnet_cidrs("10.0.0.0/8", 1).unwrap(), ["10.0.0.0/12"]);
    assert_eq!(iso_duration(5400), "PT1H30M");
    assert_eq!(iso_duration(45), "PT45S");
    assert_eq!(iso_duration(0), "PT0S");
}

/// A worker group has room for one instance above its starting size, so a
/// rolling update launches before it terminates (nodes.rs rolling_update).
#[test]
fn worker_groups_have_room_for_the_surge_instance() {
    let fixed = pool_bounds(&pool("{name: a, count: 3}"), &NodeHooks::default());
    assert_eq!((fixed.min, fixed.max, fixed.desired), (3, 3, Some(3)));
    assert_eq!(surge_max(&fixed), 4);
    // An autoscaled group with room already keeps its bound.
    let scaled = pool_bounds(&pool("{name: a, minSize: 2, maxSize: 10}"), &autoscaled(None, None));
    assert_eq!(surge_max(&scaled), 10);
    // Autoscaled with min = max: one above.
    let pinned = pool_bounds(&pool("{name: a, minSize: 2, maxSize: 2}"), &autoscaled(None, None));
    assert_eq!(surge_max(&pinned), 3);
    // A pool at zero still gets a group that may hold one.
    let zero = pool_bounds(&pool("{name: a, minSize: 0, maxSize: 0}"), &autoscaled(None, None));
    assert_eq!(surge_max(&zero), 1);
}

/// MaxInstanceLifetime: whole days in seconds, from 1 day (EC2 Auto Scaling's
/// minimum) to the largest Integer of seconds; 0 and beyond are refused.
#[test]
fn max_instance_lifetime_is_days_in_seconds_within_what_auto_scaling_takes() {
    use crate::config::max_instance_lifetime_seconds as secs;
    assert_eq!(secs(1), Ok(86_400));
    assert_eq!(secs(30), Ok(2_592_000));
    assert_eq!(secs(24_855), Ok(24_855 * 86_400));
    assert!(secs(0).unwrap_err().contains("at least 1"));
    assert!(secs(24_856).unwrap_err().contains("at most 24855"));
}
