//! A plugin's service accounts with their own IAM roles: the names templates
//! see (`serviceAccounts.<name>`), each account and role name claimed
//! cluster-wide, and the roles with their rendered statements.

use serde_json::{json, Value};

use super::{ResolvedPlugins, ServiceAccountRole};
use crate::config::{is_dns_label, is_dns_subdomain, Cluster};
use crate::located::{join_index, join_key};
use crate::plugin::checks::check_statement;
use crate::plugin::collector::Collector;
use crate::plugin::discover::PluginDef;
use crate::plugin::merge::{Claim, Merger};
use crate::plugin::scope::Scope;
use crate::plugin::template::Renderer;

/// The plugin's service accounts as templates see them
/// (`serviceAccounts.<name>.{roleArn, roleName, namespace}`), after checking
/// names and claiming each account and role name cluster-wide: two plugins
/// claiming one service account, or two accounts whose role names meet, are
/// errors naming both.
pub fn service_account_context(
    cluster: &Cluster,
    def: &PluginDef,
    merger: &mut Merger,
    errors: &mut Collector,
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
        let role = crate::irsa::role_name(cfg, &sa.namespace, &sa.name);
        let claims = [("service account", id.as_str()), ("IAM role name", role.as_str())];
        let conflict = claims.iter().find_map(|(kind, k)| {
            let at = def.err(&join_key(&key, "name"), "");
            merger
                .claim(def.name(), Claim::exclusive(Scope::Cluster.words(), *kind, k, at))
                .err()
        });
        if let Some(e) = conflict {
            errors.push(e);
            continue;
        }
        let arn = crate::irsa::role_arn(cfg, &role);
        ctx.insert(
            sa.name.clone(),
            json!({"roleArn": arn, "roleName": role, "namespace": sa.namespace}),
        );
    }
    Value::Object(ctx)
}

/// The plugin's service-account roles with their rendered statements.
pub fn service_accounts(cluster: &Cluster, r: &Renderer, out: &mut ResolvedPlugins, errors: &mut Collector) {
    let def = r.def;
    for (i, sa) in def.manifest.spec.service_accounts.iter().enumerate() {
        let key = join_index("spec.serviceAccounts", i);
        let role_name = crate::irsa::role_name(&cluster.config, &sa.namespace, &sa.name);
        let role_arn = crate::irsa::role_arn(&cluster.config, &role_name);
        let mut statements = Vec::new();
        for (j, st) in sa.iam.statements.iter().enumerate() {
            let skey = format!("{key}.iam.statements[{j}]");
            let Some(st) = errors.take(r.json(&skey, st)) else {
                continue;
            };
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
