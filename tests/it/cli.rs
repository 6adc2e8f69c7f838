//! The command line: help, init, validate and schema, through the real binary.

use assert_cmd::Command;

fn kube_aws() -> Command {
    let mut c = Command::cargo_bin("kube-aws").unwrap();
    // An empty chart cache of its own, whatever the user's cache holds.
    let cache = std::env::temp_dir().join(format!("kube-aws-cli-test-cache-{}", std::process::id()));
    c.env("NO_COLOR", "1").env("XDG_CACHE_HOME", cache);
    c
}

fn stdout(args: &[&str]) -> String {
    let out = kube_aws().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help() {
    // No kube-aws-* program on PATH may join the "Plugin commands" section.
    let out = kube_aws().env("PATH", "").arg("--help").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}

#[test]
fn init_help() {
    insta::assert_snapshot!(stdout(&["init", "--help"]));
}

#[test]
fn schema_cluster() {
    let text = stdout(&["schema", "cluster"]);
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(schema["title"], "kube-aws cluster.yaml");
    assert_eq!(schema["additionalProperties"], false);
    insta::assert_snapshot!(text);
}

#[test]
fn init_then_validate() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = tmp.path().join("demo");
    let out = kube_aws()
        .current_dir(tmp.path())
        .args(["init", "demo", "--s3-uri", "s3://my-bucket/kube-aws"])
        .output()
        .unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!("init_stdout", String::from_utf8(out.stdout).unwrap());
    for d in ["values", "plugins", "charts-index"] {
        assert!(demo.join(d).is_dir(), "{d} missing");
    }
    let cluster = std::fs::read_to_string(demo.join("cluster.yaml")).unwrap();
    insta::assert_snapshot!("init_cluster_yaml", cluster);

    let out = kube_aws()
        .current_dir(tmp.path())
        .args(["--dir", "demo", "validate"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "demo/cluster.yaml: valid (cluster \"demo\": 1 controller(s), 1 node pool(s), 0 chart(s))",
            "plugins: aws-cloud-controller-manager, aws-vpc-cni, pod-identity-webhook (2 release(s) from plugins)",
            "charts: 2 locked, 0 checked against their chart",
            "not checked (chart not fetched yet; run `kube-aws charts fetch`): aws-cloud-controller-manager, aws-vpc-cni",
        ]
    );
    assert!(
        lines.iter().any(|l| l.starts_with("userdata/controller.stub: ")),
        "{stdout}"
    );

    let json = kube_aws()
        .current_dir(tmp.path())
        .args(["--dir", "demo", "-o", "json", "validate"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["nodePools"], serde_json::json!(["general"]));
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    kube_aws()
        .current_dir(tmp.path())
        .args(["init", "c1"])
        .assert()
        .success();
    std::fs::write(tmp.path().join("c1/cluster.yaml"), "clusterName: mine\n").unwrap();
    let out = kube_aws()
        .current_dir(tmp.path())
        .args(["init", "c1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: c1/cluster.yaml already exists (pass --force to overwrite it)\n"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("c1/cluster.yaml")).unwrap(),
        "clusterName: mine\n"
    );
    kube_aws()
        .current_dir(tmp.path())
        .args(["init", "c1", "--force"])
        .assert()
        .success();
    assert!(std::fs::read_to_string(tmp.path().join("c1/cluster.yaml"))
        .unwrap()
        .contains("clusterName: c1"));
}

#[test]
fn init_rejects_bad_options_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, expect) in [
        (
            vec!["init", "x", "--cluster-name", "Bad_Name"],
            "error: --cluster-name: \"Bad_Name\" is not a valid name",
        ),
        (
            vec!["init", "x", "--region", "mars-1"],
            "error: --region: \"mars-1\" is not a valid AWS region",
        ),
        (
            vec!["init", "x", "--s3-uri", "s3:/b"],
            "error: --s3-uri: \"s3:/b\" is not valid",
        ),
    ] {
        let out = kube_aws().current_dir(tmp.path()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.starts_with(expect), "{args:?}: {stderr}");
        assert!(!tmp.path().join("x/cluster.yaml").exists());
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = kube_aws().args(["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = kube_aws().args(["schema", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn no_color_flag_and_env_are_honoured() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(tmp.path())
        .args(["--no-color", "validate"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains('\u{1b}'));
}
