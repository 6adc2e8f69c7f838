//! The render stage: pure functions from the resolved model (`RenderInput`) to
//! the artifacts AWS and the nodes run: CloudFormation stacks, user-data stubs
//! and cloud-configs (with the node program), the addon plan with its values
//! and plugin manifests. `render` does no I/O; `write_rendered` swaps a whole output
//! directory in atomically. The layout is documented in docs/rendered-layout.md.

pub mod cfn;
pub mod cloudconfig;
pub mod input;
pub mod layout;
pub mod node_files;
pub mod node_program;
pub mod plan;
pub mod secrets;
pub mod security;
pub mod summary;
pub mod timeouts;
mod write;
pub mod yaml;

use std::collections::{BTreeMap, BTreeSet};

pub use input::{AddonInput, HelmBinary, RenderInput};
pub use summary::{summarize, Summary};
pub use write::{
    write_rendered, write_rendered_steps, write_rendered_then, BeforeSwap, WriteError, WriteStep, WriteSteps,
    RENDER_MARKER,
};

/// EC2 refuses user-data over 16 KiB; we keep the stub well under it.
pub const STUB_LIMIT: usize = 4096;
/// CloudFormation's limit for a template fetched from S3 (TemplateURL).
pub const TEMPLATE_URL_LIMIT: usize = 1_000_000;
/// CloudFormation's quotas on one template's sections ("Understand
/// CloudFormation quotas", AWS CloudFormation User Guide: 500 resources,
/// 200 parameters, 200 outputs). The root stack takes one resource and one
/// parameter per node pool, so these bound the pools a cluster can hold
/// (config's `MAX_NODE_POOLS` refuses more before anything renders).
pub const TEMPLATE_QUOTAS: [(&str, usize); 3] = [("Resources", 500), ("Parameters", 200), ("Outputs", 200)];
/// CloudFormation's limit for an inline template body (reported, not enforced).
pub const TEMPLATE_BODY_LIMIT: usize = 51_200;
/// Room left in a stub for what CloudFormation substitutes (stack name, API endpoint).
pub const STUB_SUBSTITUTION_ROOM: usize = 512;

/// The largest file a render writes (a cloud-config, a manifest, a values
/// file), and the largest text a plugin template may produce. Fixed; see
/// docs/limits.md.
pub const RENDERED_FILE_LIMIT: usize = 8 * 1024 * 1024;

/// The rendered artifacts: relative path -> bytes, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    pub files: BTreeMap<String, Vec<u8>>,
    /// Each role's IAM sizes against IAM's limits (not a file).
    pub iam: Vec<cfn::iam_size::RoleSize>,
    /// The stacks each stack template names by its `TemplateURL`
    /// (`layout::template_url`), from → to: the render's own names, which
    /// publish rewrites to content-addressed keys (not a file).
    pub stack_refs: BTreeMap<String, BTreeSet<String>>,
}

impl Rendered {
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }
    pub fn text(&self, path: &str) -> Option<&str> {
        self.get(path).and_then(|b| std::str::from_utf8(b).ok())
    }
    fn put(&mut self, path: String, bytes: impl Into<Vec<u8>>) -> Result<(), RenderError> {
        let bytes = bytes.into();
        check_rendered_size(&path, bytes.len(), "")?;
        if self.files.insert(path.clone(), bytes).is_some() {
            return Err(RenderError::DuplicatePath { path });
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("invalid s3URI {uri:?}: {reason}")]
    S3Uri { uri: String, reason: String },
    #[error(
        "helm.version is 2 and {releases} chart(s) are listed, but helm.tiller.enabled is false: \
         Helm v2 needs Tiller; set helm.tiller.enabled: true or helm.version: 3"
    )]
    TillerDisabled { releases: usize },
    #[error("release {release:?} {message}")]
    Addon { release: String, message: String },
    #[error("plugin {plugin:?}: {message}")]
    Plugin { plugin: String, message: String },
    #[error("{message}")]
    Network { message: String },
    #[error("two artifacts would be written to {path:?}; rename the plugin file or release")]
    DuplicatePath { path: String },
    #[error("{path} is {size} bytes, over the {limit}-byte limit{hint}")]
    TooLarge {
        path: String,
        size: usize,
        limit: usize,
        hint: String,
    },
    #[error("{path} declares {count} {section}, over CloudFormation's quota of {limit} per template: split node pools or charts across clusters")]
    OverQuota {
        path: String,
        section: &'static str,
        count: usize,
        limit: usize,
    },
    #[error("template {name:?} failed: {message}")]
    Template { name: String, message: String },
    #[error("{message}")]
    Iam { message: String },
    #[error(transparent)]
    Located(#[from] crate::located::Located),
}

