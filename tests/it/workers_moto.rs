//! Workers replaced gracefully (issue 28), on moto server: a real work tree
//! with aws-node-termination-handler enabled (its chart locked to the real
//! upstream archive in `$KUBE_AWS_SHARED_DATA/charts`) goes through `up --wait`;
//! the queue (SSE, 300 s retention), the EventBridge rules with the queue as
//! their target, the pool's group with the managed tag reaching its instances,
//! and the lifecycle hook in the pool stack's template are checked through the
//! API. And `update --wait` with the cluster-autoscaler: the pause is tried
//! (certificate minted from moto's bundle), fails to reach an API server, and
//! `update` warns and completes; without `--wait` it warns and leaves it.
//!
//! Not covered: moto 5.2.5 has no CloudFormation support for
//! `AWS::AutoScaling::LifecycleHook` or `AWS::SQS::QueuePolicy` (it skips them
//! with a warning), so the hook is checked in the template CloudFormation
//! holds, not with DescribeLifecycleHooks, and the queue policy not at all here
//! (tests/it/workers.rs checks both in the rendered template);
//! nothing here terminates an instance, and the handler
//! itself is not run (tests/it/nth_testbed.rs runs it, with the lifecycle
//! actions of tests/support/moto_lifecycle.py).

use crate::common;

use common::charts::{lock_to_shared_charts, offline_helm, shared_charts};
use common::MotoEnv as Env;
use kube_aws::chart::ChartCache;
use serde_json::Value;

const BUCKET: &str = "kube-aws-e2e";

fn text(o: &std::process::Output) -> String {
    common::output_text(o)
}

