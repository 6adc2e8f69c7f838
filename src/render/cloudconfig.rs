//! Node cloud-configs (`#cloud-config` for Amazon Linux 2023) and the user-data
//! stubs that fetch them. The tera templates hold layout only; every value
//! reaches the node as a data file under `write_files` (a literal block or
//! base64, byte-exact), read by static scripts.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Serialize;

use super::node_files::{pretty, EtcdJson, NodeJson, ReconcilerJson, RuntimeJson};
use super::plan::{sha256_hex, AddonBundle};
use super::secrets::{find_references, node_secrets, NodeSecrets};
use super::yaml::{file_content, quote};
use super::{Ctx, RenderError, RenderInput};
use crate::config::{Taint, TaintEffect};
use crate::plugin::NodeHooks;

mod kubeadm;
pub use kubeadm::cluster_kubeadm_json;
use kubeadm::kubeadm_documents;

const NODE_TEMPLATE: &str = include_str!("templates/node.cloud-config.tera");
const STUB_TEMPLATE: &str = include_str!("templates/stub.cloud-config.tera");
const STUB_SH: &str = include_str!("templates/stub.sh");
const KUBEADM_JSON: &str = "/etc/kube-aws/kubeadm.json";
const ADDONS_UNIT: &str = include_str!("templates/kube-aws-addons.service");
const ADDONS_TIMER: &str = include_str!("templates/kube-aws-addons.timer");
const CSR_APPROVER_SERVICE: &str = include_str!("templates/kube-aws-csr-approver.service");
const CSR_APPROVER_TIMER: &str = include_str!("templates/kube-aws-csr-approver.timer");
const ETCD_BACKUP_SERVICE: &str = include_str!("templates/kube-aws-etcd-backup.service");
const ETCD_BACKUP_TIMER: &str = include_str!("templates/kube-aws-etcd-backup.timer");
const ETCD_MAINTENANCE_SERVICE: &str = include_str!("templates/kube-aws-etcd-maintenance.service");
const ETCD_MAINTENANCE_TIMER: &str = include_str!("templates/kube-aws-etcd-maintenance.timer");
const ETCD_TEST_RESTORE_SERVICE: &str = include_str!("templates/kube-aws-etcd-test-restore.service");
const ETCD_TEST_RESTORE_TIMER: &str = include_str!("templates/kube-aws-etcd-test-restore.timer");
const LIFECYCLE_SERVICE: &str = include_str!("templates/kube-aws-lifecycle.service");
/// Every node's: a changed ClusterConfiguration or KubeletConfiguration
/// applied in place (`kube-aws-node reconfigure`, enabled by the bootstrap
/// once the node has joined).
const RECONFIGURE_SERVICE: &str = include_str!("templates/kube-aws-reconfigure.service");
const RECONFIGURE_TIMER: &str = include_str!("templates/kube-aws-reconfigure.timer");
/// The controllers' etcd units, enabled (`--now`) with the plugin units, before
/// kubeadm: each waits for etcd itself (the backup service's
/// ConditionPathExists, the lifecycle watcher's checks).
pub const ETCD_UNITS: &[&str] = &[
    "kube-aws-etcd-backup.timer",
    "kube-aws-etcd-maintenance.timer",
    "kube-aws-etcd-test-restore.timer",
    "kube-aws-lifecycle.service",
];
/// Where the controllers' etcd tools read the name of their settings parameter.
pub const ETCD_JSON: &str = "/etc/kube-aws/etcd.json";
const MODULES_CONF: &str = include_str!("templates/modules.conf");
const SYSCTL_CONF: &str = include_str!("templates/sysctl.conf");
const UDEV_POLICY_ROUTES_MASK: &str = include_str!("templates/99-vpc-policy-routes.rules");
const LOGIND_CONF: &str = include_str!("templates/logind-kube-aws.conf");

