//! CloudFormation stacks as JSON values: `root` (nested stacks by TemplateURL),
//! `network` (VPC or an existing one, security groups, the API's NLB),
//! `control-plane` (IAM, launch template, group, one wait condition per addon)
//! and `node-pool-<name>`. Plugin resources and outputs merge into their stack.
//! This module owns what every stack shares (the template skeleton, the
//! cluster's tags) and the order stacks render in; each stack has its file.

mod control_plane;
mod etcd;
mod group;
mod iam;
pub mod iam_size;
mod names;
mod network;
mod nodes;
mod release_secrets;
mod root;
mod subnets;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::plan::{AddonBundle, Plan};
use super::{Ctx, RenderError, RenderInput};

pub use self::control_plane::iso_duration;
pub use self::etcd::{
    etcd_alarm_prefix, etcd_parameter_name, ETCD_LIFECYCLE_HOOK, ETCD_LIFECYCLE_TIMEOUT, ETCD_RESTORE_LOCK,
    ETCD_RESTORE_REQUEST, ETCD_SETTINGS,
};
pub use self::iam::{service_account_role_id, OIDC_PROVIDER};
pub use self::names::{DECRYPT_KMS_KEYS, PLAN_POINTER, SECRET_BUNDLE_KEY};
pub use self::network::{default_zone_count, new_vpc_zone_count};
pub use self::nodes::{
    pool_bounds, render_warnings, undrained_pool_warnings, zonal_suffix, NodeUserData, PoolBounds,
    ASG_LOGICAL_ID_VARIABLE, DRAIN_HEARTBEAT_MAX_SECONDS, DRAIN_HEARTBEAT_SECONDS, SSM_MANAGED_POLICY,
};
pub use self::release_secrets::{release_secrets, ReleaseSecrets};
pub use self::root::{AMI_METADATA, CA_CERT_HASH, KUBERNETES_VERSION, SECRETS_METADATA, ZONE_COUNT_OUTPUT};
pub use crate::config::is_arm64;

use self::control_plane::control_plane_stack;
use self::iam::service_account_resources;
use self::network::network_stack;
use self::nodes::pool_stack;
use self::root::root_stack;

fn template(description: String) -> Map<String, Value> {
    let mut t = Map::new();
    t.insert("AWSTemplateFormatVersion".into(), json!("2010-09-09"));
    t.insert("Description".into(), json!(description));
    t
}

/// `kubernetes.io/cluster/<name>`: the AWS cloud controller manager finds the
/// cluster's subnets, security groups and instances by it (`owned`: the
/// cluster's lifecycle owns them). An existing VPC's subnets must carry it
/// too; see docs/getting-started.md.
fn cluster_tag(ctx: &Ctx) -> String {
    cluster_tag_key(&ctx.cluster)
}

/// The cluster tag's key for cluster `name` (`kube-aws nodes` filters by it).
pub fn cluster_tag_key(name: &str) -> String {
    format!("kubernetes.io/cluster/{name}")
}

/// The `Name` tag of a node: `<cluster>-<role>`, role `controller` or
/// `worker-<pool>` (`kube-aws nodes` reads the role back from it).
pub fn instance_name(cluster: &str, role: &str) -> String {
    format!("{cluster}-{role}")
}

fn tags(ctx: &Ctx, name: &str) -> Value {
    json!([
        {"Key": "Name", "Value": name},
        {"Key": cluster_tag(ctx), "Value": "owned"},
    ])
}

/// Merges plugin contributions into their stacks; a logical ID clash is an error.
fn merge_plugins(input: &RenderInput, stacks: &mut [(String, Map<String, Value>)]) -> Result<(), RenderError> {
    for c in &input.plugins.cluster.cloudformation {
        let names: Vec<String> = stacks.iter().map(|(n, _)| n.clone()).collect();
        let Some((_, t)) = stacks.iter_mut().find(|(n, _)| *n == c.stack) else {
            return Err(RenderError::Plugin {
                plugin: c.plugin.clone(),
                message: format!(
                    "targets stack {:?}, which does not exist; stacks: {}",
                    c.stack,
                    names.join(", ")
                ),
            });
        };
        for (section, items) in [("Resources", &c.resources), ("Outputs", &c.outputs)] {
            let target = t
                .entry(section)
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .ok_or_else(|| RenderError::Template {
                    name: c.stack.clone(),
                    message: format!("{section} is not an object"),
                })?;
            for (k, v) in items {
                if target.contains_key(k) {
                    return Err(RenderError::Plugin {
                        plugin: c.plugin.clone(),
                        message: format!("{section} {k:?} already exists in stack {:?}; rename it", c.stack),
                    });
                }
                target.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

/// Every role's IAM sizes (iam_size.rs), or the refusal of the first role
/// IAM would refuse, located at the cluster.yaml name that makes it too long.
pub fn iam_sizes(
    input: &RenderInput,
    ctx: &Ctx,
    stacks: &[(String, Value)],
) -> Result<Vec<iam_size::RoleSize>, RenderError> {
    let names = [
        iam_size::Name {
            key: "s3URI",
            what: "the bucket name (s3URI)",
            value: ctx.bucket.clone(),
        },
        iam_size::Name {
            key: "clusterName",
            what: "the cluster name",
            value: ctx.cluster.clone(),
        },
    ];
    let mut out = Vec::new();
    for (stack, template) in stacks {
        let longest = iam_size::Longest::new(&ctx.cluster, &ctx.region, stack, input.cluster.kms_key_arn.as_deref());
        for role in iam_size::role_sizes(stack, template, &longest) {
            if let Some(e) = iam_size::exceeded(&role) {
                let (key, message) = iam_size::explain(&e, &names);
                return Err(input.source.refuse(key, message));
            }
            out.push(role);
        }
    }
    Ok(out)
}

/// Renders every stack, in a fixed order, as (name, template).
pub fn render_stacks(
    input: &RenderInput,
    ctx: &Ctx,
    plan: &Plan,
    bundle: &AddonBundle,
    nodes: &BTreeMap<String, NodeUserData>,
) -> Result<Vec<(String, Value)>, RenderError> {
    let empty = NodeUserData::default();
    let stub = |role: &str| nodes.get(role).unwrap_or(&empty);
    let mut root = root_stack(input, ctx, nodes, plan);
    service_account_resources(input, &mut root)?;
    let mut stacks = vec![
        ("root".to_string(), root),
        ("network".to_string(), network_stack(input, ctx)?),
        (
            "control-plane".to_string(),
            control_plane_stack(input, ctx, bundle, stub("controller"))?,
        ),
    ];
    for pool in &input.cluster.worker.node_pools {
        let role = format!("worker-{}", pool.name);
        stacks.push((
            format!("node-pool-{}", pool.name),
            pool_stack(input, ctx, pool, stub(&role)),
        ));
    }
    merge_plugins(input, &mut stacks)?;
    Ok(stacks.into_iter().map(|(n, t)| (n, Value::Object(t))).collect())
}
