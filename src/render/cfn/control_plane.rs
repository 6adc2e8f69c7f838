//! The `control-plane` stack: the controllers' group (see `nodes`), their
//! etcd membership and settings, and the addon plan pointer. The addons'
//! wait conditions (one per release, in dependency order) are rendered here
//! but live in the root stack, after the pools (`addon_wait_conditions`).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::super::plan::{AddonBundle, Plan};
use super::super::{Ctx, RenderError, RenderInput};
use super::etcd::{etcd_alarms, etcd_membership, etcd_settings, ETCD_SETTINGS};
use super::names::PLAN_POINTER;
use super::nodes::{node_group, node_stack_parameters, Group, NodeUserData};
use super::release_secrets::{parameter as release_secrets_parameter, pointer_value, release_secrets, ReleaseSecrets};
use super::{is_arm64, template};

/// An ISO 8601 duration CloudFormation accepts (`PT1H30M`).
pub fn iso_duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = "PT".to_string();
    if h > 0 {
        out.push_str(&format!("{h}H"));
    }
    if m > 0 {
        out.push_str(&format!("{m}M"));
    }
    if s > 0 || (h == 0 && m == 0) {
        out.push_str(&format!("{s}S"));
    }
    out
}

/// The control-plane stack's pointer to the current addon bundle: its S3 URI
/// and sha256, which the controllers' reconciler polls. Wait conditions
/// depend on it, so a new plan's wait conditions exist only once it is live.
/// With release secrets, it also holds each one's hash (release_secrets.rs).
pub(super) fn plan_pointer(ctx: &Ctx, bundle: &AddonBundle, releases: &[ReleaseSecrets]) -> Value {
    let value = pointer_value(&format!("{}/{}", ctx.s3_base, bundle.key), &bundle.sha256, releases);
    json!({"Type": "AWS::SSM::Parameter", "Properties": {
        "Name": super::super::cloudconfig::plan_parameter_name(ctx),
        "Type": "String",
        "Value": value,
        "Description": format!("kube-aws cluster {}: the addon plan the controllers install", ctx.cluster)}})
}

pub(super) fn control_plane_stack(
    input: &RenderInput,
    ctx: &Ctx,
    bundle: &AddonBundle,
    node: &NodeUserData,
) -> Result<Map<String, Value>, RenderError> {
    let c = &input.cluster.controller;
    if is_arm64(&c.instance_type) && input.helm_binary.url.contains("amd64") {
        return Err(RenderError::Network {
            message: format!(
                "controller.instanceType {:?} is arm64 but the helm client is linux-amd64; pick an x86_64 type",
                c.instance_type
            ),
        });
    }
    let mut t = template(format!("kube-aws cluster {}: control plane", ctx.cluster));
    let mut r = Map::new();
    let g = Group {
        prefix: "Controller",
        role: "controller",
        controller: true,
        instance_type: &c.instance_type,
        root_volume: c.root_volume_size,
        min: c.count,
        max: super::nodes::controller_max(c.count),
        desired: Some(c.count),
        template_tags: vec![],
        security_group: "ControllerSecurityGroupId",
        hooks: &input.plugins.controller,
        secrets: &node.secrets,
        extra_target_groups: vec![json!({"Ref": "ApiTargetGroupArn"})],
        distribution: None,
        max_lifetime: None,
        drain_timeout: super::nodes::DRAIN_HEARTBEAT_SECONDS,
        zones: None,
    };
    let mut params = node_stack_parameters(input, &g);
    let release_secrets = release_secrets(input);
    for rs in &release_secrets {
        params[&rs.parameter] = release_secrets_parameter();
    }
    t.insert("Parameters".into(), params);
    node_group(input, ctx, &g, &node.stub, &mut r);
    etcd_membership(ctx, &mut r);
    r.insert(ETCD_SETTINGS.into(), etcd_settings(input, ctx)?);
    etcd_alarms(input, ctx, &mut r)?;
    r.insert(PLAN_POINTER.into(), plan_pointer(ctx, bundle, &release_secrets));
    t.insert("Resources".into(), Value::Object(r));
    t.insert(
        "Outputs".into(),
        json!({"ControllerRoleArn": {"Value": {"Fn::GetAtt": ["ControllerRole", "Arn"]}}}),
    );
    Ok(t)
}

/// One wait condition per addon release, for the root stack: each waits for
/// `after` (the control-plane stack, whose plan pointer makes the plan live,
/// and every pool stack: many addons need a worker to be ready) and for the
/// wait conditions of the releases it depends on. In the control-plane stack
/// they would keep it from completing until the addons are ready, and the
/// pools, which wait for it, would never start.
pub(super) fn addon_wait_conditions(plan: &Plan, after: &[String]) -> Map<String, Value> {
    let ids: BTreeMap<&str, &str> = plan
        .releases
        .iter()
        .map(|e| (e.name.as_str(), e.wait_condition.as_str()))
        .collect();
    let mut r = Map::new();
    for e in &plan.releases {
        let mut deps: Vec<Value> = after.iter().map(|a| json!(a)).collect();
        deps.extend(
            e.depends_on
                .iter()
                .filter_map(|d| ids.get(d.as_str()))
                .map(|w| json!(w)),
        );
        r.insert(
            e.wait_condition.clone(),
            json!({"Type": "AWS::CloudFormation::WaitCondition", "DependsOn": deps,
                "CreationPolicy": {"ResourceSignal": {"Count": 1, "Timeout": iso_duration(e.wait_timeout_seconds)}},
                "Metadata": {"Release": e.name, "Namespace": e.namespace, "Chart": e.chart,
                             "ChartVersion": e.chart_version}}),
        );
    }
    r
}
