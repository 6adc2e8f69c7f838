//! Workers replaced gracefully (issue 28): the aws-node-termination-handler
//! plugin in Queue Processor mode, rendered from a real work tree whose lock
//! points at the real upstream chart in `$KUBE_AWS_SHARED_DATA/charts`. The root
//! stack gets the SQS queue (SSE), its policy and the five EventBridge rules;
//! each pool that enables the plugin gets the termination lifecycle hook and
//! the propagated managed tag, a pool that opts out and the controllers get
//! neither; the real chart rendered with the plugin's values (the Helm library,
//! tests/fixtures/helm_render.py) is a Deployment in queue mode with the queue
//! URL and the service account's IRSA annotation.
//!
//! Not covered here: running the handler (tests/it/nth_testbed.rs runs the
//! real program on the control-plane test bed against moto); creating the
//! stacks (tests/it/workers_moto.rs).

use crate::common;

use common::charts::{lock_to_shared_charts, shared_charts};

use std::path::Path;
use std::process::Command;

use kube_aws::chart::ChartCache;
use kube_aws::pipeline::{prepare, PrepareOptions};
use serde_json::{json, Value};

pub const CLUSTER_YAML: &str = "clusterName: demo
region: us-west-2
s3URI: s3://demo-bucket/kube-aws
kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k
worker:
  nodePools:
    - name: general
      count: 2
    - name: batch
      count: 1
      plugins:
        aws-node-termination-handler: {enabled: false}
plugins:
  aws-vpc-cni: {enabled: false}
  aws-cloud-controller-manager: {enabled: false}
  aws-node-termination-handler: {enabled: true}
";

