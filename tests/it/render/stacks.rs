//! Health and limits of the rendered stacks (the fixtures of
//! tests/it/render.rs): the API's health check is HTTPS /readyz, controllers
//! are not replaced on readiness and may mark themselves unhealthy, etcd's
//! alarms watch the quota and the backup age, and the most node pools
//! render within CloudFormation's quotas (more are refused). Not covered
//! here: a load balancer or alarm acting on them (no AWS here).

use super::*;

/// Issue 24, finding 10: the API load balancer asks each controller's
/// apiserver whether it is ready (HTTPS GET /readyz, 200 only), not whether
/// its port is open: a TCP check keeps an apiserver that lost etcd, or one
/// draining on shutdown, in service.
#[test]
fn the_api_health_check_is_https_readyz() {
    for input in [minimal(), full()] {
        let net = stack(&rendered(&input), "network");
        let tg = &net["Resources"]["ApiTargetGroup"]["Properties"];
        assert_eq!(tg["Protocol"], "TCP", "{tg}");
        assert_eq!(tg["HealthCheckProtocol"], "HTTPS", "{tg}");
        assert_eq!(tg["HealthCheckPath"], "/readyz", "{tg}");
        assert_eq!(tg["HealthCheckPort"], "6443", "{tg}");
        assert_eq!(tg["Matcher"], serde_json::json!({"HttpCode": "200"}), "{tg}");
        // What an NLB accepts for an HTTPS check: an interval of 10 or 30 s,
        // a timeout of 2 to 120 s below it, thresholds of 2 to 10.
        let interval = tg["HealthCheckIntervalSeconds"].as_u64().unwrap();
        let timeout = tg["HealthCheckTimeoutSeconds"].as_u64().unwrap();
        assert!([10, 30].contains(&interval) && (2..interval).contains(&timeout), "{tg}");
        for k in ["HealthyThresholdCount", "UnhealthyThresholdCount"] {
            assert!((2..=10).contains(&tg[k].as_u64().unwrap()), "{k}: {tg}");
        }
    }
}

/// Health: the controller group judges its instances by EC2's status checks
/// only, after the bootstrap's allowance, never by the API target group's
/// /readyz (which routes requests, and fails while etcd or the API server
/// restarts: no controller is replaced for it); the controllers may mark an
/// instance of their own group (only) Unhealthy; worker groups keep the
/// default (EC2) health checks.
#[test]
fn controllers_are_not_replaced_on_readiness_and_may_mark_themselves_unhealthy() {
    for input in [minimal(), full()] {
        let cp = stack(&rendered(&input), "control-plane");
        let g = &cp["Resources"]["ControllerGroup"]["Properties"];
        assert_eq!(
            (&g["HealthCheckType"], &g["HealthCheckGracePeriod"]),
            (&serde_json::json!("EC2"), &serde_json::json!(1800))
        );
    }
    let r = rendered(&full());
    let cp = stack(&r, "control-plane");
    let statements = cp["Resources"]["ControllerLifecycleHookPolicy"]["Properties"]["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap()
        .clone();
    let mark = statements.iter().find(|s| s["Sid"] == "MarkOwnGroupUnhealthy").unwrap();
    assert_eq!(mark["Action"], serde_json::json!(["autoscaling:SetInstanceHealth"]));
    assert!(mark["Resource"]["Fn::Sub"]
        .as_str()
        .unwrap()
        .ends_with("autoScalingGroupName/${ControllerGroup}"));
    let net = stack(&r, "network");
    let tg = &net["Resources"]["ApiTargetGroup"]["Properties"];
    assert_eq!(
        (&tg["HealthCheckProtocol"], &tg["HealthCheckPath"]),
        (&serde_json::json!("HTTPS"), &serde_json::json!("/readyz"))
    );
    for (path, _) in r.files.iter().filter(|(p, _)| p.starts_with("stacks/node-pool-")) {
        let pool: serde_json::Value = serde_json::from_slice(r.get(path).unwrap()).unwrap();
        for (id, res) in pool["Resources"].as_object().unwrap() {
            if res["Type"] == "AWS::AutoScaling::AutoScalingGroup" {
                assert!(res["Properties"].get("HealthCheckType").is_none(), "{path} {id}");
            }
        }
    }
}

/// etcd's alarms: the database at 70 % of etcd.quotaBackendBytes, the newest
/// snapshot older than twice etcd.backup.interval (missing data breaching);
/// the controllers may put metrics in the alarms' namespace only.
#[test]
fn etcd_alarms_watch_the_quota_and_the_backup_age() {
    let mut input = full();
    input.cluster.etcd.backup.interval = "2h".into();
    input.cluster.etcd.quota_backend_bytes = 10 * 1024 * 1024 * 1024;
    let r = rendered(&input);
    let cp = stack(&r, "control-plane");
    let size = &cp["Resources"]["EtcdDbSizeAlarm"]["Properties"];
    assert_eq!(size["Threshold"], 7 * 1024 * 1024 * 1024u64);
    assert_eq!(
        (&size["Namespace"], &size["MetricName"]),
        (&serde_json::json!("kube-aws/etcd"), &serde_json::json!("DbSizeBytes"))
    );
    let age = &cp["Resources"]["EtcdBackupAgeAlarm"]["Properties"];
    assert_eq!(age["Threshold"], 4 * 3600);
    assert_eq!(age["TreatMissingData"], "breaching");
    assert_eq!(age["Dimensions"][0]["Value"], input.cluster.cluster_name.as_str());
    let statements = kube_aws::render::cfn::iam_size::role_statements(&cp, "ControllerRole");
    let put = statements.iter().find(|s| s["Sid"] == "PublishEtcdMetrics").unwrap();
    assert_eq!(
        put["Condition"]["StringEquals"]["cloudwatch:namespace"],
        "kube-aws/etcd"
    );
}

/// The most node pools config admits (`MAX_NODE_POOLS`) render within
/// CloudFormation's per-template quotas (500 resources, 200 parameters, 200
/// outputs: render::TEMPLATE_QUOTAS), x86 and arm64 pools mixed (each
/// architecture adds a root parameter); past them the render refuses the
/// stack, naming the section, the count and the quota. (A render input is
/// built here without config's check, as a plugin could add parameters.)
#[test]
fn the_most_node_pools_render_within_cloudformations_quotas_and_more_are_refused() {
    let max = kube_aws::config::MAX_NODE_POOLS;
    let mut input = generated(0, max);
    input.cluster.worker.node_pools[0].instance_type = "m7g.large".into();
    let r = rendered(&input);
    let root = stack(&r, "root");
    for (section, limit) in render::TEMPLATE_QUOTAS {
        let n = root[section].as_object().map_or(0, |m| m.len());
        assert!(n <= limit, "root: {n} {section}, quota {limit}");
    }
    let params = root["Parameters"].as_object().unwrap().len();
    assert!(params >= max, "one parameter per pool: {params}");
    // Ten pools more than config admits, added past its check.
    let mut over = input.clone();
    for i in 0..10 {
        let mut pool = over.cluster.worker.node_pools[1].clone();
        let hooks = over.plugins.pools.get(&pool.name).cloned();
        pool.name = format!("extra-{i}");
        if let Some(h) = hooks {
            over.plugins.pools.insert(pool.name.clone(), h);
        }
        over.cluster.worker.node_pools.push(pool);
    }
    let err = render::render(&over).unwrap_err();
    assert!(
        matches!(
            err,
            RenderError::OverQuota {
                section: "Parameters",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "stacks/root.json declares {} Parameters, over CloudFormation's quota of 200 per template: \
             split node pools or charts across clusters",
            params + 10
        )
    );
}