/// Where the addon plan and values live on the controller.
pub const NODE_ADDON_DIR: &str = "/etc/kube-aws/addons";
/// The pod network kubeadm configures; CNI charts must agree with it.
pub const POD_SUBNET: &str = "10.244.0.0/16";
/// What cloud-init installs from Amazon Linux 2023's own repositories. kubeadm's
/// preflight (kubernetes/kubernetes cmd/kubeadm/app/preflight/checks.go,
/// addExecChecks) requires `ip`, `iptables`, `mount` and `nsenter` and warns
/// without `conntrack`, `ethtool`, `socat`, `tc` and `crictl`; the kubelet RPM
/// no longer depends on them. The EKS AMI installs the same set on AL2023
/// (awslabs/amazon-eks-ami templates/al2023/provisioners/install-worker.sh).
const PACKAGES: &[&str] = &[
    "containerd",
    "conntrack-tools",
    "iptables-nft",
    "socat",
    "ethtool",
    "iproute-tc",
    "tar",
];
/// The Kubernetes packages the repository excludes (kubeadm's install docs:
/// `exclude=kubelet kubeadm kubectl cri-tools kubernetes-cni`), so no
/// `dnf upgrade` ever moves them; the bootstrap installs them pinned, with
/// `--disableexcludes=kubernetes`.
const KUBERNETES_EXCLUDE: &str = "kubelet kubeadm kubectl cri-tools kubernetes-cni";

/// The exact package specs the bootstrap installs from pkgs.k8s.io, whose RPMs
/// are named `kubelet-1.35.4-150500.1.1.x86_64.rpm`: `NAME-VERSION` matches the
/// patch exactly, so a node never floats to a newer patch at boot. cri-tools is
/// released per minor (`cri-tools-1.35.0`), so it is pinned to the minor.
/// kubernetes-cni comes as the kubelet's dependency, from the same minor's repository.
fn kubernetes_packages(ctx: &Ctx) -> Vec<String> {
    let mut p: Vec<String> = ["kubelet", "kubeadm", "kubectl"]
        .iter()
        .map(|n| format!("{n}-{}", ctx.k8s_version))
        .collect();
    p.push(format!("cri-tools-{}.*", ctx.k8s_minor));
    p
}

/// One node role's full cloud-config.
#[derive(Debug, Clone)]
pub struct NodePart {
    /// `controller` or `worker-<pool>`.
    pub role: String,
    /// The stack holding its auto scaling group: `control-plane` or `node-pool-<pool>`.
    pub stack: String,
    /// The group's logical ID, which the node signals.
    pub asg_logical_id: String,
    pub cloud_config: String,
    pub sha256: String,
    /// The secrets it decrypts and the files it fills them into.
    pub secrets: NodeSecrets,
}

fn tera() -> Result<&'static tera::Tera, RenderError> {
    static TERA: OnceLock<Result<tera::Tera, String>> = OnceLock::new();
    TERA.get_or_init(|| {
        let mut t = tera::Tera::default();
        t.autoescape_on(vec![]);
        t.add_raw_templates(vec![("node", NODE_TEMPLATE), ("stub", STUB_TEMPLATE)])
            .map_err(|e| format!("{e:?}"))?;
        Ok(t)
    })
    .as_ref()
    .map_err(|e| RenderError::Template {
        name: "node/stub".into(),
        message: e.clone(),
    })
}

/// A `write_files` entry, every field already YAML.
#[derive(Serialize, Clone)]
struct FileEntry {
    path: String,
    permissions: String,
    owner: String,
    /// cloud-init's `encoding`: none for a literal block or a quoted
    /// scalar, `b64`, or `gz+b64` for the node program.
    encoding: Option<&'static str>,
    content: String,
}

