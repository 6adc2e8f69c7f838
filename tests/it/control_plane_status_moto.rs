//! `kube-aws status`'s control-plane section on moto (issue 26): a cluster
//! `up` on moto; before any controller wrote its records, status says none is
//! recorded (no error, no warning); then the node program's own code writes
//! them to moto through the aws CLI (tests/support/control_plane_records.py:
//! upgrade.Upgrader.join upgrading 1.35.4 → 1.36.3, reconfigure's
//! Controller.status) and status shows the version, the upgrade and the
//! reconfiguration, text and `-o json`; a failed upgrade and a failed
//! reconfiguration are warnings with the step and the message; a malformed
//! object is named by its key. A wait that fails on a controller's FAILURE
//! signal ends with the failed upgrade record's step and message.
//!
//! Not covered here: no controller boots on moto, so the records are written
//! by the node program's code against test_upgrade.py's fake cluster (kubectl
//! and kubeadm) rather than by a controller's boot (tests/it/real_node/upgrade.rs
//! has the reconfiguration on real nodes); the node role's right to write
//! them is tests/it/node_iam_moto.rs's, from src/node/iam-calls.json.

use crate::common::{self, MotoEnv};

use std::path::Path;
use std::process::Command;

const BUCKET: &str = "kube-aws-cp-status";
const PREFIX: &str = "clusters/demo";

fn text(o: &std::process::Output) -> String {
    common::output_text(o)
}

