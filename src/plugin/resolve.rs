//! From a loaded cluster and the discovered plugins to `ResolvedPlugins`:
//! which plugins are active in which scope, each scope's parameter values,
//! the rendered contributions, and their merge with conflict checks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use indexmap::IndexMap;
use regex::Regex;
use serde_json::{json, Value};

use super::discover::{discover, safe_relative, PluginDef};
use super::hooks::*;
use super::model::{FlagsSpec, NodeSpec, ParamSpec};
use super::params::{check_specs, resolve_values, Layer};
use super::template::Renderer;
use super::PluginError;
use crate::config::{
    check_flag_value, check_label_value, check_qualified_name, check_version_constraint, find_cycle, is_dns_label,
    is_dns_subdomain, kubelet_max_pods, parse_s3_uri, ChartSource, Cluster, Origin, PluginSettings, Release, Taint,
    DEFAULT_NAMESPACE, DEFAULT_TIMEOUT,
};
use crate::located::{closest, join_index, join_key, Diagnostics, Located};

static FLAG_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9.-]*$").unwrap());
// A plain unit file name: no leading '-' (systemctl would read it as an
// option), no path, no template instance escapes beyond '@'.
static UNIT_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9_][A-Za-z0-9@._-]{0,200}\.(service|timer|socket|path|mount|target)$").unwrap()
});
static PERMISSIONS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^0?[0-7]{3,4}$").unwrap());
static OWNER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z_][a-z0-9_-]*(:[a-z_][a-z0-9_-]*)?$").unwrap());
/// Kubelet flags kube-aws sets itself from cluster.yaml: a plugin uses
/// `nodeLabels`, `taints` or the pool's `maxPods` instead.
const OWNED_KUBELET_FLAGS: &[(&str, &str)] = &[
    ("node-labels", "use spec.nodes.<role>.nodeLabels"),
    ("register-with-taints", "use spec.nodes.<role>.taints"),
    ("max-pods", "set maxPods on the pool or controller in cluster.yaml"),
    ("cloud-provider", "kubelets always run with cloud-provider external"),
];
static LOGICAL_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9]{1,255}$").unwrap());

/// The reference templates see for a secret parameter.
pub fn secret_reference(plugin: &str, param: &str, scope: &str) -> String {
    if scope == "cluster" {
        format!("kube-aws-secret.{plugin}.{param}")
    } else {
        format!("kube-aws-secret.{plugin}.{param}.{scope}")
    }
}

/// One scope a plugin's hooks are rendered in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    Cluster,
    Controller,
    Pool(String),
}

impl Scope {
    fn context(&self) -> Value {
        match self {
            Scope::Cluster => json!({"role": "cluster", "pool": ""}),
            Scope::Controller => json!({"role": "controller", "pool": ""}),
            Scope::Pool(p) => json!({"role": "worker", "pool": p}),
        }
    }
    /// The key used in secret references.
    fn key(&self) -> String {
        match self {
            Scope::Cluster => "cluster".into(),
            Scope::Controller => "controller".into(),
            Scope::Pool(p) => format!("pool-{p}"),
        }
    }
    /// Words for messages.
    fn words(&self) -> String {
        match self {
            Scope::Cluster => "the cluster".into(),
            Scope::Controller => "the controller".into(),
            Scope::Pool(p) => format!("node pool {p:?}"),
        }
    }
}

/// Whether a plugin is active, in the cluster and in each node scope.
#[derive(Debug, Clone)]
pub struct Activation {
    pub cluster: bool,
    pub controller: bool,
    pub pools: Vec<bool>,
}

impl Activation {
    pub fn any(&self) -> bool {
        self.cluster || self.controller || self.pools.iter().any(|p| *p)
    }
}

/// Which scopes `def` is active in: the cluster-wide `enabled` (or the
/// manifest's `enabledByDefault`), which the controller and each pool may override.
pub fn activation(cluster: &Cluster, def: &PluginDef) -> Activation {
    let cfg = &cluster.config;
    let name = def.name();
    let at = |m: &IndexMap<String, PluginSettings>| m.get(name).and_then(|s| s.enabled);
    let base = at(&cfg.plugins).unwrap_or(def.manifest.enabled_by_default);
    Activation {
        cluster: base,
        controller: at(&cfg.controller.plugins).unwrap_or(base),
        pools: cfg
            .worker
            .node_pools
            .iter()
            .map(|p| at(&p.plugins).unwrap_or(base))
            .collect(),
    }
}

/// The cluster as templates see it: cluster.yaml without any plugin settings
/// (they may hold secrets), plus `s3Bucket`, `s3Prefix` and `kubernetes`.
fn cluster_context(cluster: &Cluster) -> Value {
    let mut v = serde_json::to_value(&cluster.config).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.remove("plugins");
        if let Some(c) = m.get_mut("controller").and_then(Value::as_object_mut) {
            c.remove("plugins");
        }
        if let Some(pools) = m
            .get_mut("worker")
            .and_then(|w| w.get_mut("nodePools"))
            .and_then(Value::as_array_mut)
        {
            for p in pools {
                if let Some(p) = p.as_object_mut() {
                    p.remove("plugins");
                }
            }
        }
        // `cluster.kubernetes`: the resolved version and the addon pins of its minor
        // (src/config/versions.rs), so charts never skew from the control plane.
        m.insert(
            "kubernetes".into(),
            serde_json::to_value(cluster.kubernetes()).unwrap_or(Value::Null),
        );
        if let Ok((bucket, prefix)) = parse_s3_uri(&cluster.config.s3_uri) {
            m.insert("s3Bucket".into(), Value::String(bucket));
            m.insert("s3Prefix".into(), Value::String(prefix));
        }
    }
    v
}

/// Every plugin visible from the cluster's work tree, resolved and merged.
pub fn resolve_plugins(cluster: &Cluster) -> Result<ResolvedPlugins, PluginError> {
    let defs = discover(&cluster.dir)?;
    resolve_with(cluster, &defs)
}

/// `resolve_plugins` over an explicit plugin list (for tests and tools).
pub fn resolve_with(cluster: &Cluster, defs: &[PluginDef]) -> Result<ResolvedPlugins, PluginError> {
    let mut errors = unknown_plugins(cluster, defs);
    let mut out = ResolvedPlugins::default();
    for p in &cluster.config.worker.node_pools {
        out.pools.insert(p.name.clone(), NodeHooks::default());
    }
    let mut merger = Merger::default();
    let mut cluster_ctx = cluster_context(cluster);
    // `cluster.serviceAccountRoles`: every active plugin's service account with
    // an IAM role, as `namespace/name` (the pod identity webhook's templates
    // insist on mutating exactly these).
    let roles: Vec<String> = defs
        .iter()
        .filter(|d| activation(cluster, d).any())
        .flat_map(|d| d.manifest.spec.service_accounts.iter())
        .map(|sa| format!("{}/{}", sa.namespace, sa.name))
        .collect();
    if let Some(m) = cluster_ctx.as_object_mut() {
        m.insert("serviceAccountRoles".into(), json!(roles));
    }
    for def in defs {
        let act = activation(cluster, def);
        if !act.any() {
            continue;
        }
        let mut spec_errors = check_specs(def);
        spec_errors.extend(check_file_references(def));
        if !spec_errors.is_empty() {
            errors.extend(spec_errors);
            continue;
        }
        out.plugins.push(ActivePlugin {
            name: def.name().to_string(),
            version: def.manifest.metadata.version.clone(),
            description: def.manifest.metadata.description.clone(),
            source: def.source,
        });
        if let Err(e) = resolve_one(cluster, def, &act, &cluster_ctx, &mut out, &mut merger) {
            errors.extend(e);
        }
    }
    if errors.is_empty() {
        errors.extend(check_releases(cluster, defs, &out));
        errors.extend(check_max_pods(cluster, &out));
        errors.extend(check_node_template_tags(cluster, &out));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(PluginError::Invalid(Diagnostics::sorted(errors)))
    }
}