/// The node program's files as `write_files` entries, with their paths: the
/// same on every node, so built once per process. Each is carried gzipped
/// (build.rs; 390 KB of text as 178 KB of base64, once per node role): 180
/// node pools rendered in 124 MB with the text, in less with the gzip
/// (docs/testing.md, "The render's speed").
fn program_entries() -> &'static [(String, FileEntry)] {
    use base64::Engine;
    static ENTRIES: OnceLock<Vec<(String, FileEntry)>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        super::node_program::files()
            .into_iter()
            .map(|f| {
                let e = FileEntry {
                    path: quote(&f.path),
                    permissions: quote(f.mode),
                    owner: quote("root:root"),
                    encoding: Some("gz+b64"),
                    content: base64::engine::general_purpose::STANDARD.encode(f.gzip),
                };
                (f.path, e)
            })
            .collect()
    })
}

fn entry(path: &str, permissions: &str, owner: &str, content: &str) -> FileEntry {
    let c = file_content(content, 6);
    FileEntry {
        path: quote(path),
        permissions: quote(permissions),
        owner: quote(owner),
        encoding: c.b64.then_some("b64"),
        content: c.yaml,
    }
}

fn render_template(name: &str, ctx: &tera::Context) -> Result<String, RenderError> {
    tera()?.render(name, ctx).map_err(|e| RenderError::Template {
        name: name.into(),
        message: format!("{e:?}"),
    })
}

/// What one kind of node gets: its role, labels, taints and hooks.
struct NodeSpec<'a> {
    role: String,
    pool: Option<&'a str>,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    hooks: &'a NodeHooks,
}

fn plain_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0', '\n'])
}

fn plugin_err(plugin: &str, message: String) -> RenderError {
    RenderError::Plugin {
        plugin: plugin.into(),
        message,
    }
}

