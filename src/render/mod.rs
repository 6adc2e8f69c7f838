//! The render stage: pure functions from the resolved model (`RenderInput`) to
//! the artifacts AWS and the nodes run: CloudFormation stacks, user-data stubs
//! and cloud-configs (with the node program), the addon plan with its values
//! and plugin manifests. `render` does no I/O; `write_rendered` swaps a whole output
//! directory in atomically. The layout is documented in docs/rendered-layout.md.

pub mod cfn;
pub mod cloudconfig;
pub mod input;
pub mod layout;
pub mod node_program;
pub mod plan;
pub mod secrets;
pub mod security;
pub mod summary;
pub mod timeouts;
pub mod yaml;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use input::{AddonInput, HelmBinary, RenderInput};
pub use summary::{summarize, Summary};

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
    for part in &parts {
        out.put(layout::cloud_config(&part.role), part.cloud_config.as_bytes())?;
        let stub = cloudconfig::render_stub(&ctx, part)?;
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

/// The file every render output directory carries: only a directory holding
/// it may be replaced by a render. Hidden, so `up` does not publish it.
pub const RENDER_MARKER: &str = ".kube-aws-rendered";
const MARKER_TEXT: &str = "This directory is kube-aws render output: each `kube-aws render` replaces it as a whole.\n";

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot write {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("refusing to write the render output to {}: {reason}", path.display())]
    Refused { path: PathBuf, reason: String },
    /// The check run on the complete new output before it replaces the old
    /// one (the post-render hooks) failed: the old output is untouched.
    #[error(transparent)]
    BeforeSwap(Box<dyn std::error::Error + Send + Sync>),
}

/// What runs on the staged output (its path) before the swap.
pub type BeforeSwap<'a> = &'a mut dyn FnMut(&Path) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError {
    let path = path.to_path_buf();
    move |source| WriteError::Io { path, source }
}

/// Writes `r` as the directory `dir` (the output of work tree `work_tree`):
/// everything goes into a fresh sibling directory first, which is then
/// exchanged with `dir` in one step (`renameat2(RENAME_EXCHANGE)` on Linux),
/// so `dir` always holds either the old or the new complete output. `dir` is
/// refused when it is or contains the work tree, or is a non-empty directory
/// without the [`RENDER_MARKER`] of an earlier render. Leftovers of a run
/// that was killed are removed (or put back, when `dir` went missing).
pub fn write_rendered(work_tree: &Path, dir: &Path, r: &Rendered) -> Result<(), WriteError> {
    write_rendered_steps(work_tree, dir, r, &WriteSteps::default())
}

/// [`write_rendered`], running `before_swap` on the complete staged output
/// (the post-render hooks, which may add files there) before it replaces
/// `dir`. If it fails, the staged output is removed and `dir` is untouched.
pub fn write_rendered_then(
    work_tree: &Path,
    dir: &Path,
    r: &Rendered,
    before_swap: BeforeSwap<'_>,
) -> Result<(), WriteError> {
    let how = WriteSteps::default();
    write_steps(work_tree, dir, r, &how, Some(before_swap))
}

/// The steps of [`write_rendered`], named so that a test can stop after one
/// of them the way a kill would (the staging and old directories are kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// The new output is complete in `.NAME.new-*`; `dir` is untouched.
    Staged,
    /// Two-rename path only: `dir` has been moved to `.NAME.old-*`.
    OldMovedAside,
    /// The new output is in `dir`; the old one waits in `.NAME.new-*`
    /// (exchange) or `.NAME.old-*` (two renames) to be removed.
    Swapped,
}

/// How [`write_rendered_steps`] runs: for tests of interrupted writes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteSteps {
    /// Return right after this step, leaving everything as a kill would.
    pub stop_after: Option<WriteStep>,
    /// Use the two-rename fallback even where an atomic exchange exists.
    pub two_renames: bool,
}

#[doc(hidden)]
pub fn write_rendered_steps(work_tree: &Path, dir: &Path, r: &Rendered, how: &WriteSteps) -> Result<(), WriteError> {
    write_steps(work_tree, dir, r, how, None)
}