/// The physical id of the one resource of `ty` in stack `stack`.
fn resource(env: &Env, stack: &str, logical: &str) -> String {
    let r = env.aws_json(&[
        "cloudformation",
        "describe-stack-resource",
        "--stack-name",
        stack,
        "--logical-resource-id",
        logical,
    ]);
    r["StackResourceDetail"]["PhysicalResourceId"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn nth_stacks_create_with_queue_rules_tags_and_hooks() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    // The chart cache `up` reads ($XDG_CACHE_HOME/kube-aws/charts).
    let cache = ChartCache::new(env.home.path().join("cache/kube-aws/charts"));
    let yaml = crate::workers::CLUSTER_YAML
        .replace("s3://demo-bucket/kube-aws", &format!("s3://{BUCKET}/clusters"))
        .replace("arn:aws:kms:us-west-2:111122223333:key/k", &kms)
        + &offline_helm(&cache);
    std::fs::write(dir.join("cluster.yaml"), yaml).unwrap();
    lock_to_shared_charts(dir, &cache, &shared_charts());

    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    let account = kms.split(':').nth(4).unwrap().to_string();

    // The queue: encrypted, 300 s retention, at the URL the chart was given.
    // The aws CLI does not take AWS_ENDPOINT_URL for SQS: named here.
    let moto = env.moto.url();
    let sqs = |args: &[&str]| -> Value {
        let mut a = vec!["sqs", "--endpoint-url", moto.as_str()];
        a.extend_from_slice(args);
        env.aws_json(&a)
    };
    let url = sqs(&["get-queue-url", "--queue-name", "demo-nth"])["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.ends_with(&format!("/{account}/demo-nth")), "{url}");
    let values = std::fs::read_to_string(
        dir.join("rendered")
            .join(kube_aws::render::layout::addon_values("aws-node-termination-handler")),
    )
    .unwrap();
    assert!(
        values.contains(&format!("https://sqs.us-west-2.amazonaws.com/{account}/demo-nth")),
        "{values}"
    );
    let attrs = sqs(&["get-queue-attributes", "--queue-url", &url, "--attribute-names", "All"]);
    assert_eq!(attrs["Attributes"]["SqsManagedSseEnabled"], "true", "{attrs}");
    assert_eq!(attrs["Attributes"]["MessageRetentionPeriod"], "300", "{attrs}");
    let queue_arn = attrs["Attributes"]["QueueArn"].as_str().unwrap().to_string();

    // Five rules, each sending to the queue.
    let rules = env.aws_json(&["events", "list-rules", "--name-prefix", "demo-nth-"]);
    let rules = rules["Rules"].as_array().unwrap();
    let mut names: Vec<&str> = rules.iter().map(|r| r["Name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "demo-nth-asg-lifecycle",
            "demo-nth-rebalance",
            "demo-nth-scheduled-change",
            "demo-nth-spot",
            "demo-nth-state-change"
        ]
    );
    for r in rules {
        let name = r["Name"].as_str().unwrap();
        let targets = env.aws_json(&["events", "list-targets-by-rule", "--rule", name]);
        assert_eq!(targets["Targets"][0]["Arn"], queue_arn.as_str(), "{name}: {targets}");
        let pattern: Value = serde_json::from_str(r["EventPattern"].as_str().unwrap()).unwrap();
        assert!(pattern["detail-type"].is_array(), "{name}: {pattern}");
    }

    // The pool that enables the plugin: the managed tag, propagated to its
    // instances; the hook in the template CloudFormation holds.
    let nested = |logical: &str| resource(&env, "demo", logical);
    let general = nested("NodePoolGeneral");
    let group = resource(&env, &general, "WorkerGroup");
    let g = env.aws_json(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        &group,
    ]);
    let tags = g["AutoScalingGroups"][0]["Tags"].as_array().unwrap();
    let managed = tags
        .iter()
        .find(|t| t["Key"] == "aws-node-termination-handler/demo")
        .unwrap_or_else(|| panic!("{tags:?}"));
    assert_eq!(managed["PropagateAtLaunch"], true);
    let instances: Vec<&str> = g["AutoScalingGroups"][0]["Instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["InstanceId"].as_str().unwrap())
        .collect();
    assert_eq!(instances.len(), 2, "{g}");
    let mut args = vec!["ec2", "describe-instances", "--instance-ids"];
    args.extend(instances.iter().copied());
    let d = env.aws_json(&args);
    for res in d["Reservations"].as_array().unwrap() {
        for i in res["Instances"].as_array().unwrap() {
            assert!(
                i["Tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t["Key"] == "aws-node-termination-handler/demo"),
                "{i}"
            );
        }
    }
    let template = env.aws_json(&["cloudformation", "get-template", "--stack-name", &general]);
    let body: Value = match &template["TemplateBody"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    };
    let hook = &body["Resources"]["WorkerDrainHook"]["Properties"];
    assert_eq!(
        hook["LifecycleTransition"], "autoscaling:EC2_INSTANCE_TERMINATING",
        "{body}"
    );
    assert_eq!(hook["DefaultResult"], "CONTINUE");

    // The pool that opts out: no managed tag.
    let batch = nested("NodePoolBatch");
    let group = resource(&env, &batch, "WorkerGroup");
    let g = env.aws_json(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        &group,
    ]);
    assert!(!g.to_string().contains("aws-node-termination-handler/"), "{g}");
}

/// `update --wait` on a cluster with the cluster-autoscaler tries to pause it
/// before the roll: the certificate is minted from the published bundle (moto's
/// KMS), and moto's load balancer name reaches no API server, so `update` warns
/// that the autoscaler is not paused and goes on to UPDATE_COMPLETE. The pause
/// itself runs against a real API server in tests/it/autoscaler_pause_testbed.rs.
#[test]
fn update_tries_to_pause_the_autoscaler_and_goes_on_when_it_cannot() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    let cache = ChartCache::new(env.home.path().join("cache/kube-aws/charts"));
    let helm = offline_helm(&cache);
    let yaml = |count: u32| {
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             worker:\n  nodePools:\n    - name: general\n      minSize: 1\n      maxSize: {count}\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n  \
             cluster-autoscaler: {{enabled: true}}\n{helm}"
        )
    };
    std::fs::write(dir.join("cluster.yaml"), yaml(3)).unwrap();
    lock_to_shared_charts(dir, &cache, &shared_charts());
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));

    std::fs::write(dir.join("cluster.yaml"), yaml(4)).unwrap();
    let update = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "2m"]);
    let out = text(&update);
    assert!(update.status.success(), "{out}");
    assert!(
        out.contains("warning: cluster-autoscaler not paused, it may scale the groups during the roll: cannot reach the API server"),
        "{out}"
    );
    assert!(out.contains("is UPDATE_COMPLETE"), "{out}");
    assert!(!out.contains("cluster-autoscaler paused"), "{out}");
    // Nothing was paused, so nothing is said to be left paused.
    assert!(!out.contains("may still be paused"), "{out}");

    // Without --wait nothing could put it back: it is left alone, with a warning.
    std::fs::write(dir.join("cluster.yaml"), yaml(5)).unwrap();
    let update = env.kube_aws(dir, &["update", "--yes"]);
    let out = text(&update);
    assert!(update.status.success(), "{out}");
    assert!(
        out.contains("warning: cluster-autoscaler not paused: only `update --wait` can put it back afterwards"),
        "{out}"
    );
}

