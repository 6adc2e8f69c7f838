//! The cluster-autoscaler's pause through a chart upgrade (issue 38), with the
//! real helm v3 client of the control-plane test bed, the real
//! cluster-autoscaler chart of `$KUBE_AWS_SHARED_DATA/charts`, and the real
//! kube-apiserver: the release is installed; `update`'s pause
//! (src/aws/lifecycle/autoscaler.rs) scales its Deployment to 0 and records the count;
//! the reconciler's decision (helm_release.py `paused_overrides`, run by
//! python3 on the answer of the reconciler's own kubectl list, with the
//! built-in plugin's `replicasValue`) gives `--set replicaCount=0`, and
//! `helm upgrade` with it keeps the Deployment at 0 with its record, where
//! an upgrade without it (Helm 3's three-way merge) sets the chart's count
//! back even though the count is the same in both manifests; the resume gives back the recorded count and removes the
//! record, after which the decision gives nothing and an upgrade keeps the
//! count.
//!
//! A failed upgrade with the override (refused by the API server) is rolled
//! back by `--atomic` to the last deployed revision, which puts its count
//! back; the reconciler's `repause_command` scales it to 0 again.
//!
//! Not covered: the reconciler's whole run around these (installer_testbed.rs
//! runs it; node tests test_paused_release.py check that `install` adds the
//! arguments to its `helm upgrade` and repauses after each failed attempt).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::autoscaler_pause_testbed::{admin_entry, recorded};
use crate::common::{charts::shared_charts, testbed};

use kube_aws::aws::lifecycle::autoscaler::{pause_release, resume_release, ScaleClient, RELEASE_LABEL};

struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    fn try_run(&self, args: &[&str]) -> Result<String, String> {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"));
        testbed::run(c)
    }

    fn run(&self, args: &[&str]) -> String {
        self.try_run(args).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// The built-in plugin's `replicasValue` for its chart.
fn plugin_replicas_value() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/cluster-autoscaler/plugin.yaml");
    let v: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v["spec"]["charts"][0]["replicasValue"]
        .as_str()
        .expect("the cluster-autoscaler plugin names its replicas value")
        .to_string()
}

/// A pure function of helm_release.py (the reconciler's helm side), called by python3 with `args` (JSON texts) as `a`.
fn helm_release_py(call: &str, args: &[&str]) -> serde_json::Value {
    let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node");
    let mut c = Command::new("python3");
    c.current_dir(node)
        .args([
            "-c",
            &format!(
                "import json, sys\nfrom kube_aws_node import helm_release\n\
                 a = [json.loads(x) for x in sys.argv[1:]]\nprint(json.dumps(helm_release.{call}))"
            ),
        ])
        .args(args);
    serde_json::from_str(&testbed::run(c).unwrap_or_else(|e| panic!("{e}"))).unwrap()
}

/// The release's plan entry, with the built-in plugin's `replicasValue`.
fn plan_entry(ns: &str, release: &str) -> String {
    serde_json::json!({"name": release, "namespace": ns, "replicasValue": plugin_replicas_value()}).to_string()
}