fn write_steps(
    work_tree: &Path,
    dir: &Path,
    r: &Rendered,
    how: &WriteSteps,
    before_swap: Option<BeforeSwap<'_>>,
) -> Result<(), WriteError> {
    let stop = |step| how.stop_after == Some(step);
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    check_output_dir(work_tree, dir)?;
    let name = match dir.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => {
            return Err(WriteError::Refused {
                path: dir.to_path_buf(),
                reason: "it names no directory (use a path such as ./rendered)".into(),
            })
        }
    };
    std::fs::create_dir_all(&parent).map_err(io_err(&parent))?;
    clean_leftovers(&parent, &name, dir)?;

    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}.new-"))
        .tempdir_in(&parent)
        .map_err(io_err(&parent))?;
    let marker = staging.path().join(RENDER_MARKER);
    std::fs::write(&marker, MARKER_TEXT).map_err(io_err(&marker))?;
    for (rel, bytes) in &r.files {
        let path = staging.path().join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(io_err(p))?;
        }
        std::fs::write(&path, bytes).map_err(io_err(&path))?;
        if rel.ends_with(".sh") {
            set_executable(&path).map_err(io_err(&path))?;
        }
    }
    if let Some(check) = before_swap {
        // On failure the TempDir drops: the staged output is removed.
        check(staging.path()).map_err(WriteError::BeforeSwap)?;
    }
    let staged = staging.keep();
    if stop(WriteStep::Staged) {
        return Ok(());
    }
    if std::fs::symlink_metadata(dir).is_err() {
        // Nothing to replace: one rename.
        return std::fs::rename(&staged, dir).map_err(|e| {
            let _ = std::fs::remove_dir_all(&staged);
            io_err(dir)(e)
        });
    }
    let exchanged = !how.two_renames && exchange(&staged, dir).map_err(io_err(dir))?;
    let old = if exchanged {
        staged
    } else {
        let old = parent.join(format!(".{name}.old-{}", std::process::id()));
        std::fs::rename(dir, &old).map_err(io_err(dir))?;
        if stop(WriteStep::OldMovedAside) {
            return Ok(());
        }
        if let Err(e) = std::fs::rename(&staged, dir) {
            let _ = std::fs::rename(&old, dir);
            let _ = std::fs::remove_dir_all(&staged);
            return Err(io_err(dir)(e));
        }
        old
    };
    if stop(WriteStep::Swapped) {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Refuses an output directory whose replacement would lose the user's
/// files: the work tree itself or any directory containing it, and any
/// existing non-empty directory (or other file) that is not render output.
fn check_output_dir(work_tree: &Path, dir: &Path) -> Result<(), WriteError> {
    let refuse = |reason: String| WriteError::Refused {
        path: dir.to_path_buf(),
        reason,
    };
    let tree = resolve_lexically(work_tree);
    let out = resolve_lexically(dir);
    if tree.starts_with(&out) {
        return Err(refuse(format!(
            "it {} the work tree {}, whose files a render would delete; choose a directory of its own, \
             such as {}",
            if tree == out { "is" } else { "contains" },
            work_tree.display(),
            layout::rendered_dir(work_tree).display()
        )));
    }
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(_) => return Ok(()),
    };
    if !meta.is_dir() {
        return Err(refuse(
            "it exists and is not a directory (remove it, or choose another --output-dir)".into(),
        ));
    }
    let entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(Result::ok)
        .collect();
    // Only the marker says a directory is render output: a directory holding
    // only directories named like the layout's may still be the user's.
    let marked = std::fs::symlink_metadata(dir.join(RENDER_MARKER)).is_ok_and(|m| m.is_file());
    if !entries.is_empty() && !marked {
        return Err(refuse(format!(
            "it is not empty and holds no {RENDER_MARKER} marker, so it is not the output of an earlier \
             render and replacing it would delete its files; choose an empty or new directory, or remove \
             this one yourself if its content is not needed"
        )));
    }
    Ok(())
}

/// `path` made absolute with symlinks resolved for the part that exists
/// (the rest, not yet created, is appended as written).
fn resolve_lexically(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut existing = abs.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return normalize(&out);
        }
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(n), Some(p)) => {
                rest.push(n);
                existing = p.to_path_buf();
            }
            _ => return normalize(&abs),
        }
    }
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Removes what an interrupted write left beside `dir`: `.NAME.new-*`
/// staging directories, and `.NAME.old-*` ones, except that an old output is
/// put back first when `dir` itself is missing (a two-rename write killed
/// between its renames). Only directories that are empty or carry the
/// marker are touched.
fn clean_leftovers(parent: &Path, name: &str, dir: &Path) -> Result<(), WriteError> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Ok(());
    };
    let (new_prefix, old_prefix) = (format!(".{name}.new-"), format!(".{name}.old-"));
    let mut leftovers: Vec<(bool, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let is_old = n.starts_with(&old_prefix);
            (is_old || n.starts_with(&new_prefix)).then(|| (is_old, e.path()))
        })
        .filter(|(_, p)| {
            std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
                && (p.join(RENDER_MARKER).is_file() || std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none()))
        })
        .collect();
    leftovers.sort();
    if std::fs::symlink_metadata(dir).is_err() {
        if let Some((_, old)) = leftovers
            .iter()
            .rev()
            .find(|(is_old, p)| *is_old && p.join(RENDER_MARKER).is_file())
        {
            std::fs::rename(old, dir).map_err(io_err(dir))?;
        }
    }
    for (_, p) in leftovers {
        if p.exists() {
            std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
        }
    }
    Ok(())
}

/// Swaps two directories in one step. Ok(false) where the system or the file
/// system has no atomic exchange (the caller then renames twice).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both arguments are valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<bool> {
    Ok(false)
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
