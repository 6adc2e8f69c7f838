//! From a loaded cluster and the discovered plugins to `ResolvedPlugins`:
//! which plugins are active in which scope, each scope's parameter values,
//! and the orchestration of the hook merges (src/plugin/hooks/), the checks
//! (src/plugin/checks.rs) and the release rules (src/plugin/releases.rs).

use indexmap::IndexMap;
use serde_json::{json, Value};

use super::checks::{
    check_file_references, check_max_pods, check_node_template_tags, check_pool_bounds, unknown_plugins,
};
use super::collector::Collector;
use super::discover::{discover, PluginDef};
use super::hooks::accounts::{service_account_context, service_accounts};
use super::hooks::cluster::cluster_hooks;
use super::hooks::node::node_hooks;
use super::hooks::*;
use super::merge::Merger;
use super::model::ParamSpec;
use super::params::{check_specs, resolve_values, Layer};
use super::releases::check_releases;
pub use super::scope::Scope;
use super::template::Renderer;
use super::PluginError;
use crate::config::{parse_s3_uri, Cluster, PluginSettings};
use crate::located::{join_key, Diagnostics, Located};

/// The reference templates see for a secret parameter.
pub fn secret_reference(plugin: &str, param: &str, scope: &str) -> String {
    if scope == "cluster" {
        format!("kube-aws-secret.{plugin}.{param}")
    } else {
        format!("kube-aws-secret.{plugin}.{param}.{scope}")
    }
}

/// The VPC CNI's parameter that turns prefix delegation on.
pub const PREFIX_DELEGATION_PARAM: &str = "enablePrefixDelegation";

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
/// (they may hold secrets), plus `s3Bucket`, `s3Prefix` and `kubernetes`
/// (and, added by `resolve_with`, `serviceAccountRoles` and `enabledPlugins`).
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
    let mut errors = Collector::default();
    errors.extend(unknown_plugins(cluster, defs));
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
    // `cluster.enabledPlugins`: the plugins enabled cluster-wide, by name, so
    // that one plugin's defaults can fit another's presence (the descheduler
    // without LowNodeUtilization beside the cluster-autoscaler).
    let enabled: Vec<&str> = defs
        .iter()
        .filter(|d| activation(cluster, d).cluster)
        .map(|d| d.name())
        .collect();
    if let Some(m) = cluster_ctx.as_object_mut() {
        m.insert("serviceAccountRoles".into(), json!(roles));
        m.insert("enabledPlugins".into(), json!(enabled));
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
        let mut one = Resolve {
            cluster,
            def,
            cluster_ctx: &cluster_ctx,
            out: &mut out,
            merger: &mut merger,
            errors: &mut errors,
        };
        one.plugin(&act);
    }
    if errors.is_empty() {
        errors.extend(check_releases(cluster, defs, &out));
        errors.extend(check_max_pods(cluster, &out));
        errors.extend(check_node_template_tags(cluster, &out));
        errors.extend(check_pool_bounds(cluster, &out));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(PluginError::Invalid(Diagnostics::sorted(errors.into_errors())))
    }
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
                    value: SecretParamValue(v.clone()),
                });
            }
            out.insert(k.clone(), Value::String(reference));
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// One active plugin being resolved into `out`.
struct Resolve<'a> {
    cluster: &'a Cluster,
    def: &'a PluginDef,
    cluster_ctx: &'a Value,
    out: &'a mut ResolvedPlugins,
    merger: &'a mut Merger,
    errors: &'a mut Collector,
}

impl Resolve<'_> {
    /// Renders and merges the plugin's hooks in every scope it is active in.
    fn plugin(&mut self, act: &Activation) {
        let (cluster, def) = (self.cluster, self.def);
        let Some(cluster_values) = self.errors.take(scope_values(cluster, def, &Scope::Cluster)) else {
            return;
        };
        if def.name() == VPC_CNI_PLUGIN {
            // One DaemonSet for the cluster: the cluster-scope value is the one
            // its env (ENABLE_PREFIX_DELEGATION) gets, on every node.
            self.out.vpc_cni_prefix_delegation =
                cluster_values.get(PREFIX_DELEGATION_PARAM) == Some(&Value::Bool(true));
        }
        let accounts = service_account_context(cluster, def, self.merger, self.errors);
        let mut scopes = vec![Scope::Cluster];
        if act.controller {
            scopes.push(Scope::Controller);
        }
        for (p, on) in cluster.config.worker.node_pools.iter().zip(&act.pools) {
            if *on {
                scopes.push(Scope::Pool(p.name.clone()));
            }
        }
        // One renderer for the plugin: each scope changes its params and scope only.
        let mut r = Renderer::new(def, self.cluster_ctx, &Value::Null, &Value::Null).with_service_accounts(&accounts);
        for scope in scopes {
            let values = if scope == Scope::Cluster {
                cluster_values.clone()
            } else {
                match self.errors.take(scope_values(cluster, def, &scope)) {
                    Some(v) => v,
                    None => continue,
                }
            };
            let params = template_params(def, &values, &cluster_values, &scope, &mut self.out.secrets);
            r.in_scope(&params, &scope.context());
            match &scope {
                Scope::Cluster => {
                    service_accounts(cluster, &r, self.out, self.errors);
                    cluster_hooks(cluster, &r, self.out, self.merger, self.errors)
                }
                Scope::Controller => node_hooks(
                    &r,
                    &scope,
                    "controller",
                    &mut self.out.controller,
                    self.merger,
                    self.errors,
                ),
                Scope::Pool(p) => {
                    let Some(target) = self.out.pools.get_mut(p) else {
                        continue;
                    };
                    node_hooks(&r, &scope, "worker", target, self.merger, self.errors)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