/// Values shared by every renderer, derived once from the input.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub cluster: String,
    pub region: String,
    pub bucket: String,
    /// Key prefix of everything this cluster publishes: `<prefix>/<cluster>` (no slashes around).
    pub key_prefix: String,
    /// `s3://<bucket>/<key_prefix>`.
    pub s3_base: String,
    /// `1.35`.
    pub k8s_minor: String,
    /// The exact patch nodes install: `1.35.8`.
    pub k8s_version: String,
}

impl Ctx {
    pub fn new(input: &RenderInput) -> Result<Ctx, RenderError> {
        let c = &input.cluster;
        let (bucket, prefix) = crate::config::parse_s3_uri(&c.s3_uri).map_err(|reason| RenderError::S3Uri {
            uri: c.s3_uri.clone(),
            reason,
        })?;
        let key_prefix = if prefix.is_empty() {
            c.cluster_name.clone()
        } else {
            format!("{prefix}/{}", c.cluster_name)
        };
        let k8s = crate::config::resolve_version(&c.kubernetes_version).map_err(|reason| RenderError::Template {
            name: "kubernetesVersion".into(),
            message: reason,
        })?;
        Ok(Ctx {
            cluster: c.cluster_name.clone(),
            region: c.region.clone(),
            s3_base: format!("s3://{bucket}/{key_prefix}"),
            bucket,
            key_prefix,
            k8s_minor: k8s.minor,
            k8s_version: k8s.version,
        })
    }
}

/// Refuses a rendered file (or a plugin's rendered text, `who` naming the
/// plugin) over [`RENDERED_FILE_LIMIT`].
fn check_rendered_size(path: &str, size: usize, who: &str) -> Result<(), RenderError> {
    if size > RENDERED_FILE_LIMIT {
        return Err(RenderError::TooLarge {
            path: format!("{who}{path}"),
            size,
            limit: RENDERED_FILE_LIMIT,
            hint: " for a rendered file (a fixed limit, see docs/limits.md): keep large data out of plugin \
                   templates and values, or fetch it on the node"
                .into(),
        });
    }
    Ok(())
}

/// Each plugin's rendered texts, by plugin and file, before they are
/// combined into node configs and manifests.
fn check_plugin_sizes(input: &RenderInput) -> Result<(), RenderError> {
    let p = &input.plugins;
    for hooks in std::iter::once(&p.controller).chain(p.pools.values()) {
        for f in &hooks.files {
            check_rendered_size(&f.path, f.content.len(), &format!("plugin {:?}: node file ", f.plugin))?;
        }
        for u in &hooks.systemd_units {
            check_rendered_size(
                &u.name,
                u.content.len(),
                &format!("plugin {:?}: systemd unit ", u.plugin),
            )?;
        }
    }
    for m in &p.cluster.manifests {
        check_rendered_size(&m.name, m.content.len(), &format!("plugin {:?}: manifest ", m.plugin))?;
    }
    for r in &p.releases {
        for v in &r.values {
            check_rendered_size(&v.file, v.content.len(), &format!("plugin {:?}: values ", v.plugin))?;
        }
    }
    Ok(())
}

