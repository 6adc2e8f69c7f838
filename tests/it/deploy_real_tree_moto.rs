//! A real work tree against moto (the helpers of tests/it/deploy_moto.rs):
//! `render` writes it, and `up`, `status`, `update` and `destroy` publish
//! and deploy exactly what render wrote; the nested stacks, their resources
//! and the groups' sizes are read back through the API.
//!
//! Not covered: what moto cannot show (tests/it/deploy_moto.rs's header).

use crate::common::MotoEnv as Env;
use crate::deploy_moto::{objects, sha256, stack_status, text, write, BUCKET, CLUSTER};

/// The nested stacks of the root stack, as the API lists them: (logical id, physical id).
fn nested_stacks(env: &Env) -> Vec<(String, String)> {
    let r = env.aws_json(&["cloudformation", "list-stack-resources", "--stack-name", CLUSTER]);
    r["StackResourceSummaries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ResourceType"] == "AWS::CloudFormation::Stack")
        .map(|r| {
            (
                r["LogicalResourceId"].as_str().unwrap().to_string(),
                r["PhysicalResourceId"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The physical ids of a stack's resources of one type.
fn resources_of(env: &Env, stack: &str, resource_type: &str) -> Vec<String> {
    let r = env.aws_json(&["cloudformation", "list-stack-resources", "--stack-name", stack]);
    r["StackResourceSummaries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ResourceType"] == resource_type)
        .map(|r| r["PhysicalResourceId"].as_str().unwrap().to_string())
        .collect()
}

/// The one auto scaling group of a nested stack: (min, max, desired).
fn group_size(env: &Env, nested: &str) -> (i64, i64, i64) {
    let (_, physical) = nested_stacks(env)
        .into_iter()
        .find(|(l, _)| l == nested)
        .unwrap_or_else(|| panic!("no nested stack {nested}"));
    let groups = resources_of(env, &physical, "AWS::AutoScaling::AutoScalingGroup");
    assert_eq!(groups.len(), 1, "{nested}: {groups:?}");
    let g = env.aws_json(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        &groups[0],
    ]);
    let g = &g["AutoScalingGroups"][0];
    (
        g["MinSize"].as_i64().unwrap(),
        g["MaxSize"].as_i64().unwrap(),
        g["DesiredCapacity"].as_i64().unwrap(),
    )
}

fn real_cluster_yaml(kms: &str, count: u32) -> String {
    // aws-vpc-cni is on by default; its chart is on the internet, out of reach here.
    format!(
        "clusterName: {CLUSTER}\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
         worker:\n  nodePools:\n    - name: general\n      count: {count}\n\
         plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
    )
}

/// The whole path a user takes, on a real work tree rendered by kube-aws
/// itself: `up --wait` (render, publish, CreateStack), `status` and
/// `status -o json`, `update --yes --wait` with a changed node pool count,
/// `update --yes` with no changes, `destroy --yes --wait`; each step checked
/// through the API (stacks, nested stacks, the load balancer behind the API
/// endpoint, the auto scaling groups).
///
/// moto runs through tests/support/moto_server.py, which patches four moto
/// bugs these templates hit (the NLB type, nested stack outputs, a deleted
/// stack's resources re-created on read, route tables never deleted).
///
/// Not covered here: instances booting, the addon installer and its signals
/// (tests/it/render.rs, tests/it/installer.rs; moto ignores CreationPolicy and
/// WaitConditions); real update semantics (moto replaces a changed nested
/// stack with a new one instead of updating it in place, and reports every
/// resource CREATE_COMPLETE); rollbacks; moto never deletes the internet
/// gateway or the target group of a deleted stack, so this test does not
/// check that destroy leaves nothing behind.
#[test]
fn real_work_tree_up_status_update_destroy() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    write(&dir.join("cluster.yaml"), &real_cluster_yaml(&kms, 1));

    // up --wait: render, publish, create, follow.
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    assert!(text(&up).contains("is CREATE_COMPLETE"), "{}", text(&up));
    for nested in ["Network", "ControlPlane", "NodePoolGeneral"] {
        assert!(
            text(&up).contains(&format!("stack {nested}: CREATE_COMPLETE")),
            "{}",
            text(&up)
        );
    }
    assert_eq!(stack_status(&env).as_deref(), Some("CREATE_COMPLETE"));
    let nested = nested_stacks(&env);
    let logical: Vec<&str> = nested.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(logical, ["Network", "ControlPlane", "NodePoolGeneral"]);
    for (l, physical) in &nested {
        let s = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", physical]);
        assert_eq!(s["Stacks"][0]["StackStatus"], "CREATE_COMPLETE", "{l}: {s}");
    }

    // The API endpoint: a network load balancer with a TCP listener, whose DNS
    // name the root stack passes up as its ApiEndpoint output.
    let lbs = resources_of(&env, &nested[0].1, "AWS::ElasticLoadBalancingV2::LoadBalancer");
    assert_eq!(lbs.len(), 1, "{lbs:?}");
    let lb = env.aws_json(&["elbv2", "describe-load-balancers", "--load-balancer-arns", &lbs[0]]);
    let lb = &lb["LoadBalancers"][0];
    assert_eq!(lb["Type"], "network", "{lb}");
    let dns = lb["DNSName"].as_str().unwrap().to_string();
    let listeners = env.aws_json(&["elbv2", "describe-listeners", "--load-balancer-arn", &lbs[0]]);
    let protocols: Vec<&str> = listeners["Listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["Protocol"].as_str().unwrap())
        .collect();
    assert_eq!(protocols, ["TCP"], "{listeners}");
    assert_eq!(group_size(&env, "ControlPlane"), (1, 1, 1));
    // A worker group's MaxSize leaves room for the rolling update's surge
    // instance (launch before terminate, src/render/cfn/nodes.rs surge_max).
    assert_eq!(group_size(&env, "NodePoolGeneral"), (1, 2, 1));

    // The published objects: each cloud-config where its stub looks for it,
    // byte for byte; the root names each nested template by its key.
    let objs = objects(&env, BUCKET);
    let keys: Vec<&str> = objs.iter().map(|(k, _)| k.as_str()).collect();
    for role in ["controller", "worker-general"] {
        let body = std::fs::read(dir.join(format!("rendered/userdata/{role}.cloud-config"))).unwrap();
        let key = format!("userdata/{role}/{}.cloud-config", sha256(&body));
        assert!(
            objs.iter().any(|(k, b)| k == &key && b == &body),
            "{key} not in {keys:?}"
        );
        let stub = std::fs::read_to_string(dir.join(format!("rendered/userdata/{role}.stub"))).unwrap();
        assert!(stub.contains(&sha256(&body)), "the {role} stub does not name its part");
    }
    let root = objs
        .iter()
        .find(|(k, _)| k.starts_with("stacks/") && k.ends_with("/root.json"))
        .unwrap();
    for nested in ["network", "control-plane", "node-pool-general"] {
        let key = objs
            .iter()
            .find(|(k, _)| k.starts_with("stacks/") && k.ends_with(&format!("/{nested}.json")))
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| panic!("{nested} not published: {keys:?}"));
        assert!(
            String::from_utf8_lossy(&root.1).contains(&key),
            "root does not name {key}"
        );
    }

    // status, text and JSON: the nested stacks and the API endpoint.
    let st = env.kube_aws(dir, &["status"]);
    assert!(st.status.success(), "{}", text(&st));
    let t = String::from_utf8_lossy(&st.stdout).to_string();
    assert!(t.starts_with("stack demo: CREATE_COMPLETE\n"), "{t}");
    for nested in ["Network", "ControlPlane", "NodePoolGeneral"] {
        assert!(t.contains(&format!("\n  {nested}: CREATE_COMPLETE\n")), "{t}");
    }
    assert!(t.contains(&format!("\n  ApiEndpoint: {dns}\n")), "{t}");
    let stj = env.kube_aws(dir, &["status", "-o", "json"]);
    assert!(stj.status.success(), "{}", text(&stj));
    let j: serde_json::Value = serde_json::from_slice(&stj.stdout).unwrap();
    assert_eq!(j["stack"]["status"], "CREATE_COMPLETE");
    let ids: Vec<&str> = j["nested"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["logical_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["Network", "ControlPlane", "NodePoolGeneral"], "{j}");
    let endpoint = j["stack"]["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["key"] == "ApiEndpoint")
        .unwrap_or_else(|| panic!("no ApiEndpoint output: {j}"));
    assert_eq!(endpoint["value"], dns.as_str());

    // up again: the stack exists; point at update.
    let again = env.kube_aws(dir, &["up"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains("already exists: run `kube-aws update`"),
        "{}",
        text(&again)
    );

    // update with a changed value: the node pool's count. The diff names the
    // one nested stack whose template changed, and the group grows.
    let live_before = env.aws(&["cloudformation", "get-template", "--stack-name", CLUSTER]);
    write(&dir.join("cluster.yaml"), &real_cluster_yaml(&kms, 2));
    let upd = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "2m"]);
    assert!(upd.status.success(), "{}", text(&upd));
    let out = String::from_utf8_lossy(&upd.stdout).to_string();
    assert!(
        out.contains("changes to stack \"demo\":\nmodified (1):\n  ~ NodePoolGeneral (AWS::CloudFormation::Stack)\n"),
        "{out}"
    );
    assert!(!out.contains("Network (") && !out.contains("ControlPlane ("), "{out}");
    assert!(out.contains("is UPDATE_COMPLETE"), "{out}");
    assert_eq!(stack_status(&env).as_deref(), Some("UPDATE_COMPLETE"));
    assert_ne!(
        env.aws(&["cloudformation", "get-template", "--stack-name", CLUSTER]),
        live_before
    );
    assert_eq!(group_size(&env, "NodePoolGeneral"), (2, 3, 2));
    assert_eq!(group_size(&env, "ControlPlane"), (1, 1, 1));

    // The AMI was resolved at up and pinned: a concrete ID in the root's
    // parameters, the one moto's SSM public parameter holds.
    let ami = env
        .aws(&[
            "ssm",
            "get-parameter",
            "--name",
            "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64",
            "--query",
            "Parameter.Value",
            "--output",
            "text",
        ])
        .trim()
        .to_string();
    assert!(ami.starts_with("ami-"), "{ami}");
    let params = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]);
    let pinned: Vec<&serde_json::Value> = params["Stacks"][0]["Parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["ParameterKey"] == "ImageIdX86")
        .collect();
    assert_eq!(pinned.len(), 1, "{params}");
    assert_eq!(pinned[0]["ParameterValue"], ami.as_str());

    // update --refresh-ami with no newer AMI: says so, and changes nothing.
    let refresh = env.kube_aws(dir, &["update", "--yes", "--refresh-ami"]);
    assert!(refresh.status.success(), "{}", text(&refresh));
    let out = String::from_utf8_lossy(&refresh.stdout).to_string();
    assert!(
        out.contains(&format!("no newer AMI: ImageIdX86 stays {ami}\n")),
        "{out}"
    );
    assert!(out.contains("no changes: stack \"demo\" is up to date"), "{out}");

    // update with no changes: says so, exit 0, the stack untouched.
    let events_before = env.aws(&["cloudformation", "describe-stack-events", "--stack-name", CLUSTER]);
    let same = env.kube_aws(dir, &["update", "--yes"]);
    assert!(same.status.success(), "{}", text(&same));
    assert!(
        String::from_utf8_lossy(&same.stdout).contains("no changes: stack \"demo\" is up to date"),
        "{}",
        text(&same)
    );
    assert_eq!(
        env.aws(&["cloudformation", "describe-stack-events", "--stack-name", CLUSTER]),
        events_before
    );
    assert_eq!(stack_status(&env).as_deref(), Some("UPDATE_COMPLETE"));

    // destroy --wait: the root and every nested stack deleted, the groups and
    // the load balancer gone.
    let root_id = env.aws(&[
        "cloudformation",
        "describe-stacks",
        "--stack-name",
        CLUSTER,
        "--query",
        "Stacks[0].StackId",
        "--output",
        "text",
    ]);
    let nested = nested_stacks(&env);
    let d = env.kube_aws(dir, &["destroy", "--yes", "--wait", "--timeout", "2m"]);
    assert!(d.status.success(), "{}", text(&d));
    assert!(text(&d).contains("stack \"demo\" is deleted"), "{}", text(&d));
    assert_eq!(
        stack_status(&env),
        None,
        "describe-stacks by name still finds the stack"
    );
    let s = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", root_id.trim()]);
    assert_eq!(s["Stacks"][0]["StackStatus"], "DELETE_COMPLETE");
    let listed = env.aws_json(&["cloudformation", "list-stacks"]);
    for (l, physical) in &nested {
        let summary = listed["StackSummaries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["StackName"] == physical.as_str())
            .unwrap_or_else(|| panic!("{l} ({physical}) not listed: {listed}"));
        assert_eq!(summary["StackStatus"], "DELETE_COMPLETE", "{l}: {summary}");
    }
    let groups = env.aws_json(&["autoscaling", "describe-auto-scaling-groups"]);
    assert_eq!(groups["AutoScalingGroups"], serde_json::json!([]), "{groups}");
    let lbs = env.aws_json(&["elbv2", "describe-load-balancers"]);
    assert_eq!(lbs["LoadBalancers"], serde_json::json!([]), "{lbs}");
    let gone = env.kube_aws(dir, &["status"]);
    assert_eq!(gone.status.code(), Some(1), "{}", text(&gone));
}
