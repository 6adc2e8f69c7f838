//! The plugin stage's standalone checks: cluster.yaml naming unknown
//! plugins, plugin files that must exist, rendered manifests and IAM
//! statements, and the limits that need every plugin resolved first (max
//! pods with the active CNI, autoscaler node-template tag lengths).

use indexmap::IndexMap;
use serde_json::Value;
use std::path::Path;

use super::discover::PluginDef;
use super::hooks::{ResolvedPlugins, TAG_KEY_LIMIT};
use crate::config::{kubelet_max_pods, Cluster, PluginSettings};
use crate::located::{did_you_mean, join_index, join_key, Located, Pos};

/// Each node kind's max-pods against its instance type, now that the active
/// CNI is known (the ENI table only binds with the VPC CNI).
pub fn check_max_pods(cluster: &Cluster, out: &ResolvedPlugins) -> Vec<Located> {
    let cfg = &cluster.config;
    let c = &cfg.controller;
    let mut nodes = vec![("controller".to_string(), c.instance_type.as_str(), c.max_pods)];
    for (i, p) in cfg.worker.node_pools.iter().enumerate() {
        nodes.push((format!("worker.nodePools[{i}]"), p.instance_type.as_str(), p.max_pods));
    }
    let mut errors = Vec::new();
    for (base, instance_type, wanted) in nodes {
        if let Err(why) = kubelet_max_pods(out.pod_addressing(), instance_type, wanted) {
            let key = if wanted.is_some() { "maxPods" } else { "instanceType" };
            let path = join_key(&base, key);
            errors.push(Located::new(&cluster.file, cluster.source.locate(&path), &path, why));
        }
    }
    errors
}

/// A plugin's ASG bounds (cluster-autoscaler's `minSize`/`maxSize`) stay
/// within the bounds the pool sets itself (`count`, or `minSize`/`maxSize`).
///
/// Refused rather than warned about: the pool's own bounds are the size its
/// owner wrote down (a cost ceiling, an availability floor), and a plugin
/// that renders a wider group would silently overrule them on every render.
/// There is no case where the wider bound is what both say: a plugin bound
/// may narrow the pool's range, and a pool that leaves its bounds out leaves
/// them to the plugin. The fix is one edit either way, and the message names it.
pub fn check_pool_bounds(cluster: &Cluster, out: &ResolvedPlugins) -> Vec<Located> {
    let src = &cluster.source;
    let mut errors = Vec::new();
    for (i, pool) in cluster.config.worker.node_pools.iter().enumerate() {
        let Some(hooks) = out.pools.get(&pool.name) else {
            continue;
        };
        let base = format!("worker.nodePools[{i}]");
        // The pool's own bounds, and the key that set each.
        let (own_min, own_max, min_key, max_key) = match (pool.count, pool.min_size, pool.max_size) {
            (Some(n), _, _) => (Some(n), Some(n), "count", "count"),
            (None, min, max) => (min, max, "minSize", "maxSize"),
        };
        let checks = [
            ("maxSize", "MaxSize", hooks.asg_max_size, own_max, max_key, true),
            ("minSize", "MinSize", hooks.asg_min_size, own_min, min_key, false),
        ];
        for (param, asg, bound, own, own_key, upper) in checks {
            let (Some(bound), Some(own)) = (bound, own) else {
                continue;
            };
            let wider = if upper { bound > own } else { bound < own };
            if !wider {
                continue;
            }
            let own_path = join_key(&base, own_key);
            let own_pos = src.locate(&own_path);
            // Where the plugin's bound was most likely written: the pool's
            // plugin settings, else the cluster-wide ones, else the pool.
            let plugin = hooks.asg_size_plugin.clone().unwrap_or_else(|| "a plugin".to_string());
            let candidates = [
                format!("{base}.plugins.{plugin}.{param}"),
                format!("plugins.{plugin}.{param}"),
                format!("{base}.plugins.{plugin}"),
            ];
            let at = candidates
                .iter()
                .find(|p| src.value(p).is_some() || src.key(p).is_some())
                .cloned()
                .unwrap_or_else(|| own_path.clone());
            let side = if upper { "above" } else { "below" };
            let leave = format!("leave {plugin}'s {param} out: it defaults to the pool's");
            let fix = match (own_key, upper) {
                ("count", _) => {
                    let (lo, hi) = if upper { (own, bound) } else { (bound, own) };
                    format!(
                        "for an autoscaled pool replace count: {own} with minSize: {lo} and maxSize: {hi} \
                         ({leave}), or opt the pool out ({base}.plugins.{plugin}.enabled: false)"
                    )
                }
                (_, true) => format!(
                    "raise the pool's maxSize to {bound} ({leave}), or lower {plugin}'s {param} to at most {own}"
                ),
                (_, false) => format!(
                    "lower the pool's minSize to {bound} ({leave}), or raise {plugin}'s {param} to at least {own}"
                ),
            };
            let pool_words = match (own_key, upper) {
                ("count", _) => "fixed size",
                (_, true) => "own maxSize",
                (_, false) => "own minSize",
            };
            errors.push(Located::new(
                &cluster.file,
                src.locate(&at),
                &at,
                format!(
                    "{plugin} sets node pool {:?}'s group {asg} to {bound}, {side} the pool's {pool_words} \
                     {own} ({own_path} at line {}, column {}); {fix}",
                    pool.name, own_pos.line, own_pos.col
                ),
            ));
        }
    }
    errors
}

