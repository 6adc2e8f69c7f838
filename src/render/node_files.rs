//! The files the node program (src/node/kube_aws_node) reads, as Rust types:
//! the render writes them from these, and their JSON Schemas
//! (`src/node/schema/*.schema.json`, [`schemas`]) are generated from the
//! same types. The node program stays standard-library only; its tests
//! validate every golden's node-side files against the schemas
//! (src/node/tests/test_schema.py, with the tools venv's `jsonschema`), and
//! tests/it/docs.rs keeps the committed schemas current.
//!
//! Invariant: a key the render writes into one of these files exists here
//! as a field, in the order it is written (serde_json's `preserve_order`):
//! the rendered bytes are what the `json!` literals wrote before.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::plan::Plan;
use super::secrets::NodeSecrets;

/// `/etc/kube-aws/node.json` (every node; read by nearly every module).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeJson {
    /// `controller` or `worker`.
    pub role: String,
    /// The worker's pool; null on a controller.
    pub pool: Option<String>,
    pub cluster: String,
    /// `1.35`.
    pub kubernetes_minor: String,
    /// `1.35.8`.
    pub kubernetes_version: String,
    /// The RPM names dnf installs (kubelet, kubeadm, kubectl, cri-tools).
    pub kubernetes_packages: Vec<String>,
    pub bootstrap_token: BootstrapTokenSettings,
    /// The systemd units the bootstrap enables.
    pub enable_units: Vec<String>,
    pub secrets: NodeSecrets,
}

/// Where the controllers publish the join token, and for how long a minted
/// token is valid (join_token.py).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapTokenSettings {
    /// The SSM parameter holding the current token (KMS-encrypted).
    pub parameter: String,
    pub ttl_seconds: u64,
}

/// `/etc/kube-aws/runtime.json`, in the user-data stub: what the stack
/// fills in (`${AWS::Region}` and the like are CloudFormation's Fn::Sub).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeJson {
    /// `controller` or `worker-<pool>`.
    pub role: String,
    pub cluster: String,
    pub region: String,
    pub stack_name: String,
    /// The group the node signals (`ControllerGroup`, a pool's group).
    pub asg_logical_id: String,
    pub api_endpoint: String,
    pub secrets_version: String,
    /// kubeadm's `sha256:<hex>` of the cluster CA.
    pub ca_cert_hash: String,
    pub secret_bundle_parameter: String,
    pub bucket: String,
    pub key_prefix: String,
    pub s3_base: String,
    /// The content-addressed full cloud-config and its sha256.
    pub cloud_config: String,
    pub cloud_config_sha256: String,
}

/// `/etc/kube-aws/addons/reconciler.json` (controllers): where the
/// reconciler finds the current plan and its record.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReconcilerJson {
    /// The SSM parameter naming the current addon bundle.
    #[serde(rename = "planParameter")]
    pub plan_parameter: String,
    /// `s3://…/status/addons/installed.json`.
    #[serde(rename = "installedURI")]
    pub installed_uri: String,
    /// The stack holding the addons' wait conditions.
    #[serde(rename = "waitConditionStack")]
    pub wait_condition_stack: String,
}

/// `/etc/kube-aws/etcd.json` (controllers): only names; the settings are in
/// the parameter, so changing them replaces no controller.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdJson {
    pub settings_parameter: String,
    pub lifecycle_hook: String,
}

/// `value` as the node files are written: pretty JSON and a newline.
pub fn pretty<T: Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_default();
    s.push('\n');
    s
}

/// Each node-side file's schema, by the name of its committed file under
/// `src/node/schema/`. Strict: an object takes no key its type lacks.
pub fn schemas() -> Vec<(&'static str, Value)> {
    let strict = |v: schemars::schema::RootSchema| {
        let mut v = serde_json::to_value(v).unwrap_or_default();
        close_objects(&mut v);
        v
    };
    vec![
        ("etcd.schema.json", strict(schemars::schema_for!(EtcdJson))),
        ("node.schema.json", strict(schemars::schema_for!(NodeJson))),
        ("plan.schema.json", strict(schemars::schema_for!(Plan))),
        ("reconciler.schema.json", strict(schemars::schema_for!(ReconcilerJson))),
        ("runtime.schema.json", strict(schemars::schema_for!(RuntimeJson))),
    ]
}

/// Adds `additionalProperties: false` to every object schema that lists its
/// properties and says nothing of others.
fn close_objects(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.contains_key("properties") && !m.contains_key("additionalProperties") {
                m.insert("additionalProperties".into(), Value::Bool(false));
            }
            m.values_mut().for_each(close_objects);
        }
        Value::Array(a) => a.iter_mut().for_each(close_objects),
        _ => {}
    }
}
