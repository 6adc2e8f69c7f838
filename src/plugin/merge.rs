//! Merging plugin contributions: every key a plugin sets in a scope is a
//! [`Claim`], and the [`Merger`] refuses two plugins claiming one key with
//! different values (or at all, for things that cannot be shared). Also the
//! flag merge that cluster and node hooks share.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use regex::Regex;

use super::collector::Collector;
use super::model::FlagsSpec;
use super::scope::Scope;
use super::template::Renderer;
use crate::config::check_flag_value;
use crate::located::{join_key, Located};

static FLAG_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9.-]*$").unwrap());
/// Kubelet flags kube-aws sets itself from cluster.yaml: a plugin uses
/// `nodeLabels`, `taints` or the pool's `maxPods` instead.
const OWNED_KUBELET_FLAGS: &[(&str, &str)] = &[
    ("node-labels", "use spec.nodes.<role>.nodeLabels"),
    ("register-with-taints", "use spec.nodes.<role>.taints"),
    ("max-pods", "set maxPods on the pool or controller in cluster.yaml"),
    ("cloud-provider", "kubelets always run with cloud-provider external"),
];

/// May two plugins set one key?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Yes, to the same value (flags, labels, tags, sizes).
    SameValue,
    /// Never (files, units, logical IDs, service accounts).
    Exclusive,
}

/// One key a plugin sets: `kind` `key` in `scope` (the words naming the
/// scope or stack, which also key the identity), found at `at`.
#[derive(Debug, Clone)]
pub struct Claim {
    pub scope: String,
    pub kind: String,
    pub key: String,
    pub value: String,
    pub policy: Policy,
    pub at: Located,
}

impl Claim {
    /// A key no two plugins may both set.
    pub fn exclusive(scope: impl Into<String>, kind: impl Into<String>, key: &str, at: Located) -> Self {
        Claim {
            scope: scope.into(),
            kind: kind.into(),
            key: key.to_string(),
            value: String::new(),
            policy: Policy::Exclusive,
            at,
        }
    }

    /// A key plugins may share when they agree on `value`.
    pub fn shared(scope: impl Into<String>, kind: impl Into<String>, key: &str, value: &str, at: Located) -> Self {
        Claim {
            value: value.to_string(),
            policy: Policy::SameValue,
            ..Claim::exclusive(scope, kind, key, at)
        }
    }
}

/// Who set a key first, for conflict messages.
#[derive(Debug, Clone)]
struct Owner {
    plugin: String,
    value: String,
    at: Located,
}

/// Remembers every merged key's owner, per (scope, kind, key).
#[derive(Default)]
pub struct Merger {
    owners: HashMap<(String, String, String), Owner>,
}

impl Merger {
    /// Claims a key for `plugin`. Returns Ok(true) when the key is new,
    /// Ok(false) when it was already set to the same value (and the policy
    /// allows that), and an error naming both plugins otherwise.
    pub fn claim(&mut self, plugin: &str, c: Claim) -> Result<bool, Located> {
        let Claim {
            scope,
            kind,
            key,
            value,
            policy,
            at,
        } = c;
        let id = (scope.clone(), kind.clone(), key.clone());
        match self.owners.get(&id) {
            None => {
                self.owners.insert(
                    id,
                    Owner {
                        plugin: plugin.to_string(),
                        value,
                        at,
                    },
                );
                Ok(true)
            }
            Some(first) if policy == Policy::SameValue && first.value == value => Ok(false),
            Some(first) => {
                let mut e = at;
                let first_at = format!("{}:{}", first.at.file.display(), first.at.pos.line);
                e.message = match policy {
                    Policy::SameValue => format!(
                        "{kind} {key:?} in {scope}: plugin {plugin:?} sets {value:?}, but plugin {:?} sets {:?} ({first_at}) (make them agree or disable one)",
                        first.plugin, first.value
                    ),
                    Policy::Exclusive => format!(
                        "{kind} {key:?} in {scope} comes from plugin {plugin:?} and from plugin {:?} ({first_at}) (rename one or disable one of the plugins)",
                        first.plugin
                    ),
                };
                Err(e)
            }
        }
    }
}

/// One component's flags in plugin.yaml: what they are called in messages
/// (`kind`, e.g. "kubelet flag") and where they are (`key`).
pub struct Flags<'a> {
    pub kind: &'a str,
    pub spec: &'a FlagsSpec,
    pub key: &'a str,
}

/// Flags of one component into `target`, with conflict checks.
pub fn merge_flags(
    r: &Renderer,
    scope: &Scope,
    flags: Flags,
    target: &mut BTreeMap<String, String>,
    merger: &mut Merger,
    errors: &mut Collector,
) {
    let kind = flags.kind;
    for (name, v) in &flags.spec.flags {
        let path = join_key(flags.key, name);
        if !FLAG_NAME.is_match(name) {
            let hint = name.trim_start_matches('-');
            errors.push(r.def.err(
                &path,
                format!("{name:?} is not a flag name (write it without leading dashes, e.g. {hint:?})"),
            ));
            continue;
        }
        let Some(value) = errors.take(r.field(&path, &v.to_text())) else {
            continue;
        };
        // An empty value leaves the flag out, so optional parameters can drop flags.
        if value.is_empty() {
            continue;
        }
        if let Err(why) = check_flag_value(&value) {
            errors.push(r.def.err(&path, format!("{kind} {name:?}: the value {value:?} {why}")));
            continue;
        }
        let owned = match kind {
            "kubelet flag" => OWNED_KUBELET_FLAGS.iter().find(|(f, _)| f == name).map(|(_, h)| *h),
            // The cloud controller manager runs the cloud loops (cloud-provider external).
            _ if name == "cloud-provider" => Some("kube-aws runs the AWS cloud controller manager instead"),
            "apiserver flag" if name == crate::render::security::ADMISSION_FLAG => {
                Some("for Pod Security admission; set podSecurity in cluster.yaml")
            }
            "apiserver flag" if crate::render::security::OWNED_APISERVER_FLAGS.contains(&name.as_str()) => {
                Some("for the encryption of Secrets at rest and the audit log (docs/deploy.md)")
            }
            "apiserver flag" if crate::irsa::OWNED_APISERVER_FLAGS.contains(&name.as_str()) => {
                Some("for the service-account issuer; set issuerURL in cluster.yaml to move it")
            }
            _ => None,
        };
        if let Some(hint) = owned {
            errors.push(r.def.err(&path, format!("{kind} {name:?} is set by kube-aws ({hint})")));
            continue;
        }
        let claim = Claim::shared(scope.words(), kind, name, &value, r.def.err(&path, ""));
        if errors.take(merger.claim(r.def.name(), claim)).is_some() {
            target.insert(name.clone(), value);
        }
    }
}