/// An autoscaled pool's node-template tags fit AWS's tag key limit (a long
/// label key would otherwise fail the stack at deploy time).
pub fn check_node_template_tags(cluster: &Cluster, out: &ResolvedPlugins) -> Vec<Located> {
    let mut errors = Vec::new();
    for (i, pool) in cluster.config.worker.node_pools.iter().enumerate() {
        let Some(hooks) = out.pools.get(&pool.name) else {
            continue;
        };
        for (key, _) in hooks.node_template_tags(pool) {
            if key.len() > TAG_KEY_LIMIT {
                let path = format!("worker.nodePools[{i}]");
                errors.push(Located::new(
                    &cluster.file,
                    cluster.source.locate(&path),
                    &path,
                    format!(
                        "the autoscaler's node-template tag {key:?} is {} characters, over AWS's {TAG_KEY_LIMIT}-character \
                         tag key limit (shorten the label or taint key in it)",
                        key.len()
                    ),
                ));
            }
        }
    }
    errors
}

/// Every file a plugin names (when the name is not itself a template) exists
/// inside the plugin directory, also in scopes no pool renders today.
pub fn check_file_references(def: &PluginDef) -> Vec<Located> {
    let s = &def.manifest.spec;
    let mut refs: Vec<(String, &str)> = Vec::new();
    for (i, c) in s.charts.iter().enumerate() {
        for (j, f) in c.values.iter().flatten().enumerate() {
            refs.push((format!("spec.charts[{i}].values[{j}]"), f));
        }
    }
    for (i, m) in s.kubernetes.manifests.iter().enumerate() {
        refs.push((join_index("spec.kubernetes.manifests", i), m));
    }
    for (role, n) in [("controller", &s.nodes.controller), ("worker", &s.nodes.worker)] {
        for (i, f) in n.files.iter().enumerate() {
            if let Some(t) = &f.template {
                refs.push((format!("spec.nodes.{role}.files[{i}].template"), t));
            }
        }
        for (i, u) in n.systemd_units.iter().enumerate() {
            if let Some(t) = &u.template {
                refs.push((format!("spec.nodes.{role}.systemdUnits[{i}].template"), t));
            }
        }
    }
    if let Some(c) = &s.cloudformation {
        for (key, f) in [("resources", &c.resources), ("outputs", &c.outputs)] {
            if let Some(f) = f {
                refs.push((format!("spec.cloudformation.{key}"), f));
            }
        }
    }
    refs.into_iter()
        .filter(|(_, rel)| !super::template::is_template(rel))
        .filter_map(|(key, rel)| def.read(&key, rel).err())
        .collect()
}

