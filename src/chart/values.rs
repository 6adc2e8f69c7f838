//! Values layering exactly as Helm does it, and the checks on the result.
//!
//! Lowest first: the chart's values.yaml < plugin values < the built-in
//! values/<release>.yaml (embedded, see [`built_in`]; releases plugins bring
//! only) < the work tree's values/<release>.yaml < the release's listed files
//! < `set`. The user layers merge like Helm's
//! `-f` files (maps merge, everything else replaces, a null is kept as null);
//! the result is then coalesced over the chart's values like Helm's
//! `CoalesceValues` (a null deletes the chart's key).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

pub mod built_in;
mod schema;
#[cfg(test)]
mod tests;

use schema::validate_schema;
pub use schema::{check_schema_structure, MAX_SCHEMA_CHAIN, MAX_SCHEMA_NODES};

use crate::chart::archive::ChartFiles;
use crate::chart::version::version_satisfies;
use crate::config::{Origin, Release};
use crate::located::{join_index, join_key, Located, SourceMap};

#[derive(Debug, thiserror::Error)]
pub enum ValuesError {
    /// A values file that cannot be read or parsed, at its `file:line:col`.
    #[error("{error} (values of release {release:?})")]
    Located { release: String, error: Located },
    #[error("release {release:?}: values file {}: {message}", file.display())]
    Malformed {
        release: String,
        file: PathBuf,
        message: String,
    },
    #[error("release {release:?}: chart {chart:?} {chart_version} needs Kubernetes {constraint:?}, but kubernetesVersion is {kubernetes:?}")]
    KubeVersion {
        release: String,
        chart: String,
        chart_version: String,
        constraint: String,
        kubernetes: String,
    },
    #[error("release {release:?}: values.schema.json of chart {chart:?}: {message}")]
    BadSchema {
        release: String,
        chart: String,
        message: String,
    },
    #[error("{}", .0.join("\n"))]
    Schema(Vec<String>),
    /// A chart image of another Kubernetes minor than the cluster's, located.
    #[error("{0}")]
    VersionSkew(String),
    /// A value a plugin parameter owns, set otherwise by a user layer, located.
    #[error("{0}")]
    PluginOwned(String),
}

/// The VPC CNI's prefix delegation switch in its chart's values (the
/// DaemonSet's and the init container's env): the aws-vpc-cni plugin sets both
/// from `enablePrefixDelegation`, and the kubelet's max-pods follows that
/// parameter (src/config/maxpods.rs). A user layer that sets it otherwise
/// would leave max-pods computed for the other mode: with 110 pods and only
/// secondary addresses, pods wait for addresses that never come.
const PREFIX_DELEGATION_VALUES: &[&[&str]] = &[
    &["env", "ENABLE_PREFIX_DELEGATION"],
    &["init", "env", "ENABLE_PREFIX_DELEGATION"],
];

/// Refuses a values layer that sets the VPC CNI's ENABLE_PREFIX_DELEGATION to
/// other than what the aws-vpc-cni plugin's parameter set, located at it.
pub fn check_plugin_owned_values(release: &str, chart: &str, layers: &[ValuesLayer]) -> Result<(), ValuesError> {
    if chart != "aws-vpc-cni" {
        return Ok(());
    }
    let plugin_layer = |l: &&ValuesLayer| l.label.starts_with("plugins/aws-vpc-cni/");
    let Some(plugin) = layers.iter().find(plugin_layer) else {
        return Ok(());
    };
    let user = merge_layers(layers);
    for path in PREFIX_DELEGATION_VALUES {
        let segments: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        let (Some(want), Some(got)) = (lookup(&plugin.values, &segments), lookup(&user, &segments)) else {
            continue;
        };
        if want == got {
            continue;
        }
        let (key, at) = locate_value(&segments, &user, layers);
        return Err(ValuesError::PluginOwned(format!(
            "{at}: release {release:?}: value {key} {got} overrides the aws-vpc-cni plugin's {want}: set \
             plugins.aws-vpc-cni.enablePrefixDelegation in cluster.yaml instead (the kubelet's max-pods follows \
             that parameter), and remove {key} here"
        )));
    }
    Ok(())
}

/// Charts whose image must be of the cluster's own Kubernetes minor:
/// cluster-autoscaler ("use the Cluster Autoscaler version that matches the
/// Kubernetes control plane version", kubernetes/autoscaler
/// cluster-autoscaler/README.md). The pins live in src/config/versions.rs.
const SAME_MINOR_CHARTS: &[&str] = &["cluster-autoscaler"];

