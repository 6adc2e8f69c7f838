//! Generated docs must match the code: docs/cluster-yaml.md is the Markdown
//! rendering of cluster.yaml's JSON Schema. Regenerate with
//! `kube-aws schema cluster --format markdown > docs/cluster-yaml.md`.

#[test]
fn cluster_yaml_reference_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cluster-yaml.md");
    let expected = kube_aws::config::cluster_reference();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "docs/cluster-yaml.md is stale: run `kube-aws schema cluster --format markdown > docs/cluster-yaml.md`"
    );
}

#[test]
fn plugin_yaml_reference_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plugin-yaml.md");
    let expected = kube_aws::plugin::plugin_reference();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "docs/plugin-yaml.md is stale: run `kube-aws schema plugin --format markdown > docs/plugin-yaml.md`"
    );
}