fn render_node(
    input: &RenderInput,
    ctx: &Ctx,
    spec: &NodeSpec,
    addons: &[(String, String, String)],
    extra_secrets: &[String],
) -> Result<(String, NodeSecrets), RenderError> {
    let mut files: Vec<FileEntry> = Vec::new();
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    let mut claim = |path: &str, owner: &str| -> Result<(), RenderError> {
        if let Some(first) = paths.insert(path.to_string(), owner.to_string()) {
            return Err(plugin_err(
                owner,
                format!(
                    "file {path:?} on {} nodes is also written by {first}; pick another path",
                    spec.role
                ),
            ));
        }
        Ok(())
    };
    let hooks = spec.hooks;
    let kubeadm = pretty(&kubeadm_documents(input, ctx, spec)?);
    let known = super::secrets::known_references(input);
    // systemd expands `$` and `%` in unit files, so a value filled into one
    // would not reach the service as it is: secrets go in files units read.
    for u in &hooks.systemd_units {
        if let Some(r) = find_references(&u.content, &known).into_iter().next() {
            return Err(plugin_err(
                &u.plugin,
                format!(
                    "systemd unit {:?} uses the secret {r:?}: systemd would expand `$` and `%` in its value; \
                     write the secret to a node file and read it with EnvironmentFile= or LoadCredential=",
                    u.name
                ),
            ));
        }
    }
    let scanned = std::iter::once((KUBEADM_JSON, kubeadm.as_str()))
        .chain(addons.iter().map(|(p, _, c)| (p.as_str(), c.as_str())))
        .chain(hooks.files.iter().map(|f| (f.path.as_str(), f.content.as_str())));
    let mut secrets = node_secrets(spec.pool.is_none(), &known, scanned);
    // Secrets the addon bundle references: decrypted at boot, filled in by the reconciler.
    if !extra_secrets.is_empty() {
        let mut names: std::collections::BTreeSet<String> = secrets.names.drain(..).collect();
        names.extend(extra_secrets.iter().cloned());
        secrets.names = names.into_iter().collect();
    }
    let node = NodeJson {
        role: if spec.pool.is_some() { "worker" } else { "controller" }.to_string(),
        pool: spec.pool.map(str::to_string),
        cluster: ctx.cluster.clone(),
        kubernetes_minor: ctx.k8s_minor.clone(),
        kubernetes_version: ctx.k8s_version.clone(),
        kubernetes_packages: kubernetes_packages(ctx),
        // No kmsKeyARN: this is user data, and a new key must replace no node
        // (issue 27 item 5); the controllers mint the join token under the
        // key in the etcd settings parameter (join_token.py `cluster_key`).
        bootstrap_token: super::security::bootstrap_token_settings(&input.cluster),
        enable_units: hooks
            .systemd_units
            .iter()
            .filter(|u| u.enable)
            .map(|u| u.name.clone())
            .chain(
                spec.pool
                    .is_none()
                    .then_some(ETCD_UNITS)
                    .into_iter()
                    .flatten()
                    .map(|u| u.to_string()),
            )
            .chain(
                spec.pool
                    .is_none()
                    .then_some(super::security::CONTROLLER_UNITS)
                    .into_iter()
                    .flatten()
                    .map(|u| u.to_string()),
            )
            .collect(),
        secrets: secrets.clone(),
    };
    let ours: Vec<(&str, &str, String)> = vec![
        ("/etc/kube-aws/node.json", "0644", pretty(&node)),
        (KUBEADM_JSON, "0600", kubeadm),
        ("/etc/modules-load.d/kube-aws.conf", "0644", MODULES_CONF.into()),
        ("/etc/sysctl.d/90-kube-aws.conf", "0644", SYSCTL_CONF.into()),
        (
            "/etc/systemd/logind.conf.d/50-kube-aws.conf",
            "0644",
            LOGIND_CONF.into(),
        ),
        (
            "/etc/udev/rules.d/99-vpc-policy-routes.rules",
            "0644",
            UDEV_POLICY_ROUTES_MASK.into(),
        ),
        (
            "/etc/systemd/system/kube-aws-reconfigure.service",
            "0644",
            RECONFIGURE_SERVICE.into(),
        ),
        (
            "/etc/systemd/system/kube-aws-reconfigure.timer",
            "0644",
            RECONFIGURE_TIMER.into(),
        ),
    ];
    for (path, mode, content) in &ours {
        claim(path, "kube-aws")?;
        files.push(entry(path, mode, "root:root", content));
    }
    for (path, program_entry) in program_entries() {
        claim(path, "kube-aws")?;
        files.push(program_entry.clone());
    }
    for (path, mode, content) in addons {
        claim(path, "kube-aws")?;
        files.push(entry(path, mode, "root:root", content));
    }
    for f in &hooks.files {
        if !f.path.starts_with('/') || f.path.split('/').any(|s| s == "..") {
            return Err(plugin_err(
                &f.plugin,
                format!("file path {:?} must be absolute, without '..'", f.path),
            ));
        }
        let mode_ok = (3..=4).contains(&f.permissions.len()) && f.permissions.chars().all(|c| ('0'..='7').contains(&c));
        if !mode_ok {
            return Err(plugin_err(
                &f.plugin,
                format!(
                    "file {:?} has permissions {:?}; use octal like \"0644\"",
                    f.path, f.permissions
                ),
            ));
        }
        claim(&f.path, &format!("plugin {}", f.plugin))?;
        let owner = if f.owner.is_empty() { "root:root" } else { &f.owner };
        files.push(entry(&f.path, &f.permissions, owner, &f.content));
    }
    for u in &hooks.systemd_units {
        if !plain_name(&u.name) || !u.name.contains('.') {
            return Err(plugin_err(
                &u.plugin,
                format!("systemd unit name {:?} must be a file name like foo.service", u.name),
            ));
        }
        let path = unit_path(&u.name);
        claim(&path, &format!("plugin {}", u.plugin))?;
        files.push(entry(&path, "0644", "root:root", &u.content));
    }
    let mut c = tera::Context::new();
    c.insert("role", &spec.role);
    c.insert("cluster", &ctx.cluster);
    c.insert("k8s_minor", &ctx.k8s_minor);
    c.insert(
        "repo_url",
        &quote(&format!("https://pkgs.k8s.io/core:/stable:/v{}/rpm/", ctx.k8s_minor)),
    );
    c.insert(
        "repo_key",
        &quote(&format!(
            "https://pkgs.k8s.io/core:/stable:/v{}/rpm/repodata/repomd.xml.key",
            ctx.k8s_minor
        )),
    );
    c.insert("packages", PACKAGES);
    c.insert("repo_exclude", &quote(KUBERNETES_EXCLUDE));
    c.insert("files", &files);
    Ok((render_template("node", &c)?, secrets))
}

