//! The rendered addon plan (the fixtures of tests/it/render.rs): Helm v2
//! and its Tiller only with charts, bad dependencies and plugins refused,
//! install order and wait conditions (a changed addon gets a new one), the
//! plan read back typed as it was rendered, and the pod identity webhook
//! ready before the releases that need it. Not covered here: installing
//! the plan (tests/it/installer.rs and the test beds).

use super::*;

#[test]
fn helm_v2_with_tiller_disabled_is_an_error() {
    let mut input = full();
    input.cluster.helm.tiller.enabled = false;
    let msg = render_err(&input);
    assert!(msg.contains("helm.tiller.enabled is false"), "{msg}");
    // Without charts, no Tiller is needed and none is installed.
    input.addons.clear();
    let r = rendered(&input);
    assert!(r.get("addons/tiller.yaml").is_none());
}

#[test]
fn tiller_only_with_charts_in_v2_mode() {
    let mut input = full();
    let plan: serde_json::Value = serde_json::from_slice(rendered(&input).get("addons/plan.json").unwrap()).unwrap();
    assert_eq!(plan["helm"]["tiller"]["install"], true);
    assert_eq!(plan["helm"]["binary"]["version"], "v2.17.0");
    input.addons.clear();
    let plan: serde_json::Value = serde_json::from_slice(rendered(&input).get("addons/plan.json").unwrap()).unwrap();
    assert_eq!(plan["helm"]["tiller"]["install"], false);
}

#[test]
fn bad_dependencies_and_plugins_are_errors() {
    let mut input = full();
    input.addons[3].release.depends_on = vec!["nope".into()];
    assert!(render_err(&input).contains("depends on \"nope\""));

    let mut input = full();
    input.addons[1].release.depends_on = vec!["dex".into()];
    assert!(render_err(&input).contains("cycle"));

    let mut input = full();
    input.addons[0].release.depends_on = vec!["metrics-server".into()];
    assert!(render_err(&input).contains("bootstrap addon"));

    let mut input = full();
    input.plugins.cluster.cloudformation[0].stack = "node-pool-missing".into();
    let msg = render_err(&input);
    assert!(
        msg.contains("\"node-pool-missing\"") && msg.contains("node-pool-general"),
        "{msg}"
    );

    let mut input = full();
    input.plugins.cluster.cloudformation[0]
        .resources
        .insert("ControllerGroup".into(), serde_json::json!({"Type": "AWS::SNS::Topic"}));
    assert!(render_err(&input).contains("\"ControllerGroup\" already exists"));

    let mut input = full();
    input.plugins.controller.files[0].path = "/etc/kube-aws/node.json".into();
    assert!(render_err(&input).contains("also written by"));

    let mut input = full();
    input.plugins.controller.files[0].path = "relative/file".into();
    assert!(render_err(&input).contains("must be absolute"));
}

#[test]
fn install_order_and_wait_conditions() {
    let r = rendered(&full());
    let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
    let names: Vec<&str> = plan["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["calico", "cert-manager", "metrics-server", "dex"]);
    // The wait conditions are in the root stack, after the control plane and
    // every pool (which start only once the control plane is done).
    let root: serde_json::Value = serde_json::from_slice(r.get("stacks/root.json").unwrap()).unwrap();
    let cp: serde_json::Value = serde_json::from_slice(r.get("stacks/control-plane.json").unwrap()).unwrap();
    for pool in ["NodePoolGeneral", "NodePoolSpotArm"] {
        assert_eq!(
            root["Resources"][pool]["DependsOn"],
            serde_json::json!(["ControlPlane"])
        );
    }
    for e in plan["releases"].as_array().unwrap() {
        let id = e["waitCondition"].as_str().unwrap();
        assert!(cp["Resources"].get(id).is_none(), "{id} in the control-plane stack");
        let wc = &root["Resources"][id];
        assert_eq!(wc["Type"], "AWS::CloudFormation::WaitCondition");
        assert_eq!(wc["CreationPolicy"]["ResourceSignal"]["Count"], 1);
        let deps = wc["DependsOn"].as_array().unwrap();
        assert_eq!(deps[..3], ["ControlPlane", "NodePoolGeneral", "NodePoolSpotArm"]);
        assert_eq!(deps.len(), 3 + e["dependsOn"].as_array().unwrap().len());
    }
}

#[test]
fn a_changed_addon_gets_a_new_wait_condition() {
    let wcs = |input: &render::RenderInput| -> Vec<String> {
        let plan: serde_json::Value = serde_json::from_slice(rendered(input).get("addons/plan.json").unwrap()).unwrap();
        plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["waitCondition"].as_str().unwrap().to_string())
            .collect()
    };
    let base = wcs(&full());
    let mut input = full();
    input.addons[2].values_yaml = "replicas: 3\n".into();
    let changed = wcs(&input);
    assert_eq!(base[0..2], changed[0..2]);
    assert_ne!(base[2], changed[2], "metrics-server's values changed");
    assert_eq!(base[3], changed[3]);
}

