//! Generated docs must match the code: docs/cluster-yaml.md is the Markdown
//! rendering of cluster.yaml's JSON Schema. Regenerate with
//! `kube-aws schema cluster --format markdown > docs/cluster-yaml.md`. The
//! node-side files' schemas (src/node/schema/, from src/render/node_files.rs)
//! are regenerated with `UPDATE_DOCS=1 cargo test --test it docs::`.

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

#[test]
fn node_file_schemas_are_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node/schema");
    let schemas = kube_aws::render::node_files::schemas();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, schema) in &schemas {
            std::fs::write(dir.join(name), kube_aws::render::node_files::pretty(schema)).unwrap();
        }
    }
    let mut stale = Vec::new();
    for (name, schema) in &schemas {
        let actual = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if actual != kube_aws::render::node_files::pretty(schema) {
            stale.push(*name);
        }
    }
    let committed: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let extra: Vec<&String> = committed
        .iter()
        .filter(|c| !schemas.iter().any(|(n, _)| n == c))
        .collect();
    assert!(
        stale.is_empty() && extra.is_empty(),
        "src/node/schema is stale ({stale:?}; not generated: {extra:?}): run `UPDATE_DOCS=1 cargo test --test it docs::`"
    );
}
