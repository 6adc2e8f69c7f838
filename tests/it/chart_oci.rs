//! OCI charts against a real registry: Debian's docker-registry (CNCF
//! distribution 2.8) on 127.0.0.1, charts pushed by helm-python-sdk, then
//! locked and fetched by kube-aws through `oci://`.
//! This registry runs without auth; the anonymous bearer-token challenge is
//! tested against a scripted registry in tests/it/chart_fetch.rs.

use crate::common;

use std::path::Path;
use std::process::Command;

use assert_cmd::Command as Bin;
use serde_json::Value;

const REGISTRY: &str = "/usr/bin/docker-registry";

fn helm(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/helm_fixture.py");
    let out = Command::new(common::tool("python"))
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn lock_and_fetch_by_oci() {
    if !Path::new(REGISTRY).exists() {
        eprintln!("{REGISTRY} missing: run `make tools`; skipping");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let config = tmp.path().join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            tmp.path().join("store").display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(REGISTRY);
    cmd.arg("serve").arg(&config);
    let _registry = common::Server::start(cmd, port);

    let repo = tmp.path().join("repo");
    let digests = helm(&["make-repo", repo.to_str().unwrap()]);
    for v in ["0.1.0", "0.1.5", "0.2.0"] {
        let tgz = repo.join(format!("app-{v}.tgz"));
        helm(&["push", tgz.to_str().unwrap(), &format!("oci://127.0.0.1:{port}/charts")]);
    }

    let wt = tmp.path().join("wt");
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::write(
        wt.join("cluster.yaml"),
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://my-bucket/p\nplugins: {{aws-vpc-cni: {{enabled: false}}, aws-cloud-controller-manager: {{enabled: false}}}}\ncharts:\n  - {{name: web, oci: 'oci://127.0.0.1:{port}/charts/app', version: '~0.1'}}\n"
        ),
    )
    .unwrap();
    let cache = tmp.path().join("cache");
    let run = |args: &[&str]| {
        Bin::cargo_bin("kube-aws")
            .unwrap()
            .env("NO_COLOR", "1")
            .env("XDG_CACHE_HOME", &cache)
            .arg("--dir")
            .arg(&wt)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["charts", "lock"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lock = kube_aws::chart::load_lock(&wt).unwrap();
    let v = &lock.index.entries["app"][0];
    assert_eq!(v.version, "0.1.5");
    assert_eq!(
        format!("sha256:{}", v.digest_hex().unwrap()),
        digests["app-0.1.5.tgz"].as_str().unwrap(),
        "the OCI layer digest is Helm's archive digest"
    );
    assert_eq!(v.urls, vec![format!("oci://127.0.0.1:{port}/charts/app:0.1.5")]);

    let out = run(&["-o", "json", "charts", "fetch"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hex = v.digest_hex().unwrap();
    let cached = cache.join(format!("kube-aws/charts/sha256/{hex}.tgz"));
    assert_eq!(
        std::fs::read(cached).unwrap(),
        std::fs::read(repo.join("app-0.1.5.tgz")).unwrap()
    );

    // An unknown tag is a clear error.
    std::fs::write(
        wt.join("cluster.yaml"),
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://my-bucket/p\nplugins: {{aws-vpc-cni: {{enabled: false}}, aws-cloud-controller-manager: {{enabled: false}}}}\ncharts:\n  - {{name: web, oci: 'oci://127.0.0.1:{port}/charts/app', version: '~7'}}\n"
        ),
    )
    .unwrap();
    let out = run(&["charts", "lock", "--update"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no version") && err.contains("0.2.0"), "{err}");
}
