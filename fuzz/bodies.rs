//! The fuzz targets' bodies, one function per target: the fuzz binaries
//! (fuzz/fuzz_targets/*.rs, libFuzzer, `make fuzz`) and the corpus replay in
//! the ordinary test build (tests/it/fuzz_corpus.rs, `make test`) both
//! include this file, so a target is written once. Each takes any bytes and
//! must return without a panic, quickly, whatever they hold.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A target's body.
pub type Body = fn(&[u8]);

/// The names of the targets, as fuzz/Cargo.toml and fuzz/corpus/ name them.
#[allow(dead_code)]
pub const TARGETS: [(&str, Body); 7] = [
    ("archive", archive),
    ("cluster_yaml", cluster_yaml),
    ("kubeconfig", kubeconfig),
    ("lock", lock),
    ("plugin_yaml", plugin_yaml),
    ("schema", schema),
    ("values", values),
];

/// Chart archive reader: any bytes as a `.tgz`.
pub fn archive(data: &[u8]) {
    let _ = kube_aws::chart::archive::read_chart_archive(data, "fuzz.tgz", None);
}

/// cluster.yaml parser and validation.
pub fn cluster_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = kube_aws::config::parse_cluster(Path::new("."), Path::new("cluster.yaml"), text);
}

/// The kubeconfig `kubeconfig` merges into: any text merged with an entry
/// (the YAML guard runs first, as for every other YAML reader).
pub fn kubeconfig(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let entry = kube_aws::kubeconfig::Entry {
        context: "fuzz".into(),
        cluster: "fuzz".into(),
        user: "fuzz-admin".into(),
        server: "https://fuzz.example:6443".into(),
        ca_pem: "CA".into(),
        cert_pem: "CERT".into(),
        key_pem: "KEY".into(),
    };
    let _ = kube_aws::kubeconfig::merge("config", Some(text), &entry);
}

/// Index and lock parser: a Helm index read as a repository index (fast and
/// full paths) and as the work tree's lock, checked against a release.
pub fn lock(data: &[u8]) {
    use kube_aws::chart::index::{find_chart_version, parse_index};
    use kube_aws::chart::lock::parse_lock;
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse_index(text, "https://charts.example.com", "index.yaml");
    let _ = find_chart_version(text, "app", Some("~1.2"), "https://charts.example.com", "index.yaml");
    if let Ok(lock) = parse_lock(text, Path::new("charts-index/index.yaml")) {
        let _ = kube_aws::chart::check_lock(&lock, &lock_cluster().releases);
    }
}

fn lock_cluster() -> &'static kube_aws::config::Cluster {
    static C: OnceLock<kube_aws::config::Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let text = "clusterName: demo\nregion: us-west-2\ns3URI: s3://demo-bucket/kube-aws\ncharts:\n  - name: app\n    repo: https://charts.example.com\n    version: \"~1.2\"\n";
        // Repository charts only: a `path:` chart must exist in the work tree.
        kube_aws::config::parse_cluster(Path::new("."), Path::new("cluster.yaml"), text)
            .expect("the fuzz cluster parses")
    })
}

/// plugin.yaml loader with templates: the input is a plugin.yaml, then
/// (after a line `#---template---`) the text of its `values.yaml.tera`. Both
/// go into a copy of tests/fixtures/every-hook, whose cluster.yaml enables
/// the plugin `everything`.
pub fn plugin_yaml(data: &[u8]) {
    const SEP: &str = "\n#---template---\n";
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (manifest, template) = text.split_once(SEP).unwrap_or((text, ""));
    let t = plugin_tree();
    if std::fs::write(t.plugin.join("plugin.yaml"), manifest).is_err()
        || std::fs::write(t.plugin.join("values.yaml.tera"), template).is_err()
    {
        return;
    }
    let _ = kube_aws::plugin::resolve_plugins(&t.cluster);
}

struct Tree {
    _tmp: tempfile::TempDir,
    plugin: PathBuf,
    cluster: kube_aws::config::Cluster,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// tests/fixtures/every-hook, from the fuzz crate (fuzz/) or the main one.
fn every_hook_fixture() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        here.join("tests/fixtures/every-hook"),
        here.join("../tests/fixtures/every-hook"),
    ]
    .into_iter()
    .find(|p| p.is_dir())
    .expect("tests/fixtures/every-hook")
}

fn plugin_tree() -> &'static Tree {
    static T: OnceLock<Tree> = OnceLock::new();
    T.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        copy_dir(&every_hook_fixture(), tmp.path());
        let cluster = kube_aws::config::load_cluster(tmp.path()).expect("the fixture loads");
        Tree {
            plugin: tmp.path().join("plugins/everything"),
            _tmp: tmp,
            cluster,
        }
    })
}

/// A chart's values.schema.json and a values file: the input is the schema
/// (JSON), then after a line `---` the values (YAML).
pub fn schema(data: &[u8]) {
    use kube_aws::chart::archive::{ChartFiles, ChartMetadata};
    use kube_aws::chart::values::{check_release_values, ValuesLayer};
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (schema, values) = text.split_once("\n---\n").unwrap_or((text, "replicas: 1\n"));
    let Ok(schema) = serde_json::from_str::<serde_json::Value>(schema) else {
        return;
    };
    let Ok(layer) = ValuesLayer::from_yaml("fuzz", Path::new("values/fuzz.yaml"), values) else {
        return;
    };
    let chart = ChartFiles {
        metadata: ChartMetadata {
            api_version: Some("v2".into()),
            name: "fuzz".into(),
            version: "1.0.0".into(),
            app_version: None,
            kube_version: None,
            description: None,
            chart_type: None,
        },
        values: Some("replicas: 1\n".into()),
        schema: Some(schema),
        crds: Vec::new(),
    };
    let _ = check_release_values("fuzz", &chart, &[layer], "1.31");
}

/// A values file: read, merged as a user layer, coalesced and written back.
pub fn values(data: &[u8]) {
    use kube_aws::chart::values::{coalesce, merge_layers, to_yaml_document, ValuesLayer};
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(layer) = ValuesLayer::from_yaml("fuzz", Path::new("values/fuzz.yaml"), text) {
        let user = merge_layers(std::slice::from_ref(&layer));
        let merged = coalesce(&user, &layer.values);
        let _ = to_yaml_document(&merged);
    }
}
