//! Drain before termination (issue 28 item 1, the must-show): the real
//! aws-node-termination-handler program (v1.25.6, built from the Go module
//! proxy by scripts/install-testbed.sh) in Queue Processor mode, configured by
//! the environment of the real chart's Deployment rendered with the plugin's
//! values, against the real kube-apiserver of the control-plane test bed (kwok
//! nodes) and moto's Auto Scaling, EC2, EventBridge and SQS.
//!
//! - moto holds the group, its `kube-aws-drain` hook (name, transition and
//!   default result from the rendered pool stack), the queue (the rendered
//!   name) and the rendered EventBridge rule sending the lifecycle event to it.
//!   `TerminateInstanceInAutoScalingGroup` puts the instance in
//!   `Terminating:Wait` and sends AWS's event (tests/support/moto_lifecycle.py:
//!   moto itself has no lifecycle actions).
//! - The handler reads the queue URL the plugin rendered (moto resolves the
//!   queue by its path), reaches moto through its `AWS_ENDPOINT` (pkg/config
//!   `aws-endpoint`, "[testing] If specified, use the AWS endpoint to make API
//!   calls"; cmd/node-termination-handler.go passes it to every client's
//!   session) and the API server as the chart's service account, with the
//!   chart's ClusterRole, through `rest.InClusterConfig` (the token and CA are
//!   mounted where a pod has them, in a mount namespace of its own).
//! - Node A: cordoned, its pod evicted, the lifecycle action completed
//!   (CONTINUE), the instance terminated well before the hook's timeout.
//! - Node B, whose pod a PodDisruptionBudget allows no disruption: cordoned,
//!   the eviction refused until the handler's drain timeout
//!   (`nodeTerminationGracePeriod`), the action never completed by the
//!   handler; the instance stays `Terminating:Wait` until the hook's heartbeat
//!   ends and its default result (CONTINUE) terminates it.
//!
//! Scaled down from what render gives: the drain timeout is the plugin's
//! minimum (30 s, a parameter in cluster.yaml) and the hook's heartbeat 45 s
//! instead of 300 s, keeping the rendered order (drain timeout below heartbeat).
//!
//! Not covered: IRSA (static keys stand for the web identity; the role's
//! actions are tested in tests/it/workers.rs), moto's IAM enforcement, the
//! handler as a pod (no kubelet), the instance's shutdown afterwards (graceful
//! node shutdown, tests of the kubelet configuration), terminations the group
//! decides itself (scale-in, rebalance) and spot/rebalance/scheduled events.

use crate::common::{testbed, MotoEnv};
use crate::workers;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const CLUSTER_YAML: &str = "clusterName: demo
region: us-west-2
s3URI: s3://demo-bucket/kube-aws
kmsKeyARN: arn:aws:kms:us-west-2:123456789012:key/k
worker:
  nodePools:
    - name: general
      count: 2
plugins:
  aws-vpc-cni: {enabled: false}
  aws-cloud-controller-manager: {enabled: false}
  aws-node-termination-handler: {enabled: true, nodeTerminationGracePeriod: 30}
";

/// The hook's heartbeat in this test (render: 300 s).
const HEARTBEAT: u64 = 45;

/// The handler's binary and the pin it was built at; panics (naming the
/// script) when the test bed lacks it.
fn nth_binary(bin: &Path) -> (std::path::PathBuf, String) {
    let exe = bin.join("aws-node-termination-handler");
    let pin = std::fs::read_dir(bin)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("aws-node-termination-handler-")?
                .strip_suffix(".pin")
                .map(str::to_string)
        })
        .next();
    match (exe.exists(), pin) {
        (true, Some(v)) => (exe, v),
        _ => panic!(
            "the control-plane test bed lacks aws-node-termination-handler in {}: run `make testbed` \
             (scripts/install-testbed.sh builds it)",
            bin.display()
        ),
    }
}

/// The container's environment as the kubelet would give it: literal values,
/// and the downward API fields the chart uses.
fn container_env(c: &Value) -> Vec<(String, String)> {
    c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let value = if let Some(v) = e["value"].as_str() {
                v.to_string()
            } else {
                match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("spec.nodeName") => "nth-host".into(),
                    Some("metadata.name") => "aws-node-termination-handler-0".into(),
                    Some("metadata.namespace") => "kube-system".into(),
                    _ => panic!("an env entry the test cannot fill: {e}"),
                }
            };
            (name, value)
        })
        .collect()
}

