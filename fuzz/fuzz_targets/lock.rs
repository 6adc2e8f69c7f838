//! Index and lock parser: a Helm index read as a repository index (fast and
//! full paths) and as the work tree's lock, checked against a release.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

use kube_aws::chart::index::{find_chart_version, parse_index};
use kube_aws::chart::lock::parse_lock;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse_index(text, "https://charts.example.com", "index.yaml");
    let _ = find_chart_version(text, "app", Some("~1.2"), "https://charts.example.com", "index.yaml");
    if let Ok(lock) = parse_lock(text, Path::new("charts-index/index.yaml")) {
        let cluster = releases();
        let _ = kube_aws::chart::check_lock(&lock, &cluster.releases);
    }
});

fn releases() -> &'static kube_aws::config::Cluster {
    static C: std::sync::OnceLock<kube_aws::config::Cluster> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let text = "clusterName: demo\nregion: us-west-2\ns3URI: s3://demo-bucket/kube-aws\ncharts:\n  - name: app\n    repo: https://charts.example.com\n    version: \"~1.2\"\n";
        // Repository charts only: a `path:` chart must exist in the work tree.
        kube_aws::config::parse_cluster(Path::new("."), Path::new("cluster.yaml"), text).expect("the fuzz cluster parses")
    })
}