/// reconcile.py's decision on the reconciler's own list of the release's Deployments.
fn overrides(cp: &testbed::ControlPlane, ns: &str, release: &str) -> Vec<String> {
    let list = cp
        .kubectl(&[
            "-n",
            ns,
            "get",
            "deployments",
            "-l",
            &format!("{RELEASE_LABEL}={release}"),
            "-o",
            "json",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_value(helm_release_py(
        "paused_overrides(a[0], a[1])",
        &[&plan_entry(ns, release), &list],
    ))
    .unwrap()
}

fn spec_replicas(cp: &testbed::ControlPlane, ns: &str, name: &str) -> String {
    cp.kubectl(&["-n", ns, "get", "deployment", name, "-o", "jsonpath={.spec.replicas}"])
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_paused_autoscaler_stays_at_zero_through_a_chart_upgrade_with_the_real_helm() {
    let Some(cp) = testbed::shared("a_paused_autoscaler_stays_at_zero_through_a_chart_upgrade_with_the_real_helm")
    else {
        return;
    };
    let chart = shared_charts().join("cluster-autoscaler-9.59.0.tgz");
    let chart = chart.to_str().unwrap();
    let ns = cp.namespace("ca-helm");
    // The release name is unique on the shared bed (the chart's cluster-scoped
    // RBAC objects are named after it).
    let release = ns.clone();
    let deploy = format!("{release}-aws-cluster-autoscaler");
    let helm = Helm {
        bin: cp.bin.join("helm"),
        kubeconfig: cp.kubeconfig.clone(),
        home: tempfile::tempdir().unwrap(),
    };
    let base = [
        "--namespace",
        &ns,
        "--set",
        "cloudProvider=aws",
        "--set",
        "awsRegion=us-east-1",
        "--set",
        "autoDiscovery.clusterName=bed",
        "--set",
        "replicaCount=2",
    ];
    let upgrade = |extra: &[&str], args: &[String]| {
        let mut a: Vec<&str> = vec!["upgrade", "--install", &release, chart];
        a.extend(base);
        a.extend(extra);
        a.extend(args.iter().map(String::as_str));
        helm.run(&a)
    };
    upgrade(&[], &[]);
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "2");
    assert_eq!(overrides(&cp, &ns, &release), Vec::<String>::new(), "not paused yet");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let api = ScaleClient::new(&admin_entry(&cp)).unwrap();
    let p = rt.block_on(pause_release(&api, &ns, &release)).unwrap();
    assert_eq!(p.replicas(), 2, "{p:?}");
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "0");

    // Helm 3's three-way merge (the last release's manifest, the live object,
    // the new manifest) sets the chart's count back on a paused Deployment
    // even when the count is the same in both manifests: the issue. The
    // record outlives the upgrade, and the next pause keeps its count.
    upgrade(&["--set", "podAnnotations.upgrade=one"], &[]);
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "2", "helm put the chart's count back");
    assert_eq!(recorded(&cp, &ns, &deploy), "2");
    let p = rt.block_on(pause_release(&api, &ns, &release)).unwrap();
    assert_eq!(p.replicas(), 2, "{p:?}");
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "0");

    // A failed upgrade with the override: `--atomic` rolls back to the last
    // deployed revision by the same three-way merge, which puts its count
    // back; the reconciler's repause command scales it to 0 again, the
    // record untouched.
    let paused = overrides(&cp, &ns, &release);
    assert_eq!(paused, ["--set", "replicaCount=0"]);
    let mut a: Vec<&str> = vec!["upgrade", "--install", &release, chart];
    a.extend(base);
    // Refused by the API server's validation of the Deployment.
    a.extend([
        "--wait",
        "--atomic",
        "--timeout",
        "60s",
        "--set",
        "revisionHistoryLimit=-1",
    ]);
    a.extend(paused.iter().map(String::as_str));
    let failed = helm.try_run(&a);
    assert!(
        failed
            .as_ref()
            .is_err_and(|e| e.contains("has been rolled back due to atomic being set")),
        "{failed:?}"
    );
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "2", "the rollback put the count back");
    let repause: Vec<String> =
        serde_json::from_value(helm_release_py("repause_command(a[0])", &[&plan_entry(&ns, &release)])).unwrap();
    assert_eq!(repause[0], "kubectl");
    cp.kubectl(&repause[1..].iter().map(String::as_str).collect::<Vec<_>>())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "0");
    assert_eq!(recorded(&cp, &ns, &deploy), "2");

    // The reconciler's upgrade of the paused release (a changed value, as a
    // minor upgrade's new chart and image tag change it), with its decision's
    // arguments: kept at 0, the record kept on the live Deployment.
    let paused = overrides(&cp, &ns, &release);
    assert_eq!(paused, ["--set", "replicaCount=0"]);
    upgrade(
        &["--wait", "--timeout", "120s", "--set", "podAnnotations.upgrade=two"],
        &paused,
    );
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "0", "the upgrade kept the pause");
    assert_eq!(recorded(&cp, &ns, &deploy), "2", "the record outlives the upgrade");

    // The resume after the upgrade gives back the recorded count; then the
    // decision gives nothing and the next upgrade keeps the chart's count.
    let r = rt.block_on(resume_release(&api, &ns, &release)).unwrap();
    assert_eq!(r.replicas(), 2, "{r:?}");
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "2");
    assert_eq!(recorded(&cp, &ns, &deploy), "");
    let after = overrides(&cp, &ns, &release);
    assert_eq!(after, Vec::<String>::new(), "resumed: not scaled to 0 again");
    upgrade(&["--set", "podAnnotations.upgrade=three"], &after);
    assert_eq!(spec_replicas(&cp, &ns, &deploy), "2");

    helm.run(&["uninstall", &release, "--namespace", &ns]);
}
