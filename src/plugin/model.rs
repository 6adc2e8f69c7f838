//! The plugin.yaml model as a plugin author writes it. Unknown keys are
//! rejected; string fields may hold tera templates, rendered per scope by
//! `resolve`. `kube-aws schema plugin` prints this model's JSON Schema.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{ChartSpec, TaintEffect};

/// The only `apiVersion` this build understands.
pub const API_VERSION: &str = "kube-aws/v1";
/// The only `kind`.
pub const KIND: &str = "Plugin";
/// The manifest's file name inside a plugin directory.
pub const MANIFEST_FILE: &str = "plugin.yaml";

/// A whole plugin.yaml.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "kube-aws plugin.yaml")]
pub struct PluginManifest {
    /// Must be `kube-aws/v1`.
    pub api_version: String,
    /// Must be `Plugin`.
    pub kind: String,
    pub metadata: Metadata,
    /// Active unless cluster.yaml says `enabled: false` (core features such as the CNI).
    #[serde(default)]
    pub enabled_by_default: bool,
    #[serde(default)]
    pub spec: PluginSpec,
}

/// Who the plugin is.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// The plugin's name: a DNS-1123 label, equal to its directory's name.
    pub name: String,
    /// The plugin's own version (not its charts').
    pub version: String,
    /// One line shown by `kube-aws plugins list`.
    #[serde(default)]
    pub description: String,
}

/// What the plugin declares and contributes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSpec {
    /// Typed parameters, set in cluster.yaml under `plugins.<name>`.
    #[serde(default)]
    pub parameters: IndexMap<String, ParamSpec>,
    /// Helm releases; `values` are files in the plugin directory (`*.tera` are templates).
    #[serde(default)]
    pub charts: Vec<ChartSpec>,
    /// Control-plane and kubelet flags, and plain manifests.
    #[serde(default)]
    pub kubernetes: KubernetesSpec,
    /// Hooks on controller and worker nodes.
    #[serde(default)]
    pub nodes: NodesSpec,
    /// CloudFormation resources and outputs merged into one stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloudformation: Option<CloudFormationSpec>,
    /// Kubernetes service accounts that get their own IAM role (IAM roles for
    /// service accounts): templates see `serviceAccounts.<name>.roleArn` for the
    /// chart's `eks.amazonaws.com/role-arn` annotation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<ServiceAccountSpec>,
    /// Subcommands the plugin adds: `kube-aws NAME ARGS…` runs `run` on the
    /// operator's machine while the plugin is enabled. Built-in names are refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<CommandSpec>,
    /// Programs run on the operator's machine before and after kube-aws steps
    /// (see plugin-authoring.md, "Hooks", for their environment).
    #[serde(default, skip_serializing_if = "LifecycleHooks::is_empty")]
    pub hooks: LifecycleHooks,
}

/// A subcommand a plugin adds to `kube-aws`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandSpec {
    /// The subcommand's name (a DNS-1123 label, not a built-in command's name).
    pub name: String,
    /// One line shown by `kube-aws --help` and `kube-aws plugins list`.
    #[serde(default)]
    pub description: String,
    /// An executable file in the plugin directory, run with the command's arguments.
    pub run: String,
}

/// Hooks per kube-aws step; each runs in plugin order, from the work tree.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LifecycleHooks {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_render: Vec<HookSpec>,
    /// May add files only under `rendered/plugins/<plugin>/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_render: Vec<HookSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_up: Vec<HookSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_up: Vec<HookSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_update: Vec<HookSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_update: Vec<HookSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_destroy: Vec<HookSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_destroy: Vec<HookSpec>,
}

impl LifecycleHooks {
    /// Every hook list with its plugin.yaml key (`preRender`, …).
    pub fn all(&self) -> [(&'static str, &Vec<HookSpec>); 8] {
        [
            ("preRender", &self.pre_render),
            ("postRender", &self.post_render),
            ("preUp", &self.pre_up),
            ("postUp", &self.post_up),
            ("preUpdate", &self.pre_update),
            ("postUpdate", &self.post_update),
            ("preDestroy", &self.pre_destroy),
            ("postDestroy", &self.post_destroy),
        ]
    }

    pub fn is_empty(&self) -> bool {
        self.all().iter().all(|(_, l)| l.is_empty())
    }
}

/// One hook: a program in the plugin directory.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookSpec {
    /// An executable file in the plugin directory.
    pub run: String,
    /// Its arguments, passed as they are (no shell).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// How long it may run (a duration such as `30s`, `5m`); its process group is killed then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// A service account and the IAM statements of its own role. Only a token for
/// exactly `system:serviceaccount:<namespace>:<name>` can assume the role.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountSpec {
    /// The service account's namespace (a DNS-1123 label).
    pub namespace: String,
    /// The service account's name (a DNS-1123 subdomain), unique within the plugin.
    pub name: String,
    /// The role's policy statements (templates, like node statements).
    #[serde(default)]
    pub iam: IamSpec,
}

