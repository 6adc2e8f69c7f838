//! The node program `kube-aws-node` (src/node/kube_aws_node): its Python unit
//! tests (`python3 -m unittest discover src/node/tests`, with the tools
//! venv's python3: test_schema.py validates the goldens' node-side files
//! with its jsonschema), and a static check
//! that it runs on Python 3.9, Amazon Linux 2023's system python3 (`vermin
//! -t=3.9-`, from the tools venv, scripts/install-tools.sh). Among the unit
//! tests, src/node/tests/test_etcd_real.py runs the etcd tools against three
//! real etcd members of the control-plane test bed (KUBE_AWS_TESTBED_BIN; with
//! KUBE_AWS_TESTBED=skip they are skipped and the run says so). The program's
//! subcommands run end to end in tests/it/installer.rs, tests/it/node_bootstrap.rs
//! and tests/it/node_secrets.rs.

use crate::common;

use std::process::Command;

use crate::node_secrets::{mode, node, read, text, work_tree};

#[test]
fn the_node_programs_unit_tests_pass() {
    // The tools venv's python3: test_schema.py needs its jsonschema and PyYAML.
    let mut cmd = Command::new(common::tool("python3"));
    cmd.args(["-m", "unittest", "discover", "-v", "src/node/tests"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("KUBE_AWS_TESTBED_BIN")
        .env_remove("KUBE_AWS_ROOT");
    if let Some(bin) = common::testbed::bin_dir("the_node_programs_unit_tests_pass") {
        cmd.env("KUBE_AWS_TESTBED_BIN", bin);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let ran: usize = regex::Regex::new(r"Ran (\d+) tests")
        .unwrap()
        .captures(&err)
        .and_then(|c| c[1].parse().ok())
        .unwrap_or(0);
    assert!(ran >= 30, "{err}");
    // The shared secret-reference vectors and the scheduler are among them.
    for t in [
        "test_found_as_the_renderer_finds_them",
        "test_concurrency_bounds_the_starts_in_plan_order",
        "test_members_leader_removal_through_a_peer_and_stale_rules",
    ] {
        assert!(err.contains(t), "{t} did not run:\n{err}");
    }
    // The goldens' node-side files against their schemas ran, not skipped:
    // it needs the tools venv's jsonschema (src/node/tests/test_schema.py).
    let schema_ran = regex::Regex::new(r"test_every_golden_node_side_file_matches_its_schema \([^)]*\) \.\.\. ok")
        .unwrap()
        .is_match(&err);
    assert!(schema_ran, "test_schema.py did not run and pass:\n{err}");
}

#[test]
fn the_node_program_runs_on_python_3_9() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/node");
    let o = Command::new(common::tool("vermin"))
        .args(["-t=3.9-", "--violations", "--no-tips", "--eval-annotations", dir])
        .output()
        .unwrap();
    assert!(o.status.success(), "a construct needs Python > 3.9:\n{}", text(&o));
    // It did look at the program (the launcher has no .py suffix: checked by name).
    let o = Command::new(common::tool("vermin"))
        .args(["-t=3.9-", "--violations", "--no-tips", "--eval-annotations"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/src/node/kube-aws-node"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // And it fails on what 3.9 cannot run, so the check can fail.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.py");
    std::fs::write(
        &bad,
        "def f(x: int | None):\n    match x:\n        case _:\n            return 1\n",
    )
    .unwrap();
    let o = Command::new(common::tool("vermin"))
        .args(["-t=3.9-", "--violations", "--no-tips", "--eval-annotations"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success(), "vermin accepted 3.10 code:\n{}", text(&o));
}

/// The kubelet serving-certificate approver (`kube-aws-node csr-approver`):
/// its decision is a pure function of the CSR, its decoded request and the
/// cluster's running instances, unit-tested with requests the real openssl
/// makes (src/node/tests/test_csr_approver.py, run by tests/it/node_program.rs).
/// Here: the controller carries its service and timer, workers do not.
#[test]
fn the_csr_approver_runs_on_controllers_only() {
    let env = crate::common::MotoEnv::new();
    let tree = tempfile::tempdir().unwrap();
    work_tree(tree.path(), "arn:aws:kms:us-west-2:111122223333:key/none");
    let r = env.kube_aws(tree.path(), &["render"]);
    assert!(r.status.success(), "{}", text(&r));
    let c = node(tree.path(), "controller");
    let w = node(tree.path(), "worker-general");
    assert_eq!(
        read(c.path(), "opt/kube-aws/lib/kube_aws_node/csr_approver.py"),
        include_str!("../../src/node/kube_aws_node/csr_approver.py")
    );
    assert_eq!(mode(c.path(), "opt/kube-aws/bin/kube-aws-node"), 0o755);
    assert!(read(c.path(), "etc/systemd/system/kube-aws-csr-approver.service")
        .contains("ExecStart=/opt/kube-aws/bin/kube-aws-node csr-approver\n"));
    assert!(read(c.path(), "etc/systemd/system/kube-aws-csr-approver.timer").contains("OnUnitActiveSec"));
    assert!(!w.path().join("etc/systemd/system/kube-aws-csr-approver.timer").exists());
    // The program's dispatch knows it.
    let o = Command::new("python3")
        .arg(c.path().join("opt/kube-aws/bin/kube-aws-node"))
        .arg("csr-approver")
        .arg("--bad")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("usage: kube-aws-node csr-approver"), "{}", text(&o));
}