/// Renders every artifact. Pure: the same input gives byte-identical output.
pub fn render(input: &RenderInput) -> Result<Rendered, RenderError> {
    check_plugin_sizes(input)?;
    let ctx = Ctx::new(input)?;
    let mut out = Rendered::default();
    let plan = plan::build_plan(input, &ctx)?;

    // Addons: plan, values, Tiller, manifests.
    let mut plan_json = serde_json::to_string_pretty(&plan).map_err(|e| RenderError::Template {
        name: layout::ADDON_PLAN.into(),
        message: e.to_string(),
    })?;
    plan_json.push('\n');
    out.put(layout::ADDON_PLAN.into(), plan_json)?;
    for a in &input.addons {
        out.put(layout::addon_values(&a.release.name), a.values_yaml.as_bytes())?;
    }
    if plan.helm.tiller.install {
        let t = &input.cluster.helm.tiller;
        out.put(
            layout::TILLER_MANIFEST.into(),
            plan::tiller_manifest(&t.namespace, t.history_max),
        )?;
    }
    for m in &input.plugins.cluster.manifests {
        check_file_name(&m.plugin, &m.name)?;
        out.put(layout::plugin_manifest(&m.plugin, &m.name), m.content.as_bytes())?;
    }

    // The cluster-wide kubeadm documents travel with the addon plan, not in
    // the controllers' user data: changing them replaces no instance, and the
    // controllers apply them in place (src/node/kube_aws_node/reconfigure.py).
    out.put(
        layout::kubeadm_cluster(),
        cloudconfig::cluster_kubeadm_json(input, &ctx),
    )?;

    // The addon bundle the controllers' reconciler installs, named by the
    // control-plane stack's plan pointer: no addon file is in a node's user data.
    let bundle = plan::addon_bundle(input, &out)?;
    out.put(layout::ADDON_BUNDLE.into(), bundle.text.clone())?;

    // Nodes: full cloud-configs, then the stubs that fetch them.
    let parts = cloudconfig::render_nodes(input, &ctx, &bundle)?;
    let mut nodes = BTreeMap::new();
    for mut part in parts {
        // Moved, not copied: a pool's cloud-config holds the node program
        // (about 340 KB), and a cluster may have 190 pools.
        let cloud_config = std::mem::take(&mut part.cloud_config);
        out.put(layout::cloud_config(&part.role), cloud_config.into_bytes())?;
        let stub = cloudconfig::render_stub(&ctx, &part)?;
        let path = layout::stub(&part.role);
        if stub.len() + STUB_SUBSTITUTION_ROOM > STUB_LIMIT {
            return Err(RenderError::TooLarge {
                path,
                size: stub.len(),
                limit: STUB_LIMIT - STUB_SUBSTITUTION_ROOM,
                hint: " (kept free for CloudFormation substitutions)".into(),
            });
        }
        out.put(path, stub.as_bytes())?;
        nodes.insert(
            part.role.clone(),
            cfn::NodeUserData {
                stub,
                secrets: part.secrets.names.clone(),
                versioned: part.secrets.boot_names.clone(),
            },
        );
    }

    // Stacks.
    check_no_secrets_in_stacks(input)?;
    let stacks = cfn::render_stacks(input, &ctx, &plan, &bundle, &nodes)?;
    out.iam = cfn::iam_sizes(input, &ctx, &stacks)?;
    // The root names every other stack by its TemplateURL (cfn/root.rs).
    let nested: BTreeSet<String> = stacks
        .iter()
        .map(|(name, _)| layout::stack(name))
        .filter(|path| path != layout::ROOT_TEMPLATE)
        .collect();
    out.stack_refs.insert(layout::ROOT_TEMPLATE.to_string(), nested);
    for (name, template) in stacks {
        for (section, limit) in TEMPLATE_QUOTAS {
            let count = template.get(section).and_then(|v| v.as_object()).map_or(0, |m| m.len());
            if count > limit {
                return Err(RenderError::OverQuota {
                    path: layout::stack(&name),
                    section,
                    count,
                    limit,
                });
            }
        }
        let mut text = serde_json::to_string_pretty(&template).map_err(|e| RenderError::Template {
            name: name.clone(),
            message: e.to_string(),
        })?;
        text.push('\n');
        let path = layout::stack(&name);
        if text.len() > TEMPLATE_URL_LIMIT {
            return Err(RenderError::TooLarge {
                path,
                size: text.len(),
                limit: TEMPLATE_URL_LIMIT,
                hint: ": split charts or node pools across clusters".into(),
            });
        }
        out.put(path, text)?;
    }
    Ok(out)
}