/// Refuses a cluster-autoscaler release whose `image.tag` (from any values
/// layer, or the chart's defaults when `values` includes them) is of another
/// minor than `kubernetes_version`, located at the layer that set it.
pub fn check_minor_skew(
    release: &str,
    chart: &str,
    values: &Value,
    layers: &[ValuesLayer],
    kubernetes_version: &str,
) -> Result<(), ValuesError> {
    if !SAME_MINOR_CHARTS.contains(&chart) {
        return Ok(());
    }
    let Some(tag) = values.pointer("/image/tag").and_then(Value::as_str) else {
        return Ok(());
    };
    let Ok(k8s) = crate::config::resolve_version(kubernetes_version) else {
        return Ok(()); // an unsupported version is refused at load, with its location
    };
    let problem = match crate::config::minor_of(tag) {
        Some(m) if m == k8s.minor => return Ok(()),
        Some(m) => format!("is cluster-autoscaler {m}"),
        None => "has no MAJOR.MINOR version".to_string(),
    };
    let segments = ["image".to_string(), "tag".to_string()];
    let (_, at) = locate_value(&segments, values, layers);
    Err(ValuesError::VersionSkew(format!(
        "{at}: release {release:?}: value image.tag {tag:?} {problem}, but the cluster runs Kubernetes {}: \
         cluster-autoscaler's minor must equal the cluster's (remove image.tag to get {}, \
         or change kubernetesVersion)",
        k8s.minor, k8s.release.cluster_autoscaler
    )))
}

/// One layer of user values and where it came from.
#[derive(Debug, Clone)]
pub struct ValuesLayer {
    /// The file (or `cluster.yaml set`, `plugin <name>`) named in messages.
    pub label: String,
    pub values: Value,
    /// Positions of keys, for `file:line:col` in messages.
    pub source: Option<SourceMap>,
}

