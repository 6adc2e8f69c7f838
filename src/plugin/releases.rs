//! A plugin's chart releases: each `spec.charts[i]` rendered, checked by the
//! one chart check (src/config/chart_spec.rs) with paths inside the plugin
//! directory, and its values layer; then the rules over every release of the
//! cluster (unique names, known and acyclic `dependsOn`).

use serde_json::Value;

use super::collector::Collector;
use super::discover::{safe_relative, PluginDef};
use super::hooks::{PluginRelease, PluginValues, ResolvedPlugins};
use super::template::Renderer;
use crate::config::{chart_release, ChartSpec, Cluster, GraphProblem, Origin, Release, ReleaseGraph};
use crate::located::{did_you_mean, join_index, Located, Pos};

/// The release of the plugin's `spec.charts[i]`, or None after recording why not.
pub fn plugin_release(
    cluster: &Cluster,
    r: &Renderer,
    i: usize,
    c: &ChartSpec,
    errors: &mut Collector,
) -> Option<PluginRelease> {
    let def = r.def;
    let base = join_index("spec.charts", i);
    let raw = serde_json::to_value(c).unwrap_or(Value::Null);
    let rendered = errors.take(r.json(&base, &raw))?;
    let c: ChartSpec =
        errors.take(serde_json::from_value(rendered).map_err(|e| def.err(&base, format!("after rendering: {e}"))))?;
    let user_values = format!("values/{}.yaml", c.name);
    let values_files = if cluster.dir.join(&user_values).is_file() {
        vec![user_values]
    } else {
        Vec::new()
    };
    let origin = Origin::Plugin {
        plugin: def.name().to_string(),
        index: i,
    };
    let release = chart_release(&c, origin, values_files, |p| chart_path(cluster, def, p)).map_err(|problems| {
        problems
            .iter()
            .map(|p| def.err(&p.path(&base), p.message.clone()))
            .collect::<Vec<_>>()
    });
    let release = errors.take(release);
    let values = values_layer(r, &base, &c, errors);
    Some(PluginRelease {
        // The plugin's `set` is in its values layer, below the user's values/<release>.yaml.
        release: Release {
            set: serde_json::Map::new(),
            declared: Some(crate::config::Declared::at(&def.file, &def.map, &base)),
            ..release?
        },
        values,
    })
}

/// A plugin chart's `path:`: inside the plugin directory of a work-tree plugin.
fn chart_path(cluster: &Cluster, def: &PluginDef, p: &str) -> Result<String, String> {
    let clean = safe_relative(p)?;
    let Some(wt) = &def.work_tree_dir else {
        return Err(format!(
            "{p:?}: a built-in plugin cannot ship a chart directory (use repo or oci)"
        ));
    };
    let rel = wt.join(clean);
    if cluster.dir.join(&rel).exists() {
        Ok(rel.to_string_lossy().into_owned())
    } else {
        Err(format!("{p:?} does not exist in {}", def.display_dir.display()))
    }
}

/// The plugin's values for one release: its rendered values files, then its `set`.
fn values_layer(r: &Renderer, base: &str, c: &ChartSpec, errors: &mut Collector) -> Vec<PluginValues> {
    let def = r.def;
    let mut values = Vec::new();
    for (j, f) in c.values.iter().flatten().enumerate() {
        let key = format!("{base}.values[{j}]");
        let Some(content) = errors.take(r.file(&key, f)) else {
            continue;
        };
        let shown = def.display_file(f);
        if errors
            .take(crate::located::check_yaml(&shown, &content, &crate::reader::TEXT_LIMIT))
            .is_none()
        {
            continue;
        }
        match serde_yaml::from_str::<serde_yaml::Value>(&content) {
            Ok(v) if v.is_mapping() || v.is_null() => values.push(PluginValues {
                plugin: def.name().to_string(),
                file: f.clone(),
                content,
            }),
            Ok(_) => errors.push(Located::new(
                &shown,
                Pos { line: 1, col: 1 },
                "",
                format!("plugin {:?}: rendered values must be a YAML map", def.name()),
            )),
            Err(e) => {
                let pos = Pos::of_yaml_error(&e).unwrap_or_default();
                errors.push(Located::new(
                    &shown,
                    pos,
                    "",
                    format!(
                        "plugin {:?}: the rendered values are not YAML: {e} (quote values with the json_encode filter)",
                        def.name()
                    ),
                ));
            }
        }
    }
    if !c.set.is_empty() {
        values.push(PluginValues {
            plugin: def.name().to_string(),
            file: format!("{}#{base}.set", super::model::MANIFEST_FILE),
            content: serde_yaml::to_string(&c.set).unwrap_or_default(),
        });
    }
    values
}

