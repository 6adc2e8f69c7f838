//! Unit tests of values layering, coalescing and the checks on the result.

use super::*;
use serde_json::json;

fn layer(label: &str, v: Value) -> ValuesLayer {
    ValuesLayer {
        label: label.into(),
        values: v,
        source: None,
    }
}

#[test]
fn maps_merge_lists_replace_nulls_delete() {
    let chart = json!({"a": {"b": 1, "c": [1, 2], "d": {"e": 1}}, "keep": true, "gone": 1});
    let layers = [
        layer("one", json!({"a": {"c": [3], "d": {"f": 2}}, "gone": null})),
        layer("two", json!({"a": {"b": 5, "d": null}})),
    ];
    let user = merge_layers(&layers);
    assert_eq!(user, json!({"a": {"c": [3], "d": null, "b": 5}, "gone": null}));
    let merged = coalesce(&user, &chart);
    assert_eq!(merged, json!({"a": {"c": [3], "b": 5}, "keep": true}));
}

#[test]
fn schema_errors_name_release_path_and_file() {
    let chart = ChartFiles {
        metadata: serde_yaml::from_str("name: c\nversion: 1.0.0\nkubeVersion: '>=1.20.0-0'\n").unwrap(),
        values: Some("replicas: 1\n".into()),
        schema: Some(json!({"properties": {"replicas": {"type": "integer"}}})),
        crds: vec![],
    };
    let text = "replicas: two\n";
    let l = ValuesLayer::from_yaml("r", Path::new("values/r.yaml"), text).unwrap();
    let err = check_release_values("r", &chart, &[l], "1.31").unwrap_err().to_string();
    assert!(
        err.contains("values/r.yaml:1:") && err.contains("\"r\"") && err.contains("replicas"),
        "{err}"
    );
    let err = check_release_values("r", &chart, &[], "1.19").unwrap_err().to_string();
    assert!(err.contains(">=1.20.0-0") && err.contains("1.19"), "{err}");
}

#[test]
fn autoscaler_minor_must_equal_the_clusters() {
    let l = ValuesLayer::from_yaml("ca", Path::new("values/ca.yaml"), "image:\n  tag: v1.34.2\n").unwrap();
    let user = merge_layers(std::slice::from_ref(&l));
    let e = check_minor_skew("ca", "cluster-autoscaler", &user, std::slice::from_ref(&l), "1.35")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("values/ca.yaml:2:") && e.contains("cluster-autoscaler 1.34") && e.contains("v1.35.0"),
        "{e}"
    );
    let ok = json!({"image": {"tag": "v1.36.0"}});
    assert!(check_minor_skew("ca", "cluster-autoscaler", &ok, &[], "1.36.1").is_ok());
    assert!(check_minor_skew("x", "other-chart", &user, &[], "1.35").is_ok());
    assert!(check_minor_skew("ca", "cluster-autoscaler", &json!({}), &[], "1.35").is_ok());
    let latest = json!({"image": {"tag": "latest"}});
    let e = check_minor_skew("ca", "cluster-autoscaler", &latest, &[], "1.35").unwrap_err();
    assert!(e.to_string().contains("has no MAJOR.MINOR"), "{e}");
}

/// A release named `name` with the given listed files and `set`; `plugin`
/// says whether a plugin brings it (else cluster.yaml lists it).
fn release(name: &str, plugin: bool, files: &[&str], set: Value) -> Release {
    let origin = if plugin {
        Origin::Plugin {
            plugin: name.into(),
            index: 0,
        }
    } else {
        Origin::Cluster { index: 0 }
    };
    Release {
        name: name.into(),
        chart: name.into(),
        source: crate::config::ChartSource::Repo("https://charts.example.com".into()),
        version: None,
        namespace: "default".into(),
        values_files: files.iter().map(|f| f.to_string()).collect(),
        set: set.as_object().cloned().unwrap_or_default(),
        depends_on: vec![],
        timeout: std::time::Duration::from_secs(300),
        create_namespace: true,
        bootstrap: false,
        replicas_value: None,
        origin,
        declared: None,
    }
}

