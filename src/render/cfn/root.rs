//! The `root` stack: the nested stacks by TemplateURL (the pools after the
//! control plane), the addons' wait conditions after both, the pinned AMI,
//! secrets-version and Kubernetes version parameters the publisher fills, and
//! their metadata.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::super::plan::{camel, Plan};
use super::super::{Ctx, RenderInput};
use super::control_plane::addon_wait_conditions;
use super::names::{DECRYPT_KMS_KEYS, SECRET_BUNDLE_KEY};
use super::nodes::{
    ca_cert_hash_parameter, decrypt_keys_parameter, secret_bundle_key_parameter, secrets_version_parameter,
    NodeUserData,
};
use super::{is_arm64, template};

pub(super) const AMI_X86: &str = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64";
pub(super) const AMI_ARM: &str = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64";

/// The root parameter carrying the pinned AMI of an instance type's architecture.
pub(super) fn ami_root_parameter(instance_type: &str) -> &'static str {
    if is_arm64(instance_type) {
        "ImageIdArm64"
    } else {
        "ImageIdX86"
    }
}

pub(super) fn ami_description(source: &str) -> String {
    if source.starts_with("ami-") {
        "the AMI set in cluster.yaml (ami)".to_string()
    } else {
        format!("the pinned AMI, resolved from {source} at up or update --refresh-ami")
    }
}

/// Root metadata naming, per AMI parameter, the SSM public parameter the
/// publisher resolves it from, or the explicit image ID (`ami-…`) cluster.yaml gives.
pub const AMI_METADATA: &str = "kube-aws:amis";

/// The root parameter that carries a nested stack's secrets version.
pub(super) fn secrets_version_key(stack_logical_id: &str) -> String {
    format!("{stack_logical_id}SecretsVersion")
}

/// The parameter carrying kubeadm's `caCertHashes` value for the cluster CA,
/// which kube-aws generates at the first publish (src/pki.rs); the publisher
/// passes it to the root stack, which hands it to every node stack.
pub const CA_CERT_HASH: &str = "CACertHash";

/// The root parameter recording the Kubernetes version the cluster runs
/// (`1.35.8`): the stack owns it, so it is the version of the last update
/// that completed (a rolled-back update rolls it back too). `update` and
/// `validate --stack` check a new `kubernetesVersion` against it
/// (src/config/versions.rs `check_upgrade`); no resource uses it.
pub const KUBERNETES_VERSION: &str = "KubernetesVersion";

/// Root metadata naming, per secrets version parameter, the bundle entries it
/// covers; the publisher hashes their ciphertexts (see src/aws/publish/mod.rs).
pub const SECRETS_METADATA: &str = "kube-aws:secretsVersions";

/// The root stack's output recording the zone count of a new VPC.
pub const ZONE_COUNT_OUTPUT: &str = "ZoneCount";