/// A pool with two instance types and a spot split renders and creates: moto's
/// group holds the MixedInstancesPolicy (overrides, distribution) and launches
/// its instances; capacity rebalancing is on.
#[test]
fn mixed_spot_pool_creates() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             worker:\n  nodePools:\n    - name: spot\n      count: 2\n      instancesDistribution:\n        \
             instanceTypes: [m6i.large, m5.large, m6a.large]\n        onDemandBaseCapacity: 1\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    let pool = resource(&env, "demo", "NodePoolSpot");
    let group = resource(&env, &pool, "WorkerGroup");
    let g = env.aws_json(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        &group,
    ]);
    let g = &g["AutoScalingGroups"][0];
    let m = &g["MixedInstancesPolicy"];
    let types: Vec<&str> = m["LaunchTemplate"]["Overrides"]
        .as_array()
        .unwrap_or_else(|| panic!("{g}"))
        .iter()
        .map(|o| o["InstanceType"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["m6i.large", "m5.large", "m6a.large"], "{g}");
    assert_eq!(
        m["InstancesDistribution"]["SpotAllocationStrategy"], "price-capacity-optimized",
        "{g}"
    );
    assert_eq!(m["InstancesDistribution"]["OnDemandBaseCapacity"], 1, "{g}");
    assert_eq!(g["Instances"].as_array().unwrap().len(), 2, "{g}");
    assert_eq!((g["MinSize"].as_i64(), g["MaxSize"].as_i64()), (Some(2), Some(3)));
}

/// Issue 28 item 5: a zonal pool creates one group per zone on moto, each
/// group's subnets those of one zone, every group at the pool's size; the
/// user data CloudFormation substituted names each zone's own group.
#[test]
fn zonal_pool_creates_one_group_per_zone() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             network:\n  availabilityZones: [us-west-2a, us-west-2b]\n\
             worker:\n  nodePools:\n    - name: ebs\n      zonal: true\n      count: 1\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    let pool = resource(&env, "demo", "NodePoolEbs");
    let mut zones = Vec::new();
    for i in 0..2 {
        let group = resource(&env, &pool, &format!("WorkerGroup{i}"));
        let g = env.aws_json(&[
            "autoscaling",
            "describe-auto-scaling-groups",
            "--auto-scaling-group-names",
            &group,
        ]);
        let g = &g["AutoScalingGroups"][0];
        let subnets: Vec<&str> = g["VPCZoneIdentifier"].as_str().unwrap().split(',').collect();
        assert_eq!(subnets.len(), 1, "{g}");
        let s = env.aws_json(&["ec2", "describe-subnets", "--subnet-ids", subnets[0]]);
        zones.push(s["Subnets"][0]["AvailabilityZone"].as_str().unwrap().to_string());
        assert_eq!(g["Instances"].as_array().unwrap().len(), 1, "{g}");
        assert_eq!(
            (g["MinSize"].as_i64(), g["DesiredCapacity"].as_i64()),
            (Some(1), Some(1))
        );
        // The launch template's user data, as CloudFormation substituted it.
        let lt = resource(&env, &pool, &format!("WorkerLaunchTemplate{i}"));
        let v = env.aws_json(&["ec2", "describe-launch-template-versions", "--launch-template-id", &lt]);
        use base64::Engine;
        let data = v["LaunchTemplateVersions"][0]["LaunchTemplateData"]["UserData"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"));
        let data = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data).unwrap()).unwrap();
        assert!(data.contains(&format!("\"asgLogicalId\":\"WorkerGroup{i}\"")), "{data}");
    }
    assert_eq!(zones, ["us-west-2a", "us-west-2b"]);
}

