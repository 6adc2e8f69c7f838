//! Kubernetes upgrades against moto server: `up` records the running version
//! in the root stack (`KubernetesVersion`); `update` and `validate --stack`
//! refuse a skipped minor, a downgrade and a patch the version table does not
//! list, naming the versions allowed next, and change nothing; an allowed
//! upgrade moves the record.
//!
//! Not covered here: no node boots on moto, so nothing runs kubeadm (the
//! node's upgrade is src/node/tests/test_upgrade.py and
//! tests/it/node_bootstrap.rs; on real nodes, tests/it/real_node/upgrade.rs
//! has the reconfiguration, and the upgrade needs a second Kubernetes
//! version in the node bed);
//! moto completes an update at once, so the order in which CloudFormation
//! updates the nested stacks is checked in the live template's DependsOn,
//! not in time.
//!
//! A version change comes alone: mixed with another change it is refused
//! before anything is published, and applied in two updates it goes
//! through, the second with rollback disabled (as the preview says: moto
//! 5.2.5 reads no DisableRollback from ExecuteChangeSet, and never fails or
//! rolls back an update), so the stopped states (UPDATE_FAILED resumed by `update`,
//! UPDATE_ROLLBACK_FAILED refused with `continue-update-rollback`) are
//! covered from recorded events (src/aws/wait/recovery/tests.rs) and the
//! decisions by src/aws/lifecycle/version_change.rs's tests.

use crate::common;

use std::path::Path;

use common::output_text as text;
use common::MotoEnv as Env;
use common::MotoTree;
use serde_json::Value;

const BUCKET: &str = "kube-aws-upgrade";
const CLUSTER: &str = "demo";

fn cluster_yaml(kms: &str, version: &str) -> String {
    cluster_yaml_with(kms, version, 1)
}

/// `spot` is the pool whose size the mixed-change test changes.
fn cluster_yaml_with(kms: &str, version: &str, spot: u32) -> String {
    // aws-vpc-cni's chart is on the internet, out of reach here.
    format!(
        "clusterName: {CLUSTER}\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
         kubernetesVersion: \"{version}\"\n\
         controller:\n  count: 3\n\
         worker:\n  nodePools:\n    - name: general\n      count: 1\n    - name: spot\n      count: {spot}\n\
         plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
    )
}

/// A cluster `up` at `version` on a fresh moto; the work tree and the KMS key.
fn cluster_at(env: &Env, version: &str) -> (tempfile::TempDir, String) {
    let MotoTree { tree, kms } = env.work_tree(&[BUCKET]);
    std::fs::write(tree.path().join("cluster.yaml"), cluster_yaml(&kms, version)).unwrap();
    let up = env.kube_aws(tree.path(), &["up", "--wait", "--timeout", "3m"]);
    assert!(up.status.success(), "{}", text(&up));
    (tree, kms)
}

fn recorded(env: &Env) -> String {
    let s = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]);
    s["Stacks"][0]["Parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ParameterKey"] == "KubernetesVersion")
        .and_then(|p| p["ParameterValue"].as_str())
        .unwrap_or_else(|| panic!("no KubernetesVersion parameter: {s}"))
        .to_string()
}

fn set_version(dir: &Path, kms: &str, version: &str) {
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(kms, version)).unwrap();
}

/// `update --yes` and `validate --stack` both refuse, saying `why` and
/// `allowed` (the versions it names); the stack keeps its record and template.
fn refused(env: &Env, dir: &Path, why: &str, allowed: &str) {
    let before = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]);
    for args in [&["update", "--yes"][..], &["validate", "--stack"][..]] {
        let out = env.kube_aws(dir, args);
        let t = text(&out);
        assert!(!out.status.success(), "{args:?}: {t}");
        assert!(t.contains(why), "{args:?}: {t}");
        assert!(t.contains(allowed), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{t}");
    }
    let after = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]);
    assert_eq!(before["Stacks"][0]["Parameters"], after["Stacks"][0]["Parameters"]);
    assert_eq!(before["Stacks"][0]["StackStatus"], after["Stacks"][0]["StackStatus"]);
}