pub(super) fn root_stack(
    input: &RenderInput,
    ctx: &Ctx,
    nodes: &BTreeMap<String, NodeUserData>,
    plan: &Plan,
) -> Map<String, Value> {
    let mut t = template(format!("kube-aws cluster {}: root stack", ctx.cluster));
    // The publisher passes ArtifactBaseURL and rewrites `stacks/<stack>.json` to the
    // stack's content-addressed key (see src/aws/publish/mod.rs).
    let base = format!(
        "https://{}.s3.{}.amazonaws.com/{}",
        ctx.bucket, ctx.region, ctx.key_prefix
    );
    let mut params = Map::new();
    params.insert(
        "ArtifactBaseURL".into(),
        json!({"Type": "String", "Default": base,
            "Description": "HTTPS URL of s3URI/<cluster>, where the nested stack templates are published"}),
    );
    params.insert(CA_CERT_HASH.into(), ca_cert_hash_parameter());
    params.insert(SECRET_BUNDLE_KEY.into(), secret_bundle_key_parameter());
    if let Some(k) = &input.cluster.kms_key_arn {
        let mut p = decrypt_keys_parameter();
        p["Default"] = json!(k);
        params.insert(DECRYPT_KMS_KEYS.into(), p);
    }
    params.insert(
        KUBERNETES_VERSION.into(),
        json!({"Type": "String", "Default": ctx.k8s_version, "AllowedPattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$",
            "Description": "the Kubernetes version the cluster runs: kube-aws update refuses a skipped minor, a downgrade or an unknown patch against it"}),
    );
    let mut amis = Map::new();
    // Each AMI parameter's source: the SSM public parameter, or the image
    // cluster.yaml's `ami` names for that architecture (the publisher passes
    // an explicit image as it is, see src/aws/publish/ami.rs pin_amis).
    let mut ami = |instance_type: &str| -> Value {
        let p = ami_root_parameter(instance_type);
        let path = if p == "ImageIdArm64" { AMI_ARM } else { AMI_X86 };
        let source = input.cluster.explicit_ami(instance_type).unwrap_or(path);
        amis.insert(p.to_string(), json!(source));
        json!({"Ref": p})
    };
    let controller_ami = ami(&input.cluster.controller.instance_type);
    let pool_amis: Vec<Value> = input
        .cluster
        .worker
        .node_pools
        .iter()
        .map(|p| ami(&p.instance_type))
        .collect();
    for (p, path) in &amis {
        params.insert(
            p.clone(),
            json!({"Type": "String", "Description": ami_description(path.as_str().unwrap_or_default())}),
        );
    }
    let mut covered = Map::new();
    let mut node_stack = |logical_id: &str, role: &str| -> Value {
        let key = secrets_version_key(logical_id);
        params.insert(key.clone(), secrets_version_parameter());
        let names = nodes.get(role).map(|n| n.versioned.clone()).unwrap_or_default();
        covered.insert(key.clone(), json!(names));
        json!({"Ref": key})
    };
    let out = |o: &str| json!({"Fn::GetAtt": ["Network", format!("Outputs.{o}")]});
    let url = |s: &str| json!({"Fn::Sub": crate::render::layout::template_url(&crate::render::layout::stack(s))});
    let mut r = Map::new();
    r.insert(
        "Network".into(),
        json!({"Type": "AWS::CloudFormation::Stack", "Properties": {"TemplateURL": url("network")}}),
    );
    let version = node_stack("ControlPlane", "controller");
    let control_plane = json!({"Type": "AWS::CloudFormation::Stack", "Properties": {"TemplateURL": url("control-plane"),
            "Parameters": {"SubnetIds": out("SubnetIds"), "ControllerSecurityGroupId": out("ControllerSecurityGroupId"),
                           "ApiEndpoint": out("ApiEndpoint"), "ApiTargetGroupArn": out("ApiTargetGroupArn"),
                           "SecretsVersion": version, "CACertHash": {"Ref": CA_CERT_HASH},
                           SECRET_BUNDLE_KEY: {"Ref": SECRET_BUNDLE_KEY}, "ImageId": controller_ami}}});
    r.insert("ControlPlane".into(), control_plane);
    if input.cluster.kms_key_arn.is_some() {
        r["ControlPlane"]["Properties"]["Parameters"][DECRYPT_KMS_KEYS] = json!({"Ref": DECRYPT_KMS_KEYS});
    }
    // The pools start once the control plane is done: an upgrade rolls the
    // controllers first, so no kubelet is newer than an API server
    // (https://kubernetes.io/releases/version-skew-policy/#kubelet).
    let mut after = vec!["ControlPlane".to_string()];
    for (pool, pool_ami) in input.cluster.worker.node_pools.iter().zip(pool_amis) {
        let id = format!("NodePool{}", camel(&pool.name));
        let version = node_stack(&id, &format!("worker-{}", pool.name));
        after.push(id.clone());
        r.insert(
            id,
            json!({"Type": "AWS::CloudFormation::Stack", "DependsOn": ["ControlPlane"], "Properties": {
                "TemplateURL": url(&format!("node-pool-{}", pool.name)),
                "Parameters": {"SubnetIds": out("SubnetIds"), "WorkerSecurityGroupId": out("WorkerSecurityGroupId"),
                               "ApiEndpoint": out("ApiEndpoint"), "SecretsVersion": version,
                               "CACertHash": {"Ref": CA_CERT_HASH},
                               SECRET_BUNDLE_KEY: {"Ref": SECRET_BUNDLE_KEY}, "ImageId": pool_ami}}}),
        );
        if input.cluster.kms_key_arn.is_some() {
            let id = format!("NodePool{}", camel(&pool.name));
            r[&id]["Properties"]["Parameters"][DECRYPT_KMS_KEYS] = json!({"Ref": DECRYPT_KMS_KEYS});
        }
    }
    // Each release's secrets version (release_secrets.rs), handed to the plan pointer.
    for rs in super::release_secrets::release_secrets(input) {
        params.insert(rs.parameter.clone(), super::release_secrets::parameter());
        covered.insert(rs.parameter.clone(), json!(rs.names));
        r["ControlPlane"]["Properties"]["Parameters"][&rs.parameter] = json!({"Ref": rs.parameter});
    }
    // The addons' wait conditions come last: after the control plane and every pool.
    r.extend(addon_wait_conditions(plan, &after));
    t.insert(
        "Metadata".into(),
        json!({ SECRETS_METADATA: covered, AMI_METADATA: amis }),
    );
    t.insert("Parameters".into(), Value::Object(params));
    t.insert("Resources".into(), Value::Object(r));
    let mut outputs = json!({"ApiEndpoint": {"Value": out("ApiEndpoint")},
               "ControlPlaneStack": {"Value": {"Ref": "ControlPlane"}}});
    // The zone count of a new VPC, recorded in the stack: `update` renders
    // with it (src/aws/lifecycle/deploy.rs recorded_zone_count).
    if let Some(n) = super::network::new_vpc_zone_count(&input.cluster) {
        outputs[ZONE_COUNT_OUTPUT] = json!({"Value": n.to_string(),
            "Description": "zones of the new VPC's subnets, recorded when the stack was created"});
    }
    // How the service-account roles are named, recorded in the stack:
    // `update` renders with it (src/aws/state/role_names.rs).
    outputs[crate::irsa::ROLE_NAMES_OUTPUT] = json!({
        "Value": input.cluster.recorded_role_names.unwrap_or_default().as_str(),
        "Description": "how the service-account roles are named, recorded when the stack was created"});
    t.insert("Outputs".into(), outputs);
    t
}
