//! The index parser against every real repository index in ../shared/data:
//! the fast pre-scan agrees with a full serde_yaml parse, one-chart lookups
//! agree with the full parse, and the real-data quirks are handled.
//! Not covered here: speed and memory (see scripts/bench.sh).

use crate::common;

use kube_aws::chart::index::{find_chart, parse_index, parse_index_full};
use kube_aws::chart::{resolve_version, ChartVersion};

fn index_files(sub: &str) -> Vec<std::path::PathBuf> {
    let Some(data) = common::shared_data() else {
        return Vec::new();
    };
    let mut files: Vec<_> = std::fs::read_dir(data.join(sub))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn fast_parse_equals_full_parse_on_every_real_index() {
    let mut files = index_files("indexes");
    files.extend(index_files("addon-indexes"));
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.display().to_string();
        let fast = parse_index(&text, "https://repo.example/charts", &name).unwrap();
        let versions: usize = fast.entries.values().map(Vec::len).sum();
        assert!(versions > 0, "{name}");
        // The merged index is the eight others together; a full serde_yaml parse
        // of 16 MB in a debug build is slow, so it is checked by counts instead.
        if f.file_name().unwrap() == "merged.index.yaml" {
            assert_eq!(fast.entries.len(), 310, "{name}");
            assert_eq!(versions + fast.warnings.len(), 16_500, "{name}: {:?}", fast.warnings);
            continue;
        }
        let full = parse_index_full(&text, "https://repo.example/charts", &name).unwrap();
        assert_eq!(fast, full, "{name}");
        // One-chart lookups give what the full parse gives, for the first, a
        // middle and the last chart.
        let names: Vec<&String> = full.entries.keys().collect();
        for n in [names[0], names[names.len() / 2], names[names.len() - 1]] {
            let found = find_chart(&text, n, "https://repo.example/charts", &name).unwrap();
            assert_eq!(found.versions.as_ref(), full.entries.get(n), "{name}: {n}");
        }
    }
}

fn lookup(file: &str, chart: &str) -> Vec<ChartVersion> {
    let Some(data) = common::shared_data() else {
        return Vec::new();
    };
    let text = std::fs::read_to_string(data.join(file)).unwrap();
    find_chart(&text, chart, "https://argoproj.github.io/argo-helm", file)
        .unwrap()
        .versions
        .unwrap_or_else(|| panic!("{chart} not in {file}"))
}

#[test]
fn real_data_quirks() {
    if common::shared_data().is_none() {
        return;
    }
    // kubeshop's `common` became `common-kubeshop` in the merged index; its
    // versions still say `name: common`, and we keep them under the key.
    let common = lookup("indexes/merged.index.yaml", "common-kubeshop");
    assert!(!common.is_empty());
    assert!(common.iter().all(|v| v.name == "common"));
    // Duplicate versions with different digests: both kept, resolution picks one.
    let alloy = lookup("indexes/grafana__helm-charts.index.yaml", "alloy-operator");
    let dups: Vec<_> = alloy.iter().filter(|v| v.version == "0.2.6-beta.2").collect();
    assert!(dups.len() >= 2, "{}", dups.len());
    assert_ne!(dups[0].digest, dups[1].digest);
    assert_eq!(
        resolve_version(&alloy, Some("0.2.6-beta.2")).unwrap().version,
        "0.2.6-beta.2"
    );
    // Deprecated entries and mixed apiVersions parse.
    let argo = lookup("indexes/argoproj__argo-helm.index.yaml", "argo");
    assert!(argo.iter().any(|v| v.deprecated));
    let jenkins = lookup("indexes/jenkinsci__helm-charts.index.yaml", "jenkins");
    let apis: std::collections::BTreeSet<_> = jenkins.iter().map(|v| v.api_version.clone()).collect();
    assert!(apis.contains("v1") && apis.contains("v2"), "{apis:?}");
    let eks = lookup("indexes/aws__eks-charts.index.yaml", "aws-vpc-cni");
    // Newest stable by semver, not by file order.
    assert_eq!(resolve_version(&eks, None).unwrap().version, "1.22.4");
}

#[test]
fn oci_urls_inside_an_http_index_are_kept() {
    let Some(data) = common::shared_data() else { return };
    let text = std::fs::read_to_string(data.join("indexes/kubeshop__helm-charts.index.yaml")).unwrap();
    let index = parse_index(&text, "https://kubeshop.github.io/helm-charts", "kubeshop").unwrap();
    let oci: Vec<_> = index
        .entries
        .values()
        .flatten()
        .filter(|v| v.urls.iter().any(|u| u.starts_with("oci://")))
        .collect();
    assert!(!oci.is_empty(), "expected oci:// urls in the kubeshop index");
}

#[test]
fn argo_relative_urls_resolve_against_the_repository() {
    let Some(data) = common::shared_data() else { return };
    let text = std::fs::read_to_string(data.join("indexes/argoproj__argo-helm.index.yaml")).unwrap();
    let index = parse_index(&text, "https://argoproj.github.io/argo-helm", "argo").unwrap();
    let all_absolute = index
        .entries
        .values()
        .flatten()
        .flat_map(|v| &v.urls)
        .all(|u| u.contains("://"));
    assert!(all_absolute);
}

