//! Render: golden files of every artifact for two fixtures, the real validators
//! (cfn-lint, cloud-init schema, shellcheck, kubernetes-validate) on each,
//! determinism, data never reaching scripts, render errors, atomic writes.
//!
//! Not covered here: running the cloud-configs on a real Amazon Linux 2023 node
//! (`cloud-init single --file`, kubeadm, the S3 join handshake) or creating the
//! stacks in AWS; moto ignores wait conditions (see tests of the aws stage).
//!
//! Here: the goldens (their snapshots are `it__render__<fixture>__…`),
//! the layout and how it is written (atomically, by the library and the
//! CLI), determinism, the stubs' sizes. The validators and data never
//! reaching scripts: render/validators.rs; the addon plan (install order,
//! wait conditions, Helm v2, the pod identity webhook): render/plan.rs;
//! IAM and secrets (each role's secrets, least privilege, the backups'
//! scope): render/iam.rs; what an update replaces and in which order:
//! render/updates.rs; health checks, alarms and CloudFormation's quotas:
//! render/stacks.rs.

use crate::common;
use crate::render_fixtures;

use std::path::Path;
use std::process::Command;

use kube_aws::render::{self, write_rendered, RenderError, Rendered};
use render_fixtures::*;

mod iam;
mod plan;
mod stacks;
mod updates;
mod validators;

fn rendered(input: &render::RenderInput) -> Rendered {
    render::render(input).unwrap_or_else(|e| panic!("render failed: {e}"))
}

fn snapshot_all(fixture: &str, r: &Rendered) {
    let listing: Vec<String> = r
        .files
        .iter()
        .map(|(p, b)| format!("{p} ({} bytes)", b.len()))
        .collect();
    insta::assert_snapshot!(format!("{fixture}__files"), listing.join("\n"));
    for (path, bytes) in &r.files {
        let text = std::str::from_utf8(bytes).unwrap_or_else(|_| panic!("{path} is not UTF-8"));
        insta::assert_snapshot!(format!("{fixture}__{}", path.replace('/', "__")), text);
    }
}

#[test]
fn golden_minimal() {
    snapshot_all("minimal", &rendered(&minimal()));
}

#[test]
fn golden_full() {
    snapshot_all("full", &rendered(&full()));
}

#[test]
fn layout_is_the_documented_one() {
    let r = rendered(&full());
    for p in [
        "stacks/root.json",
        "stacks/network.json",
        "stacks/control-plane.json",
        "stacks/node-pool-general.json",
        "stacks/node-pool-spot-arm.json",
        "userdata/controller.stub",
        "userdata/controller.cloud-config",
        "userdata/worker-general.stub",
        "userdata/worker-spot-arm.cloud-config",
        "addons/plan.json",
        "addons/values/cert-manager.yaml",
        "addons/values/dex.yaml",
        "addons/tiller.yaml",
        "manifests/dex/rbac.yaml",
    ] {
        assert!(
            r.get(p).is_some(),
            "{p} missing; have {:?}",
            r.files.keys().collect::<Vec<_>>()
        );
    }
    assert!(
        rendered(&minimal()).get("addons/tiller.yaml").is_none(),
        "Tiller only in Helm v2 mode"
    );
}

#[test]
fn same_input_same_bytes() {
    for input in [minimal(), full(), generated(20, 5)] {
        assert_eq!(rendered(&input), rendered(&input.clone()));
    }
}

/// The write_files entries of a cloud-config, decoded: path -> content.
fn written_files(cloud_config: &str) -> Vec<(String, String)> {
    let doc: serde_yaml::Value = serde_yaml::from_str(cloud_config).unwrap();
    doc["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| {
            let content = String::from_utf8(crate::common::write_file_content(f)).unwrap();
            (f["path"].as_str().unwrap().to_string(), content)
        })
        .collect()
}

fn render_err(input: &render::RenderInput) -> String {
    match render::render(input) {
        Ok(_) => panic!("render should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn stubs_fit_and_sizes_are_reported() {
    let r = rendered(&full());
    let stubs = render::stub_sizes(&r);
    assert_eq!(stubs.len(), 3);
    for s in &stubs {
        assert!(s.size + render::STUB_SUBSTITUTION_ROOM <= 4096, "{s:?}");
    }
    let t = render::template_sizes(&r);
    assert_eq!(t.len(), 5);
    assert!(t.iter().all(|s| s.size > 0 && s.size < s.limit));
}

#[test]
fn write_rendered_replaces_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rendered");
    let r = rendered(&minimal());
    // An earlier render's output (it carries the marker) with a stale file in it.
    write_rendered(dir.path(), &out, &r).unwrap();
    std::fs::create_dir_all(out.join("stale")).unwrap();
    std::fs::write(out.join("stale/old.txt"), "old").unwrap();
    // `out` holds r's files, and nothing else (no temporary sibling) is left beside it.
    let holds_r_alone = || {
        assert_eq!(
            std::fs::read(out.join("addons/plan.json")).unwrap(),
            r.get("addons/plan.json").unwrap()
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    };
    write_rendered(dir.path(), &out, &r).unwrap();
    assert!(!out.join("stale").exists(), "old output is replaced as a whole");
    holds_r_alone();

    // A write that fails half-way (a file where a directory must go) leaves the previous output.
    let mut bad = r.clone();
    bad.files.insert("stacks/root.json/x".into(), b"x".to_vec());
    assert!(write_rendered(dir.path(), &out, &bad).is_err());
    holds_r_alone();
}

#[test]
fn a_failed_render_is_a_typed_error() {
    let mut input = minimal();
    input.cluster.s3_uri = "http://not-s3".into();
    assert!(matches!(render::render(&input), Err(RenderError::S3Uri { .. })));
}

#[test]
fn cli_render_writes_the_layout_and_is_repeatable() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("demo");
    let bin = || {
        let mut c = assert_cmd::Command::cargo_bin("kube-aws").unwrap();
        c.env("NO_COLOR", "1");
        c
    };
    bin().arg("init").arg(&tree).assert().success();
    let out = bin().arg("--dir").arg(&tree).arg("render").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("control-plane.json"), "{stdout}");
    let plan = std::fs::read(tree.join("rendered/addons/plan.json")).unwrap();
    assert!(tree.join("rendered/userdata/worker-general.stub").is_file());

    let other = dir.path().join("elsewhere");
    let out = bin()
        .arg("--dir")
        .arg(&tree)
        .args(["-o", "json", "render", "--output-dir"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "stacks/root.json"));
    assert_eq!(
        std::fs::read(other.join("addons/plan.json")).unwrap(),
        plan,
        "same tree, same bytes"
    );
}

fn stack(r: &Rendered, name: &str) -> serde_json::Value {
    serde_json::from_slice(r.get(&format!("stacks/{name}.json")).unwrap()).unwrap()
}