/// Renders `yaml` with the shared charts locked; returns (stacks by name, the
/// NTH release's values, its archive).
pub fn render(
    yaml: &str,
) -> (
    tempfile::TempDir,
    serde_json::Map<String, Value>,
    Value,
    std::path::PathBuf,
) {
    let charts = shared_charts();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cluster.yaml"), yaml).unwrap();
    let cache = ChartCache::new(tmp.path().join("cache"));
    let archives = lock_to_shared_charts(&dir, &cache, &charts);
    let p = prepare(&PrepareOptions {
        dir: dir.clone(),
        cache_dir: cache.root().to_path_buf(),
        require_charts: true,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let values = p
        .releases
        .releases
        .iter()
        .position(|r| r.name == "aws-node-termination-handler")
        .map(|i| p.prepared[i].values.user.clone());
    let r = kube_aws::render::render(&p.input).unwrap_or_else(|e| panic!("{e}"));
    let mut stacks = serde_json::Map::new();
    for (path, bytes) in &r.files {
        if let Some(name) = path.strip_prefix("stacks/").and_then(|n| n.strip_suffix(".json")) {
            stacks.insert(name.to_string(), serde_json::from_slice(bytes).unwrap());
        } else if path.ends_with(".cloud-config") {
            // Cloud-configs as text, under their path.
            stacks.insert(path.clone(), Value::String(String::from_utf8(bytes.clone()).unwrap()));
        }
    }
    let archive = archives
        .get("aws-node-termination-handler")
        .cloned()
        .unwrap_or_default();
    (tmp, stacks, serde_json::to_value(values).unwrap(), archive)
}

fn of_type<'a>(t: &'a Value, ty: &str) -> Vec<(&'a String, &'a Value)> {
    t["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == ty)
        .collect()
}

#[test]
fn nth_plugin_renders_queue_rules_hooks_and_tags() {
    let (_tmp, stacks, _, _) = render(CLUSTER_YAML);
    let root = &stacks["root"];

    // The queue: server-side encryption, 300 s retention (the hook's heartbeat).
    let queue = &root["Resources"]["NthQueue"];
    assert_eq!(queue["Type"], "AWS::SQS::Queue");
    assert_eq!(queue["Properties"]["QueueName"], "demo-nth");
    assert_eq!(queue["Properties"]["SqsManagedSseEnabled"], true);
    assert_eq!(queue["Properties"]["MessageRetentionPeriod"], 300);
    // Its policy: EventBridge (and SQS) may send, nobody else.
    let policy = &root["Resources"]["NthQueuePolicy"]["Properties"];
    assert_eq!(policy["Queues"], json!([{"Ref": "NthQueue"}]));
    let st = &policy["PolicyDocument"]["Statement"];
    assert_eq!(st.as_array().unwrap().len(), 1);
    assert_eq!(
        st[0]["Principal"]["Service"],
        json!(["events.amazonaws.com", "sqs.amazonaws.com"])
    );
    assert_eq!(st[0]["Action"], "sqs:SendMessage");
    // kops's rules plus the rebalance recommendation, each to the queue.
    let rules = of_type(root, "AWS::Events::Rule");
    let mut kinds: Vec<String> = rules
        .iter()
        .map(|(_, r)| {
            let p = &r["Properties"]["EventPattern"];
            assert_eq!(
                r["Properties"]["Targets"][0]["Arn"],
                json!({"Fn::GetAtt": ["NthQueue", "Arn"]})
            );
            assert_eq!(r["Properties"]["State"], "ENABLED");
            format!(
                "{} {}",
                p["source"][0].as_str().unwrap(),
                p["detail-type"][0].as_str().unwrap()
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "aws.autoscaling EC2 Instance-terminate Lifecycle Action",
            "aws.ec2 EC2 Instance Rebalance Recommendation",
            "aws.ec2 EC2 Instance State-change Notification",
            "aws.ec2 EC2 Spot Instance Interruption Warning",
            "aws.health AWS Health Event",
        ]
    );
    // Only the workers' drain hook: the controllers' etcd hook
    // (kube-aws-etcd-member) is completed by the node program, never by the handler.
    let asg = rules
        .iter()
        .find(|(_, r)| r["Properties"]["EventPattern"]["source"][0] == "aws.autoscaling")
        .unwrap()
        .1;
    assert_eq!(
        asg["Properties"]["EventPattern"]["detail"],
        json!({"LifecycleHookName": ["kube-aws-drain"]})
    );
    let health = rules
        .iter()
        .find(|(_, r)| r["Properties"]["EventPattern"]["source"][0] == "aws.health")
        .unwrap()
        .1;
    assert_eq!(
        health["Properties"]["EventPattern"]["detail"],
        json!({"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]})
    );

    // The enabled pool: the hook on its group, and the managed tag on its instances.
    let general = &stacks["node-pool-general"];
    let hooks = of_type(general, "AWS::AutoScaling::LifecycleHook");
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    let h = &hooks[0].1["Properties"];
    assert_eq!(h["AutoScalingGroupName"], json!({"Ref": "WorkerGroup"}));
    assert_eq!(h["LifecycleHookName"], "kube-aws-drain");
    assert_eq!(h["LifecycleTransition"], "autoscaling:EC2_INSTANCE_TERMINATING");
    assert_eq!(h["DefaultResult"], "CONTINUE");
    assert_eq!(h["HeartbeatTimeout"], 300);
    let tags = general["Resources"]["WorkerGroup"]["Properties"]["Tags"]
        .as_array()
        .unwrap();
    let managed = tags
        .iter()
        .find(|t| t["Key"] == "aws-node-termination-handler/demo")
        .unwrap_or_else(|| panic!("{tags:?}"));
    assert_eq!(managed["PropagateAtLaunch"], true);
    // The pool that opts out and the controllers: no hook of the handler's, no tag.
    let batch = &stacks["node-pool-batch"];
    assert!(of_type(batch, "AWS::AutoScaling::LifecycleHook").is_empty());
    assert!(!batch.to_string().contains("aws-node-termination-handler/"));
    let cp = &stacks["control-plane"];
    let cp_hooks = of_type(cp, "AWS::AutoScaling::LifecycleHook");
    assert!(
        cp_hooks
            .iter()
            .all(|(_, h)| h["Properties"]["LifecycleHookName"] != "kube-aws-drain"),
        "{cp_hooks:?}"
    );
    assert!(!cp.to_string().contains("aws-node-termination-handler/"));
}

#[test]
fn nth_role_has_the_documented_actions_and_a_tag_condition() {
    let (_tmp, stacks, _, _) = render(CLUSTER_YAML);
    let root = stacks["root"].to_string();
    let roles = of_type(&stacks["root"], "AWS::IAM::Role");
    let (_, role) = roles
        .iter()
        .find(|(_, r)| {
            r.to_string()
                .contains("system:serviceaccount:kube-system:aws-node-termination-handler")
        })
        .unwrap_or_else(|| panic!("no role for the handler's service account: {root}"));
    let statements: Vec<&Value> = role["Properties"]["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap())
        .collect();
    let mut actions: Vec<&str> = statements
        .iter()
        .flat_map(|s| s["Action"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()))
        .collect();
    actions.sort();
    // README.md@v1.25.6, "IAM Policy for aws-node-termination-handler Deployment".
    assert_eq!(
        actions,
        [
            "autoscaling:CompleteLifecycleAction",
            "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeTags",
            "ec2:DescribeInstances",
            "sqs:DeleteMessage",
            "sqs:ReceiveMessage"
        ]
    );
    let complete = statements
        .iter()
        .find(|s| s["Action"][0] == "autoscaling:CompleteLifecycleAction")
        .unwrap();
    assert_eq!(
        complete["Condition"],
        json!({"StringEquals": {"aws:ResourceTag/kubernetes.io/cluster/demo": "owned"}})
    );
    let sqs = statements
        .iter()
        .find(|s| s["Action"][0] == "sqs:DeleteMessage")
        .unwrap();
    assert_eq!(sqs["Resource"], "arn:aws:sqs:us-west-2:111122223333:demo-nth");
}

/// The objects of the real aws-node-termination-handler chart rendered with
/// `values` by the Helm library (tests/fixtures/helm_render.py).
pub fn nth_chart_objects(tmp: &Path, values: &Value, archive: &Path) -> Vec<Value> {
    let jobs = json!([{"release": "aws-node-termination-handler", "namespace": "kube-system",
                       "archive": archive, "values": values}]);
    let jobs_file = tmp.join("jobs.json");
    std::fs::write(&jobs_file, jobs.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/helm_render.py");
    let out = Command::new(common::tool("python"))
        .arg(script)
        .arg(&jobs_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rendered: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut objects = Vec::new();
    for (template, text) in rendered["aws-node-termination-handler"].as_object().unwrap() {
        if !template.ends_with(".yaml") {
            continue;
        }
        for d in serde_yaml::Deserializer::from_str(text.as_str().unwrap()) {
            let doc: Value = serde::Deserialize::deserialize(d).unwrap();
            if !doc.is_null() {
                objects.push(doc);
            }
        }
    }
    objects
}

#[test]
fn nth_real_chart_is_a_queue_processor_deployment_with_its_role() {
    let (tmp, _, values, archive) = render(CLUSTER_YAML);
    let objects = nth_chart_objects(tmp.path(), &values, &archive);
    let mut kinds: Vec<&str> = objects.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["ClusterRole", "ClusterRoleBinding", "Deployment", "ServiceAccount"]
    );
    let role = "arn:aws:iam::111122223333:role/demo-us-west-2-kube-system-aws-node-termination-handler";
    let sa = objects.iter().find(|o| o["kind"] == "ServiceAccount").unwrap();
    assert_eq!(sa["metadata"]["name"], "aws-node-termination-handler");
    assert_eq!(sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"], role);
    let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "aws-node-termination-handler");
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["kube-aws.io/role-arn"],
        role
    );
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        "public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.25.6"
    );
    let env = |name: &str| -> String {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {}", c["env"]))["value"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(env("ENABLE_SQS_TERMINATION_DRAINING"), "true");
    assert_eq!(
        env("QUEUE_URL"),
        "https://sqs.us-west-2.amazonaws.com/111122223333/demo-nth"
    );
    assert_eq!(env("AWS_REGION"), "us-west-2");
    assert_eq!(env("CHECK_TAG_BEFORE_DRAINING"), "true");
    assert_eq!(env("MANAGED_TAG"), "aws-node-termination-handler/demo");
    assert_eq!(env("NODE_TERMINATION_GRACE_PERIOD"), "240");
    assert_eq!(env("IGNORE_DAEMON_SETS"), "true");
    assert_eq!(env("DELETE_SQS_MSG_IF_NODE_NOT_FOUND"), "false");
}

/// Issue 28 item 3: a worker roll keeps the pool's capacity (launch before
/// terminate: MinInstancesInService is the starting size, MaxSize one above
/// it) and suspends the processes AWS says to suspend; an autoscaled pool
/// keeps its own bound when it has room.
#[test]
fn worker_rolls_launch_before_terminating_and_suspend_processes() {
    let yaml = CLUSTER_YAML
        .replace("count: 2", "count: 3")
        .replace("  aws-node-termination-handler: {enabled: true}\n", "  cluster-autoscaler: {enabled: true}\n")
        .replace(
            "    - name: batch\n      count: 1\n      plugins:\n        aws-node-termination-handler: {enabled: false}\n",
            "    - name: batch\n      minSize: 2\n      maxSize: 6\n",
        )
        .replace("    - name: general\n      count: 3\n", "    - name: general\n      count: 3\n      plugins:\n        cluster-autoscaler: {enabled: false}\n");
    let (_tmp, stacks, _, _) = render(&yaml);
    let suspended = json!([
        "HealthCheck",
        "ReplaceUnhealthy",
        "AZRebalance",
        "AlarmNotification",
        "ScheduledActions"
    ]);
    for (stack, min_in_service, min, max) in [("node-pool-general", "3", "3", "4"), ("node-pool-batch", "2", "2", "6")]
    {
        let g = &stacks[stack]["Resources"]["WorkerGroup"];
        let policy = &g["UpdatePolicy"]["AutoScalingRollingUpdate"];
        assert_eq!(policy["MinInstancesInService"], min_in_service, "{stack}");
        assert_eq!(policy["MaxBatchSize"], "1", "{stack}");
        assert_eq!(policy["WaitOnResourceSignals"], true, "{stack}");
        assert_eq!(policy["SuspendProcesses"], suspended, "{stack}");
        assert_eq!(g["Properties"]["MinSize"], min, "{stack}");
        assert_eq!(g["Properties"]["MaxSize"], max, "{stack}");
    }
    // The fixed pool keeps its size; the autoscaled one leaves it to the autoscaler.
    assert_eq!(
        stacks["node-pool-general"]["Resources"]["WorkerGroup"]["Properties"]["DesiredCapacity"],
        "3"
    );
    assert!(stacks["node-pool-batch"]["Resources"]["WorkerGroup"]["Properties"]
        .get("DesiredCapacity")
        .is_none());
    // Controllers: count - 1 in service (etcd's quorum), the same suspensions.
    let cp = &stacks["control-plane"]["Resources"]["ControllerGroup"]["UpdatePolicy"]["AutoScalingRollingUpdate"];
    assert_eq!(cp["SuspendProcesses"], suspended);
}

const MIXED_BASE: &str = "clusterName: demo
region: us-west-2
s3URI: s3://demo-bucket/kube-aws
kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k
plugins:
  aws-vpc-cni: {enabled: false}
  aws-cloud-controller-manager: {enabled: false}
worker:
  nodePools:
";

/// Issue 28 item 4, bad input: spot settings with one type, an unknown type,
/// two architectures, a type set twice, `instanceType` beside the list; each
/// refused by `validate` at its `file:line:col` with the fix.
#[test]
fn bad_mixed_pools_are_refused_where_they_are_written() {
    for (pool, want) in [
        (
            "    - name: spot\n      instancesDistribution:\n        instanceTypes: [m6i.large]\n",
            "cluster.yaml:12:24: worker.nodePools[0].instancesDistribution.instanceTypes: spot and mixed instances need at least two instance types, got 1 (\"m6i.large\"): add types",
        ),
        (
            "    - name: spot\n      instancesDistribution:\n        instanceTypes: [m6i.large, m6i.larg]\n",
            "cluster.yaml:12:36: worker.nodePools[0].instancesDistribution.instanceTypes[1]: instance type \"m6i.larg\" is not in kube-aws's instance table (did you mean \"m6i.large\"?)",
        ),
        (
            "    - name: spot\n      instancesDistribution:\n        instanceTypes: [m6i.large, m7g.large]\n",
            "cluster.yaml:12:36: worker.nodePools[0].instancesDistribution.instanceTypes[1]: \"m7g.large\" is arm64 but \"m6i.large\" is x86_64: a pool's instance types must share one architecture (one AMI); put them in separate pools",
        ),
        (
            "    - name: spot\n      instanceType: m5.large\n      instancesDistribution:\n        instanceTypes: [m6i.large, m5.large]\n",
            "cluster.yaml:11:21: worker.nodePools[0].instanceType: set the pool's types in instancesDistribution.instanceTypes only",
        ),
        (
            "    - name: spot\n      instancesDistribution:\n        instanceTypes: [m6i.large, m5.large]\n        spotAllocationStrategy: cheapest\n",
            "spotAllocationStrategy",
        ),
    ] {
        let (code, err) = common::validate_work_tree(&format!("{MIXED_BASE}{pool}"), &[]);
        assert_ne!(code, 0, "{pool}");
        assert!(err.contains(want), "{pool}\nwant {want}\ngot {err}");
    }
}

/// Issue 36 §2: a pool's drain timeout is its hook's heartbeat; a pool the
/// handler is off for gets no hook and one warning that its terminations will
/// not drain; a timeout outside what a lifecycle hook takes (and below the
/// handler's longest drain) is refused at its key.
#[test]
fn drain_timeout_is_a_pool_setting_and_an_undrained_pool_is_warned_about() {
    let yaml = CLUSTER_YAML.replace(
        "    - name: general\n      count: 2\n",
        "    - name: general\n      count: 2\n      drainTimeoutSeconds: 900\n",
    );
    let (tmp, stacks, _, _) = render(&yaml);
    let dir = tmp.path().join("wt");
    let hooks = of_type(&stacks["node-pool-general"], "AWS::AutoScaling::LifecycleHook");
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0].1["Properties"]["HeartbeatTimeout"], 900);
    assert!(of_type(&stacks["node-pool-batch"], "AWS::AutoScaling::LifecycleHook").is_empty());
    let p = prepare(&PrepareOptions {
        dir: dir.clone(),
        cache_dir: tmp.path().join("cache"),
        require_charts: true,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let warnings = kube_aws::render::cfn::undrained_pool_warnings(&p.input);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("node pool \"batch\": aws-node-termination-handler is off, so terminations"),
        "{warnings:?}"
    );
    // Many undrained pools: one warning, naming eight and counting the rest.
    let pools: String = (0..10).map(|i| format!("    - name: p{i}\n      count: 1\n")).collect();
    let (code, err) = common::validate_work_tree(&format!("{MIXED_BASE}{pools}"), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches("aws-node-termination-handler is off").count(), 1, "{err}");
    assert!(
        err.contains(
            "node pools \"p0\", \"p1\", \"p2\", \"p3\", \"p4\", \"p5\", \"p6\", \"p7\" and 2 more: \
             aws-node-termination-handler is off, so terminations of their nodes"
        ),
        "{err}"
    );
    for bad in ["299", "7201"] {
        let (code, err) = common::validate_work_tree(
            &format!("{MIXED_BASE}    - name: a\n      count: 1\n      drainTimeoutSeconds: {bad}\n"),
            &[],
        );
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains(&format!(
                "cluster.yaml:12:28: worker.nodePools[0].drainTimeoutSeconds: {bad} is outside 300..=7200"
            )),
            "{err}"
        );
    }
}

/// Issue 28 item 4: a pool with several types and a spot split renders a
/// MixedInstancesPolicy (the launch template with one override per type,
/// on-demand base and share, price-capacity-optimized, capacity rebalance);
/// the launch template's type and the AMI are the first type's; max-pods is
/// the smallest over the types; an autoscaled pool's node-template tags name
/// no instance type, so they hold for every type.
#[test]
fn mixed_spot_pool_renders_a_mixed_instances_policy() {
    let yaml = format!(
        "{}\n  cluster-autoscaler: {{enabled: true}}\n  aws-vpc-cni: {{enabled: true}}\n{}",
        MIXED_BASE
            .replace("  aws-vpc-cni: {enabled: false}\n", "")
            .trim_end_matches("worker:\n  nodePools:\n")
            .trim_end(),
        "worker:\n  nodePools:\n    - name: spot\n      minSize: 1\n      maxSize: 6\n      labels: {lifecycle: spot}\n      \
         instancesDistribution:\n        instanceTypes: [m6i.large, t3.medium]\n        onDemandBaseCapacity: 1\n        \
         onDemandPercentageAboveBaseCapacity: 20\n"
    );
    let (_tmp, stacks, _, _) = render(&yaml);
    let g = &stacks["node-pool-spot"]["Resources"]["WorkerGroup"]["Properties"];
    assert!(g.get("LaunchTemplate").is_none(), "{g}");
    assert_eq!(g["CapacityRebalance"], true);
    let m = &g["MixedInstancesPolicy"];
    assert_eq!(
        m["LaunchTemplate"]["LaunchTemplateSpecification"]["LaunchTemplateId"],
        json!({"Ref": "WorkerLaunchTemplate"})
    );
    assert_eq!(
        m["LaunchTemplate"]["Overrides"],
        json!([{"InstanceType": "m6i.large"}, {"InstanceType": "t3.medium"}])
    );
    assert_eq!(
        m["InstancesDistribution"],
        json!({"OnDemandAllocationStrategy": "prioritized", "OnDemandBaseCapacity": 1,
               "OnDemandPercentageAboveBaseCapacity": 20, "SpotAllocationStrategy": "price-capacity-optimized"})
    );
    let lt = &stacks["node-pool-spot"]["Resources"]["WorkerLaunchTemplate"]["Properties"]["LaunchTemplateData"];
    assert_eq!(lt["InstanceType"], "m6i.large");
    // max-pods: t3.medium's 17, not m6i.large's 29 (VPC CNI secondary addresses).
    let cc = stacks["userdata/worker-spot.cloud-config"].as_str().unwrap();
    let kubeadm = common::testbed::kubeadm_json(cc);
    let join = kubeadm["documents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "JoinConfiguration")
        .unwrap();
    let args = common::testbed::extra_args(&join["nodeRegistration"]["kubeletExtraArgs"]);
    assert!(args.contains(&("max-pods".to_string(), "17".to_string())), "{args:?}");
    // Node-template tags: the pool's label, no instance type in any of them.
    let tags = g["Tags"].as_array().unwrap();
    assert!(tags
        .iter()
        .any(|t| t["Key"] == "k8s.io/cluster-autoscaler/node-template/label/lifecycle" && t["Value"] == "spot"));
    assert!(
        !tags.iter().any(|t| t.to_string().contains("instance-type")),
        "{tags:?}"
    );
}

/// Issue 28 item 5: a zonal pool renders one group per zone, each launching
/// into its zone's subnet only, with its own launch template (whose user data
/// names the group the node signals) and drain hook; every zone's group has
/// the pool's size and the same tags (the autoscaler's discovery and node
/// templates), so `--balance-similar-node-groups` (on in the plugin's values)
/// balances them. A pool without `zonal` keeps its one group over all zones.
#[test]
fn zonal_pool_renders_one_group_per_zone_tagged_alike() {
    let yaml = "clusterName: demo
region: us-west-2
s3URI: s3://demo-bucket/kube-aws
kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k
network:
  availabilityZones: [us-west-2a, us-west-2b, us-west-2c]
worker:
  nodePools:
    - name: ebs
      zonal: true
      minSize: 1
      maxSize: 4
      labels: {storage: ebs}
    - name: general
      count: 2
plugins:
  aws-vpc-cni: {enabled: false}
  aws-cloud-controller-manager: {enabled: false}
  aws-node-termination-handler: {enabled: true}
  cluster-autoscaler: {enabled: true}
";
    let (_tmp, stacks, _, _) = render(yaml);
    let ebs = &stacks["node-pool-ebs"];
    let groups = of_type(ebs, "AWS::AutoScaling::AutoScalingGroup");
    let mut names: Vec<&str> = groups.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(names, ["WorkerGroup0", "WorkerGroup1", "WorkerGroup2"]);
    let tags_of = |g: &Value| {
        let mut t: Vec<String> = g["Properties"]["Tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.to_string())
            .collect();
        t.sort();
        t
    };
    let first_tags = tags_of(&ebs["Resources"]["WorkerGroup0"]);
    for i in 0..3 {
        let g = &ebs["Resources"][format!("WorkerGroup{i}")];
        let p = &g["Properties"];
        assert_eq!(
            p["VPCZoneIdentifier"],
            json!([{"Fn::Select": [i, {"Ref": "SubnetIds"}]}]),
            "zone {i}'s subnet only"
        );
        assert_eq!((p["MinSize"].as_str(), p["MaxSize"].as_str()), (Some("1"), Some("4")));
        assert_eq!(
            p["LaunchTemplate"]["LaunchTemplateId"],
            json!({"Ref": format!("WorkerLaunchTemplate{i}")})
        );
        assert_eq!(tags_of(g), first_tags, "zone {i}'s group is tagged as zone 0's");
        let lt = &ebs["Resources"][format!("WorkerLaunchTemplate{i}")];
        let sub = &lt["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Sub"];
        assert!(
            sub[0]
                .as_str()
                .unwrap()
                .contains("\"asgLogicalId\":\"${AsgLogicalId}\""),
            "{sub}"
        );
        assert_eq!(sub[1], json!({"AsgLogicalId": format!("WorkerGroup{i}")}));
        let hook = &ebs["Resources"][format!("WorkerDrainHook{i}")]["Properties"];
        assert_eq!(hook["AutoScalingGroupName"], json!({"Ref": format!("WorkerGroup{i}")}));
    }
    let tags: Vec<Value> = ebs["Resources"]["WorkerGroup0"]["Properties"]["Tags"]
        .as_array()
        .unwrap()
        .clone();
    for key in [
        "k8s.io/cluster-autoscaler/enabled",
        "k8s.io/cluster-autoscaler/demo",
        "k8s.io/cluster-autoscaler/node-template/label/storage",
    ] {
        assert!(tags.iter().any(|t| t["Key"] == key), "{key}: {tags:?}");
    }
    assert!(ebs["Resources"].get("WorkerGroup").is_none());
    assert_eq!(
        ebs["Outputs"]["AutoScalingGroupName"]["Value"],
        json!({"Fn::Join": [",", [{"Ref": "WorkerGroup0"}, {"Ref": "WorkerGroup1"}, {"Ref": "WorkerGroup2"}]]})
    );
    // One role, profile and secret pointer for the pool.
    assert_eq!(of_type(ebs, "AWS::IAM::Role").len(), 1);
    assert_eq!(of_type(ebs, "AWS::SSM::Parameter").len(), 1);
    // The other pool: one group over every zone, its stub without the variable.
    let general = &stacks["node-pool-general"]["Resources"];
    assert_eq!(
        general["WorkerGroup"]["Properties"]["VPCZoneIdentifier"],
        json!({"Ref": "SubnetIds"})
    );
    let sub = &general["WorkerLaunchTemplate"]["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Sub"];
    assert!(
        sub.as_str().unwrap().contains("\"asgLogicalId\":\"WorkerGroup\""),
        "{sub}"
    );
}

/// Issue 28 item 5, bad input: a zonal pool in a cluster of one zone (a new
/// VPC of one listed zone, or an existing VPC with one subnet) is refused at
/// `validate` where `zonal` is written, with the fix.
#[test]
fn zonal_pool_in_a_one_zone_cluster_is_refused_where_it_is_written() {
    for (network, want) in [
        (
            "network:\n  availabilityZones: [us-west-2a]\n",
            "cluster.yaml:13:14: worker.nodePools[0].zonal: a zonal pool renders one group per zone, and this cluster \
             has one zone (network.availabilityZones is [\"us-west-2a\"]): list two or more zones in \
             network.availabilityZones, or remove `zonal: true`",
        ),
        (
            "network:\n  vpcId: vpc-0123456789abcdef0\n  subnetIds: [subnet-0123456789abcdef0]\n",
            "worker.nodePools[0].zonal: a zonal pool renders one group per zone, and this cluster has one zone \
             (network.subnetIds lists [\"subnet-0123456789abcdef0\"]): list a subnet of each further zone in \
             network.subnetIds, or remove `zonal: true`",
        ),
    ] {
        let yaml = format!("{MIXED_BASE}    - name: ebs\n      zonal: true\n")
            .replace("plugins:", &format!("{network}plugins:"));
        let (code, err) = common::validate_work_tree(&yaml, &[]);
        assert_ne!(code, 0, "{network}");
        assert!(err.contains(want), "{network}\nwant {want}\ngot {err}");
    }
    // Two zones (the default for one controller) are enough.
    let (code, err) = common::validate_work_tree(&format!("{MIXED_BASE}    - name: ebs\n      zonal: true\n"), &[]);
    assert_eq!(code, 0, "{err}");
}
