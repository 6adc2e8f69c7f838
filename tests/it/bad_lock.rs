//! Errors that named a file but no position (issue 30, item 6), through
//! `kube-aws validate`: a malformed `charts-index/index.yaml` (no
//! `apiVersion`, wrong types), a chart that is not locked or whose locked
//! version no longer matches (blamed on cluster.yaml's chart entry, where the
//! fix is), and a values file whose top level is a list. Each exits 1 at the
//! `file:line:col` of the value to change; the exact text is snapshotted.

use crate::common::validate_work_tree as validate;

const CLUSTER: &str = "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/kube-aws\ncharts:\n  - name: a\n    repo: https://c.example.com\n    version: \"1.0.0\"\n";

/// A lock holding chart `a` at `version`.
fn lock(version: &str) -> String {
    format!(
        "apiVersion: v1\nentries:\n  a:\n    - name: a\n      version: {version}\n      digest: \"{}\"\n      urls: [https://c.example.com/a-{version}.tgz]\n      annotations: {{kube-aws.io/source: \"repo:https://c.example.com\", kube-aws.io/release: a}}\n",
        "0".repeat(64)
    )
}

macro_rules! bad {
    ($name:ident, $located_at:expr, $files:expr) => {
        #[test]
        fn $name() {
            let files: Vec<(&str, String)> = $files;
            let files: Vec<(&str, &str)> = files.iter().map(|(n, b)| (*n, b.as_str())).collect();
            let (code, stderr) = validate(CLUSTER, &files);
            assert_eq!(code, 1, "stderr: {stderr}");
            assert!(
                stderr.starts_with(&format!("error: {}", $located_at)),
                "not located at {}: {stderr}",
                $located_at
            );
            insta::assert_snapshot!(stderr);
        }
    };
}

bad!(
    lock_without_api_version,
    "charts-index/index.yaml:2:1:",
    vec![("charts-index/index.yaml", "# the lock\nentries: {}\n".into())]
);
bad!(
    lock_api_version_not_a_string,
    "charts-index/index.yaml:1:13:",
    vec![("charts-index/index.yaml", "apiVersion: [v1]\nentries: {}\n".into())]
);
bad!(
    lock_entries_wrong_type,
    "charts-index/index.yaml:3:6:",
    vec![("charts-index/index.yaml", "apiVersion: v1\nentries:\n  a: 3\n".into())]
);
bad!(
    chart_not_locked,
    "cluster.yaml:5:5:",
    vec![("charts-index/index.yaml", "apiVersion: v1\nentries: {}\n".into())]
);
bad!(
    locked_version_does_not_match,
    "cluster.yaml:7:14:",
    vec![("charts-index/index.yaml", lock("2.0.0"))]
);
bad!(
    values_top_level_list,
    "values/a.yaml:2:1:",
    vec![
        ("charts-index/index.yaml", lock("1.0.0")),
        ("values/a.yaml", "# values\n- a\n- b\n".into())
    ]
);