fn lifecycle_state(moto: &MotoEnv, instance: &str) -> Option<String> {
    let v = moto.aws_json(&[
        "autoscaling",
        "describe-auto-scaling-instances",
        "--instance-ids",
        instance,
    ]);
    v["AutoScalingInstances"][0]["LifecycleState"]
        .as_str()
        .map(str::to_string)
}

fn ec2_state(moto: &MotoEnv, instance: &str) -> String {
    let v = moto.aws_json(&["ec2", "describe-instances", "--instance-ids", instance]);
    v["Reservations"][0]["Instances"][0]["State"]["Name"]
        .as_str()
        .unwrap()
        .to_string()
}

fn kubectl_json(cp: &testbed::ControlPlane, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&cp.kubectl(&a).unwrap_or_else(|e| panic!("{e}"))).unwrap()
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool, log: &Path) {
    let start = Instant::now();
    while !ok() {
        if start.elapsed() > limit {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            panic!(
                "{what}: not after {limit:?}; the handler's log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn nth_drains_a_terminating_node_and_a_pdb_holds_the_drain_until_the_hook_times_out() {
    let Some(cp) = testbed::shared("nth_drains_a_terminating_node_and_a_pdb_holds_the_drain_until_the_hook_times_out")
    else {
        return;
    };
    let (nth, pin) = nth_binary(&cp.bin);

    // What render and the real chart give.
    let (tmp, stacks, values, archive) = workers::render(CLUSTER_YAML);
    let objects = workers::nth_chart_objects(tmp.path(), &values, &archive);
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let image = container["image"].as_str().unwrap();
    assert!(
        image.ends_with(&format!(":{pin}")),
        "the chart runs {image}, the test bed built {pin}: update NTH in scripts/install-testbed.sh"
    );
    let env = container_env(container);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("NODE_TERMINATION_GRACE_PERIOD").as_deref(), Some("30"));
    assert_eq!(get("ENABLE_SQS_TERMINATION_DRAINING").as_deref(), Some("true"));
    let queue_url = get("QUEUE_URL").unwrap();
    let root = &stacks["root"]["Resources"];
    let queue_name = root["NthQueue"]["Properties"]["QueueName"].as_str().unwrap();
    assert!(
        queue_url.ends_with(&format!("/123456789012/{queue_name}")),
        "{queue_url}"
    );
    let pool = &stacks["node-pool-general"]["Resources"];
    let hook = pool
        .as_object()
        .unwrap()
        .values()
        .find(|r| r["Type"] == "AWS::AutoScaling::LifecycleHook")
        .unwrap()["Properties"]
        .clone();
    assert_eq!(hook["HeartbeatTimeout"], 300);

    // moto: the queue, the rendered rule to it, the group with the rendered
    // tags and hook.
    let moto = MotoEnv::new();
    let endpoint = moto.moto.url();
    let sqs = |args: &[&str]| -> Value {
        let mut a = vec!["--endpoint-url", endpoint.as_str(), "sqs"];
        a.extend(args);
        moto.aws_json(&a)
    };
    let q = sqs(&["create-queue", "--queue-name", queue_name]);
    let q_url = q["QueueUrl"].as_str().unwrap().to_string();
    let q_arn = sqs(&[
        "get-queue-attributes",
        "--queue-url",
        &q_url,
        "--attribute-names",
        "QueueArn",
    ])["Attributes"]["QueueArn"]
        .as_str()
        .unwrap()
        .to_string();
    let rule = &root["NthAsgLifecycleRule"]["Properties"];
    let rule_name = rule["Name"].as_str().unwrap();
    moto.aws(&[
        "events",
        "put-rule",
        "--name",
        rule_name,
        "--event-pattern",
        &rule["EventPattern"].to_string(),
    ]);
    moto.aws(&[
        "events",
        "put-targets",
        "--rule",
        rule_name,
        "--targets",
        &json!([{"Id": "NthQueue", "Arn": q_arn}]).to_string(),
    ]);
    moto.aws(&[
        "ec2",
        "create-launch-template",
        "--launch-template-name",
        "demo-general",
        "--launch-template-data",
        r#"{"ImageId":"ami-12c6146b","InstanceType":"t3.medium"}"#,
    ]);
    let tags: Vec<Value> = pool["WorkerGroup"]["Properties"]["Tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["Value"].is_string())
        .map(|t| json!({"Key": t["Key"], "Value": t["Value"], "PropagateAtLaunch": t["PropagateAtLaunch"]}))
        .collect();
    assert!(tags.iter().any(|t| t["Key"] == "aws-node-termination-handler/demo"));
    moto.aws(&[
        "autoscaling",
        "create-auto-scaling-group",
        "--auto-scaling-group-name",
        "demo-general",
        "--launch-template",
        "LaunchTemplateName=demo-general",
        "--min-size",
        "0",
        "--max-size",
        "3",
        "--desired-capacity",
        "2",
        "--availability-zones",
        "us-west-2a",
        "--tags",
        &Value::Array(tags).to_string(),
    ]);
    moto.aws(&[
        "autoscaling",
        "put-lifecycle-hook",
        "--auto-scaling-group-name",
        "demo-general",
        "--lifecycle-hook-name",
        hook["LifecycleHookName"].as_str().unwrap(),
        "--lifecycle-transition",
        hook["LifecycleTransition"].as_str().unwrap(),
        "--default-result",
        hook["DefaultResult"].as_str().unwrap(),
        "--heartbeat-timeout",
        &HEARTBEAT.to_string(),
    ]);
    let group = moto.aws_json(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        "demo-general",
    ]);
    let ids: Vec<String> = group["AutoScalingGroups"][0]["Instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["InstanceId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let dns = |id: &str| -> String {
        let v = moto.aws_json(&["ec2", "describe-instances", "--instance-ids", id]);
        v["Reservations"][0]["Instances"][0]["PrivateDnsName"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (node_a, node_b) = (dns(&a), dns(&b));

    // The nodes kubelet would register (named by the private DNS name, as the
    // handler looks them up), a pod on each, and a PDB that lets none of B's go.
    let ns = cp.namespace("nth");
    for (node, id) in [(&node_a, &a), (&node_b, &b)] {
        let manifest = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": node, "type": "kwok"}},
            "spec": {"providerID": format!("aws:///us-west-2a/{id}")}
        });
        cp.kubectl_stdin(&["apply", "-f", "-"], &manifest.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    cp.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "node",
        &node_a,
        &node_b,
        "--timeout=120s",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    for (node, app) in [(&node_a, "free"), (&node_b, "held")] {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": app, "namespace": ns, "labels": {"app": app}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        });
        cp.kubectl_stdin(&["apply", "-f", "-"], &pod.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "held", "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "held"}}}
    });
    cp.kubectl_stdin(&["apply", "-f", "-"], &pdb.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    cp.kubectl(&[
        "-n",
        &ns,
        "wait",
        "--for=condition=Ready",
        "pod",
        "--all",
        "--timeout=120s",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    while kubectl_json(&cp, &["-n", &ns, "get", "pdb", "held"])["status"]["currentHealthy"] != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the PDB's status never counted the pod"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        kubectl_json(&cp, &["-n", &ns, "get", "pdb", "held"])["status"]["disruptionsAllowed"],
        0
    );

    // The chart's service account and RBAC, and a token for it.
    for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"] {
        let o = objects.iter().find(|o| o["kind"] == kind).unwrap();
        cp.kubectl_stdin(&["apply", "-f", "-"], &o.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let sa_dir = tmp.path().join("serviceaccount");
    std::fs::create_dir_all(&sa_dir).unwrap();
    let token = cp
        .kubectl(&[
            "-n",
            "kube-system",
            "create",
            "token",
            "aws-node-termination-handler",
            "--duration=1h",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(sa_dir.join("token"), token.trim()).unwrap();
    std::fs::copy(cp.pki.join("ca.crt"), sa_dir.join("ca.crt")).unwrap();
    std::fs::write(sa_dir.join("namespace"), "kube-system").unwrap();

    // The handler, as the chart configures it, reaching moto by AWS_ENDPOINT.
    // In a mount namespace of its own, a tmpfs over /run (where /var/run
    // points) holds the service account files where rest.InClusterConfig
    // reads them; nothing of the host's changes.
    let script = r#"set -e
run=$(readlink -f /var/run)
mount -t tmpfs tmpfs "$run"
mkdir -p "$run/secrets/kubernetes.io/serviceaccount"
cp "$1"/token "$1"/ca.crt "$1"/namespace "$run/secrets/kubernetes.io/serviceaccount/"
exec "$2""#;
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"])
        .arg(&sa_dir)
        .arg(&nth)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("AWS_ENDPOINT", &endpoint)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", cp.api_port.to_string());
    let log = tmp.path().join("nth.log");
    let mut handler = testbed::Proc::spawn("aws-node-termination-handler", c, log.clone());
    handler
        .wait_until(Duration::from_secs(60), || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("has started successfully")
        })
        .unwrap_or_else(|e| panic!("{e}"));

    // Both instances terminate (a roll, a scale-in, a console terminate).
    let t0 = Instant::now();
    for id in [&a, &b] {
        moto.aws(&[
            "autoscaling",
            "terminate-instance-in-auto-scaling-group",
            "--instance-id",
            id,
            "--no-should-decrement-desired-capacity",
        ]);
    }
    // B waits (A may be drained and gone already: the handler is quick, and
    // its completing the action is itself proof A waited, below).
    assert_eq!(lifecycle_state(&moto, &b).as_deref(), Some("Terminating:Wait"));

    // A: cordoned, drained, the action completed, terminated long before the
    // hook would have ended the wait.
    wait_for(
        "instance A terminated after the handler completed its lifecycle action",
        Duration::from_secs(HEARTBEAT - 10),
        || ec2_state(&moto, &a) == "terminated",
        &log,
    );
    let a_done = t0.elapsed();
    assert_eq!(lifecycle_state(&moto, &a), None, "A left the group");
    let node = kubectl_json(&cp, &["get", "node", &node_a]);
    assert_eq!(node["spec"]["unschedulable"], true, "A cordoned: {node}");
    let pods = kubectl_json(&cp, &["-n", &ns, "get", "pods", "-l", "app=free"]);
    assert_eq!(pods["items"].as_array().unwrap().len(), 0, "A's pod evicted: {pods}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("Completed ASG Lifecycle Hook") && l.contains(&a)),
        "{text}"
    );

    // B: cordoned at once, its pod kept by the PDB past the handler's drain
    // timeout (30 s), the action not completed: still Terminating:Wait.
    wait_for(
        "node B cordoned",
        Duration::from_secs(20),
        || kubectl_json(&cp, &["get", "node", &node_b])["spec"]["unschedulable"] == true,
        &log,
    );
    wait_for(
        "the handler's drain of B giving up at its timeout",
        Duration::from_secs(HEARTBEAT - 3).saturating_sub(t0.elapsed()),
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("global timeout reached: 30s")
        },
        &log,
    );
    assert!(
        t0.elapsed() >= Duration::from_secs(30),
        "the drain held at least its 30 s ({:?})",
        t0.elapsed()
    );
    assert_eq!(lifecycle_state(&moto, &b).as_deref(), Some("Terminating:Wait"));
    let held = kubectl_json(&cp, &["-n", &ns, "get", "pod", "held"]);
    assert!(held["metadata"]["deletionTimestamp"].is_null(), "{held}");
    assert_eq!(held["status"]["phase"], "Running");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "the eviction was refused by the PDB: {text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.contains("Completed ASG Lifecycle Hook") && l.contains(&b)),
        "{text}"
    );

    // The hook's heartbeat ends the wait: its default result terminates B.
    wait_for(
        "instance B terminated by the hook's timeout",
        Duration::from_secs(HEARTBEAT + 20).saturating_sub(t0.elapsed()),
        || ec2_state(&moto, &b) == "terminated",
        &log,
    );
    let b_done = t0.elapsed();
    assert!(b_done >= Duration::from_secs(HEARTBEAT), "{b_done:?}");
    assert!(
        kubectl_json(&cp, &["-n", &ns, "get", "pod", "held"])["metadata"]["deletionTimestamp"].is_null(),
        "the PDB held to the end"
    );
    eprintln!(
        "nth_testbed: A drained and completed after {:.1}s; B held by its PDB, terminated by the hook's {}s timeout after {:.1}s",
        a_done.as_secs_f64(),
        HEARTBEAT,
        b_done.as_secs_f64()
    );
    drop(handler);
    let _ = cp.kubectl(&["delete", "node", &node_a, &node_b, "--wait=false"]);
}
