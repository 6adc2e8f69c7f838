//! Bad input for the built-in addons, through `kube-aws render`: dex with no
//! connector, an upstream connector without its client or `local` with one,
//! or an `http` issuer, and a chart Helm 2 cannot install in Helm v2
//! mode. Each exits 1 with a located error (snapshotted) and writes nothing.

use assert_cmd::Command;

const BASE: &str = "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/kube-aws\n";

/// Runs `kube-aws render` on `yaml`; returns the exit code, stderr, and the
/// files in the work tree afterwards (besides cluster.yaml).
fn render(yaml: &str) -> (i32, String, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.yaml"), yaml).unwrap();
    let out = Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .args(["render", "--cache-dir"])
        .arg(cache.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let written = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "cluster.yaml")
        .collect();
    (out.status.code().unwrap_or(-1), stderr, written)
}

macro_rules! bad {
    ($name:ident, $located_at:expr, $yaml:expr) => {
        #[test]
        fn $name() {
            let yaml: String = $yaml.into();
            let (code, stderr, written) = render(&yaml);
            assert_eq!(code, 1, "stderr: {stderr}");
            assert!(
                stderr.starts_with(&format!("error: {}", $located_at)),
                "not located at {}: {stderr}",
                $located_at
            );
            assert!(written.is_empty(), "render wrote {written:?}");
            insta::assert_snapshot!(stderr);
        }
    };
}

const DEX_OK: &str = "exposure: values, connector: github, connectorClientID: demo, connectorClientSecret: hunter2";

bad!(
    dex_without_a_connector,
    "cluster.yaml:5:3: plugins.dex: plugin \"dex\" needs parameter \"connector\"",
    format!("{BASE}plugins:\n  dex: {{enabled: true, issuerURL: https://dex.example.com, exposure: values}}\n")
);
bad!(
    dex_without_an_exposure,
    "cluster.yaml:5:3: plugins.dex: plugin \"dex\" needs parameter \"exposure\"",
    format!("{BASE}plugins:\n  dex: {{enabled: true, issuerURL: https://dex.example.com, connector: github, connectorClientID: demo, connectorClientSecret: hunter2}}\n")
);
bad!(
    dex_behind_a_load_balancer_without_its_certificate,
    "",
    format!("{BASE}plugins:\n  dex: {{enabled: true, issuerURL: https://dex.example.com, exposure: loadBalancer, connector: github, connectorClientID: demo, connectorClientSecret: hunter2}}\n")
);
bad!(
    dex_with_an_http_issuer,
    "cluster.yaml:5:",
    format!("{BASE}plugins:\n  dex: {{enabled: true, issuerURL: http://dex.example.com, {DEX_OK}}}\n")
);
bad!(
    dex_oidc_connector_without_its_issuer,
    "",
    format!("{BASE}plugins:\n  dex: {{enabled: true, issuerURL: https://dex.example.com, exposure: values, connector: oidc, connectorClientID: demo, connectorClientSecret: hunter2}}\n")
);
bad!(
    dex_github_connector_without_its_client,
    "",
    format!("{BASE}plugins:\n  dex: {{enabled: true, issuerURL: https://dex.example.com, exposure: values, connector: github}}\n")
);
bad!(
    dex_local_connector_with_an_upstream_client,
    "",
    format!("{BASE}plugins:\n  dex: {{enabled: true, issuerURL: https://dex.example.com, exposure: values, connector: local, connectorClientID: demo, connectorClientSecret: hunter2}}\n")
);
bad!(
    helm_v2_mode_refuses_a_v2_chart,
    "cluster.yaml:5:",
    format!("{BASE}helm:\n  version: 2\nplugins:\n  metrics-server: {{enabled: true}}\n")
);

#[test]
fn a_good_dex_renders() {
    let (code, stderr, written) = render(&format!(
        "{BASE}plugins:\n  dex: {{enabled: true, issuerURL: https://dex.example.com, {DEX_OK}}}\n"
    ));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(written, ["rendered"]);
}

/// `connector: local` (Dex's own password database) needs no upstream
/// client: Dex gets the password database and the password grant, and no
/// upstream connector.
#[test]
fn a_local_dex_renders_with_the_password_database() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        format!("{BASE}plugins:\n  dex: {{enabled: true, issuerURL: https://dex.example.com, exposure: values, connector: local}}\n"),
    )
    .unwrap();
    let out = Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .args(["render", "--cache-dir"])
        .arg(cache.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let values = std::fs::read_to_string(dir.path().join("rendered/addons/values/dex.yaml")).unwrap();
    let v: serde_yaml::Value = serde_yaml::from_str(&values).unwrap();
    assert_eq!(
        v["config"]["enablePasswordDB"],
        serde_yaml::Value::Bool(true),
        "{values}"
    );
    assert_eq!(v["config"]["oauth2"]["passwordConnector"], "local", "{values}");
    assert!(v["config"].get("connectors").is_none(), "{values}");
}

#[test]
fn helm_v2_mode_takes_v1_charts() {
    // aws-vpc-cni and aws-cloud-controller-manager (on by default) are apiVersion v1 charts.
    let (code, stderr, _) = render(&format!("{BASE}helm:\n  version: 2\n"));
    assert_eq!(code, 0, "{stderr}");
}
