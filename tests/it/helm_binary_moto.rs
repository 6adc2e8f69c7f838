//! The helm client set in cluster.yaml (`helm.binary`, issue 36 §4) on moto
//! server: `up` downloads it over HTTP (a local server holding a real
//! tarball), checks its sha256 and publishes it with the charts at
//! `charts/<sha256>.tgz`, the object the addon plan names and the installer
//! reads (tests/it/installer.rs). A tarball whose sha256 differs from
//! cluster.yaml's is refused at `helm.binary.sha256`, located, before
//! anything is published.
//!
//! Not covered: the pinned upstream release (get.helm.sh is not reachable
//! here; its pin is the one the control-plane test bed builds helm at); a
//! node installing from the published copy on a real controller (the
//! installer tests do it with the fake aws CLI and on the control-plane bed).

use crate::common;

use common::charts::{lock_to_shared_charts, shared_charts};
use common::MotoEnv as Env;
use kube_aws::chart::ChartCache;
use serde_json::Value;

const BUCKET: &str = "kube-aws-helm";

fn cluster_yaml(kms: &str, url: &str, sha: &str) -> String {
    format!(
        "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
         worker:\n  nodePools:\n    - {{name: general, minSize: 1, maxSize: 3}}\n\
         plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n  \
         cluster-autoscaler: {{enabled: true}}\n\
         helm:\n  binary:\n    url: {url}\n    sha256: {sha}\n    version: v3.16.3\n"
    )
}

/// A helm tarball (`linux-amd64/helm`) in `dir`: its file name and sha256.
fn tarball(dir: &std::path::Path) -> (String, String) {
    let bytes = common::charts::helm_tarball(b"#!/bin/sh\nexit 1\n");
    let name = "helm-v3.16.3-linux-amd64.tar.gz";
    std::fs::write(dir.join(name), &bytes).unwrap();
    (name.to_string(), kube_aws::chart::cache::sha256_hex(&bytes))
}

#[test]
fn up_publishes_the_helm_client_with_the_charts_and_refuses_one_that_does_not_match() {
    let env = Env::new();
    let served = tempfile::tempdir().unwrap();
    let (name, sha) = tarball(served.path());
    let http = common::start_http(served.path());
    let url = format!("http://127.0.0.1:{}/{name}", http.port);
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    let cache = ChartCache::new(env.home.path().join("cache/kube-aws/charts"));

    // A sha256 that is not the tarball's: located, and nothing published.
    let wrong = "0".repeat(64);
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(&kms, &url, &wrong)).unwrap();
    lock_to_shared_charts(dir, &cache, &shared_charts());
    let up = env.kube_aws(dir, &["up"]);
    let out = common::output_text(&up);
    assert_eq!(up.status.code(), Some(1), "{out}");
    assert!(out.contains("cluster.yaml:15:13: helm.binary.sha256: "), "{out}");
    assert!(out.contains(&format!("has sha256 {sha}, not \"{wrong}\"")), "{out}");
    let listed = env.aws_json(&["s3api", "list-objects-v2", "--bucket", BUCKET]);
    assert!(listed.get("Contents").is_none(), "published: {listed}");
    assert!(
        !cache.contains(&wrong) && !cache.contains(&sha),
        "nothing enters the cache"
    );

    // The right one: downloaded, checked, published where the plan says.
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(&kms, &url, &sha)).unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", common::output_text(&up));
    let plan: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("rendered").join(kube_aws::aws::publish::ADDON_PLAN)).unwrap(),
    )
    .unwrap();
    let binary = &plan["helm"]["binary"];
    assert_eq!(binary["sha256"], sha.as_str());
    assert_eq!(binary["url"], url.as_str());
    let object = format!("s3://{BUCKET}/clusters/demo/charts/{sha}.tgz");
    assert_eq!(binary["object"], object.as_str());
    let got = tempfile::tempdir().unwrap();
    let copy = got.path().join("helm.tgz");
    env.aws(&["s3", "cp", "--only-show-errors", &object, &copy.display().to_string()]);
    assert_eq!(
        kube_aws::chart::cache::sha256_hex(&std::fs::read(&copy).unwrap()),
        sha,
        "the published copy is the tarball"
    );
}
