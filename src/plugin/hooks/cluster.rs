//! Cluster hooks of one plugin: control-plane flags, Kubernetes manifests,
//! CloudFormation resources and outputs, and its chart releases.

use std::collections::HashSet;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::{CfnContribution, Manifest, ResolvedPlugins};
use crate::config::Cluster;
use crate::located::{join_index, Located, Pos};
use crate::plugin::checks::check_manifest;
use crate::plugin::collector::Collector;
use crate::plugin::merge::{merge_flags, Claim, Flags, Merger};
use crate::plugin::model::CloudFormationSpec;
use crate::plugin::releases::plugin_release;
use crate::plugin::scope::Scope;
use crate::plugin::template::Renderer;

static LOGICAL_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9]{1,255}$").unwrap());

/// Merges the plugin's cluster-scope hooks into `out`.
pub fn cluster_hooks(
    cluster: &Cluster,
    r: &Renderer,
    out: &mut ResolvedPlugins,
    merger: &mut Merger,
    errors: &mut Collector,
) {
    let spec = &r.def.manifest.spec;
    let k = &spec.kubernetes;
    let c = &mut out.cluster;
    for (kind, spec, key, target) in [
        (
            "apiserver flag",
            &k.api_server,
            "spec.kubernetes.apiServer.flags",
            &mut c.api_server_flags,
        ),
        (
            "controller-manager flag",
            &k.controller_manager,
            "spec.kubernetes.controllerManager.flags",
            &mut c.controller_manager_flags,
        ),
        (
            "scheduler flag",
            &k.scheduler,
            "spec.kubernetes.scheduler.flags",
            &mut c.scheduler_flags,
        ),
    ] {
        merge_flags(r, &Scope::Cluster, Flags { kind, spec, key }, target, merger, errors);
    }
    manifests(r, out, errors);
    if let Some(cfn) = &spec.cloudformation {
        if let Some(c) = cloudformation(cluster, r, cfn, merger, errors) {
            out.cluster.cloudformation.push(c);
        }
    }
    for (i, c) in spec.charts.iter().enumerate() {
        if let Some(rel) = plugin_release(cluster, r, i, c, errors) {
            out.releases.push(rel);
        }
    }
}

/// The plugin's Kubernetes manifests, rendered and checked, unique by file name.
fn manifests(r: &Renderer, out: &mut ResolvedPlugins, errors: &mut Collector) {
    let def = r.def;
    let mut names = HashSet::new();
    for (i, m) in def.manifest.spec.kubernetes.manifests.iter().enumerate() {
        let key = join_index("spec.kubernetes.manifests", i);
        let Some(rel) = errors.take(r.field(&key, m)) else {
            continue;
        };
        let Some(content) = errors.take(r.file(&key, &rel)) else {
            continue;
        };
        if errors.take(check_manifest(&def.display_file(&rel), &content)).is_none() {
            continue;
        }
        let file_name = Path::new(&rel).file_name().and_then(|s| s.to_str()).unwrap_or(&rel);
        let name = file_name.strip_suffix(".tera").unwrap_or(file_name).to_string();
        if !names.insert(name.clone()) {
            errors.push(def.err(
                &key,
                format!("two manifests are named {name:?} (rename one of the files)"),
            ));
            continue;
        }
        out.cluster.manifests.push(Manifest {
            plugin: def.name().to_string(),
            name,
            content,
        });
    }
}

/// The plugin's CloudFormation contribution to one stack of this cluster.
fn cloudformation(
    cluster: &Cluster,
    r: &Renderer,
    cfn: &CloudFormationSpec,
    merger: &mut Merger,
    errors: &mut Collector,
) -> Option<CfnContribution> {
    let def = r.def;
    let stack = errors.take(r.field("spec.cloudformation.stack", &cfn.stack))?;
    let valid_stack = matches!(stack.as_str(), "root" | "network" | "control-plane")
        || stack
            .strip_prefix("node-pool-")
            .is_some_and(|p| cluster.pool_names().contains(&p));
    if !valid_stack {
        let mut names = vec!["root".to_string(), "network".into(), "control-plane".into()];
        names.extend(cluster.pool_names().iter().map(|p| format!("node-pool-{p}")));
        errors.push(def.err(
            "spec.cloudformation.stack",
            format!(
                "{stack:?} is not a stack of this cluster (use one of: {})",
                names.join(", ")
            ),
        ));
        return None;
    }
    let mut load = Stack {
        r,
        stack: &stack,
        merger,
        errors,
    };
    let resources = load.section("spec.cloudformation.resources", &cfn.resources, "resource");
    let outputs = load.section("spec.cloudformation.outputs", &cfn.outputs, "output");
    Some(CfnContribution {
        plugin: def.name().to_string(),
        stack,
        resources,
        outputs,
    })
}

/// Loads the sections of one plugin's contribution to `stack`.
struct Stack<'a, 'r> {
    r: &'a Renderer<'r>,
    stack: &'a str,
    merger: &'a mut Merger,
    errors: &'a mut Collector,
}

impl Stack<'_, '_> {
    /// The rendered `resource`s or `output`s file named at `key`, checked
    /// and claimed by logical ID; what fails is left out.
    fn section(&mut self, key: &str, rel: &Option<String>, what: &str) -> Map<String, Value> {
        let def = self.r.def;
        let Some(rel) = rel else { return Map::new() };
        let r = self.r;
        let Some((rel, text)) = self
            .errors
            .take(r.field(key, rel).and_then(|rel| r.file(key, &rel).map(|t| (rel, t))))
        else {
            return Map::new();
        };
        let shown = def.display_file(&rel);
        let top = Pos { line: 1, col: 1 };
        let m = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                self.errors.push(Located::new(
                    &shown,
                    top,
                    "",
                    format!("the rendered {what}s must be a JSON object of logical ID to {what}"),
                ));
                return Map::new();
            }
            Err(e) => {
                self.errors.push(Located::new(
                    &shown,
                    Pos {
                        line: e.line(),
                        col: e.column(),
                    },
                    "",
                    format!(
                        "plugin {:?}: the rendered file is not JSON: {e} (quote values with the json_encode filter)",
                        def.name()
                    ),
                ));
                return Map::new();
            }
        };
        let mut good = Map::new();
        for (id, body) in m {
            let shape_ok = match what {
                "resource" => body.get("Type").is_some_and(Value::is_string),
                _ => body.get("Value").is_some(),
            };
            if !LOGICAL_ID.is_match(&id) {
                self.errors.push(Located::new(
                    &shown,
                    top,
                    "",
                    format!("{id:?} is not a CloudFormation logical ID (use letters and digits only)"),
                ));
            } else if !shape_ok {
                let need = if what == "resource" {
                    "a \"Type\""
                } else {
                    "a \"Value\""
                };
                self.errors
                    .push(Located::new(&shown, top, "", format!("{what} {id:?} has no {need}")));
            } else {
                let line = line_of(&text, &id);
                let at = Located::new(&shown, Pos { line, col: 1 }, "", "");
                let place = format!("stack {:?}", self.stack);
                let claim = Claim::exclusive(place, format!("CloudFormation {what}"), &id, at);
                if self.errors.take(self.merger.claim(def.name(), claim)).is_some() {
                    good.insert(id, body);
                }
            }
        }
        good
    }
}

/// The 1-based line where `"needle"` first appears, or 1.
fn line_of(text: &str, needle: &str) -> usize {
    let quoted = format!("\"{needle}\"");
    text.lines()
        .position(|l| l.contains(&quoted))
        .map(|i| i + 1)
        .unwrap_or(1)
}