/// CloudFormation would see a secret's reference itself, never its value: the
/// plugin contributions that land in stacks (resources, outputs, IAM
/// statements, group tags) must not hold one.
fn check_no_secrets_in_stacks(input: &RenderInput) -> Result<(), RenderError> {
    let known = secrets::known_references(input);
    let p = &input.plugins;
    let mut places: Vec<(&str, &str, String)> = Vec::new();
    for c in &p.cluster.cloudformation {
        let text = serde_json::to_string(&(&c.resources, &c.outputs)).unwrap_or_default();
        places.push((&c.plugin, "CloudFormation resources", text));
    }
    for hooks in std::iter::once(&p.controller).chain(p.pools.values()) {
        for st in &hooks.iam_statements {
            places.push((&st.plugin, "IAM statements", st.statement.to_string()));
        }
        for (k, v) in &hooks.asg_tags {
            places.push(("", "auto scaling group tags", format!("{k}={v}")));
        }
    }
    for (plugin, what, text) in places {
        if let Some(r) = secrets::find_references(&text, &known).into_iter().next() {
            let plugin = input
                .plugins
                .secrets
                .iter()
                .find(|s| s.reference == r)
                .map(|s| s.plugin.clone())
                .filter(|_| plugin.is_empty())
                .unwrap_or_else(|| plugin.to_string());
            return Err(RenderError::Plugin {
                plugin,
                message: format!(
                    "the secret {r:?} is used in its {what}; CloudFormation would get the reference, not the value. \
                     Secrets are filled in on the nodes only (node files, chart values, manifests, API server \
                     flags): use a parameter without `secret: true` there"
                ),
            });
        }
    }
    Ok(())
}

/// Plugin and manifest names become path segments: one plain segment each.
fn check_file_name(plugin: &str, name: &str) -> Result<(), RenderError> {
    let bad = |s: &str| s.is_empty() || s == "." || s == ".." || s.contains(['/', '\\', '\0']);
    if bad(plugin) || bad(name) {
        return Err(RenderError::Plugin {
            plugin: plugin.into(),
            message: format!("manifest name {name:?} must be a plain file name (no '/', '..')"),
        });
    }
    Ok(())
}

/// One size figure: what `validate` reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SizeReport {
    pub path: String,
    pub size: usize,
    pub limit: usize,
    /// The limit that matters less, for information (inline template body).
    pub note: Option<String>,
}

/// The user-data stubs' sizes against the 4 KiB budget.
pub fn stub_sizes(r: &Rendered) -> Vec<SizeReport> {
    r.files
        .iter()
        .filter(|(p, _)| layout::is_stub(p))
        .map(|(p, b)| SizeReport {
            path: p.clone(),
            size: b.len(),
            limit: STUB_LIMIT,
            note: None,
        })
        .collect()
}

/// The stack templates' sizes against the TemplateURL limit (they go through S3).
pub fn template_sizes(r: &Rendered) -> Vec<SizeReport> {
    r.files
        .iter()
        .filter(|(p, _)| layout::in_stacks(p))
        .map(|(p, b)| SizeReport {
            path: p.clone(),
            size: b.len(),
            limit: TEMPLATE_URL_LIMIT,
            note: (b.len() > TEMPLATE_BODY_LIMIT).then(|| format!("over the {TEMPLATE_BODY_LIMIT}-byte inline limit")),
        })
        .collect()
}