fn unit_path(name: &str) -> String {
    format!("/etc/systemd/system/{name}")
}

/// What only controllers carry: the addon reconciler's service and timer
/// (`kube-aws-node reconcile`) and where it finds the current plan, and the
/// kubelet serving-certificate approver's (`kube-aws-node csr-approver`). No
/// addon plan, values or manifest: those come from the addon bundle the
/// control-plane stack's `AddonPlan` parameter names, so an addon change
/// leaves the controllers' user data as it is.
fn controller_addon_files(ctx: &Ctx) -> Vec<(String, String, String)> {
    let reconciler = ReconcilerJson {
        plan_parameter: plan_parameter_name(ctx),
        installed_uri: format!("{}/{}", ctx.s3_base, super::layout::INSTALLED_RELEASES),
        // The addons' wait conditions are in the root stack, named after the cluster.
        wait_condition_stack: ctx.cluster.clone(),
    };
    let mut files = vec![(RECONCILER_JSON.into(), "0644".into(), pretty(&reconciler))];
    for (name, unit) in [
        ("kube-aws-addons.service", ADDONS_UNIT),
        ("kube-aws-addons.timer", ADDONS_TIMER),
        ("kube-aws-csr-approver.service", CSR_APPROVER_SERVICE),
        ("kube-aws-csr-approver.timer", CSR_APPROVER_TIMER),
        ("kube-aws-etcd-backup.service", ETCD_BACKUP_SERVICE),
        ("kube-aws-etcd-backup.timer", ETCD_BACKUP_TIMER),
        ("kube-aws-etcd-maintenance.service", ETCD_MAINTENANCE_SERVICE),
        ("kube-aws-etcd-maintenance.timer", ETCD_MAINTENANCE_TIMER),
        ("kube-aws-etcd-test-restore.service", ETCD_TEST_RESTORE_SERVICE),
        ("kube-aws-etcd-test-restore.timer", ETCD_TEST_RESTORE_TIMER),
        ("kube-aws-lifecycle.service", LIFECYCLE_SERVICE),
    ] {
        files.push((unit_path(name), "0644".into(), unit.into()));
    }
    // Only names: the settings themselves (backup interval, quota,
    // controller count) are in the parameter, so changing them replaces no controller.
    let etcd = EtcdJson {
        settings_parameter: super::cfn::etcd_parameter_name(ctx),
        lifecycle_hook: super::cfn::ETCD_LIFECYCLE_HOOK.to_string(),
    };
    files.push((ETCD_JSON.into(), "0644".into(), pretty(&etcd)));
    files
}

/// Where the reconciler reads the name of the plan pointer and of the record
/// of what it installed.
pub const RECONCILER_JSON: &str = "/etc/kube-aws/addons/reconciler.json";

/// The SSM parameter (control-plane stack, `AddonPlan`) holding the current
/// addon bundle's S3 URI and sha256.
pub fn plan_parameter_name(ctx: &Ctx) -> String {
    format!("/kube-aws/{}/addon-plan", ctx.cluster)
}