/// Each node kind's max-pods against its instance type, now that the active
/// CNI is known (the ENI table only binds with the VPC CNI).
fn check_max_pods(cluster: &Cluster, out: &ResolvedPlugins) -> Vec<Located> {
    let cfg = &cluster.config;
    let c = &cfg.controller;
    let mut nodes = vec![("controller".to_string(), c.instance_type.as_str(), c.max_pods)];
    for (i, p) in cfg.worker.node_pools.iter().enumerate() {
        nodes.push((format!("worker.nodePools[{i}]"), p.instance_type.as_str(), p.max_pods));
    }
    let mut errors = Vec::new();
    for (base, instance_type, wanted) in nodes {
        if let Err(why) = kubelet_max_pods(out.vpc_cni(), instance_type, wanted) {
            let key = if wanted.is_some() { "maxPods" } else { "instanceType" };
            let path = join_key(&base, key);
            errors.push(Located::new(&cluster.file, cluster.source.locate(&path), &path, why));
        }
    }
    errors
}

/// An autoscaled pool's node-template tags fit AWS's tag key limit (a long
/// label key would otherwise fail the stack at deploy time).
fn check_node_template_tags(cluster: &Cluster, out: &ResolvedPlugins) -> Vec<Located> {
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
fn check_file_references(def: &PluginDef) -> Vec<Located> {
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
fn unknown_plugins(cluster: &Cluster, defs: &[PluginDef]) -> Vec<Located> {
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
            let mut msg = format!("there is no plugin {name:?}");
            match closest(name, &names) {
                Some(best) => msg.push_str(&format!(" (did you mean {best:?}?)")),
                None => msg.push_str(" (run `kube-aws plugins list` to see the plugins)"),
            }
            let pos = cluster
                .source
                .key(&path)
                .unwrap_or_else(|| cluster.source.locate(&path));
            errors.push(Located::new(&cluster.file, pos, &path, msg));
        }
    }
    errors
}

/// Where the values of one plugin come from for each scope.
fn scope_values(cluster: &Cluster, def: &PluginDef, scope: &Scope) -> Result<IndexMap<String, Value>, Vec<Located>> {
    let cfg = &cluster.config;
    let name = def.name();
    let empty = IndexMap::new();
    let base_path = join_key("plugins", name);
    let mut layers = vec![Layer {
        values: cfg.plugins.get(name).map(|s| &s.params).unwrap_or(&empty),
        path: base_path.clone(),
    }];
    let scope_path = match scope {
        Scope::Cluster => None,
        Scope::Controller => Some((join_key("controller.plugins", name), cfg.controller.plugins.get(name))),
        Scope::Pool(p) => {
            let i = cfg.worker.node_pools.iter().position(|x| &x.name == p).unwrap_or(0);
            let path = join_key(&format!("worker.nodePools[{i}].plugins"), name);
            Some((path, cfg.worker.node_pools.get(i).and_then(|x| x.plugins.get(name))))
        }
    };
    let mut missing_at = if cfg.plugins.contains_key(name) {
        base_path
    } else {
        "plugins".to_string()
    };
    if let Some((path, Some(settings))) = &scope_path {
        layers.push(Layer {
            values: &settings.params,
            path: path.clone(),
        });
        if !cfg.plugins.contains_key(name) {
            missing_at = path.clone();
        }
    }
    resolve_values(def, &layers, &cluster.file, &cluster.source, &missing_at)
}

/// A plugin's resolved cluster-scope parameters without its `secret: true`
/// ones: what a hook may see (`KUBE_AWS_PARAMS`).
pub fn public_params(cluster: &Cluster, def: &PluginDef) -> Result<IndexMap<String, Value>, Vec<Located>> {
    let mut values = scope_values(cluster, def, &Scope::Cluster)?;
    let params = &def.manifest.spec.parameters;
    values.retain(|k, _| params.get(k).is_none_or(|s| !s.secret));
    Ok(values)
}

