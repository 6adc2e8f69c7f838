//! The real upstream charts of `$KUBE_AWS_SHARED_DATA/charts` as a work tree's
//! lock: each release's shared chart goes into the chart cache and a test lock
//! (`charts-index/index.yaml`) pins it, so kube-aws's own pipeline resolves
//! every release offline to exactly that archive. The shared charts are
//! packaged from upstream source, so their digests differ from the published
//! ones; the lock's URLs point nowhere (`https://shared-data.invalid/`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube_aws::chart::lock::source_ref;
use kube_aws::chart::ChartCache;
use serde_json::{json, Value};

/// `$KUBE_AWS_SHARED_DATA/charts`; panics (tests that need it never skip) when absent.
pub fn shared_charts() -> PathBuf {
    let data = std::env::var_os("KUBE_AWS_SHARED_DATA").map(PathBuf::from).unwrap_or_else(|| {
        panic!("KUBE_AWS_SHARED_DATA is not set: point it at the shared data (its charts/ holds the real upstream charts); this test does not skip")
    });
    let charts = data.join("charts");
    assert!(
        charts.join("index.yaml").is_file(),
        "{}: no index.yaml, so no real charts to check (KUBE_AWS_SHARED_DATA={})",
        charts.display(),
        data.display()
    );
    charts
}

/// The shared charts' index entry for `chart` at `version`.
pub fn shared_entry<'a>(index: &'a serde_yaml::Value, chart: &str, version: &str) -> Option<&'a serde_yaml::Value> {
    index["entries"][chart]
        .as_sequence()?
        .iter()
        .find(|e| e["version"].as_str() == Some(version))
}

/// Writes the test lock for the work tree `dir` (its cluster.yaml already
/// written) and stores each release's shared chart in `cache`. Returns each
/// release's archive in the cache, by release name.
pub fn lock_to_shared_charts(dir: &Path, cache: &ChartCache, charts: &Path) -> BTreeMap<String, PathBuf> {
    std::fs::create_dir_all(dir.join("charts-index")).unwrap();
    let index: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(charts.join("index.yaml")).unwrap()).unwrap();
    let releases = kube_aws::pipeline::load_releases(dir).unwrap_or_else(|e| panic!("{e}"));
    let mut entries: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut archives = BTreeMap::new();
    for r in &releases.releases {
        let version = r.version.as_deref().unwrap();
        let e = shared_entry(&index, &r.chart, version)
            .unwrap_or_else(|| panic!("{} {version} is not in {}", r.chart, charts.display()));
        let file = e["urls"][0].as_str().unwrap();
        let bytes = std::fs::read(charts.join(file)).unwrap();
        let (hex, path) = cache.store(&bytes).unwrap();
        assert_eq!(
            Some(hex.as_str()),
            e["digest"].as_str(),
            "{file}: digest differs from its index"
        );
        archives.insert(r.name.clone(), path);
        entries.entry(r.chart.clone()).or_default().push(json!({
            "apiVersion": e["apiVersion"].as_str().unwrap(),
            "name": r.chart,
            "version": version,
            "digest": hex,
            "created": "2026-11-30T00:00:00Z",
            "urls": [format!("https://shared-data.invalid/{file}")],
            "annotations": {
                "kube-aws.io/source": source_ref(&r.source),
                "kube-aws.io/release": r.name,
            },
        }));
    }
    let lock = json!({"apiVersion": "v1", "entries": entries});
    std::fs::write(
        dir.join("charts-index/index.yaml"),
        serde_yaml::to_string(&lock).unwrap(),
    )
    .unwrap();
    archives
}

/// A helm client tarball as get.helm.sh lays it out: `linux-amd64/helm`
/// holding `helm` (mode 0755), gzipped.
pub fn helm_tarball(helm: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    {
        let mut tar = tar::Builder::new(&mut gz);
        let mut header = tar::Header::new_gnu();
        header.set_size(helm.len() as u64);
        header.set_mode(0o755);
        header.set_mtime(0);
        header.set_cksum();
        tar.append_data(&mut header, "linux-amd64/helm", helm).unwrap();
        tar.finish().unwrap();
    }
    gz.finish().unwrap()
}

/// A helm client tarball for tests that publish but run no helm (moto):
/// `linux-amd64/helm` is a script that says so and fails. It goes into
/// `cache` as `up` would put a downloaded one (content-addressed, so under
/// its own sha256), and the returned cluster.yaml lines (`helm.binary`,
/// its URL pointing nowhere) make `up` and `update` take it from there
/// instead of downloading the pinned upstream release.
pub fn offline_helm(cache: &ChartCache) -> String {
    let bytes = helm_tarball(b"#!/bin/sh\necho 'a test stand-in: no helm runs here' >&2\nexit 1\n");
    let (hex, _) = cache.store(&bytes).unwrap();
    format!("helm:\n  binary: {{url: \"https://helm.invalid/helm-test-linux-amd64.tar.gz\", sha256: {hex}, version: v0.0.0-test}}\n")
}