#[test]
fn upgrade_refuses_a_skipped_minor() {
    let env = Env::new();
    let (tree, kms) = cluster_at(&env, "1.35");
    assert_eq!(recorded(&env), "1.35.8");
    set_version(tree.path(), &kms, "1.37");
    refused(
        &env,
        tree.path(),
        "\"1.37\" (1.37.2) skips a minor",
        "allowed next versions: 1.36.1, 1.36.3, 1.36.4, 1.36.5",
    );
    assert_eq!(recorded(&env), "1.35.8");
}

#[test]
fn upgrade_refuses_a_downgrade_after_an_upgrade() {
    let env = Env::new();
    let (tree, kms) = cluster_at(&env, "1.35");
    // An allowed minor upgrade moves the record, and the preview says it.
    set_version(tree.path(), &kms, "1.36.1");
    let ok = env.kube_aws(tree.path(), &["validate", "--stack"]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(
        text(&ok).contains("Kubernetes 1.35.8 → 1.36.1 is allowed"),
        "{}",
        text(&ok)
    );
    let upd = env.kube_aws(tree.path(), &["update", "--yes", "--wait", "--timeout", "3m"]);
    assert!(upd.status.success(), "{}", text(&upd));
    assert!(text(&upd).contains("1.35.8 → 1.36.1"), "{}", text(&upd));
    assert_eq!(recorded(&env), "1.36.1");
    // Back to 1.35: refused.
    set_version(tree.path(), &kms, "1.35");
    refused(
        &env,
        tree.path(),
        "older than the running 1.36.1: kube-aws never downgrades",
        "allowed next versions: 1.36.3, 1.36.4, 1.36.5, 1.37.2",
    );
    assert_eq!(recorded(&env), "1.36.1");
}

#[test]
fn upgrade_refuses_an_unknown_patch() {
    let env = Env::new();
    let (tree, kms) = cluster_at(&env, "1.35");
    set_version(tree.path(), &kms, "1.36.2");
    // Refused when cluster.yaml is loaded, with its position.
    refused(
        &env,
        tree.path(),
        "cluster.yaml:5:20: kubernetesVersion: Kubernetes 1.36.2 is not in kube-aws's version table",
        "known 1.36 patches: 1.36.1, 1.36.3, 1.36.4, 1.36.5",
    );
    assert_eq!(recorded(&env), "1.35.8");
}

fn live_root(env: &Env) -> Value {
    let t = env.aws_json(&["cloudformation", "get-template", "--stack-name", CLUSTER]);
    match &t["TemplateBody"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    }
}

#[test]
fn upgrade_order_control_plane_then_pools_then_addons() {
    let env = Env::new();
    let (tree, kms) = cluster_at(&env, "1.35");
    set_version(tree.path(), &kms, "1.36");
    let upd = env.kube_aws(tree.path(), &["update", "--yes", "--wait", "--timeout", "3m"]);
    assert!(upd.status.success(), "{}", text(&upd));
    let out = String::from_utf8_lossy(&upd.stdout).to_string();
    assert!(
        out.contains(
            "upgrade: control plane 1.35.8 → 1.36.5 (3 controllers, one at a time: the first runs kubeadm upgrade apply), \
             then pools general, spot (each node replaced, one at a time), then the addons"
        ),
        "{out}"
    );
    assert_eq!(recorded(&env), "1.36.5");
    // The live root template: each pool stack waits for the control-plane
    // stack, and every addon wait condition for both.
    let root = live_root(&env);
    let res = root["Resources"].as_object().unwrap();
    for pool in ["NodePoolGeneral", "NodePoolSpot"] {
        assert_eq!(res[pool]["DependsOn"], serde_json::json!(["ControlPlane"]), "{pool}");
    }
    // The plan the controllers read names the version its addons wait for,
    // and each release's wait condition is in the root stack after the
    // pools. (This tree has no release: every chart is out of reach here;
    // render::plan::install_order_and_wait_conditions checks a plan with four.)
    let plan: Value =
        serde_json::from_slice(&std::fs::read(tree.path().join("rendered/addons/plan.json")).unwrap()).unwrap();
    assert_eq!(plan["kubernetesVersion"], "1.36.5");
    let releases = plan["releases"].as_array().unwrap();
    let wcs: Vec<&Value> = res
        .values()
        .filter(|r| r["Type"] == "AWS::CloudFormation::WaitCondition")
        .collect();
    assert_eq!(wcs.len(), releases.len());
    for wc in wcs {
        let deps = wc["DependsOn"].as_array().unwrap();
        assert_eq!(deps[..3], ["ControlPlane", "NodePoolGeneral", "NodePoolSpot"], "{wc}");
    }
    // The control-plane stack itself has no wait condition left.
    let cp = env.aws_json(&["cloudformation", "describe-stack-resources", "--stack-name", CLUSTER]);
    assert!(
        cp["StackResources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["LogicalResourceId"] == "ControlPlane"),
        "{cp}"
    );
}

fn objects(env: &Env) -> Vec<String> {
    let out = env.aws_json(&["s3api", "list-objects-v2", "--bucket", BUCKET]);
    let mut keys: Vec<String> = out["Contents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["Key"].as_str().map(str::to_string))
        .collect();
    keys.sort();
    keys
}

/// A version change with another change (a pool's size) is refused before
/// anything is published, naming what else changes and the two ways on;
/// the other change first, then the version alone, both go through, and
/// the version change says it runs with rollback disabled.
#[test]
fn upgrade_refuses_a_version_change_mixed_with_other_changes() {
    let env = Env::new();
    let (tree, kms) = cluster_at(&env, "1.35");
    let write = |version: &str, spot: u32| {
        std::fs::write(tree.path().join("cluster.yaml"), cluster_yaml_with(&kms, version, spot)).unwrap()
    };
    let stack = || env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER])["Stacks"][0].clone();
    let (before, published) = (stack(), objects(&env));
    write("1.36", 2);
    let out = env.kube_aws(tree.path(), &["update", "--yes"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("update refused, nothing was published or changed: kubernetesVersion 1.35.8 → 1.36.5 comes with other changes: stack NodePoolSpot"),
        "{t}"
    );
    assert!(
        t.contains("set kubernetesVersion: \"1.35.8\" in cluster.yaml and run `kube-aws update`"),
        "{t}"
    );
    assert!(t.contains("or the version first: undo the other changes"), "{t}");
    assert!(!t.contains("panicked"), "{t}");
    // Nothing published, nothing changed.
    assert_eq!(objects(&env), published);
    let after = stack();
    assert_eq!(before["Parameters"], after["Parameters"]);
    assert_eq!(before["StackStatus"], after["StackStatus"]);
    // The other change first, at the running version: an ordinary update.
    write("1.35.8", 2);
    let other = env.kube_aws(tree.path(), &["update", "--yes", "--wait", "--timeout", "3m"]);
    assert!(other.status.success(), "{}", text(&other));
    assert!(!text(&other).contains("rollback disabled"), "{}", text(&other));
    assert_eq!(recorded(&env), "1.35.8");
    // Then the version alone: rollback disabled.
    write("1.36", 2);
    let upgrade = env.kube_aws(tree.path(), &["update", "--yes", "--wait", "--timeout", "3m"]);
    let t = text(&upgrade);
    assert!(upgrade.status.success(), "{t}");
    assert!(t.contains("upgrade: control plane 1.35.8 → 1.36.5"), "{t}");
    assert!(
        t.contains("rollback disabled: a failure stops the update where it is (UPDATE_FAILED)"),
        "{t}"
    );
    assert_eq!(recorded(&env), "1.36.5");
}