#[test]
fn the_plan_reads_back_typed_as_it_was_rendered() {
    use kube_aws::render::{layout, plan::Plan};
    for input in [minimal(), full()] {
        let r = rendered(&input);
        let bytes = r.get(layout::ADDON_PLAN).unwrap();
        let typed = Plan::from_json(bytes).unwrap();
        let built = render::plan::build_plan(&input, &render::Ctx::new(&input).unwrap()).unwrap();
        assert_eq!(typed, built);
        let mut again = serde_json::to_string_pretty(&typed).unwrap();
        again.push('\n');
        assert_eq!(again.as_bytes(), bytes, "the plan does not survive a round trip");
        assert_eq!(typed.releases.len(), input.addons.len());
        assert!(
            typed.releases.iter().all(|rel| rel.sha256.is_some() == rel.locked),
            "{typed:?}"
        );
    }
    // What `aws` reads of a plan it did not render: every other key defaults.
    let partial = Plan::from_json(br#"{"releases": [{"name": "dex", "waitCondition": "AddonDexReady"}]}"#).unwrap();
    assert_eq!(partial.releases[0].wait_condition, "AddonDexReady");
    assert!(Plan::from_json(br#"{"releases": [{"name": 3}]}"#).is_err());
}

/// The example's render input (`init --example`, charts not fetched).
fn example_input() -> (tempfile::TempDir, render::RenderInput) {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("example");
    let o = Command::new(env!("CARGO_BIN_EXE_kube-aws"))
        .args(["init", "--example"])
        .arg(&tree)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::output_text(&o));
    let p = kube_aws::pipeline::prepare(&kube_aws::pipeline::PrepareOptions {
        dir: tree,
        cache_dir: tmp.path().join("cache"),
        require_charts: false,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    (tmp, p.input)
}

/// The pod identity webhook (issue 24, finding 9): two replicas that a
/// drain cannot both take, spread over zones and hosts, and Ready before any
/// release whose pods need it starts: its Deployment is in the plan's
/// `manifestRollouts`, the releases of plugins with IAM roles are not
/// bootstrap ones (so they start after that wait), and their wait-condition
/// timeouts include it.
#[test]
fn pod_identity_webhook_is_ready_before_the_releases_that_need_it() {
    let (_tmp, input) = example_input();
    let r = rendered(&input);
    let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
    let manifest = "manifests/pod-identity-webhook/webhook.yaml";
    assert!(
        plan["manifests"].as_array().unwrap().iter().any(|m| m == manifest),
        "{}",
        plan["manifests"]
    );
    assert_eq!(
        plan["manifestRollouts"],
        serde_json::json!([{
            "manifest": manifest,
            "kind": "Deployment",
            "namespace": "kube-system",
            "name": "pod-identity-webhook",
            "timeoutSeconds": kube_aws::render::plan::MANIFEST_ROLLOUT_TIMEOUT_SECONDS,
        }])
    );

    // The workload: 2 replicas, a PDB keeping one, a soft spread by zone and host.
    let docs: Vec<serde_yaml::Value> =
        serde_yaml::Deserializer::from_str(std::str::from_utf8(r.get(manifest).unwrap()).unwrap())
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let deploy = of("Deployment");
    let spec = &deploy["spec"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let labels = &spec["template"]["metadata"]["labels"];
    let spread: Vec<(&str, &str)> = pod["topologySpreadConstraints"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["maxSkew"], 1);
            assert_eq!(c["labelSelector"]["matchLabels"]["app"], labels["app"]);
            (
                c["topologyKey"].as_str().unwrap(),
                c["whenUnsatisfiable"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        spread,
        [
            ("topology.kubernetes.io/zone", "ScheduleAnyway"),
            ("kubernetes.io/hostname", "ScheduleAnyway")
        ]
    );
    let pdb = of("PodDisruptionBudget");
    assert_eq!(pdb["metadata"]["namespace"], "kube-system");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], spec["selector"]["matchLabels"]);
    assert_eq!(labels["app"], spec["selector"]["matchLabels"]["app"]);

    // The releases that need it come after it.
    let with_roles: std::collections::BTreeSet<&str> = input
        .plugins
        .service_accounts
        .iter()
        .map(|s| s.plugin.as_str())
        .collect();
    let releases = plan["releases"].as_array().unwrap();
    let needing: Vec<&str> = releases
        .iter()
        .filter(|rel| {
            let origin = rel["origin"].as_str().unwrap();
            with_roles.iter().any(|p| origin == format!("plugin {p}"))
        })
        .map(|rel| rel["name"].as_str().unwrap())
        .collect();
    assert!(
        needing.len() >= 2,
        "the example has releases with IAM roles: {needing:?}"
    );
    for rel in releases {
        if needing.contains(&rel["name"].as_str().unwrap()) {
            assert_eq!(rel["bootstrap"], false, "{rel}");
        }
    }
    // Each non-bootstrap release's timeout includes the rollout wait; a
    // bootstrap one's does not (the rollout is after the bootstrap phase).
    let deps: Vec<Vec<String>> = releases
        .iter()
        .map(|rel| serde_json::from_value(rel["dependsOn"].clone()).unwrap())
        .collect();
    let steps: Vec<render::timeouts::Step> = releases
        .iter()
        .zip(&deps)
        .map(|(rel, d)| render::timeouts::Step {
            name: rel["name"].as_str().unwrap(),
            depends_on: d,
            bootstrap: rel["bootstrap"] == true,
            budget: render::timeouts::release_budget(rel["timeoutSeconds"].as_u64().unwrap()),
        })
        .collect();
    let without = render::timeouts::wait_timeouts(
        &steps,
        &render::timeouts::Schedule::reconciler(render::plan::CONCURRENCY),
    );
    for ((rel, plain), step) in releases.iter().zip(without).zip(&steps) {
        let extra = if step.bootstrap {
            0
        } else {
            render::plan::MANIFEST_ROLLOUT_TIMEOUT_SECONDS
        };
        assert_eq!(rel["waitTimeoutSeconds"].as_u64().unwrap(), plain + extra, "{rel}");
    }

    // A release with an IAM role cannot be a bootstrap one: its pods would
    // wait for a webhook that is only applied after the bootstrap phase.
    let mut bad = input.clone();
    let a = bad.addons.iter_mut().find(|a| a.release.name == needing[0]).unwrap();
    a.release.bootstrap = true;
    a.release.depends_on.clear();
    let text = match render::render(&bad) {
        Ok(_) => panic!("a bootstrap release with an IAM role renders"),
        Err(e) => e.to_string(),
    };
    assert!(
        text.contains(needing[0]) && text.contains("bootstrap") && text.contains("pod identity webhook"),
        "{text}"
    );

    // Without the webhook nothing waits.
    let mut off = input.clone();
    off.plugins.plugins.retain(|p| p.name != "pod-identity-webhook");
    off.plugins
        .cluster
        .manifests
        .retain(|m| m.plugin != "pod-identity-webhook");
    let r = rendered(&off);
    let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
    assert!(plan.get("manifestRollouts").is_none(), "{plan}");
}