/// Plugin names in cluster.yaml that no plugin answers to.
pub fn unknown_plugins(cluster: &Cluster, defs: &[PluginDef]) -> Vec<Located> {
    let names: Vec<&str> = defs.iter().map(|d| d.name()).collect();
    let cfg = &cluster.config;
    let mut sections: Vec<(String, &IndexMap<String, PluginSettings>)> = vec![
        ("plugins".into(), &cfg.plugins),
        ("controller.plugins".into(), &cfg.controller.plugins),
    ];
    for (i, p) in cfg.worker.node_pools.iter().enumerate() {
        sections.push((format!("worker.nodePools[{i}].plugins"), &p.plugins));
    }
    let mut errors = Vec::new();
    for (base, map) in sections {
        for name in map.keys() {
            if names.contains(&name.as_str()) {
                continue;
            }
            let path = join_key(&base, name);
            let mut hint = did_you_mean(name, &names);
            if hint.is_empty() {
                hint = " (run `kube-aws plugins list` to see the plugins)".into();
            }
            let msg = format!("there is no plugin {name:?}{hint}");
            let pos = cluster
                .source
                .key(&path)
                .unwrap_or_else(|| cluster.source.locate(&path));
            errors.push(Located::new(&cluster.file, pos, &path, msg));
        }
    }
    errors
}

/// Parses every YAML document of a manifest; each must be an object with
/// apiVersion and kind.
pub fn check_manifest(file: &Path, content: &str) -> Result<(), Located> {
    crate::located::check_yaml(file, content, &crate::reader::TEXT_LIMIT)?;
    for doc in serde_yaml::Deserializer::from_str(content) {
        let v: serde_yaml::Value = serde::Deserialize::deserialize(doc).map_err(|e| {
            let pos = Pos::of_yaml_error(&e).unwrap_or_default();
            Located::new(file, pos, "", format!("the rendered manifest is not YAML: {e}"))
        })?;
        if v.is_null() {
            continue;
        }
        let ok = v.get("apiVersion").is_some_and(|x| x.is_string()) && v.get("kind").is_some_and(|x| x.is_string());
        if !ok {
            return Err(Located::new(
                file,
                Pos { line: 1, col: 1 },
                "",
                "a rendered manifest document lacks apiVersion or kind (each document must be a Kubernetes object)",
            ));
        }
    }
    Ok(())
}

/// The shape of an identity-policy statement.
pub fn check_statement(st: &Value) -> Result<(), String> {
    let Some(m) = st.as_object() else {
        return Err("an IAM statement must be a map with Effect, Action and Resource".into());
    };
    match m.get("Effect").and_then(Value::as_str) {
        Some("Allow" | "Deny") => {}
        other => {
            return Err(format!(
                "Effect must be \"Allow\" or \"Deny\", not {}",
                other.map(|s| format!("{s:?}")).unwrap_or_else(|| "missing".into())
            ))
        }
    }
    if !m.contains_key("Action") && !m.contains_key("NotAction") {
        return Err("the statement has no Action (or NotAction)".into());
    }
    if !m.contains_key("Resource") && !m.contains_key("NotResource") {
        return Err("the statement has no Resource (or NotResource)".into());
    }
    // Every action of every service is never least privilege.
    let actions = match m.get("Action") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v) => vec![v],
        None => vec![],
    };
    if actions.iter().any(|a| a.as_str() == Some("*")) {
        return Err("Action \"*\" grants every action of every service (list the actions the addon calls)".into());
    }
    let allowed = [
        "Sid",
        "Effect",
        "Action",
        "NotAction",
        "Resource",
        "NotResource",
        "Condition",
    ];
    for k in m.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(format!(
                "{k:?} is not an IAM statement key{}",
                did_you_mean(k, &allowed)
            ));
        }
    }
    Ok(())
}
