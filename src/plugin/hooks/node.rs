//! Node hooks of one plugin in one node scope (the controller or a pool):
//! kubelet flags, IAM statements, files, systemd units, labels, ASG tags and
//! sizes, and taints, each claimed in the scope so plugins cannot collide.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use indexmap::IndexMap;
use regex::Regex;
use serde_json::Value;

use super::{IamStatement, NodeFile, NodeHooks, SystemdUnit};
use crate::config::{check_label_value, check_qualified_name, Taint};
use crate::located::join_key;
use crate::plugin::checks::check_statement;
use crate::plugin::collector::Collector;
use crate::plugin::merge::{merge_flags, Claim, Flags, Merger};
use crate::plugin::model::{NodeSpec, Scalar};
use crate::plugin::scope::Scope;
use crate::plugin::template::Renderer;

// A plain unit file name: no leading '-' (systemctl would read it as an
// option), no path, no template instance escapes beyond '@'.
static UNIT_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9_][A-Za-z0-9@._-]{0,200}\.(service|timer|socket|path|mount|target)$").unwrap()
});
static PERMISSIONS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^0?[0-7]{3,4}$").unwrap());
static OWNER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z_][a-z0-9_-]*(:[a-z_][a-z0-9_-]*)?$").unwrap());

/// What one plugin renders into one node scope, and where it records.
struct NodeMerge<'a, 'r> {
    r: &'a Renderer<'r>,
    scope: &'a Scope,
    /// `spec.nodes.<role>`, for error paths.
    base: String,
    plugin: String,
    merger: &'a mut Merger,
    errors: &'a mut Collector,
}

/// Merges the plugin's hooks for node `role` ("controller" or "worker") in `scope` into `target`.
pub fn node_hooks(
    r: &Renderer,
    scope: &Scope,
    role: &str,
    target: &mut NodeHooks,
    merger: &mut Merger,
    errors: &mut Collector,
) {
    let spec = &r.def.manifest.spec;
    let (kubelet, nodes) = match role {
        "controller" => (&spec.kubernetes.kubelet.controller, &spec.nodes.controller),
        _ => (&spec.kubernetes.kubelet.worker, &spec.nodes.worker),
    };
    let kubelet_key = format!("spec.kubernetes.kubelet.{role}.flags");
    let flags = Flags {
        kind: "kubelet flag",
        spec: kubelet,
        key: &kubelet_key,
    };
    merge_flags(r, scope, flags, &mut target.kubelet_flags, merger, errors);
    let mut m = NodeMerge {
        r,
        scope,
        base: format!("spec.nodes.{role}"),
        plugin: r.def.name().to_string(),
        merger,
        errors,
    };
    m.iam(nodes, target);
    m.files(nodes, target);
    m.units(nodes, target);
    m.key_values(
        "node label",
        &nodes.node_labels,
        "nodeLabels",
        &mut target.node_labels,
        true,
    );
    m.key_values("ASG tag", &nodes.asg_tags, "asgTags", &mut target.asg_tags, false);
    m.asg_size(nodes, target);
    m.taints(nodes, target);
}

impl NodeMerge<'_, '_> {
    /// Claims `c` for this plugin; true when it may be merged (new, or the same value again).
    fn claim(&mut self, c: Claim) -> Option<bool> {
        self.errors.take(self.merger.claim(&self.plugin, c))
    }

    fn iam(&mut self, spec: &NodeSpec, target: &mut NodeHooks) {
        let def = self.r.def;
        for (i, st) in spec.iam.statements.iter().enumerate() {
            let key = format!("{}.iam.statements[{i}]", self.base);
            let Some(st) = self.errors.take(self.r.json(&key, st)) else {
                continue;
            };
            if let Err(why) = check_statement(&st) {
                self.errors.push(def.err(&key, why));
                continue;
            }
            if let Some(sid) = st.get("Sid").and_then(Value::as_str) {
                let c = Claim::exclusive(
                    self.scope.words(),
                    "IAM statement Sid",
                    sid,
                    def.err(&join_key(&key, "Sid"), ""),
                );
                if self.claim(c).is_none() {
                    continue;
                }
            }
            target.iam_statements.push(IamStatement {
                plugin: self.plugin.clone(),
                statement: st,
            });
        }
    }

    fn files(&mut self, spec: &NodeSpec, target: &mut NodeHooks) {
        let def = self.r.def;
        for (i, f) in spec.files.iter().enumerate() {
            let key = format!("{}.files[{i}]", self.base);
            let Some(path) = self.errors.take(self.r.field(&join_key(&key, "path"), &f.path)) else {
                continue;
            };
            if !path.starts_with('/') || path.split('/').any(|s| s == ".." || s == ".") || path.ends_with('/') {
                self.errors.push(def.err(
                    &join_key(&key, "path"),
                    format!("{path:?} is not an absolute file path (for example \"/etc/kube-aws/x.conf\")"),
                ));
                continue;
            }
            if !PERMISSIONS.is_match(&f.permissions) {
                self.errors.push(def.err(
                    &join_key(&key, "permissions"),
                    format!("{:?} is not an octal mode (for example \"0644\")", f.permissions),
                ));
                continue;
            }
            if !OWNER.is_match(&f.owner) {
                self.errors.push(def.err(
                    &join_key(&key, "owner"),
                    format!("{:?} is not user:group (for example \"root:root\")", f.owner),
                ));
                continue;
            }
            let Some(content) = self.errors.take(body(self.r, &key, &f.content, &f.template)) else {
                continue;
            };
            let c = Claim::exclusive(self.scope.words(), "file", &path, def.err(&join_key(&key, "path"), ""));
            if self.claim(c).is_some() {
                target.files.push(NodeFile {
                    plugin: self.plugin.clone(),
                    path,
                    content,
                    permissions: f.permissions.clone(),
                    owner: f.owner.clone(),
                });
            }
        }
    }