/// The release graph's rules over every release (src/config/graph.rs),
/// located: a plugin release named like an earlier one, `dependsOn` targets
/// that no release answers to (cluster.yaml releases may depend on plugin
/// releases, so their targets are checked here, where every release is
/// known), and a cycle through a plugin release.
pub fn check_releases(cluster: &Cluster, defs: &[PluginDef], out: &ResolvedPlugins) -> Vec<Located> {
    let all: Vec<&Release> = cluster
        .releases
        .iter()
        .chain(out.releases.iter().map(|p| &p.release))
        .collect();
    let graph = ReleaseGraph::new(&all);
    let known = graph.names();
    // The plugin that declares release `i`, with its index in spec.charts.
    let plugin_of = |i: usize| match &all[i].origin {
        Origin::Plugin { plugin, index } => defs.iter().find(|d| d.name() == plugin).map(|d| (d, *index)),
        Origin::Cluster { .. } => None,
    };
    let mut errors = Vec::new();
    for p in graph.duplicates() {
        let GraphProblem::Duplicate { release, first } = p else {
            continue;
        };
        let Some((def, index)) = plugin_of(release) else {
            continue;
        };
        let first = match (&all[first].origin, plugin_of(first)) {
            (Origin::Cluster { index }, _) => format!(
                "cluster.yaml charts[{index}] ({}:{})",
                cluster.file.display(),
                cluster.source.locate(&format!("charts[{index}].name")).line
            ),
            (_, Some((d, i))) => format!(
                "plugin {:?} ({}:{})",
                d.name(),
                d.file.display(),
                d.map.locate(&format!("spec.charts[{i}].name")).line
            ),
            (_, None) => continue,
        };
        errors.push(def.err(
            &format!("spec.charts[{index}].name"),
            format!(
                "release {:?} of plugin {:?} collides with the release of the same name from {first} (rename one, or disable the plugin)",
                all[release].name,
                def.name()
            ),
        ));
    }
    let mut self_cycle = None;
    for p in graph.bad_targets() {
        match p {
            GraphProblem::Unknown { release, dep } => {
                let d = &all[release].depends_on[dep];
                match (&all[release].origin, plugin_of(release)) {
                    (Origin::Cluster { index }, _) => {
                        let path = format!("charts[{index}].dependsOn[{dep}]");
                        let mut hint = did_you_mean(d, &known);
                        if hint.is_empty() {
                            hint = " (list it under charts, enable the plugin that declares it, or remove it)".into();
                        }
                        errors.push(Located::new(
                            &cluster.file,
                            cluster.source.locate(&path),
                            &path,
                            format!("{d:?} is not a release in this cluster or its enabled plugins{hint}"),
                        ));
                    }
                    (_, Some((def, index))) => {
                        let msg = format!(
                            "release {:?} depends on {d:?}, which no chart or enabled plugin declares{}",
                            all[release].name,
                            did_you_mean(d, &known)
                        );
                        errors.push(def.err(&format!("spec.charts[{index}].dependsOn[{dep}]"), msg));
                    }
                    (_, None) => {}
                }
            }
            // cluster.yaml's own are config's (src/config/validate.rs); a plugin's is a cycle of one.
            GraphProblem::SelfDependency { release, .. } if plugin_of(release).is_some() => {
                let name = all[release].name.clone();
                self_cycle.get_or_insert(vec![name.clone(), name]);
            }
            _ => {}
        }
    }
    if !errors.is_empty() {
        return errors;
    }
    let cycle = match graph.cycle() {
        Some(GraphProblem::Cycle { cycle }) => Some(cycle),
        _ => self_cycle,
    };
    let Some(cycle) = cycle else { return errors };
    // Cycles within cluster.yaml are config's; this one runs through the first such plugin release.
    let culprit = (cluster.releases.len()..all.len()).find(|&i| cycle.contains(&all[i].name));
    if let Some((def, index)) = culprit.and_then(plugin_of) {
        errors.push(def.err(
            &format!("spec.charts[{index}].dependsOn"),
            format!(
                "dependency cycle: {} (remove one of these dependsOn entries)",
                cycle.join(" -> ")
            ),
        ));
    }
    errors
}
