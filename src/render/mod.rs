//! The render stage: pure functions from the resolved model (`RenderInput`) to
//! the artifacts AWS and the nodes run: CloudFormation stacks, user-data stubs
//! and cloud-configs, the addon plan with its values, the installer script and
//! plugin manifests. `render` does no I/O; `write_rendered` swaps a whole output
//! directory in atomically. The layout is documented in docs/rendered-layout.md.

pub mod cfn;
pub mod cloudconfig;
pub mod input;
pub mod plan;
pub mod secrets;
pub mod summary;
pub mod yaml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use input::{AddonInput, HelmBinary, RenderInput};
pub use summary::{summarize, Summary};

/// The static installer, shipped as-is to the controller.
pub const INSTALL_ADDONS_SH: &str = include_str!("templates/install-addons.sh");

/// EC2 refuses user-data over 16 KiB; we keep the stub well under it.
pub const STUB_LIMIT: usize = 4096;
/// CloudFormation's limit for a template fetched from S3 (TemplateURL).
pub const TEMPLATE_URL_LIMIT: usize = 1_000_000;
/// CloudFormation's limit for an inline template body (reported, not enforced).
pub const TEMPLATE_BODY_LIMIT: usize = 51_200;
/// Room left in a stub for what CloudFormation substitutes (stack name, API endpoint).
pub const STUB_SUBSTITUTION_ROOM: usize = 512;

/// The rendered artifacts: relative path -> bytes, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    pub files: BTreeMap<String, Vec<u8>>,
}

impl Rendered {
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }
    pub fn text(&self, path: &str) -> Option<&str> {
        self.get(path).and_then(|b| std::str::from_utf8(b).ok())
    }
    fn put(&mut self, path: String, bytes: impl Into<Vec<u8>>) -> Result<(), RenderError> {
        if self.files.insert(path.clone(), bytes.into()).is_some() {
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
    #[error("template {name:?} failed: {message}")]
    Template { name: String, message: String },
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
    /// The exact patch nodes install: `1.35.4`.
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

/// Renders every artifact. Pure: the same input gives byte-identical output.
pub fn render(input: &RenderInput) -> Result<Rendered, RenderError> {
    let ctx = Ctx::new(input)?;
    let mut out = Rendered::default();
    let plan = plan::build_plan(input, &ctx)?;

    // Addons: plan, values, installer, Tiller, manifests.
    let mut plan_json = serde_json::to_string_pretty(&plan).map_err(|e| RenderError::Template {
        name: "addons/plan.json".into(),
        message: e.to_string(),
    })?;
    plan_json.push('\n');
    out.put("addons/plan.json".into(), plan_json)?;
    for a in &input.addons {
        out.put(
            format!("addons/values/{}.yaml", a.release.name),
            a.values_yaml.as_bytes(),
        )?;
    }
    out.put("addons/install-addons.sh".into(), INSTALL_ADDONS_SH)?;
    if plan.helm.tiller.install {
        let t = &input.cluster.helm.tiller;
        out.put(
            "addons/tiller.yaml".into(),
            plan::tiller_manifest(&t.namespace, t.history_max),
        )?;
    }
    for m in &input.plugins.cluster.manifests {
        check_file_name(&m.plugin, &m.name)?;
        out.put(format!("manifests/{}/{}", m.plugin, m.name), m.content.as_bytes())?;
    }

    // Nodes: full cloud-configs, then the stubs that fetch them.
    let parts = cloudconfig::render_nodes(input, &ctx, &out)?;
    let mut nodes = BTreeMap::new();
    for part in &parts {
        out.put(
            format!("userdata/{}.cloud-config", part.role),
            part.cloud_config.as_bytes(),
        )?;
        let stub = cloudconfig::render_stub(&ctx, part)?;
        let path = format!("userdata/{}.stub", part.role);
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
            },
        );
    }

    // Stacks.
    check_no_secrets_in_stacks(input)?;
    for (name, template) in cfn::render_stacks(input, &ctx, &plan, &nodes)? {
        let mut text = serde_json::to_string_pretty(&template).map_err(|e| RenderError::Template {
            name: name.clone(),
            message: e.to_string(),
        })?;
        text.push('\n');
        let path = format!("stacks/{name}.json");
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
    let known = secrets::longest_first(input.plugins.secrets.iter().map(|s| s.reference.as_str()));
    if known.is_empty() {
        return Ok(());
    }
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
        .filter(|(p, _)| p.starts_with("userdata/") && p.ends_with(".stub"))
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
        .filter(|(p, _)| p.starts_with("stacks/"))
        .map(|(p, b)| SizeReport {
            path: p.clone(),
            size: b.len(),
            limit: TEMPLATE_URL_LIMIT,
            note: (b.len() > TEMPLATE_BODY_LIMIT).then(|| format!("over the {TEMPLATE_BODY_LIMIT}-byte inline limit")),
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Writes `r` as the directory `dir`: everything goes into a fresh sibling
/// directory first, which then replaces `dir`. A failure leaves `dir` as it was.
pub fn write_rendered(dir: &Path, r: &Rendered) -> Result<(), WriteError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WriteError { path, source }
    };
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(err(&parent))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "rendered".into());
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}.new-"))
        .tempdir_in(&parent)
        .map_err(err(&parent))?;
    for (rel, bytes) in &r.files {
        let path = staging.path().join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(err(p))?;
        }
        std::fs::write(&path, bytes).map_err(err(&path))?;
        if rel.ends_with(".sh") {
            set_executable(&path).map_err(err(&path))?;
        }
    }
    // Swap: move the old directory aside, move the new one in, then drop the old.
    let old = parent.join(format!(".{name}.old-{}", std::process::id()));
    let had_old = dir.exists();
    if had_old {
        std::fs::rename(dir, &old).map_err(err(dir))?;
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, dir) {
        if had_old {
            let _ = std::fs::rename(&old, dir);
        }
        let _ = std::fs::remove_dir_all(&staged);
        return Err(WriteError {
            path: dir.to_path_buf(),
            source: e,
        });
    }
    if had_old {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(())
}

#[cfg(unix)]
fn set_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> std::io::Result<()> {
    Ok(())
}