/// The node program writes both records for `scenario` (upgraded, failed).
fn write_records(env: &MotoEnv, scenario: &str) {
    let root = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(common::tool("python"));
    env.apply(&mut cmd);
    cmd.env("KUBE_AWS_ROOT", root.path())
        .arg(repo.join("tests/support/control_plane_records.py"))
        .args([repo.to_str().unwrap(), BUCKET, PREFIX, scenario]);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// `status` and `status -o json`, both succeeding (warnings do not fail it).
fn status(env: &MotoEnv, dir: &Path) -> (String, serde_json::Value) {
    let st = env.kube_aws(dir, &["status"]);
    assert!(st.status.success(), "{}", text(&st));
    let t = String::from_utf8_lossy(&st.stdout).to_string();
    assert!(!text(&st).contains("panicked"), "{}", text(&st));
    let stj = env.kube_aws(dir, &["status", "-o", "json"]);
    assert!(stj.status.success(), "{}", text(&stj));
    let j: serde_json::Value = serde_json::from_slice(&stj.stdout).unwrap();
    (t, j["controlPlane"].clone())
}

/// The lines of the `control plane:` section.
fn section(t: &str) -> Vec<String> {
    t.lines()
        .skip_while(|l| *l != "control plane:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim_start().to_string())
        .collect()
}

/// `…, 5m ago …` → `…, AGE ago …`: ages depend on when the test ran.
fn without_ages(line: &str) -> String {
    regex::Regex::new(r", \d+[smhd]\d*[smh]? ago")
        .unwrap()
        .replace_all(line, ", AGE ago")
        .into_owned()
}

#[test]
fn status_shows_the_recorded_version_the_last_upgrade_and_reconfiguration() {
    let env = MotoEnv::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             worker:\n  nodePools:\n    - name: general\n      count: 1\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));

    // Nothing recorded yet: said plainly, no warning.
    let (t, j) = status(&env, dir);
    assert_eq!(
        section(&t),
        [
            "version: not recorded",
            "upgrade: no upgrade recorded",
            "reconfiguration: no reconfiguration recorded"
        ],
        "{t}"
    );
    assert!(!t.contains("warning: the control-plane"), "{t}");
    assert_eq!(j["upgrade"], serde_json::Value::Null, "{j}");
    assert_eq!(j["reconfiguration"], serde_json::Value::Null, "{j}");
    assert_eq!(j["warnings"], serde_json::json!([]), "{j}");

    // An upgrade that went through, and an applied reconfiguration.
    write_records(&env, "upgraded");
    let (t, j) = status(&env, dir);
    let lines: Vec<String> = section(&t).iter().map(|l| without_ages(l)).collect();
    assert_eq!(
        lines,
        [
            "version: 1.36.3",
            "upgrade: upgraded 1.35.4 → 1.36.3 on ip-10-0-0-5.ec2.internal, AGE ago",
            "reconfiguration: applied on ip-10-0-1-6.ec2.internal, AGE ago (configuration 4f2a4f2a4f2a)",
        ],
        "{t}"
    );
    assert!(
        t.contains("reconfiguration: applied on ip-10-0-1-6.ec2.internal, 5m ago"),
        "{t}"
    );
    assert!(!t.contains("warning: the control-plane"), "{t}");
    assert_eq!(j["version"], "1.36.3", "{j}");
    let u = &j["upgrade"];
    assert_eq!(
        serde_json::json!([
            u["phase"].clone(),
            u["from"].clone(),
            u["to"].clone(),
            u["step"].clone(),
            u["node"].clone()
        ]),
        serde_json::json!(["upgraded", "1.35.4", "1.36.3", "done", "ip-10-0-0-5.ec2.internal"]),
        "{j}"
    );
    assert!(u["ageSeconds"].as_i64().unwrap() < 600, "{j}");
    assert_eq!(j["reconfiguration"]["phase"], "applied", "{j}");
    assert_eq!(j["reconfiguration"]["instanceId"], "i-0ctl", "{j}");

    // A failed upgrade (kubeadm upgrade apply) and a failed reconfiguration: warnings.
    write_records(&env, "failed");
    let (t, j) = status(&env, dir);
    let lines = section(&t);
    assert_eq!(lines[0], "version: 1.35.4", "the version the control plane is at: {t}");
    assert!(
        without_ages(&lines[1]).starts_with(
            "upgrade: failed 1.35.4 → 1.36.3, step kubeadm-upgrade-apply on ip-10-0-0-5.ec2.internal, AGE ago: \
             kubeadm upgrade apply v1.36.3 exited 1 (see the boot log); kubeadm-config and kubelet-config are back \
             as they were (1.35.4)"
        ),
        "{t}"
    );
    assert!(
        lines[2].starts_with("reconfiguration: failed, step kube-apiserver on ip-10-0-1-6.ec2.internal"),
        "{t}"
    );
    assert!(
        t.contains(
            "\nwarning: the control-plane upgrade (1.35.4 → 1.36.3) failed at step kubeadm-upgrade-apply on \
             ip-10-0-0-5.ec2.internal: kubeadm upgrade apply v1.36.3 exited 1"
        ),
        "{t}"
    );
    assert!(
        t.contains("\nwarning: the control-plane reconfiguration failed at step kube-apiserver on ip-10-0-1-6"),
        "{t}"
    );
    assert_eq!(j["upgrade"]["phase"], "failed", "{j}");
    assert_eq!(j["upgrade"]["step"], "kubeadm-upgrade-apply", "{j}");
    assert!(
        j["upgrade"]["message"]
            .as_str()
            .unwrap()
            .contains("back as they were (1.35.4)"),
        "{j}"
    );
    assert_eq!(j["reconfiguration"]["phase"], "failed", "{j}");
    assert_eq!(j["warnings"].as_array().unwrap().len(), 2, "{j}");

    // A malformed object: named by its key, the rest of status answers.
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "not json").unwrap();
    env.aws(&[
        "s3api",
        "put-object",
        "--bucket",
        BUCKET,
        "--key",
        &format!("{PREFIX}/status/control-plane/reconfigure.json"),
        "--body",
        bad.path().to_str().unwrap(),
    ]);
    let (t, j) = status(&env, dir);
    assert!(
        t.contains(&format!(
            "  reconfiguration: cannot read: s3://{BUCKET}/{PREFIX}/status/control-plane/reconfigure.json is \
             not the reconfiguration record the controllers write: "
        )),
        "{t}"
    );
    assert!(t.contains("stack demo: CREATE_COMPLETE"), "{t}");
    assert!(
        j["reconfigurationError"]
            .as_str()
            .unwrap()
            .contains("status/control-plane/reconfigure.json"),
        "{j}"
    );
    assert_eq!(j["upgrade"]["phase"], "failed", "{j}");
}