/// A work tree holding `files` (path, text).
fn work_tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

const BUILT_IN: &str = "resources:\n  requests:\n    cpu: 100m\n    memory: 200Mi\nlogLevel: info\n";

#[test]
fn built_in_values_override_the_plugins() {
    let dir = work_tree(&[]);
    let plugin = layer(
        "plugins/r/values.yaml.tera",
        json!({"replicas": 1, "logLevel": "debug", "resources": {"requests": {"cpu": "1m"}, "limits": {"cpu": "1"}}}),
    );
    let r = release("r", true, &[], json!({}));
    let layers = layers_over(dir.path(), &r, Some(plugin), Some(BUILT_IN)).unwrap();
    let labels: Vec<&str> = layers.iter().map(|l| l.label.as_str()).collect();
    assert_eq!(labels, ["plugins/r/values.yaml.tera", "built-in values/r.yaml"]);
    assert_eq!(
        merge_layers(&layers),
        json!({"replicas": 1, "logLevel": "info",
               "resources": {"requests": {"cpu": "100m", "memory": "200Mi"}, "limits": {"cpu": "1"}}})
    );
}

#[test]
fn the_work_trees_values_override_the_built_in_ones() {
    let dir = work_tree(&[("values/r.yaml", "replicas: 2\nresources:\n  requests:\n    cpu: 7m\n")]);
    let r = release("r", true, &[], json!({}));
    let layers = layers_over(dir.path(), &r, None, Some(BUILT_IN)).unwrap();
    assert_eq!(layers.len(), 2, "{layers:?}");
    assert_eq!(
        merge_layers(&layers),
        json!({"resources": {"requests": {"cpu": "7m", "memory": "200Mi"}}, "logLevel": "info", "replicas": 2})
    );
}

#[test]
fn listed_files_then_set_override_the_work_trees_values() {
    let dir = work_tree(&[
        ("values/r.yaml", "logLevel: warn\nreplicas: 2\n"),
        ("more.yaml", "logLevel: error\nreplicas: 3\n"),
    ]);
    let r = release("r", true, &["more.yaml"], json!({"replicas": 4}));
    let layers = layers_over(dir.path(), &r, None, Some(BUILT_IN)).unwrap();
    let merged = merge_layers(&layers);
    assert_eq!(merged["logLevel"], "error", "{merged}");
    assert_eq!(merged["replicas"], 4, "{merged}");
    assert_eq!(merged["resources"]["requests"]["cpu"], "100m", "{merged}");
    // The chart's own values are the lowest of all.
    let chart = json!({"replicas": 1, "logLevel": "trace", "image": {"tag": "v1"}});
    let all = coalesce(&merged, &chart);
    assert_eq!((&all["replicas"], &all["image"]["tag"]), (&json!(4), &json!("v1")));
}

#[test]
fn only_releases_plugins_bring_get_the_built_in_values() {
    let name = built_in::releases()[0];
    let dir = work_tree(&[]);
    let from_plugin = load_user_layers(dir.path(), &release(name, true, &[], json!({})), None).unwrap();
    assert_eq!(from_plugin.len(), 1, "{from_plugin:?}");
    assert_eq!(from_plugin[0].label, format!("built-in values/{name}.yaml"));
    let listed = load_user_layers(dir.path(), &release(name, false, &[], json!({})), None).unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    let none = load_user_layers(dir.path(), &release("no-such-release", true, &[], json!({})), None).unwrap();
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn every_built_in_values_file_is_a_mapping() {
    let names = built_in::releases();
    assert!(
        names.contains(&"metrics-server") && names.contains(&"external-dns"),
        "{names:?}"
    );
    for name in names {
        let text = built_in::values_text(name).unwrap();
        let l = ValuesLayer::from_yaml(name, &built_in::label(name), text).unwrap();
        assert!(l.values.as_object().is_some_and(|m| !m.is_empty()), "{name}");
    }
}