/// Replaces secret values with their references, recording each reference.
fn template_params(
    def: &PluginDef,
    values: &IndexMap<String, Value>,
    cluster_values: &IndexMap<String, Value>,
    scope: &Scope,
    secrets: &mut Vec<SecretRef>,
) -> Value {
    let mut out = serde_json::Map::new();
    for (k, v) in values {
        let spec: Option<&ParamSpec> = def.manifest.spec.parameters.get(k);
        if spec.is_some_and(|s| s.secret) {
            // A scope that does not override the secret shares the cluster's reference.
            let owner = if cluster_values.get(k) == Some(v) {
                Scope::Cluster
            } else {
                scope.clone()
            };
            let reference = secret_reference(def.name(), k, &owner.key());
            if !secrets.iter().any(|s| s.reference == reference) {
                secrets.push(SecretRef {
                    plugin: def.name().to_string(),
                    param: k.clone(),
                    reference: reference.clone(),
                    scope: owner.key(),
                    value: SecretValue(v.clone()),
                });
            }
            out.insert(k.clone(), Value::String(reference));
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

fn resolve_one(
    cluster: &Cluster,
    def: &PluginDef,
    act: &Activation,
    cluster_ctx: &Value,
    out: &mut ResolvedPlugins,
    merger: &mut Merger,
) -> Result<(), Vec<Located>> {
    let mut errors = Vec::new();
    let cluster_values = scope_values(cluster, def, &Scope::Cluster)?;
    let accounts = service_account_context(cluster, def, merger, &mut errors);
    let mut scopes = vec![Scope::Cluster];
    if act.controller {
        scopes.push(Scope::Controller);
    }
    for (p, on) in cluster.config.worker.node_pools.iter().zip(&act.pools) {
        if *on {
            scopes.push(Scope::Pool(p.name.clone()));
        }
    }
    for scope in scopes {
        let values = if scope == Scope::Cluster {
            cluster_values.clone()
        } else {
            match scope_values(cluster, def, &scope) {
                Ok(v) => v,
                Err(e) => {
                    errors.extend(e);
                    continue;
                }
            }
        };
        let params = template_params(def, &values, &cluster_values, &scope, &mut out.secrets);
        let r = Renderer::new(def, cluster_ctx, &params, &scope.context()).with_service_accounts(&accounts);
        match &scope {
            Scope::Cluster => {
                service_accounts(cluster, &r, out, &mut errors);
                cluster_hooks(cluster, &r, out, merger, &mut errors)
            }
            Scope::Controller => {
                let spec = &def.manifest.spec;
                node_hooks(
                    &r,
                    &scope,
                    &spec.kubernetes.kubelet.controller,
                    "spec.kubernetes.kubelet.controller.flags",
                    &spec.nodes.controller,
                    "spec.nodes.controller",
                    &mut out.controller,
                    merger,
                    &mut errors,
                )
            }
            Scope::Pool(p) => {
                let spec = &def.manifest.spec;
                let Some(target) = out.pools.get_mut(p) else { continue };
                node_hooks(
                    &r,
                    &scope,
                    &spec.kubernetes.kubelet.worker,
                    "spec.kubernetes.kubelet.worker.flags",
                    &spec.nodes.worker,
                    "spec.nodes.worker",
                    target,
                    merger,
                    &mut errors,
                )
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The plugin's service accounts as templates see them
/// (`serviceAccounts.<name>.{roleArn, roleName, namespace}`), after checking
/// names and claiming each account and role name cluster-wide: two plugins
/// claiming one service account, or two accounts whose role names meet, are
/// errors naming both.
fn service_account_context(
    cluster: &Cluster,
    def: &PluginDef,
    merger: &mut Merger,
    errors: &mut Vec<Located>,
) -> Value {
    let cfg = &cluster.config;
    let mut ctx = serde_json::Map::new();
    for (i, sa) in def.manifest.spec.service_accounts.iter().enumerate() {
        let key = join_index("spec.serviceAccounts", i);
        if !is_dns_label(&sa.namespace, 63) {
            errors.push(def.err(
                &join_key(&key, "namespace"),
                format!(
                    "{:?} is not a valid namespace (a DNS-1123 label: lowercase letters, digits and '-')",
                    sa.namespace
                ),
            ));
            continue;
        }
        if !is_dns_subdomain(&sa.name, 253) {
            errors.push(def.err(
                &join_key(&key, "name"),
                format!(
                    "{:?} is not a valid service account name (a DNS-1123 subdomain: lowercase letters, digits, '-' and '.')",
                    sa.name
                ),
            ));
            continue;
        }
        if ctx.contains_key(&sa.name) {
            errors.push(def.err(
                &join_key(&key, "name"),
                format!(
                    "the plugin declares two service accounts named {:?} (templates name them by name: rename one)",
                    sa.name
                ),
            ));
            continue;
        }
        let id = format!("{}/{}", sa.namespace, sa.name);
        let role = crate::irsa::role_name(&cfg.cluster_name, &sa.namespace, &sa.name);
        let claims = [("service account", id.as_str()), ("IAM role name", role.as_str())];
        if let Some(e) = claims.iter().find_map(|(kind, k)| {
            merger
                .claim(
                    &Scope::Cluster,
                    "the cluster",
                    kind,
                    k,
                    "",
                    false,
                    def.name(),
                    def.err(&join_key(&key, "name"), ""),
                )
                .err()
        }) {
            errors.push(e);
            continue;
        }
        let arn = crate::irsa::role_arn(cfg, &role);
        ctx.insert(
            sa.name.clone(),
            json!({"roleArn": arn, "roleName": role, "namespace": sa.namespace}),
        );
    }
    if !ctx.is_empty() && cfg.issuer_url.is_none() {
        if let Ok((bucket, _)) = parse_s3_uri(&cfg.s3_uri) {
            if bucket.contains('.') {
                errors.push(def.err(
                    "spec.serviceAccounts",
                    format!(
                        "the bucket {bucket:?} has a '.' in its name, so IAM cannot read the service-account \
                         issuer from it over HTTPS (virtual-hosted TLS); set issuerURL in cluster.yaml and host \
                         the discovery documents there, or use a bucket without '.'"
                    ),
                ));
            }
        }
    }
    Value::Object(ctx)
}

/// The plugin's service-account roles with their rendered statements.
fn service_accounts(cluster: &Cluster, r: &Renderer, out: &mut ResolvedPlugins, errors: &mut Vec<Located>) {
    let def = r.def;
    for (i, sa) in def.manifest.spec.service_accounts.iter().enumerate() {
        let key = join_index("spec.serviceAccounts", i);
        let role_name = crate::irsa::role_name(&cluster.config.cluster_name, &sa.namespace, &sa.name);
        let role_arn = crate::irsa::role_arn(&cluster.config, &role_name);
        let mut statements = Vec::new();
        for (j, st) in sa.iam.statements.iter().enumerate() {
            let skey = format!("{key}.iam.statements[{j}]");
            let before = errors.len();
            let st = r.json(&skey, st, errors);
            if errors.len() > before {
                continue;
            }
            match check_statement(&st) {
                Ok(()) => statements.push(st),
                Err(why) => errors.push(def.err(&skey, why)),
            }
        }
        if sa.iam.statements.is_empty() {
            errors.push(def.err(
                &join_key(&key, "iam.statements"),
                format!("service account {}/{} has no IAM statements (a role without a policy grants nothing: remove the entry or add statements)", sa.namespace, sa.name),
            ));
        }
        out.service_accounts.push(ServiceAccountRole {
            plugin: def.name().to_string(),
            namespace: sa.namespace.clone(),
            name: sa.name.clone(),
            role_name,
            role_arn,
            statements,
        });
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
struct Merger {
    owners: HashMap<(String, String, String), Owner>,
}

impl Merger {
    /// Claims `key` for `plugin` with `value`. Returns Ok(true) when the key is
    /// new, Ok(false) when it was already set to the same value, and an error
    /// naming both plugins and values otherwise. `same_value_ok` is false for
    /// things that cannot be shared (files, units, logical IDs).
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        scope: &Scope,
        place: &str,
        kind: &str,
        key: &str,
        value: &str,
        same_value_ok: bool,
        plugin: &str,
        at: Located,
    ) -> Result<bool, Located> {
        // The place words name the scope or stack, so they key the identity too.
        let k = (format!("{}/{place}", scope.key()), kind.to_string(), key.to_string());
        match self.owners.get(&k) {
            None => {
                self.owners.insert(
                    k,
                    Owner {
                        plugin: plugin.to_string(),
                        value: value.to_string(),
                        at,
                    },
                );
                Ok(true)
            }
            Some(first) if same_value_ok && first.value == value => Ok(false),
            Some(first) => {
                let mut e = at.clone();
                let first_at = format!("{}:{}", first.at.file.display(), first.at.pos.line);
                e.message = if same_value_ok {
                    format!(
                        "{kind} {key:?} in {place}: plugin {:?} sets {value:?}, but plugin {:?} sets {:?} ({first_at}) (make them agree or disable one)",
                        plugin,
                        first.plugin,
                        first.value
                    )
                } else {
                    format!(
                        "{kind} {key:?} in {place} comes from plugin {:?} and from plugin {:?} ({first_at}) (rename one or disable one of the plugins)",
                        plugin,
                        first.plugin
                    )
                };
                Err(e)
            }
        }
    }
}

/// Flags of one component into `target`, with conflict checks.
#[allow(clippy::too_many_arguments)]
fn merge_flags(
    r: &Renderer,
    scope: &Scope,
    kind: &str,
    spec: &FlagsSpec,
    key: &str,
    target: &mut BTreeMap<String, String>,
    merger: &mut Merger,
    errors: &mut Vec<Located>,
) {
    for (name, v) in &spec.flags {
        let path = join_key(key, name);
        if !FLAG_NAME.is_match(name) {
            let hint = name.trim_start_matches('-');
            errors.push(r.def.err(
                &path,
                format!("{name:?} is not a flag name (write it without leading dashes, e.g. {hint:?})"),
            ));
            continue;
        }
        let value = match r.field(&path, &v.to_text()) {
            Ok(x) => x,
            Err(e) => {
                errors.push(e);
                continue;
            }
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
            "apiserver flag" if crate::irsa::OWNED_APISERVER_FLAGS.contains(&name.as_str()) => {
                Some("for the service-account issuer; set issuerURL in cluster.yaml to move it")
            }
            _ => None,
        };
        if let Some(hint) = owned {
            errors.push(r.def.err(&path, format!("{kind} {name:?} is set by kube-aws ({hint})")));
            continue;
        }
        match merger.claim(
            scope,
            &scope.words(),
            kind,
            name,
            &value,
            true,
            r.def.name(),
            r.def.err(&path, ""),
        ) {
            Ok(_) => {
                target.insert(name.clone(), value);
            }
            Err(e) => errors.push(e),
        }
    }
}

fn cluster_hooks(
    cluster: &Cluster,
    r: &Renderer,
    out: &mut ResolvedPlugins,
    merger: &mut Merger,
    errors: &mut Vec<Located>,
) {
    let def = r.def;
    let spec = &def.manifest.spec;
    let scope = Scope::Cluster;
    let k = &spec.kubernetes;
    merge_flags(
        r,
        &scope,
        "apiserver flag",
        &k.api_server,
        "spec.kubernetes.apiServer.flags",
        &mut out.cluster.api_server_flags,
        merger,
        errors,
    );
    merge_flags(
        r,
        &scope,
        "controller-manager flag",
        &k.controller_manager,
        "spec.kubernetes.controllerManager.flags",
        &mut out.cluster.controller_manager_flags,
        merger,
        errors,
    );
    merge_flags(
        r,
        &scope,
        "scheduler flag",
        &k.scheduler,
        "spec.kubernetes.scheduler.flags",
        &mut out.cluster.scheduler_flags,
        merger,
        errors,
    );

    let mut names = HashSet::new();
    for (i, m) in k.manifests.iter().enumerate() {
        let key = join_index("spec.kubernetes.manifests", i);
        let rel = match r.field(&key, m) {
            Ok(x) => x,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let content = match r.file(&key, &rel) {
            Ok(x) => x,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if let Err(e) = check_manifest(&def.display_file(&rel), &content) {
            errors.push(e);
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

    if let Some(cfn) = &spec.cloudformation {
        if let Some(c) = cloudformation(cluster, r, cfn, merger, errors) {
            out.cluster.cloudformation.push(c);
        }
    }

    for (i, c) in spec.charts.iter().enumerate() {
        if let Some(rel) = chart(cluster, r, i, c, errors) {
            out.releases.push(rel);
        }
    }
}

/// Parses every YAML document of a manifest; each must be an object with
/// apiVersion and kind.
fn check_manifest(file: &Path, content: &str) -> Result<(), Located> {
    crate::located::check_yaml(file, content, &crate::reader::TEXT_LIMIT)?;
    for doc in serde_yaml::Deserializer::from_str(content) {
        let v: serde_yaml::Value = serde::Deserialize::deserialize(doc).map_err(|e| {
            let pos = e
                .location()
                .map(|l| crate::located::Pos {
                    line: l.line(),
                    col: l.column(),
                })
                .unwrap_or_default();
            Located::new(file, pos, "", format!("the rendered manifest is not YAML: {e}"))
        })?;
        if v.is_null() {
            continue;
        }
        let ok = v.get("apiVersion").is_some_and(|x| x.is_string()) && v.get("kind").is_some_and(|x| x.is_string());
        if !ok {
            return Err(Located::new(
                file,
                crate::located::Pos { line: 1, col: 1 },
                "",
                "a rendered manifest document lacks apiVersion or kind (each document must be a Kubernetes object)",
            ));
        }
    }
    Ok(())
}

fn cloudformation(
    cluster: &Cluster,
    r: &Renderer,
    cfn: &super::model::CloudFormationSpec,
    merger: &mut Merger,
    errors: &mut Vec<Located>,
) -> Option<CfnContribution> {
    let def = r.def;
    let stack = match r.field("spec.cloudformation.stack", &cfn.stack) {
        Ok(s) => s,
        Err(e) => {
            errors.push(e);
            return None;
        }
    };
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
    let mut load = |key: &str, rel: &Option<String>, what: &str| -> serde_json::Map<String, Value> {
        let Some(rel) = rel else { return serde_json::Map::new() };
        let text = match r.field(key, rel).and_then(|rel| r.file(key, &rel).map(|t| (rel, t))) {
            Ok(x) => x,
            Err(e) => {
                errors.push(e);
                return serde_json::Map::new();
            }
        };
        let (rel, text) = text;
        let shown = def.display_file(&rel);
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => {
                let mut good = serde_json::Map::new();
                for (id, body) in m {
                    let shape_ok = match what {
                        "resource" => body.get("Type").is_some_and(Value::is_string),
                        _ => body.get("Value").is_some(),
                    };
                    if !LOGICAL_ID.is_match(&id) {
                        errors.push(Located::new(
                            &shown,
                            crate::located::Pos { line: 1, col: 1 },
                            "",
                            format!("{id:?} is not a CloudFormation logical ID (use letters and digits only)"),
                        ));
                    } else if !shape_ok {
                        let need = if what == "resource" {
                            "a \"Type\""
                        } else {
                            "a \"Value\""
                        };
                        errors.push(Located::new(
                            &shown,
                            crate::located::Pos { line: 1, col: 1 },
                            "",
                            format!("{what} {id:?} has no {need}"),
                        ));
                    } else {
                        let at = Located::new(
                            &shown,
                            crate::located::Pos {
                                line: line_of(&text, &id),
                                col: 1,
                            },
                            "",
                            "",
                        );
                        match merger.claim(
                            &Scope::Cluster,
                            &format!("stack {stack:?}"),
                            &format!("CloudFormation {what}"),
                            &id,
                            "",
                            false,
                            def.name(),
                            at,
                        ) {
                            Ok(_) => {
                                good.insert(id, body);
                            }
                            Err(e) => errors.push(e),
                        }
                    }
                }
                good
            }
            Ok(_) => {
                errors.push(Located::new(
                    &shown,
                    crate::located::Pos { line: 1, col: 1 },
                    "",
                    format!("the rendered {what}s must be a JSON object of logical ID to {what}"),
                ));
                serde_json::Map::new()
            }
            Err(e) => {
                errors.push(Located::new(
                    &shown,
                    crate::located::Pos {
                        line: e.line(),
                        col: e.column(),
                    },
                    "",
                    format!(
                        "plugin {:?}: the rendered file is not JSON: {e} (quote values with the json_encode filter)",
                        def.name()
                    ),
                ));
                serde_json::Map::new()
            }
        }
    };
    let resources = load("spec.cloudformation.resources", &cfn.resources, "resource");
    let outputs = load("spec.cloudformation.outputs", &cfn.outputs, "output");
    Some(CfnContribution {
        plugin: def.name().to_string(),
        stack,
        resources,
        outputs,
    })
}

/// The 1-based line where `"needle"` first appears, or 1.
fn line_of(text: &str, needle: &str) -> usize {
    let quoted = format!("\"{needle}\"");
    text.lines()
        .position(|l| l.contains(&quoted))
        .map(|i| i + 1)
        .unwrap_or(1)
}

fn chart(
    cluster: &Cluster,
    r: &Renderer,
    i: usize,
    c: &crate::config::ChartSpec,
    errors: &mut Vec<Located>,
) -> Option<PluginRelease> {
    let def = r.def;
    let base = join_index("spec.charts", i);
    let before = errors.len();
    let raw = serde_json::to_value(c).unwrap_or(Value::Null);
    let rendered = r.json(&base, &raw, errors);
    if errors.len() > before {
        return None;
    }
    let c: crate::config::ChartSpec = match serde_json::from_value(rendered) {
        Ok(c) => c,
        Err(e) => {
            errors.push(def.err(&base, format!("after rendering: {e}")));
            return None;
        }
    };
    let err = |key: &str, msg: String| def.err(&join_key(&base, key), msg);
    if !is_dns_label(&c.name, 53) {
        errors.push(err(
            "name",
            format!(
                "{:?} is not a valid release name (use lowercase letters, digits and '-')",
                c.name
            ),
        ));
    }
    let source = match (&c.repo, &c.oci, &c.path) {
        (Some(repo), None, None) => match url::Url::parse(repo) {
            Ok(u) if u.scheme() == "http" || u.scheme() == "https" => Some(ChartSource::Repo(repo.clone())),
            _ => {
                errors.push(err(
                    "repo",
                    format!("{repo:?} is not an http(s) URL (for example \"https://charts.example.com\")"),
                ));
                None
            }
        },
        (None, Some(oci), None) => {
            if oci
                .strip_prefix("oci://")
                .is_some_and(|r| r.contains('/') && !r.ends_with('/'))
            {
                Some(ChartSource::Oci(oci.clone()))
            } else {
                errors.push(err(
                    "oci",
                    format!("{oci:?} is not an OCI chart reference (use oci://host/path/name)"),
                ));
                None
            }
        }
        (None, None, Some(p)) => match (&def.work_tree_dir, safe_relative(p)) {
            (_, Err(why)) => {
                errors.push(err("path", why));
                None
            }
            (None, Ok(_)) => {
                errors.push(err(
                    "path",
                    format!("{p:?}: a built-in plugin cannot ship a chart directory (use repo or oci)"),
                ));
                None
            }
            (Some(wt), Ok(clean)) => {
                let rel = wt.join(clean);
                if cluster.dir.join(&rel).exists() {
                    Some(ChartSource::Path(rel.to_string_lossy().into_owned()))
                } else {
                    errors.push(err(
                        "path",
                        format!("{p:?} does not exist in {}", def.display_dir.display()),
                    ));
                    None
                }
            }
        },
        (None, None, None) => {
            errors.push(def.err(
                &base,
                format!(
                    "release {:?} has no chart source (set one of repo, oci or path)",
                    c.name
                ),
            ));
            None
        }
        _ => {
            errors.push(def.err(
                &base,
                format!(
                    "release {:?} sets more than one of repo, oci and path (keep one)",
                    c.name
                ),
            ));
            None
        }
    };
    if let Some(v) = &c.version {
        if let Err(why) = check_version_constraint(v) {
            errors.push(err("version", format!("{v:?} is not a version or constraint: {why}")));
        }
    }
    if let Some(ns) = &c.namespace {
        if !is_dns_label(ns, 63) {
            errors.push(err("namespace", format!("{ns:?} is not a valid namespace")));
        }
    }
    let timeout = match c.timeout.as_deref().map(humantime::parse_duration) {
        None => DEFAULT_TIMEOUT,
        Some(Ok(d)) if d > Duration::ZERO => d,
        Some(_) => {
            errors.push(err(
                "timeout",
                format!(
                    "{:?} is not a positive duration (use for example \"5m\")",
                    c.timeout.clone().unwrap_or_default()
                ),
            ));
            DEFAULT_TIMEOUT
        }
    };
    let mut values = Vec::new();
    for (j, f) in c.values.iter().flatten().enumerate() {
        let key = format!("{base}.values[{j}]");
        match r.file(&key, f) {
            Ok(content) => {
                let shown = def.display_file(f);
                if let Err(e) = crate::located::check_yaml(&shown, &content, &crate::reader::TEXT_LIMIT) {
                    errors.push(e);
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
                        crate::located::Pos { line: 1, col: 1 },
                        "",
                        format!("plugin {:?}: rendered values must be a YAML map", def.name()),
                    )),
                    Err(e) => {
                        let pos = e
                            .location()
                            .map(|l| crate::located::Pos {
                                line: l.line(),
                                col: l.column(),
                            })
                            .unwrap_or_default();
                        errors.push(Located::new(&shown, pos, "", format!("plugin {:?}: the rendered values are not YAML: {e} (quote values with the json_encode filter)", def.name())));
                    }
                }
            }
            Err(e) => errors.push(e),
        }
    }
    // The plugin's `set` is part of the plugin layer, so the user's values/<release>.yaml still wins over it.
    if !c.set.is_empty() {
        values.push(PluginValues {
            plugin: def.name().to_string(),
            file: format!("{}#{base}.set", super::model::MANIFEST_FILE),
            content: serde_yaml::to_string(&c.set).unwrap_or_default(),
        });
    }
    let source = source?;
    let chart = c
        .chart
        .clone()
        .unwrap_or_else(|| crate::config::default_chart_name(&source, &c.name));
    let user_values = format!("values/{}.yaml", c.name);
    Some(PluginRelease {
        release: Release {
            name: c.name.clone(),
            chart,
            source,
            version: c.version.clone(),
            namespace: c.namespace.clone().unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
            values_files: if cluster.dir.join(&user_values).is_file() {
                vec![user_values]
            } else {
                Vec::new()
            },
            set: serde_json::Map::new(),
            depends_on: c.depends_on.clone(),
            timeout,
            create_namespace: c.create_namespace.unwrap_or(true),
            bootstrap: c.bootstrap,
            origin: Origin::Plugin {
                plugin: def.name().to_string(),
                index: i,
            },
        },
        values,
    })
}

/// Release names unique across cluster.yaml and plugins; dependsOn known and acyclic.
fn check_releases(cluster: &Cluster, defs: &[PluginDef], out: &ResolvedPlugins) -> Vec<Located> {
    let mut errors = Vec::new();
    let def_of = |p: &str| defs.iter().find(|d| d.name() == p);
    let mut seen: HashMap<&str, String> = HashMap::new();
    for r in &cluster.releases {
        if let Origin::Cluster { index } = r.origin {
            seen.insert(
                &r.name,
                format!(
                    "cluster.yaml charts[{index}] ({}:{})",
                    cluster.file.display(),
                    cluster.source.locate(&format!("charts[{index}].name")).line
                ),
            );
        }
    }
    for pr in &out.releases {
        let Origin::Plugin { plugin, index } = &pr.release.origin else {
            continue;
        };
        let Some(def) = def_of(plugin) else { continue };
        let key = format!("spec.charts[{index}].name");
        let here = format!(
            "plugin {plugin:?} ({}:{})",
            def.file.display(),
            def.map.locate(&key).line
        );
        if let Some(first) = seen.get(pr.release.name.as_str()) {
            errors.push(def.err(
                &key,
                format!(
                    "release {:?} of plugin {plugin:?} collides with the release of the same name from {first} (rename one, or disable the plugin)",
                    pr.release.name
                ),
            ));
        } else {
            seen.insert(&pr.release.name, here);
        }
    }
    let all: Vec<&Release> = cluster
        .releases
        .iter()
        .chain(out.releases.iter().map(|p| &p.release))
        .collect();
    let known: Vec<&str> = all.iter().map(|r| r.name.as_str()).collect();
    // cluster.yaml releases may depend on plugin releases, so their targets are checked here,
    // where every release is known.
    for r in &cluster.releases {
        let Origin::Cluster { index } = r.origin else { continue };
        for (j, d) in r.depends_on.iter().enumerate() {
            if !known.contains(&d.as_str()) {
                let path = format!("charts[{index}].dependsOn[{j}]");
                let hint = match closest(d, &known) {
                    Some(best) => format!(" (did you mean {best:?}?)"),
                    None => " (list it under charts, enable the plugin that declares it, or remove it)".to_string(),
                };
                errors.push(Located::new(
                    &cluster.file,
                    cluster.source.locate(&path),
                    &path,
                    format!("{d:?} is not a release in this cluster or its enabled plugins{hint}"),
                ));
            }
        }
    }
    for pr in &out.releases {
        let Origin::Plugin { plugin, index } = &pr.release.origin else {
            continue;
        };
        let Some(def) = def_of(plugin) else { continue };
        for (j, d) in pr.release.depends_on.iter().enumerate() {
            if !known.contains(&d.as_str()) {
                let mut msg = format!(
                    "release {:?} depends on {d:?}, which no chart or enabled plugin declares",
                    pr.release.name
                );
                if let Some(best) = closest(d, &known) {
                    msg.push_str(&format!(" (did you mean {best:?}?)"));
                }
                errors.push(def.err(&format!("spec.charts[{index}].dependsOn[{j}]"), msg));
            }
        }
    }
    if errors.is_empty() {
        let graph: BTreeMap<&str, Vec<&str>> = all
            .iter()
            .map(|r| (r.name.as_str(), r.depends_on.iter().map(String::as_str).collect()))
            .collect();
        if let Some(cycle) = find_cycle(&graph) {
            let culprit = out.releases.iter().find(|p| cycle.contains(&p.release.name.as_str()));
            if let Some(pr) = culprit {
                if let Origin::Plugin { plugin, index } = &pr.release.origin {
                    if let Some(def) = def_of(plugin) {
                        errors.push(def.err(
                            &format!("spec.charts[{index}].dependsOn"),
                            format!(
                                "dependency cycle: {} (remove one of these dependsOn entries)",
                                cycle.join(" -> ")
                            ),
                        ));
                    }
                }
            }
        }
    }
    errors
}

#[allow(clippy::too_many_arguments)]
fn node_hooks(
    r: &Renderer,
    scope: &Scope,
    kubelet: &FlagsSpec,
    kubelet_key: &str,
    spec: &NodeSpec,
    base: &str,
    target: &mut NodeHooks,
    merger: &mut Merger,
    errors: &mut Vec<Located>,
) {
    let def = r.def;
    let plugin = def.name().to_string();
    merge_flags(
        r,
        scope,
        "kubelet flag",
        kubelet,
        kubelet_key,
        &mut target.kubelet_flags,
        merger,
        errors,
    );

    for (i, st) in spec.iam.statements.iter().enumerate() {
        let key = format!("{base}.iam.statements[{i}]");
        let before = errors.len();
        let st = r.json(&key, st, errors);
        if errors.len() > before {
            continue;
        }
        if let Err(why) = check_statement(&st) {
            errors.push(def.err(&key, why));
            continue;
        }
        if let Some(sid) = st.get("Sid").and_then(Value::as_str) {
            if let Err(e) = merger.claim(
                scope,
                &scope.words(),
                "IAM statement Sid",
                sid,
                "",
                false,
                &plugin,
                def.err(&join_key(&key, "Sid"), ""),
            ) {
                errors.push(e);
                continue;
            }
        }
        target.iam_statements.push(IamStatement {
            plugin: plugin.clone(),
            statement: st,
        });
    }

    for (i, f) in spec.files.iter().enumerate() {
        let key = format!("{base}.files[{i}]");
        let path = match r.field(&join_key(&key, "path"), &f.path) {
            Ok(p) => p,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if !path.starts_with('/') || path.split('/').any(|s| s == ".." || s == ".") || path.ends_with('/') {
            errors.push(def.err(
                &join_key(&key, "path"),
                format!("{path:?} is not an absolute file path (for example \"/etc/kube-aws/x.conf\")"),
            ));
            continue;
        }
        if !PERMISSIONS.is_match(&f.permissions) {
            errors.push(def.err(
                &join_key(&key, "permissions"),
                format!("{:?} is not an octal mode (for example \"0644\")", f.permissions),
            ));
            continue;
        }
        if !OWNER.is_match(&f.owner) {
            errors.push(def.err(
                &join_key(&key, "owner"),
                format!("{:?} is not user:group (for example \"root:root\")", f.owner),
            ));
            continue;
        }
        let Some(content) = body(r, &key, &f.content, &f.template, errors) else {
            continue;
        };
        match merger.claim(
            scope,
            &scope.words(),
            "file",
            &path,
            "",
            false,
            &plugin,
            def.err(&join_key(&key, "path"), ""),
        ) {
            Ok(_) => target.files.push(NodeFile {
                plugin: plugin.clone(),
                path,
                content,
                permissions: f.permissions.clone(),
                owner: f.owner.clone(),
            }),
            Err(e) => errors.push(e),
        }
    }

    for (i, u) in spec.systemd_units.iter().enumerate() {
        let key = format!("{base}.systemdUnits[{i}]");
        let name = match r.field(&join_key(&key, "name"), &u.name) {
            Ok(p) => p,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if !UNIT_NAME.is_match(&name) {
            errors.push(def.err(
                &join_key(&key, "name"),
                format!(
                    "{name:?} is not a unit file name (start with a letter, digit or '_', then letters, digits, \
                     '@', '.', '_' or '-', ending in .service, .timer, .socket, .path, .mount or .target; \
                     for example \"foo.service\")"
                ),
            ));
            continue;
        }
        let Some(content) = body(r, &key, &u.content, &u.template, errors) else {
            continue;
        };
        match merger.claim(
            scope,
            &scope.words(),
            "systemd unit",
            &name,
            "",
            false,
            &plugin,
            def.err(&join_key(&key, "name"), ""),
        ) {
            Ok(_) => target.systemd_units.push(SystemdUnit {
                plugin: plugin.clone(),
                name,
                content,
                enable: u.enable,
            }),
            Err(e) => errors.push(e),
        }
    }

    let mut kv = |what: &str,
                  map: &IndexMap<String, String>,
                  field: &str,
                  target: &mut BTreeMap<String, String>,
                  check: bool| {
        for (k, v) in map {
            let key = format!("{base}.{field}.{k}");
            let (k2, v2) = match (r.field(&key, k), r.field(&key, v)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    errors.push(e);
                    continue;
                }
            };
            if check {
                if let Err(why) = check_qualified_name(&k2) {
                    errors.push(def.err(&key, format!("{k2:?} is not a valid label key: {why}")));
                    continue;
                }
                if let Err(why) = check_label_value(&v2) {
                    errors.push(def.err(&key, format!("{v2:?} is not a valid value of label {k2:?}: {why}")));
                    continue;
                }
            }
            match merger.claim(scope, &scope.words(), what, &k2, &v2, true, &plugin, def.err(&key, "")) {
                Ok(_) => {
                    target.insert(k2, v2);
                }
                Err(e) => errors.push(e),
            }
        }
    };
    kv(
        "node label",
        &spec.node_labels,
        "nodeLabels",
        &mut target.node_labels,
        true,
    );
    kv("ASG tag", &spec.asg_tags, "asgTags", &mut target.asg_tags, false);

    if let Some(size) = &spec.asg_size {
        let mut bound = |name: &str, v: &Option<super::model::Scalar>| -> Option<u32> {
            let key = format!("{base}.asgSize.{name}");
            let text = r.field(&key, &v.as_ref()?.to_text()).map_err(|e| errors.push(e)).ok()?;
            if text.is_empty() {
                return None;
            }
            match text.parse::<u32>() {
                Ok(n) => {
                    let what = format!("ASG {name} size");
                    match merger.claim(
                        scope,
                        &scope.words(),
                        &what,
                        name,
                        &text,
                        true,
                        &plugin,
                        def.err(&key, ""),
                    ) {
                        Ok(_) => Some(n),
                        Err(e) => {
                            errors.push(e);
                            None
                        }
                    }
                }
                Err(_) => {
                    errors.push(def.err(&key, format!("{text:?} is not a whole number of instances")));
                    None
                }
            }
        };
        let min = bound("min", &size.min);
        let max = bound("max", &size.max);
        if let (Some(a), Some(b)) = (min, max) {
            if a > b {
                errors.push(def.err(
                    &format!("{base}.asgSize"),
                    format!("min {a} is above max {b} in {}", scope.words()),
                ));
            }
        }
        target.asg_min_size = min.or(target.asg_min_size);
        target.asg_max_size = max.or(target.asg_max_size);
    }

    for (i, t) in spec.taints.iter().enumerate() {
        let key = format!("{base}.taints[{i}]");
        let (k, v) = match (
            r.field(&join_key(&key, "key"), &t.key),
            r.field(&join_key(&key, "value"), &t.value),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                errors.push(e);
                continue;
            }
        };
        if let Err(why) = check_qualified_name(&k) {
            errors.push(def.err(&join_key(&key, "key"), format!("{k:?} is not a valid taint key: {why}")));
            continue;
        }
        if let Err(why) = check_label_value(&v) {
            errors.push(def.err(
                &join_key(&key, "value"),
                format!("{v:?} is not a valid taint value: {why}"),
            ));
            continue;
        }
        let id = format!("{k}:{:?}", t.effect);
        match merger.claim(
            scope,
            &scope.words(),
            "taint",
            &id,
            &v,
            true,
            &plugin,
            def.err(&key, ""),
        ) {
            Ok(true) => target.taints.push(Taint {
                key: k,
                value: v,
                effect: t.effect,
            }),
            Ok(false) => {}
            Err(e) => errors.push(e),
        }
    }
}

/// A file's or unit's body: inline `content` (a template) or a `template` file.
fn body(
    r: &Renderer,
    key: &str,
    content: &Option<String>,
    template: &Option<String>,
    errors: &mut Vec<Located>,
) -> Option<String> {
    let res = match (content, template) {
        (Some(c), None) => r.field(&join_key(key, "content"), c),
        (None, Some(t)) => {
            let k = join_key(key, "template");
            r.field(&k, t).and_then(|t| r.file(&k, &t))
        }
        _ => Err(r.def.err(key, "set exactly one of content and template")),
    };
    res.map_err(|e| errors.push(e)).ok()
}

/// The shape of an identity-policy statement.
fn check_statement(st: &Value) -> Result<(), String> {
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
            let mut msg = format!("{k:?} is not an IAM statement key");
            if let Some(best) = closest(k, &allowed) {
                msg.push_str(&format!(" (did you mean {best:?}?)"));
            }
            return Err(msg);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_cluster;

    /// A cluster with two pools and one work-tree plugin `p` from `plugin_yaml`.
    fn setup(cluster_yaml: &str, plugin_yaml: &str) -> (tempfile::TempDir, Cluster) {
        let dir = tempfile::tempdir().unwrap();
        let pdir = dir.path().join("plugins/p");
        std::fs::create_dir_all(&pdir).unwrap();
        std::fs::write(
            pdir.join("plugin.yaml"),
            format!("apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {{name: p, version: 0.1.0}}\n{plugin_yaml}"),
        )
        .unwrap();
        let text = format!(
            "clusterName: c1\nregion: us-west-2\ns3URI: s3://bucket-1/pre/fix\nworker:\n  nodePools:\n    - {{name: a, count: 1}}\n    - name: b\n      count: 1\n{cluster_yaml}"
        );
        let cluster = parse_cluster(dir.path(), Path::new("cluster.yaml"), &text).unwrap();
        (dir, cluster)
    }

    fn resolve(cluster: &Cluster) -> Result<ResolvedPlugins, String> {
        resolve_plugins(cluster).map_err(|e| e.to_string())
    }

    #[test]
    fn a_pool_can_opt_in_alone() {
        let (_d, c) = setup(
            "      plugins: {p: {enabled: true}}\n",
            "spec:\n  nodes:\n    worker:\n      nodeLabels: {p: 'on'}\n    controller:\n      nodeLabels: {p: 'on'}\n",
        );
        let r = resolve(&c).unwrap();
        assert!(r.pools["a"].node_labels.is_empty());
        assert_eq!(r.pools["b"].node_labels["p"], "on");
        assert!(r.controller.node_labels.is_empty());
        assert!(r.plugins.iter().any(|p| p.name == "p"));
    }

    #[test]
    fn a_pool_can_opt_out() {
        let (_d, c) = setup(
            "      plugins: {p: {enabled: false}}\nplugins:\n  p: {enabled: true}\n",
            "spec:\n  nodes:\n    worker:\n      asgTags: {t: '{{ scope.pool }}'}\n",
        );
        let r = resolve(&c).unwrap();
        assert_eq!(r.pools["a"].asg_tags["t"], "a");
        assert!(r.pools["b"].asg_tags.is_empty());
    }

    #[test]
    fn enabled_by_default_and_turned_off() {
        let yaml = "enabledByDefault: true\nspec:\n  kubernetes:\n    apiServer:\n      flags: {x: '1'}\n";
        let (_d, c) = setup("", yaml);
        assert_eq!(resolve(&c).unwrap().cluster.api_server_flags["x"], "1");
        let (_d, c) = setup("plugins:\n  p: {enabled: false}\n", yaml);
        assert!(resolve(&c).unwrap().cluster.api_server_flags.is_empty());
    }

    #[test]
    fn templates_never_see_plugin_settings_of_the_cluster() {
        let ctx_yaml = "spec:\n  parameters:\n    pw: {type: string, secret: true}\n  kubernetes:\n    manifests: []\n    apiServer:\n      flags: {x: '{{ cluster.plugins.p.pw }}'}\n";
        let (_d, c) = setup("plugins:\n  p: {enabled: true, pw: hunter2}\n", ctx_yaml);
        let err = resolve(&c).unwrap_err();
        assert!(err.contains("cluster.plugins.p.pw"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn s3_bucket_and_prefix_are_in_the_context() {
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  kubernetes:\n    apiServer:\n      flags: {x: '{{ cluster.s3Bucket }}|{{ cluster.s3Prefix }}|{{ scope.role }}'}\n",
        );
        assert_eq!(
            resolve(&c).unwrap().cluster.api_server_flags["x"],
            "bucket-1|pre/fix|cluster"
        );
    }

    #[test]
    fn a_flag_name_with_dashes_is_refused() {
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  kubernetes:\n    scheduler:\n      flags: {--v: '2'}\n",
        );
        let err = resolve(&c).unwrap_err();
        assert!(err.contains("without leading dashes, e.g. \"v\""), "{err}");
    }

    #[test]
    fn same_label_from_two_scopes_is_not_a_conflict() {
        // Each pool is its own scope: the same file path in two pools is fine.
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  nodes:\n    worker:\n      files: [{path: /etc/p, content: x}]\n",
        );
        let r = resolve(&c).unwrap();
        for pool in ["a", "b"] {
            assert_eq!(r.pools[pool].files.iter().filter(|f| f.plugin == "p").count(), 1);
        }
    }

    #[test]
    fn one_plugin_cannot_write_a_file_twice() {
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  nodes:\n    controller:\n      files: [{path: /etc/p, content: x}, {path: /etc/p, content: y}]\n",
        );
        let err = resolve(&c).unwrap_err();
        assert!(
            err.contains("file \"/etc/p\" in the controller comes from plugin \"p\" and from plugin \"p\""),
            "{err}"
        );
    }

    #[test]
    fn content_and_template_are_exclusive() {
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  nodes:\n    controller:\n      systemdUnits: [{name: a.service}]\n",
        );
        assert!(resolve(&c)
            .unwrap_err()
            .contains("set exactly one of content and template"));
    }

    #[test]
    fn unknown_stack_is_refused() {
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  cloudformation: {stack: node-pool-zzz}\n",
        );
        let err = resolve(&c).unwrap_err();
        assert!(err.contains("node-pool-a, node-pool-b"), "{err}");
    }

    #[test]
    fn plugin_depends_on_unknown_release() {
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  charts:\n    - {name: x, repo: 'https://c.example.com', dependsOn: [cert-manager]}\n",
        );
        let err = resolve(&c).unwrap_err();
        assert!(
            err.contains("depends on \"cert-manager\", which no chart or enabled plugin declares"),
            "{err}"
        );
    }

    #[test]
    fn missing_files_are_found_even_in_unused_scopes() {
        // No pool enables p's worker hooks here (the pools opt out), yet the typo is reported.
        let (_d, c) = setup(
            "      plugins: {p: {enabled: false}}\nplugins:\n  p: {enabled: true}\n",
            "spec:\n  nodes:\n    worker:\n      files: [{path: /etc/p, template: nope.tera}]\n",
        );
        let mut c = c;
        c.config.worker.node_pools[0].plugins = c.config.worker.node_pools[1].plugins.clone();
        let err = resolve(&c).unwrap_err();
        assert!(err.contains("\"nope.tera\" does not exist"), "{err}");
    }
    const KMS: &str = "kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\nplugins:\n  p: {enabled: true}\n";
    const SA: &str = "spec:\n  serviceAccounts:\n    - namespace: kube-system\n      name: dns\n      iam:\n        statements:\n          - {Sid: Change, Effect: Allow, Action: [route53:ChangeResourceRecordSets], Resource: 'arn:aws:route53:::hostedzone/{{ cluster.clusterName }}'}\n";

    #[test]
    fn a_service_account_gets_its_role_and_templates_its_arn() {
        let yaml =
            format!("{SA}  kubernetes:\n    apiServer:\n      flags: {{x: '{{{{ serviceAccounts.dns.roleArn }}}}'}}\n");
        let (_d, c) = setup(KMS, &yaml);
        let r = resolve(&c).unwrap();
        assert_eq!(
            r.cluster.api_server_flags["x"],
            "arn:aws:iam::111122223333:role/c1-kube-system-dns"
        );
        let sa = &r.service_accounts[0];
        assert_eq!(
            (sa.plugin.as_str(), sa.namespace.as_str(), sa.name.as_str()),
            ("p", "kube-system", "dns")
        );
        assert_eq!(sa.role_name, "c1-kube-system-dns");
        assert_eq!(sa.statements[0]["Resource"], "arn:aws:route53:::hostedzone/c1");
        // Nothing of it lands on a node role.
        let on_nodes = r.controller.iam_statements.iter().chain(&r.pools["a"].iam_statements);
        assert!(
            on_nodes.clone().all(|st| st.plugin != "p"),
            "{:?}",
            on_nodes.collect::<Vec<_>>()
        );
    }

    #[test]
    fn two_plugins_claiming_one_service_account_are_named_both() {
        let (d, c) = setup(&format!("{KMS}  q: {{enabled: true}}\n"), SA);
        let qdir = d.path().join("plugins/q");
        std::fs::create_dir_all(&qdir).unwrap();
        std::fs::write(
            qdir.join("plugin.yaml"),
            format!("apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {{name: q, version: 0.1.0}}\n{SA}"),
        )
        .unwrap();
        let err = resolve(&c).unwrap_err();
        assert!(
            err.contains("service account \"kube-system/dns\"")
                && err.contains("plugin \"q\"")
                && err.contains("plugin \"p\""),
            "{err}"
        );
        assert!(err.contains("plugins/q/plugin.yaml:"), "{err}");
    }

    #[test]
    fn two_service_accounts_with_one_role_name_are_named_both() {
        // c1-a-b-c either way: kube-system/x-y and kube-system-x/y would meet too.
        let two = "spec:\n  serviceAccounts:\n    - {namespace: a-b, name: c, iam: {statements: [{Effect: Allow, Action: [s3:GetObject], Resource: '*'}]}}\n    - {namespace: a, name: b-c, iam: {statements: [{Effect: Allow, Action: [s3:GetObject], Resource: '*'}]}}\n";
        let (_d, c) = setup(KMS, two);
        let err = resolve(&c).unwrap_err();
        assert!(
            err.contains("IAM role name \"c1-a-b-c\"") && err.contains("spec.serviceAccounts[1].name"),
            "{err}"
        );
    }

    #[test]
    fn bad_service_accounts_are_located() {
        let bad_ns = SA.replace("kube-system", "Kube_System");
        let (_d, c) = setup(KMS, &bad_ns);
        let err = resolve(&c).unwrap_err();
        assert!(
            err.contains("spec.serviceAccounts[0].namespace")
                && err.contains("\"Kube_System\" is not a valid namespace"),
            "{err}"
        );
        let star = SA.replace("[route53:ChangeResourceRecordSets]", "['*']");
        let (_d, c) = setup(KMS, &star);
        let err = resolve(&c).unwrap_err();
        assert!(
            err.contains("spec.serviceAccounts[0].iam.statements[0]") && err.contains("Action \"*\""),
            "{err}"
        );
        // Before kmsKeyARN is set (render only: up requires it), a placeholder account.
        let (_d, c) = setup("plugins:\n  p: {enabled: true}\n", SA);
        assert_eq!(
            resolve(&c).unwrap().service_accounts[0].role_arn,
            "arn:aws:iam::000000000000:role/c1-kube-system-dns"
        );
    }

    #[test]
    fn the_issuer_flags_are_kube_aws_own() {
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  kubernetes:\n    apiServer:\n      flags: {service-account-issuer: 'https://x'}\n",
        );
        let err = resolve(&c).unwrap_err();
        assert!(
            err.contains("\"service-account-issuer\" is set by kube-aws") && err.contains("issuerURL"),
            "{err}"
        );
    }

    #[test]
    fn a_node_statement_with_every_action_is_refused() {
        let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  nodes:\n    worker:\n      iam:\n        statements: [{Effect: Allow, Action: '*', Resource: '*'}]\n",
        );
        let err = resolve(&c).unwrap_err();
        assert!(
            err.contains("spec.nodes.worker.iam.statements[0]") && err.contains("every action"),
            "{err}"
        );
    }
}