/// `--wait`'s failure (AwsSource reading the record once a controller of the
/// operation failed): moto with CreationPolicy signals
/// (tests/support/moto_signals.py, create only: moto's updates complete at
/// once, so this follows `up`'s create where a real upgrade fails an
/// `update`; the decision is the same pure one,
/// src/aws/wait/tests/nodes.rs). The node program writes the failed upgrade
/// record; the controller's failure report is the documented shape
/// (docs/deploy.md, "The node failure report") put by the test, and the
/// FAILURE signal is the one the node sends. `up --wait` follows the create
/// to its rollback and its failure ends with the record's line.
#[test]
fn a_failed_controllers_upgrade_record_ends_the_waits_failure() {
    let env = MotoEnv::with_signals();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    // `up --wait` left running: the stack stays CREATE_IN_PROGRESS until the signal.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
    env.apply(&mut cmd);
    let up = cmd
        .arg("--dir")
        .arg(dir)
        .args(["up", "--wait", "--timeout", "2m"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let nested = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "no ControlPlane stack"
        );
        let mut ask = Command::new(common::tool("aws"));
        env.apply(&mut ask);
        let out = ask
            .args(["cloudformation", "describe-stack-resources", "--stack-name", "demo"])
            .output()
            .unwrap();
        let found = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|r| {
                r["StackResources"]
                    .as_array()?
                    .iter()
                    .find(|r| r["LogicalResourceId"] == "ControlPlane")
                    .and_then(|r| r["PhysicalResourceId"].as_str())
                    .map(str::to_string)
            });
        match found {
            Some(n) if !n.is_empty() => break n,
            _ => std::thread::sleep(std::time::Duration::from_millis(500)),
        }
    };
    let described = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", &nested]);
    let nested_name = described["Stacks"][0]["StackName"].as_str().unwrap().to_string();

    write_records(&env, "failed");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let report = serde_json::json!({"instanceId": "i-0ctl", "nodeName": "ip-10-0-0-5.ec2.internal",
        "role": "controller", "stack": nested_name, "asgLogicalId": "ControllerGroup",
        "step": "kubeadm-upgrade-apply", "exitCode": 1, "command": "kubernetes upgrade",
        "log": "[upgrade/apply] FATAL: the control plane is not healthy\n", "timestamp": now});
    let body = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(body.path(), report.to_string()).unwrap();
    env.aws(&[
        "s3api",
        "put-object",
        "--bucket",
        BUCKET,
        "--key",
        &format!("{PREFIX}/status/nodes/i-0ctl.json"),
        "--body",
        body.path().to_str().unwrap(),
    ]);
    env.aws(&[
        "cloudformation",
        "signal-resource",
        "--stack-name",
        &nested_name,
        "--logical-resource-id",
        "ControllerGroup",
        "--unique-id",
        "i-0ctl",
        "--status",
        "FAILURE",
    ]);

    let w = up.wait_with_output().unwrap();
    let t = text(&w);
    assert_eq!(w.status.code(), Some(3), "the stack failed: {t}");
    assert!(
        t.contains("node ip-10-0-0-5.ec2.internal (i-0ctl, controller) failed at step kubeadm-upgrade-apply"),
        "{t}"
    );
    assert!(
        t.contains(
            "\nerror:   the control-plane upgrade record (status/control-plane/upgrade.json): failed at step \
             kubeadm-upgrade-apply: kubeadm upgrade apply v1.36.3 exited 1 (see the boot log); kubeadm-config and \
             kubelet-config are back as they were (1.35.4)"
        ),
        "{t}"
    );
}