impl ValuesLayer {
    /// A layer from YAML text; `label` names it in messages.
    pub fn from_yaml(release: &str, label: &Path, text: &str) -> Result<ValuesLayer, ValuesError> {
        let located = |error: Located| ValuesError::Located {
            release: release.into(),
            error,
        };
        // The YAML guard (size, depth) runs first: serde_yaml is quadratic on deep nesting.
        let source = SourceMap::parse(label, text).map_err(located)?;
        let values: Value = if text.trim().is_empty() {
            Value::Object(Map::new())
        } else {
            serde_yaml::from_str(text).map_err(|e| located(crate::located::serde_yaml_error(label, &e)))?
        };
        let values = match values {
            Value::Null => Value::Object(Map::new()),
            Value::Object(m) => Value::Object(m),
            other => {
                return Err(located(Located::new(
                    label,
                    crate::reader::first_content(text),
                    "",
                    format!(
                        "the top level must be a mapping of values (key: value), not {}",
                        kind(&other)
                    ),
                )))
            }
        };
        Ok(ValuesLayer {
            label: label.display().to_string(),
            values,
            source: Some(source),
        })
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The user layers of a release, lowest first: `plugin` (already rendered
/// plugin values), the built-in values/<release>.yaml when a plugin brings
/// the release and the tool ships one, the work tree's values/<release>.yaml
/// when it exists, the listed files, then `set`.
pub fn load_user_layers(
    dir: &Path,
    release: &Release,
    plugin: Option<ValuesLayer>,
) -> Result<Vec<ValuesLayer>, ValuesError> {
    let built_in = match release.origin {
        Origin::Plugin { .. } => built_in::values_text(&release.name),
        Origin::Cluster { .. } => None,
    };
    layers_over(dir, release, plugin, built_in)
}

/// [`load_user_layers`] with the built-in layer's text given.
fn layers_over(
    dir: &Path,
    release: &Release,
    plugin: Option<ValuesLayer>,
    built_in: Option<&str>,
) -> Result<Vec<ValuesLayer>, ValuesError> {
    let mut layers: Vec<ValuesLayer> = plugin.into_iter().collect();
    if let Some(text) = built_in {
        layers.push(ValuesLayer::from_yaml(
            &release.name,
            &built_in::label(&release.name),
            text,
        )?);
    }
    let default = format!("values/{}.yaml", release.name);
    let mut files = Vec::new();
    // Present in any form: the reader refuses what is not a regular file.
    if std::fs::symlink_metadata(dir.join(&default)).is_ok() && !release.values_files.contains(&default) {
        files.push(default);
    }
    files.extend(release.values_files.iter().cloned());
    for f in files {
        let label = crate::config::display_path(dir, &f);
        let text = crate::reader::read_text(dir, Path::new(&f), &label, &crate::reader::TEXT_LIMIT).map_err(|e| {
            ValuesError::Located {
                release: release.name.clone(),
                error: e.into_located(),
            }
        })?;
        layers.push(ValuesLayer::from_yaml(&release.name, &label, &text)?);
    }
    if !release.set.is_empty() {
        layers.push(ValuesLayer {
            label: format!("cluster.yaml (set of release {:?})", release.name),
            values: Value::Object(release.set.clone()),
            source: None,
        });
    }
    Ok(layers)
}

/// Merges user layers the way Helm merges `-f` files: maps merge, anything
/// else (lists, scalars, null) replaces.
pub fn merge_layers(layers: &[ValuesLayer]) -> Value {
    let mut out = Map::new();
    for l in layers {
        if let Value::Object(m) = &l.values {
            merge_maps(&mut out, m);
        }
    }
    Value::Object(out)
}

fn merge_maps(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        if let (Value::Object(src), Some(Value::Object(dst))) = (v, into.get_mut(k)) {
            merge_maps(dst, src);
            continue;
        }
        into.insert(k.clone(), v.clone());
    }
}

/// Coalesces user values over the chart's values like Helm's
/// `chartutil.CoalesceValues`: user values win, maps merge, a null deletes
/// the chart's key.
pub fn coalesce(user: &Value, chart: &Value) -> Value {
    let mut v = match user {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    if let Value::Object(chart) = chart {
        for (key, val) in chart {
            match v.get_mut(key) {
                Some(Value::Null) => {
                    v.shift_remove(key);
                }
                Some(Value::Object(dest)) => {
                    if let Value::Object(src) = val {
                        coalesce_tables(dest, src);
                    }
                }
                Some(_) => {}
                None => {
                    v.insert(key.clone(), val.clone());
                }
            }
        }
    }
    Value::Object(v)
}

fn coalesce_tables(dst: &mut Map<String, Value>, src: &Map<String, Value>) {
    // Helm marks every null in dst as "delete", also when src lacks the key.
    let nulls: Vec<String> = dst
        .iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k.clone())
        .collect();
    for k in &nulls {
        dst.shift_remove(k);
    }
    for (key, val) in src {
        if nulls.contains(key) {
            continue;
        }
        match dst.get_mut(key) {
            None => {
                dst.insert(key.clone(), val.clone());
            }
            Some(Value::Object(d)) => {
                if let Value::Object(s) = val {
                    coalesce_tables(d, s);
                }
            }
            Some(_) => {}
        }
    }
}

/// The user values of a release, as the one YAML document the node passes
/// to `helm -f`.
pub fn to_yaml_document(user: &Value) -> String {
    serde_yaml::to_string(user).unwrap_or_default()
}

/// The values of one release, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseValues {
    pub release: String,
    /// The merged user layers (what the node gets).
    pub user: Value,
    /// The user values coalesced over the chart's values (what Helm renders with).
    pub merged: Value,
}

/// Layers, coalesces and checks a release's values against its chart:
/// the chart's kubeVersion against `kubernetes_version`, then values.schema.json.
pub fn check_release_values(
    release: &str,
    chart: &ChartFiles,
    layers: &[ValuesLayer],
    kubernetes_version: &str,
) -> Result<ReleaseValues, ValuesError> {
    if let Some(kv) = chart.metadata.kube_version.as_deref().filter(|k| !k.trim().is_empty()) {
        let ok = version_satisfies(kubernetes_version, kv).unwrap_or(false);
        if !ok {
            return Err(ValuesError::KubeVersion {
                release: release.into(),
                chart: chart.metadata.name.clone(),
                chart_version: chart.metadata.version.clone(),
                constraint: kv.into(),
                kubernetes: kubernetes_version.into(),
            });
        }
    }
    let chart_values = match chart.values.as_deref() {
        Some(text) => ValuesLayer::from_yaml(release, Path::new("values.yaml"), text)?.values,
        None => Value::Object(Map::new()),
    };
    let user = merge_layers(layers);
    let merged = coalesce(&user, &chart_values);
    check_minor_skew(release, &chart.metadata.name, &merged, layers, kubernetes_version)?;
    check_plugin_owned_values(release, &chart.metadata.name, layers)?;
    if let Some(schema) = &chart.schema {
        validate_schema(release, &chart.metadata.name, schema, &merged, layers)?;
    }
    Ok(ReleaseValues {
        release: release.into(),
        user,
        merged,
    })
}

/// The dotted path of a JSON pointer, and the highest layer that set it
/// (`file:line:col` when known), or the chart's values.yaml.
fn locate_value(segments: &[String], merged: &Value, layers: &[ValuesLayer]) -> (String, String) {
    // Build the path the way SourceMap spells it: a.b[0].c.
    let mut path = String::new();
    let mut node = Some(merged);
    for s in segments {
        match node {
            Some(Value::Array(items)) => {
                let i: usize = s.parse().unwrap_or(0);
                path = join_index(&path, i);
                node = items.get(i);
            }
            other => {
                path = join_key(&path, s);
                node = other.and_then(|n| n.get(s));
            }
        }
    }
    for depth in (1..=segments.len()).rev() {
        for layer in layers.iter().rev() {
            // A parent only counts when the layer replaced it wholesale (a list, a scalar).
            let found = lookup(&layer.values, &segments[..depth]);
            if found.is_some_and(|v| depth == segments.len() || !v.is_object()) {
                let pos = layer
                    .source
                    .as_ref()
                    .map(|s| {
                        let p = s.locate(&path);
                        format!(":{}:{}", p.line, p.col)
                    })
                    .unwrap_or_default();
                return (path, format!("{}{pos}", layer.label));
            }
        }
    }
    (path, "chart values.yaml".into())
}

fn lookup<'a>(v: &'a Value, segments: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for s in segments {
        cur = match cur {
            Value::Object(m) => m.get(s)?,
            Value::Array(a) => a.get(s.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}