    fn units(&mut self, spec: &NodeSpec, target: &mut NodeHooks) {
        let def = self.r.def;
        for (i, u) in spec.systemd_units.iter().enumerate() {
            let key = format!("{}.systemdUnits[{i}]", self.base);
            let Some(name) = self.errors.take(self.r.field(&join_key(&key, "name"), &u.name)) else {
                continue;
            };
            if !UNIT_NAME.is_match(&name) {
                self.errors.push(def.err(
                    &join_key(&key, "name"),
                    format!(
                        "{name:?} is not a unit file name (start with a letter, digit or '_', then letters, digits, \
                         '@', '.', '_' or '-', ending in .service, .timer, .socket, .path, .mount or .target; \
                         for example \"foo.service\")"
                    ),
                ));
                continue;
            }
            let Some(content) = self.errors.take(body(self.r, &key, &u.content, &u.template)) else {
                continue;
            };
            let c = Claim::exclusive(
                self.scope.words(),
                "systemd unit",
                &name,
                def.err(&join_key(&key, "name"), ""),
            );
            if self.claim(c).is_some() {
                target.systemd_units.push(SystemdUnit {
                    plugin: self.plugin.clone(),
                    name,
                    content,
                    enable: u.enable,
                });
            }
        }
    }

    /// Rendered key/value pairs (node labels, checked as labels; ASG tags) into `target`.
    fn key_values(
        &mut self,
        what: &str,
        map: &IndexMap<String, String>,
        field: &str,
        target: &mut BTreeMap<String, String>,
        labels: bool,
    ) {
        let def = self.r.def;
        for (k, v) in map {
            let key = format!("{}.{field}.{k}", self.base);
            let (k2, v2) = match (self.r.field(&key, k), self.r.field(&key, v)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    self.errors.push(e);
                    continue;
                }
            };
            if labels {
                if let Err(why) = check_qualified_name(&k2) {
                    self.errors
                        .push(def.err(&key, format!("{k2:?} is not a valid label key: {why}")));
                    continue;
                }
                if let Err(why) = check_label_value(&v2) {
                    self.errors
                        .push(def.err(&key, format!("{v2:?} is not a valid value of label {k2:?}: {why}")));
                    continue;
                }
            }
            if self
                .claim(Claim::shared(self.scope.words(), what, &k2, &v2, def.err(&key, "")))
                .is_some()
            {
                target.insert(k2, v2);
            }
        }
    }

    /// One bound of `asgSize` (`min` or `max`), rendered and claimed.
    fn bound(&mut self, name: &str, v: &Option<Scalar>) -> Option<u32> {
        let key = format!("{}.asgSize.{name}", self.base);
        let text = self.errors.take(self.r.field(&key, &v.as_ref()?.to_text()))?;
        if text.is_empty() {
            return None;
        }
        let Ok(n) = text.parse::<u32>() else {
            self.errors.push(
                self.r
                    .def
                    .err(&key, format!("{text:?} is not a whole number of instances")),
            );
            return None;
        };
        let c = Claim::shared(
            self.scope.words(),
            format!("ASG {name} size"),
            name,
            &text,
            self.r.def.err(&key, ""),
        );
        self.claim(c).map(|_| n)
    }

    fn asg_size(&mut self, spec: &NodeSpec, target: &mut NodeHooks) {
        let Some(size) = &spec.asg_size else { return };
        let min = self.bound("min", &size.min);
        let max = self.bound("max", &size.max);
        if let (Some(a), Some(b)) = (min, max) {
            if a > b {
                self.errors.push(self.r.def.err(
                    &format!("{}.asgSize", self.base),
                    format!("min {a} is above max {b} in {}", self.scope.words()),
                ));
            }
        }
        if min.is_some() || max.is_some() {
            target.asg_size_plugin = Some(self.plugin.clone());
        }
        target.asg_min_size = min.or(target.asg_min_size);
        target.asg_max_size = max.or(target.asg_max_size);
    }

    fn taints(&mut self, spec: &NodeSpec, target: &mut NodeHooks) {
        let def = self.r.def;
        for (i, t) in spec.taints.iter().enumerate() {
            let key = format!("{}.taints[{i}]", self.base);
            let (k, v) = match (
                self.r.field(&join_key(&key, "key"), &t.key),
                self.r.field(&join_key(&key, "value"), &t.value),
            ) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    self.errors.push(e);
                    continue;
                }
            };
            if let Err(why) = check_qualified_name(&k) {
                self.errors
                    .push(def.err(&join_key(&key, "key"), format!("{k:?} is not a valid taint key: {why}")));
                continue;
            }
            if let Err(why) = check_label_value(&v) {
                self.errors.push(def.err(
                    &join_key(&key, "value"),
                    format!("{v:?} is not a valid taint value: {why}"),
                ));
                continue;
            }
            let id = format!("{k}:{:?}", t.effect);
            if self.claim(Claim::shared(self.scope.words(), "taint", &id, &v, def.err(&key, ""))) == Some(true) {
                target.taints.push(Taint {
                    key: k,
                    value: v,
                    effect: t.effect,
                });
            }
        }
    }
}

/// A file's or unit's body: inline `content` (a template) or a `template` file.
fn body(
    r: &Renderer,
    key: &str,
    content: &Option<String>,
    template: &Option<String>,
) -> Result<String, crate::located::Located> {
    match (content, template) {
        (Some(c), None) => r.field(&join_key(key, "content"), c),
        (None, Some(t)) => {
            let k = join_key(key, "template");
            r.field(&k, t).and_then(|t| r.file(&k, &t))
        }
        _ => Err(r.def.err(key, "set exactly one of content and template")),
    }
}