/// A parameter's type.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    String,
    Integer,
    Number,
    Boolean,
    List,
    Map,
}

impl ParamType {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
            ParamType::List => "list",
            ParamType::Map => "map",
        }
    }
}

/// One typed parameter.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParamSpec {
    #[serde(rename = "type")]
    pub kind: ParamType,
    /// Shown by `kube-aws plugins show`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The plugin cannot work without it (a default makes no sense then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// Used when cluster.yaml does not set the parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    /// The allowed values.
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<serde_json::Value>>,
    /// A regular expression a string value must match (unanchored: use `^…$`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Lower bound of a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<f64>,
    /// Upper bound of a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<f64>,
    /// Never written in plaintext: templates see a reference, replaced on the node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
}

/// Flags of one Kubernetes component: `name: value`, without the leading `--`.
/// A flag whose value renders to an empty string is left out.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlagsSpec {
    #[serde(default)]
    pub flags: IndexMap<String, Scalar>,
}

/// A string, number or boolean, used as text.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum Scalar {
    String(String),
    Integer(i64),
    Number(f64),
    Bool(bool),
}

impl Scalar {
    pub fn to_text(&self) -> String {
        match self {
            Scalar::String(s) => s.clone(),
            Scalar::Integer(i) => i.to_string(),
            Scalar::Number(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// Kubelet flags per role.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletSpec {
    #[serde(default)]
    pub controller: FlagsSpec,
    #[serde(default)]
    pub worker: FlagsSpec,
}

/// Kubernetes components and manifests.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesSpec {
    #[serde(default)]
    pub api_server: FlagsSpec,
    #[serde(default)]
    pub controller_manager: FlagsSpec,
    #[serde(default)]
    pub scheduler: FlagsSpec,
    #[serde(default)]
    pub kubelet: KubeletSpec,
    /// Manifest files in the plugin directory (`*.tera` are templates), applied once the apiserver answers.
    #[serde(default)]
    pub manifests: Vec<String>,
}

/// Hooks per node role.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodesSpec {
    /// Applies to the controller nodes.
    #[serde(default)]
    pub controller: NodeSpec,
    /// Applies to every node pool where the plugin is enabled, with that pool's parameters.
    #[serde(default)]
    pub worker: NodeSpec,
}

/// What a plugin adds to one kind of node.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSpec {
    #[serde(default)]
    pub iam: IamSpec,
    /// Files written by cloud-init, as data.
    #[serde(default)]
    pub files: Vec<FileSpec>,
    #[serde(default)]
    pub systemd_units: Vec<UnitSpec>,
    #[serde(default)]
    pub node_labels: IndexMap<String, String>,
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
    /// Tags on the scope's auto scaling group (propagated at launch).
    #[serde(default)]
    pub asg_tags: IndexMap<String, String>,
    /// Bounds for the scope's auto scaling group (worker pools only); a value
    /// that renders empty leaves the pool's own bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asg_size: Option<AsgSizeSpec>,
}

/// Auto scaling group bounds, as templates rendering to whole numbers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AsgSizeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Scalar>,
}

/// IAM policy statements added to the node role.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IamSpec {
    /// IAM statements: objects with Effect, Action and Resource (and optional Sid, Condition).
    #[serde(default)]
    pub statements: Vec<serde_json::Value>,
}

/// A file on the node. Exactly one of `content` and `template`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileSpec {
    /// Absolute path on the node.
    pub path: String,
    /// Inline content (a template itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A file in the plugin directory (`*.tera` is rendered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Octal mode (default `0644`).
    #[serde(default = "default_permissions")]
    pub permissions: String,
    /// `user:group` (default `root:root`).
    #[serde(default = "default_owner")]
    pub owner: String,
}

fn default_permissions() -> String {
    "0644".into()
}
fn default_owner() -> String {
    "root:root".into()
}

/// A systemd unit. Exactly one of `content` and `template`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnitSpec {
    /// Unit file name, e.g. `foo.service`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Enable and start it at boot (default true).
    #[serde(default = "yes")]
    pub enable: bool,
}

fn yes() -> bool {
    true
}

/// A node taint (key and value may be templates).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintSpec {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: TaintEffect,
}

/// CloudFormation resources and outputs for one stack.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudFormationSpec {
    /// Target stack: `root` (default), `network`, `control-plane` or `node-pool-<name>`.
    #[serde(default = "root_stack")]
    pub stack: String,
    /// A JSON file (object of logical ID to resource) in the plugin directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<String>,
    /// A JSON file (object of output name to output) in the plugin directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<String>,
}

fn root_stack() -> String {
    "root".into()
}