/// Renders the controller's and each pool's full cloud-config. `out` already
/// holds the addon artifacts the controller carries.
pub fn render_nodes(input: &RenderInput, ctx: &Ctx, bundle: &AddonBundle) -> Result<Vec<NodePart>, RenderError> {
    let mut parts = Vec::new();
    let default_hooks = NodeHooks::default();
    let p = &input.plugins;

    let mut taints = vec![Taint {
        key: "node-role.kubernetes.io/control-plane".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    }];
    taints.extend(p.controller.taints.iter().cloned());
    let spec = NodeSpec {
        role: "controller".into(),
        pool: None,
        labels: p.controller.node_labels.clone(),
        taints,
        hooks: &p.controller,
    };
    let mut controller_files = controller_addon_files(ctx);
    controller_files.extend(super::security::controller_files(&input.cluster));
    let (text, secrets) = render_node(input, ctx, &spec, &controller_files, &bundle.secret_names)?;
    parts.push(NodePart {
        role: "controller".into(),
        secrets,
        stack: "control-plane".into(),
        asg_logical_id: "ControllerGroup".into(),
        sha256: sha256_hex(text.as_bytes()),
        cloud_config: text,
    });

    for pool in &input.cluster.worker.node_pools {
        let hooks = p.pools.get(&pool.name).unwrap_or(&default_hooks);
        let (labels, taints) = hooks.pool_labels_and_taints(pool);
        let role = format!("worker-{}", pool.name);
        let spec = NodeSpec {
            role: role.clone(),
            pool: Some(&pool.name),
            labels,
            taints,
            hooks,
        };
        let (text, secrets) = render_node(input, ctx, &spec, &[], &[])?;
        parts.push(NodePart {
            role,
            secrets,
            stack: format!("node-pool-{}", pool.name),
            // A zonal pool's groups share this part: each zone's launch
            // template substitutes its own group (src/render/cfn/nodes.rs).
            asg_logical_id: if pool.zonal {
                super::cfn::ASG_LOGICAL_ID_VARIABLE.into()
            } else {
                "WorkerGroup".into()
            },
            sha256: sha256_hex(text.as_bytes()),
            cloud_config: text,
        });
    }
    Ok(parts)
}

/// The S3 URI a node part is published to (content-addressed).
pub fn part_uri(ctx: &Ctx, part: &NodePart) -> String {
    format!("{}/userdata/{}/{}.cloud-config", ctx.s3_base, part.role, part.sha256)
}

/// The user-data stub of a node part. `${AWS::StackName}`, `${AWS::Region}`,
/// `${ApiEndpoint}`, `${SecretsVersion}` and `${CACertHash}` are left for
/// CloudFormation's Fn::Sub. The secrets version is in the user data so that a
/// changed secret replaces the nodes that use it; the CA hash (kubeadm's
/// `caCertHashes`, of the CA kube-aws generated) is what nodes join with.
pub fn render_stub(ctx: &Ctx, part: &NodePart) -> Result<String, RenderError> {
    let runtime = RuntimeJson {
        role: part.role.clone(),
        cluster: ctx.cluster.clone(),
        region: "${AWS::Region}".into(),
        stack_name: "${AWS::StackName}".into(),
        asg_logical_id: part.asg_logical_id.clone(),
        api_endpoint: "${ApiEndpoint}".into(),
        secrets_version: "${SecretsVersion}".into(),
        ca_cert_hash: "${CACertHash}".into(),
        secret_bundle_parameter: super::layout::secret_bundle_parameter(&ctx.cluster, &part.role),
        bucket: ctx.bucket.clone(),
        key_prefix: ctx.key_prefix.clone(),
        s3_base: ctx.s3_base.clone(),
        cloud_config: part_uri(ctx, part),
        cloud_config_sha256: part.sha256.clone(),
    };
    let mut runtime_text = serde_json::to_string(&runtime).unwrap_or_default();
    runtime_text.push('\n');
    let files = vec![
        entry("/etc/kube-aws/runtime.json", "0644", "root:root", &runtime_text),
        entry("/opt/kube-aws/bin/kube-aws-stub", "0755", "root:root", STUB_SH),
    ];
    let mut c = tera::Context::new();
    c.insert("role", &part.role);
    c.insert("files", &files);
    render_template("stub", &c)
}
