//! What a change of the input replaces in the rendered stacks (the
//! fixtures of tests/it/render.rs): an addon-only change touches the plan
//! pointer and wait conditions only, three controllers roll one at a time
//! (launching first) over every zone, and what each kind of change
//! replaces. Not covered here: CloudFormation running the update (the
//! moto tests, the real-node bed).

use super::*;

/// Resources of a stack whose definition differs between two renders (added,
/// removed or changed), by logical ID.
fn changed_resources(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let (ra, rb) = (a["Resources"].as_object().unwrap(), b["Resources"].as_object().unwrap());
    let mut ids: Vec<String> = ra
        .keys()
        .chain(rb.keys())
        .filter(|k| ra.get(*k) != rb.get(*k))
        .cloned()
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The day-2 invariant at template level: an addon-only change (values, a
/// chart version, a plugin manifest) leaves every launch template, auto
/// scaling group, role and user data as it is; only the plan pointer and the
/// changed releases' wait conditions differ. (tests/it/deploy_moto.rs shows the
/// same through a change set.)
#[test]
fn an_addon_only_change_touches_the_plan_pointer_and_wait_conditions_only() {
    let before = full();
    let a = rendered(&before);
    let mut after = before.clone();
    after.addons[2].values_yaml.push_str("replicas: 3\n");
    after.addons[1].chart_version = "9.9.9".into();
    after.plugins.cluster.manifests[0].content.push_str("# changed\n");
    let b = rendered(&after);
    let wc = |r: &Rendered, i: usize| -> String {
        let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
        plan["releases"][i]["waitCondition"].as_str().unwrap().to_string()
    };
    let (cp_a, cp_b) = (stack(&a, "control-plane"), stack(&b, "control-plane"));
    // Only the pointer (control plane) and wait conditions (root) differ (a
    // kept wait condition may list a dependency's new ID, which
    // CloudFormation does not update it for).
    assert_eq!(changed_resources(&cp_a, &cp_b), ["AddonPlan"]);
    let (cp_a, cp_b) = (stack(&a, "root"), stack(&b, "root"));
    for id in changed_resources(&cp_a, &cp_b) {
        let t = cp_b["Resources"].get(&id).unwrap_or(&cp_a["Resources"][&id])["Type"].clone();
        assert!(t == "AWS::CloudFormation::WaitCondition", "{id} ({t}) changed");
    }
    // The new wait conditions are exactly the changed releases'.
    let ids = |cp: &serde_json::Value| -> std::collections::BTreeSet<String> {
        cp["Resources"].as_object().unwrap().keys().cloned().collect()
    };
    let added: Vec<String> = ids(&cp_b).difference(&ids(&cp_a)).cloned().collect();
    let mut want = Vec::new();
    for name in [&before.addons[1].release.name, &before.addons[2].release.name] {
        let plan: serde_json::Value = serde_json::from_slice(a.get("addons/plan.json").unwrap()).unwrap();
        let i = plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .position(|e| e["name"] == name.as_str())
            .unwrap();
        assert_ne!(wc(&a, i), wc(&b, i));
        want.push(wc(&b, i));
    }
    want.sort();
    assert_eq!(added, want);
    for (path, bytes) in &a.files {
        if path.starts_with("userdata/")
            || (path.starts_with("stacks/")
                && !["stacks/control-plane.json", "stacks/root.json"].contains(&path.as_str()))
        {
            assert_eq!(b.get(path), Some(bytes.as_slice()), "{path} changed");
        }
    }
    // The releases that did not change keep their wait condition: nothing waits for them.
    let unchanged = |r: &Rendered| -> Vec<String> {
        let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
        plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["name"] != before.addons[1].release.name.as_str()
                    && e["name"] != before.addons[2].release.name.as_str()
            })
            .map(|e| e["waitCondition"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(unchanged(&a), unchanged(&b));
    // Each wait condition depends on the control-plane stack, whose pointer
    // makes its plan live: it exists only once the controllers can see its plan.
    let any_wc = wc(&b, 0);
    let deps = &cp_b["Resources"][any_wc.as_str()]["DependsOn"];
    assert!(deps.as_array().unwrap().iter().any(|d| d == "ControlPlane"), "{deps}");
}

/// The controllers keep etcd's quorum through an update: one at a time,
/// launch before terminate (the count in service, MaxSize one above it),
/// each new one signalled (joined) before an old one goes, over every
/// subnet's zone; one controller rolls terminate first.
#[test]
fn three_controllers_roll_one_at_a_time_launching_first_over_every_zone() {
    let mut input = full();
    input.cluster.controller.count = 3;
    let cp = stack(&rendered(&input), "control-plane");
    let g = &cp["Resources"]["ControllerGroup"];
    let policy = &g["UpdatePolicy"]["AutoScalingRollingUpdate"];
    assert_eq!(policy["MaxBatchSize"], "1");
    assert_eq!(policy["MinInstancesInService"], "3");
    assert_eq!(policy["WaitOnResourceSignals"], true);
    assert!(policy["PauseTime"].as_str().unwrap().starts_with("PT"));
    assert!(policy["SuspendProcesses"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == "AZRebalance"));
    assert_eq!(g["CreationPolicy"]["ResourceSignal"]["Count"], 3);
    let p = &g["Properties"];
    assert_eq!(
        (
            p["MinSize"].as_str(),
            p["MaxSize"].as_str(),
            p["DesiredCapacity"].as_str()
        ),
        (Some("3"), Some("4"), Some("3"))
    );
    // MinInstancesInService must stay below MaxSize (CloudFormation's rule).
    assert!(policy["MinInstancesInService"].as_str().unwrap() < p["MaxSize"].as_str().unwrap());
    // One controller: terminate first (its replacement restores the snapshot).
    let mut one = input.clone();
    one.cluster.controller.count = 1;
    let cp1 = stack(&rendered(&one), "control-plane");
    let g1 = &cp1["Resources"]["ControllerGroup"];
    assert_eq!(
        g1["UpdatePolicy"]["AutoScalingRollingUpdate"]["MinInstancesInService"],
        "0"
    );
    assert_eq!(g1["Properties"]["MaxSize"], "1");
    // Every subnet (one per zone) is the group's: the group balances over the zones.
    assert_eq!(p["VPCZoneIdentifier"], serde_json::json!({"Ref": "SubnetIds"}));
    // Three zones by default with 3 controllers (1+1+1: losing one zone keeps
    // quorum), each node subnet in its own zone, all of them in SubnetIds.
    let mut default_zones = input.clone();
    default_zones.cluster.network.availability_zones.clear();
    let r = rendered(&default_zones);
    let net = stack(&r, "network");
    let zones: Vec<&serde_json::Value> = (0..3)
        .map(|i| &net["Resources"][format!("Subnet{i}")]["Properties"]["AvailabilityZone"])
        .collect();
    for (i, z) in zones.iter().enumerate() {
        assert_eq!(z["Fn::Select"][0], i, "{z}");
    }
    assert!(net["Resources"].get("Subnet3").is_none());
    assert_eq!(
        net["Outputs"]["SubnetIds"]["Value"]["Fn::Join"][1]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // One controller keeps the two default zones.
    let mut one = default_zones.clone();
    one.cluster.controller.count = 1;
    assert!(stack(&rendered(&one), "network")["Resources"].get("Subnet2").is_none());
    assert_eq!(stack(&rendered(&one), "root")["Outputs"]["ZoneCount"]["Value"], "2");
    // After `up`, the stack's record wins (issue 29): 3 controllers scaled to
    // one keep the three subnets, and the record stays 3.
    let mut recorded = one.clone();
    recorded.cluster.network.recorded_zone_count = Some(3);
    let r = rendered(&recorded);
    assert!(stack(&r, "network")["Resources"].get("Subnet2").is_some());
    assert_eq!(stack(&r, "root")["Outputs"]["ZoneCount"]["Value"], "3");
    // Explicit zones win: 3 controllers on 2 listed zones split 2+1 (documented).
    let mut two = input.clone();
    two.cluster.network.availability_zones = vec!["us-west-2a".into(), "us-west-2b".into()];
    assert!(stack(&rendered(&two), "network")["Resources"].get("Subnet2").is_none());

    // The termination hook: the leaving controller removes its etcd member
    // once the others keep a quorum (holding the hook with heartbeats until
    // then); the group goes on after 300 s without a heartbeat.
    let hook = &cp["Resources"]["ControllerTerminationHook"];
    assert_eq!(hook["Type"], "AWS::AutoScaling::LifecycleHook");
    let h = &hook["Properties"];
    assert_eq!(h["AutoScalingGroupName"], serde_json::json!({"Ref": "ControllerGroup"}));
    assert_eq!(h["LifecycleTransition"], "autoscaling:EC2_INSTANCE_TERMINATING");
    assert_eq!(h["DefaultResult"], "CONTINUE");
    assert_eq!(h["HeartbeatTimeout"], 300);
    assert_eq!(h["LifecycleHookName"], "kube-aws-etcd-member");
    // Completing it is allowed on its own group only.
    let policy = &cp["Resources"]["ControllerLifecycleHookPolicy"]["Properties"];
    assert_eq!(policy["Roles"], serde_json::json!([{"Ref": "ControllerRole"}]));
    let complete = policy["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Sid"] == "CompleteOwnLifecycleAction")
        .unwrap();
    // The heartbeat holds the hook while the member's removal would lose quorum.
    assert_eq!(
        complete["Action"],
        serde_json::json!([
            "autoscaling:CompleteLifecycleAction",
            "autoscaling:RecordLifecycleActionHeartbeat"
        ])
    );
    assert!(complete["Resource"]["Fn::Sub"]
        .as_str()
        .unwrap()
        .ends_with(":autoScalingGroup:*:autoScalingGroupName/${ControllerGroup}"));
}

/// What each kind of change rolls, at template level: the groups
/// src/aws/lifecycle/rolls.rs finds between two renders (the rule `update`'s preview
/// uses), with the root parameters a publish sets (an AMI, a secrets
/// version). Printed (for docs/deploy.md's "What each kind of change
/// replaces") and checked: only the changes that reach a node's user data, its
/// launch template or its subnets replace instances.
#[test]
fn what_each_kind_of_change_replaces() {
    use kube_aws::aws::lifecycle::rolls::{group_rolls, Deployment, Replacement};
    use kube_aws::aws::lifecycle::update_order::rolls_in_words;
    let base = full();
    let a = rendered(&base);
    let params = |extra: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut p: std::collections::BTreeMap<String, String> =
            [("ImageIdX86", "ami-x86-1"), ("ImageIdArm64", "ami-arm-1")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        for (k, v) in extra {
            p.insert(k.to_string(), v.to_string());
        }
        p.into_iter().collect()
    };
    let deployment = |r: &Rendered, p: &[(String, String)]| {
        Deployment::from_files(r.text("stacks/root.json").unwrap(), p, |path| {
            r.text(path).map(str::to_string)
        })
        .unwrap()
    };
    let old = deployment(&a, &params(&[]));
    assert_eq!(
        old.nested.len(),
        4,
        "every nested template is found: {:?}",
        old.nested.keys()
    );
    type Change = Box<dyn Fn(&mut render::RenderInput)>;
    let none: Change = Box::new(|_| {});
    // (kind, the change, root parameters it sets, the groups that roll and how)
    type Kind<'a> = (&'a str, Change, Vec<(&'a str, &'a str)>, Vec<&'a str>);
    let kinds: Vec<Kind> = vec![
        (
            "addon values (one release)",
            Box::new(|i| i.addons[2].values_yaml.push_str("replicas: 3\n")),
            vec![],
            vec![],
        ),
        (
            "chart version (one release)",
            Box::new(|i| i.addons[1].chart_version = "9.9.9".into()),
            vec![],
            vec![],
        ),
        (
            "plugin manifest",
            Box::new(|i| i.plugins.cluster.manifests[0].content.push_str("# x\n")),
            vec![],
            vec![],
        ),
        (
            "etcd.backup.interval",
            Box::new(|i| i.cluster.etcd.backup.interval = "30m".into()),
            vec![],
            vec![],
        ),
        (
            "plugin node file (controller)",
            Box::new(|i| i.plugins.controller.files[0].content.push_str("x\n")),
            vec![],
            vec!["ControlPlane/ControllerGroup rolling"],
        ),
        (
            "kubelet flag (pool general)",
            Box::new(|i| {
                let hooks = i.plugins.pools.get_mut("general").unwrap();
                hooks.kubelet_flags.insert("max-pods".into(), "40".into());
            }),
            vec![],
            vec!["NodePoolGeneral/WorkerGroup rolling"],
        ),
        // The ClusterConfiguration is in the addon bundle, not the user data:
        // the controllers apply it in place (reconfigure.py), no group rolls.
        (
            "apiserver flag (plugin)",
            Box::new(|i| {
                i.plugins
                    .cluster
                    .api_server_flags
                    .insert("oidc-username-claim".into(), "email".into());
            }),
            vec![],
            vec![],
        ),
        (
            "controller-manager flag (plugin)",
            Box::new(|i| {
                i.plugins
                    .cluster
                    .controller_manager_flags
                    .insert("node-monitor-grace-period".into(), "50s".into());
            }),
            vec![],
            vec![],
        ),
        (
            "scheduler flag (plugin)",
            Box::new(|i| {
                i.plugins.cluster.scheduler_flags.insert("v".into(), "3".into());
            }),
            vec![],
            vec![],
        ),
        (
            "secret rotation (a controller secret)",
            Box::new(|_| {}),
            vec![("ControlPlaneSecretsVersion", "0123456789abcdef")],
            vec!["ControlPlane/ControllerGroup rolling"],
        ),
        (
            "AMI refresh (x86_64)",
            Box::new(|_| {}),
            vec![("ImageIdX86", "ami-x86-2")],
            vec![
                "ControlPlane/ControllerGroup rolling",
                "NodePoolGeneral/WorkerGroup rolling",
            ],
        ),
        (
            "pool instance type (general)",
            Box::new(|i| i.cluster.worker.node_pools[0].instance_type = "m6i.xlarge".into()),
            vec![],
            vec!["NodePoolGeneral/WorkerGroup rolling"],
        ),
        (
            "controller.count 3 → 5",
            Box::new(|i| i.cluster.controller.count += 2),
            vec![],
            vec!["ControlPlane/ControllerGroup resized"],
        ),
        (
            "kubernetesVersion 1.35 → 1.36",
            Box::new(|i| i.cluster.kubernetes_version = "1.36".into()),
            vec![],
            vec![
                "ControlPlane/ControllerGroup rolling",
                "NodePoolGeneral/WorkerGroup rolling",
                "NodePoolSpotArm/WorkerGroup rolling",
            ],
        ),
        ("nothing", none, vec![], vec![]),
    ];
    let mut table = String::new();
    for (kind, change, set, want) in &kinds {
        let mut input = base.clone();
        change(&mut input);
        let b = rendered(&input);
        let rolls = group_rolls(&old, &deployment(&b, &params(set)));
        let got: Vec<String> = rolls
            .iter()
            .map(|r| {
                let how = match (&r.replacement, r.before != r.after) {
                    (Replacement::Rolling { batch: 1 }, _) => "rolling",
                    (Replacement::None, true) => "resized",
                    (other, _) => panic!("{kind}: {other:?}"),
                };
                format!("{}/{} {how}", r.stack, r.group)
            })
            .collect();
        table.push_str(&format!("| {kind} | {} |\n", rolls_in_words(&rolls)));
        assert_eq!(got, *want, "{kind}: {rolls:#?}");
    }
    println!("{table}");
}
