//! Runs the Python unit tests of the controllers' etcd tools
//! (src/node/kube_aws_node/etcd.py: lifecycle, stale members, backups,
//! restore) so `make test` runs them: src/node/tests/test_etcd.py under
//! recording fakes, and src/node/tests/test_etcd_real.py against three real
//! etcd members of the control-plane test bed (KUBE_AWS_TESTBED_BIN; with
//! KUBE_AWS_TESTBED=skip the real ones are skipped and the run says so).

mod common;

use std::process::Command;

#[test]
fn etcd_tools_python_unit_tests_pass() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut cmd = Command::new("python3");
    cmd.current_dir(root)
        .args([
            "-m",
            "unittest",
            "discover",
            "-v",
            "src/node/tests",
            "-p",
            "test_etcd*.py",
        ])
        .env_remove("KUBE_AWS_TESTBED_BIN")
        .env_remove("KUBE_AWS_ROOT");
    if let Some(bin) = common::testbed::bin_dir("etcd_tools_python_unit_tests_pass") {
        cmd.env("KUBE_AWS_TESTBED_BIN", bin);
    }
    let out = cmd.output().expect("python3 runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The run really ran the tests (discovery finding nothing is a failure too).
    let ran: usize = err
        .lines()
        .find_map(|l| l.strip_prefix("Ran ")?.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    assert!(ran >= 20, "only {ran} tests ran:\n{err}");
}