/// Issue 28 item 6: before it asks, `update` says when a pool's failure
/// would roll back more than the pool: a change set that updates a pool
/// alone prints nothing, one that updates a pool and the control plane
/// prints the note (before "updating stack"). moto neither rolls nor rolls
/// back: CloudFormation's nested-stack rollback itself is AWS's, documented
/// in docs/deploy.md, "When an update fails".
#[test]
fn update_says_before_it_asks_that_a_failing_pool_rolls_back_the_cluster() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    let yaml = |count: u32, root_volume: u32| {
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             controller:\n  rootVolumeSize: {root_volume}\n\
             worker:\n  nodePools:\n    - name: general\n      count: {count}\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        )
    };
    std::fs::write(dir.join("cluster.yaml"), yaml(1, 30)).unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));

    // The pool alone: its failure could undo only itself.
    std::fs::write(dir.join("cluster.yaml"), yaml(2, 30)).unwrap();
    let update = env.kube_aws(dir, &["update", "--yes"]);
    let out = text(&update);
    assert!(update.status.success(), "{out}");
    assert!(out.contains("NodePoolGeneral"), "{out}");
    assert!(!out.contains("rolls back the whole cluster"), "{out}");

    // The pool and the control plane: said before applying.
    std::fs::write(dir.join("cluster.yaml"), yaml(3, 40)).unwrap();
    let update = env.kube_aws(dir, &["update", "--yes"]);
    let out = text(&update);
    assert!(update.status.success(), "{out}");
    let note = "note: a failure in NodePoolGeneral (a node that never signals, no capacity for its type) rolls \
                back the whole cluster: the other changes (ControlPlane) are undone too, and a pool that already \
                rolled rolls back, replacing its nodes again (docs/deploy.md, \"When an update fails\")";
    let at = out.find(note).unwrap_or_else(|| panic!("{out}"));
    let applied = out.find("updating stack").unwrap_or_else(|| panic!("{out}"));
    assert!(at < applied, "the note comes before the change set is applied: {out}");
}

/// Issue 36 §2: turning the termination handler on for a running pool tags
/// the pool's running instances with its managed tag (the group only
/// propagates it to instances it launches later, and the handler drains only
/// tagged ones), once the update is confirmed and before its change set
/// runs; a second update finds nothing left to tag. moto launches the groups'
/// instances (with `aws:autoscaling:groupName`) and serves EC2 CreateTags.
#[test]
fn enabling_the_handler_on_a_running_pool_tags_its_running_instances() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    let cache = ChartCache::new(env.home.path().join("cache/kube-aws/charts"));
    let helm = offline_helm(&cache);
    let yaml = |nth: bool| {
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             worker:\n  nodePools:\n    - name: general\n      count: 2\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n  \
             aws-node-termination-handler: {{enabled: {nth}}}\n{helm}"
        )
    };
    std::fs::write(dir.join("cluster.yaml"), yaml(false)).unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    let pool = resource(&env, "demo", "NodePoolGeneral");
    let group = resource(&env, &pool, "WorkerGroup");
    let running = env.aws_json(&[
        "ec2",
        "describe-instances",
        "--filters",
        &format!("Name=tag:aws:autoscaling:groupName,Values={group}"),
        "Name=instance-state-name,Values=running",
        "--query",
        "Reservations[].Instances[].InstanceId",
    ]);
    let mut ids: Vec<String> = running
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap().to_string())
        .collect();
    ids.sort();
    assert_eq!(ids.len(), 2, "{running}");

    std::fs::write(dir.join("cluster.yaml"), yaml(true)).unwrap();
    lock_to_shared_charts(dir, &cache, &shared_charts());
    let update = env.kube_aws(dir, &["update", "--yes"]);
    let out = text(&update);
    assert!(update.status.success(), "{out}");
    let line = format!(
        "tagged 2 running instance(s) of {group} with aws-node-termination-handler/demo (the termination handler \
         drains only tagged instances): {}",
        ids.join(", ")
    );
    assert!(out.contains(&line), "{out}");
    let tags = env.aws_json(&[
        "ec2",
        "describe-tags",
        "--filters",
        "Name=key,Values=aws-node-termination-handler/demo",
        "Name=resource-type,Values=instance",
    ]);
    let mut tagged: Vec<&str> = tags["Tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| ids.contains(&t["ResourceId"].as_str().unwrap().to_string()))
        .map(|t| {
            assert_eq!(t["Value"], "owned", "{t}");
            t["ResourceId"].as_str().unwrap()
        })
        .collect();
    tagged.sort();
    assert_eq!(tagged, ids.iter().map(String::as_str).collect::<Vec<_>>(), "{tags}");
}