#[test]
fn builtin_lock_matches_the_published_indexes() {
    let Some(data) = common::shared_data() else { return };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let lock = kube_aws::chart::load_lock(dir).unwrap();
    assert_eq!(lock.index.entries.len(), 9);
    // aws-cloud-controller-manager's published index is not in the shared data;
    // its digest was taken from the upstream repository's gh-pages index.yaml
    // (kubernetes/cloud-provider-aws, commit a5a006cc) and is not checked here.
    const NOT_IN_SHARED: &[&str] = &["aws-cloud-controller-manager"];
    for (name, versions) in &lock.index.entries {
        if NOT_IN_SHARED.contains(&name.as_str()) {
            eprintln!("builtin_lock_matches_the_published_indexes: {name} not checked (no shared index)");
            continue;
        }
        let v = &versions[0];
        let source = v.annotations["kube-aws.io/source"]
            .strip_prefix("repo:")
            .unwrap()
            .to_string();
        let mut found = None;
        for sub in ["addon-indexes", "indexes"] {
            for f in std::fs::read_dir(data.join(sub)).unwrap() {
                let f = f.unwrap().path();
                if f.file_name().unwrap() == "merged.index.yaml" {
                    continue;
                }
                let text = std::fs::read_to_string(&f).unwrap();
                if let Some(list) = find_chart(&text, name, &source, "x").unwrap().versions {
                    found = list.into_iter().find(|x| x.version == v.version);
                }
                if found.is_some() {
                    break;
                }
            }
            if found.is_some() {
                break;
            }
        }
        let found = found.unwrap_or_else(|| panic!("{name} {} not in the shared indexes", v.version));
        assert_eq!(found.digest_hex(), v.digest_hex(), "{name}");
        assert_eq!(found.urls, v.urls, "{name}");
    }
}

/// The one-entry fast path (version lines only, one entry parsed) picks what
/// parsing every entry and resolving picks, on every real index.
#[test]
fn fast_version_pick_equals_full_resolution() {
    use kube_aws::chart::index::find_chart_version;
    let mut files = index_files("indexes");
    files.extend(index_files("addon-indexes"));
    for f in files.iter().filter(|f| f.file_name().unwrap() != "merged.index.yaml") {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.display().to_string();
        let full = parse_index(&text, "https://r/", &name).unwrap();
        for (chart, versions) in full.entries.iter().step_by(3) {
            let newest = resolve_version(versions, None).ok().map(|v| v.version.clone());
            let mut wanted: Vec<Option<String>> =
                vec![None, Some("*".into()), Some(">=0.0.0-0".into()), Some("~99".into())];
            if let Some(v) = newest.as_deref().and_then(kube_aws::chart::parse_version) {
                wanted.push(Some(format!("~{}.{}", v.major, v.minor)));
                wanted.push(Some(format!("<{}", v)));
            }
            wanted.push(versions.last().map(|v| v.version.clone()));
            for w in wanted {
                let slow = resolve_version(versions, w.as_deref()).cloned();
                let fast = find_chart_version(&text, chart, w.as_deref(), "https://r/", &name)
                    .unwrap()
                    .chosen
                    .unwrap();
                assert_eq!(fast, slow, "{name}: {chart} {w:?}");
            }
        }
    }
}

#[test]
fn work_tree_lock_layers_over_the_builtin_lock() {
    use kube_aws::chart::lock::parse_lock;
    let builtin_text = include_str!("../../charts-index/index.yaml");
    let builtin = parse_lock(builtin_text, std::path::Path::new("(built-in) charts-index/index.yaml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("cluster.yaml"),
        "clusterName: demo\nregion: us-west-2\ns3URI: s3://my-bucket/p\ncharts:\n  - {name: metrics-server, repo: 'https://kubernetes-sigs.github.io/metrics-server/', version: '~3.13'}\n",
    )
    .unwrap();
    let cluster = kube_aws::config::load_cluster(dir).unwrap();
    // The work tree alone has no lock; load_lock layers it over the built-in one.
    let work = kube_aws::chart::lock::load_work_tree_lock(dir).unwrap();
    assert!(kube_aws::chart::check_lock(&work, &cluster.releases).is_err());
    let layered = work.layered_over(&builtin);
    let locked = kube_aws::chart::check_lock(&layered, &cluster.releases).unwrap();
    assert_eq!(
        kube_aws::chart::check_lock(&kube_aws::chart::load_lock(dir).unwrap(), &cluster.releases).unwrap(),
        locked
    );
    assert_eq!(locked[0].version, "3.13.1");
    assert_eq!(
        locked[0].digest.as_deref(),
        Some("084e6edb680cf4e2acc30bd496568c53fdf663cbacf6e17876b25785c35b7a13")
    );
}
