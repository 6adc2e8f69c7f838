//! The example cluster (`init --example`, the README's main job): it validates
//! and renders offline, and every artifact passes the real validators:
//! cfn-lint (0 errors), `cloud-init schema`, shellcheck and kubernetes-validate.
//! Not covered here: that the charts install on a real cluster (no Kubernetes
//! API server runs on this machine; see tests/render.rs for the installer run
//! against recording fakes).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn kube_aws(cwd: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", cache)
        .args(args)
        .output()
        .unwrap()
}

fn files_under(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn example_validates_renders_and_passes_every_validator() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let out = kube_aws(tmp.path(), &cache, &["init", "--example", "example"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["values/metrics-server.yaml", "values/external-dns.yaml"] {
        assert!(tmp.path().join("example").join(f).is_file(), "{f} missing");
    }
    let out = kube_aws(tmp.path(), &cache, &["--dir", "example", "validate"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let out = kube_aws(tmp.path(), &cache, &["--dir", "example", "render"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "stacks:",
        "root.json",
        "node-pool-general.json",
        "controller.stub",
        "addons, in install order:",
        // The bootstrap releases first: the cloud controller and the CNI.
        "1. aws-cloud-controller-manager aws-cloud-controller-manager 0.0.11 in kube-system (bootstrap)",
        "2. aws-vpc-cni              aws-vpc-cni 1.22.4 in kube-system (bootstrap)",
        "metrics-server 3.13.1",
    ] {
        assert!(summary.contains(needle), "summary lacks {needle:?}:\n{summary}");
    }
    let rendered = tmp.path().join("example/rendered");

    let stacks = files_under(&rendered.join("stacks"), ".json");
    assert_eq!(stacks.len(), 5, "{stacks:?}");
    let lint = Command::new(common::tool("cfn-lint"))
        .args(["--non-zero-exit-code", "error"])
        .args(&stacks)
        .output()
        .unwrap();
    assert!(
        lint.status.success(),
        "cfn-lint errors:\n{}",
        String::from_utf8_lossy(&lint.stdout)
    );

    let configs = files_under(&rendered.join("userdata"), ".cloud-config");
    assert_eq!(configs.len(), 3, "{configs:?}");
    for c in &configs {
        let out = Command::new("cloud-init")
            .args(["schema", "--config-file"])
            .arg(c)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}{}",
            c.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for stub in files_under(&rendered.join("userdata"), ".stub") {
        assert!(
            std::fs::metadata(&stub).unwrap().len() <= 4096,
            "{} over 4 KiB",
            stub.display()
        );
    }

    let scripts = files_under(&rendered, ".sh");
    assert!(!scripts.is_empty());
    let out = Command::new("shellcheck")
        .args(["-S", "warning"])
        .args(&scripts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shellcheck:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let manifests = files_under(&rendered.join("manifests"), ".yaml");
    assert!(
        !manifests.is_empty(),
        "the example enables cluster-dump, which ships a manifest"
    );
    let out = Command::new(common::tool("kubernetes-validate"))
        .args(["--strict", "-k", "1.35.0"])
        .args(&manifests)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubernetes-validate:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn render_is_deterministic_and_atomic() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    assert!(kube_aws(tmp.path(), &cache, &["init", "--example", "ex"])
        .status
        .success());
    let read_all = |dir: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        files_under(dir, "")
            .into_iter()
            .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
            .collect()
    };
    assert!(kube_aws(tmp.path(), &cache, &["--dir", "ex", "render"])
        .status
        .success());
    let first = read_all(&tmp.path().join("ex/rendered"));
    assert!(kube_aws(tmp.path(), &cache, &["--dir", "ex", "render"])
        .status
        .success());
    assert_eq!(
        first,
        read_all(&tmp.path().join("ex/rendered")),
        "same input, different bytes"
    );

    // A failing render leaves the previous output untouched.
    let cluster = tmp.path().join("ex/cluster.yaml");
    let text = std::fs::read_to_string(&cluster).unwrap();
    std::fs::write(
        &cluster,
        text.replace("issuerURL: https://dex.example.com", "issuerURL: http://insecure"),
    )
    .unwrap();
    let out = kube_aws(tmp.path(), &cache, &["--dir", "ex", "render"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("issuerURL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(first, read_all(&tmp.path().join("ex/rendered")));
}
