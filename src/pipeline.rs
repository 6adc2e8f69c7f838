//! The offline pipeline that `validate`, `render`, `charts` and `up` share:
//! cluster.yaml → plugins → every release (cluster and plugin) → locked charts
//! and layered values → the render input. Each stage stays in its module; this
//! only passes one stage's output to the next.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::chart::{self, PrepareError, PreparedRelease, ValuesError, ValuesLayer};
use crate::config::{load_cluster, Cluster, ConfigError, Release};
use crate::plugin::{resolve_plugins, PluginError, ResolvedPlugins};
use crate::render::{AddonInput, RenderInput};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error(transparent)]
    Chart(#[from] PrepareError),
    #[error(transparent)]
    Values(#[from] ValuesError),
}

/// The work tree with its plugins resolved: every release there is to install.
#[derive(Debug, Clone)]
pub struct Releases {
    pub cluster: Cluster,
    pub plugins: ResolvedPlugins,
    /// cluster.yaml releases first, then plugin releases, in declaration order.
    pub releases: Vec<Release>,
    /// The plugin values layer of each plugin release, by release name.
    pub plugin_values: HashMap<String, ValuesLayer>,
}

impl Releases {
    /// What the chart stage needs to prepare every release.
    pub fn chart_options(&self, opts: &PrepareOptions) -> chart::PrepareReleasesOptions {
        chart::PrepareReleasesOptions {
            dir: opts.dir.clone(),
            releases: self.releases.clone(),
            kubernetes_version: self.cluster.config.kubernetes_version.clone(),
            plugin_values: self.plugin_values.clone(),
            cache_dir: opts.cache_dir.clone(),
            require_charts: opts.require_charts,
            helm_v2: helm_v2_mode(&self.cluster),
        }
    }
}

/// Loads cluster.yaml and resolves its plugins.
pub fn load_releases(dir: &Path) -> Result<Releases, PipelineError> {
    load_releases_recorded(dir, &Recorded::default())
}

/// What the live stack recorded when `up` created it, which `update` renders
/// with (not in cluster.yaml): the zone count of a new VPC (src/aws/state/zones.rs)
/// and how its service-account roles are named (src/irsa.rs `RoleNames`).
/// Default: a new cluster's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    pub zone_count: Option<usize>,
    pub role_names: Option<crate::irsa::RoleNames>,
}

/// [`load_releases`] for a live stack's `record`: set on the cluster before
/// the plugins resolve (their role names and ARNs depend on it).
pub fn load_releases_recorded(dir: &Path, record: &Recorded) -> Result<Releases, PipelineError> {
    let mut cluster = load_cluster(dir)?;
    cluster.config.network.recorded_zone_count = record.zone_count;
    cluster.config.recorded_role_names = record.role_names;
    let plugins = resolve_plugins(&cluster)?;
    let mut releases = cluster.releases.clone();
    let mut plugin_values = HashMap::new();
    for pr in &plugins.releases {
        releases.push(pr.release.clone());
        let mut layers = Vec::new();
        for v in &pr.values {
            let label = Path::new("plugins").join(&v.plugin).join(&v.file);
            layers.push(ValuesLayer::from_yaml(&pr.release.name, &label, &v.content)?);
        }
        if !layers.is_empty() {
            let label = layers.iter().map(|l| l.label.clone()).collect::<Vec<_>>().join(" + ");
            plugin_values.insert(
                pr.release.name.clone(),
                ValuesLayer {
                    label,
                    values: chart::merge_layers(&layers),
                    source: None,
                },
            );
        }
    }
    Ok(Releases {
        cluster,
        plugins,
        releases,
        plugin_values,
    })
}

/// Inputs of `prepare` (the chart stage's own, with the releases filled in,
/// are [`chart::PrepareReleasesOptions`]: see [`Releases::chart_options`]).
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    pub dir: PathBuf,
    pub cache_dir: PathBuf,
    /// Fail when a locked chart is not in the cache (deploys need every archive).
    pub require_charts: bool,
}

/// Everything render needs, with what could not be checked offline.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub releases: Releases,
    pub prepared: Vec<PreparedRelease>,
    pub input: RenderInput,
    /// Releases whose chart is not in the cache: their values were not checked
    /// against the chart's schema and their CRDs are unknown.
    pub not_fetched: Vec<String>,
}

/// Runs every offline stage up to the render input.
pub fn prepare(opts: &PrepareOptions) -> Result<Prepared, PipelineError> {
    prepare_releases(opts, load_releases(&opts.dir)?)
}

/// [`prepare`] from releases already loaded.
fn prepare_releases(opts: &PrepareOptions, releases: Releases) -> Result<Prepared, PipelineError> {
    let prepared = chart::prepare_releases(&releases.chart_options(opts))?;
    let not_fetched = prepared
        .iter()
        .filter(|p| p.chart.is_none())
        .map(|p| p.locked.release.clone())
        .collect();
    let addons = releases
        .releases
        .iter()
        .zip(&prepared)
        .map(|(release, p)| addon_input(release, p))
        .collect();
    let mut input = RenderInput::new(releases.cluster.config.clone(), addons);
    input.plugins = releases.plugins.clone();
    input.source = crate::render::input::ConfigSource {
        file: releases.cluster.file.clone(),
        map: releases.cluster.source.clone(),
    };
    Ok(Prepared {
        releases,
        prepared,
        input,
        not_fetched,
    })
}

/// Helm v2 mode and where cluster.yaml sets it, or None in Helm v3 mode.
pub fn helm_v2_mode(cluster: &Cluster) -> Option<chart::HelmV2Mode> {
    (cluster.config.helm.version == 2).then(|| chart::HelmV2Mode {
        file: cluster.file.clone(),
        pos: cluster
            .source
            .value("helm.version")
            .unwrap_or_else(|| cluster.source.locate("helm.version")),
    })
}

fn addon_input(release: &Release, p: &PreparedRelease) -> AddonInput {
    AddonInput {
        release: release.clone(),
        chart_version: p.locked.version.clone(),
        digest: p.locked.digest.clone(),
        chart_url: p
            .locked
            .urls
            .first()
            .cloned()
            .unwrap_or_else(|| p.locked.source.clone()),
        values_yaml: p.values_yaml.clone(),
        // The chart lists them from its root (`crds/x.yaml`); the plan and the
        // installer name them within crds/ (`x.yaml`).
        crds: p
            .chart
            .as_ref()
            .map(|c| {
                c.crds
                    .iter()
                    .map(|f| f.strip_prefix("crds/").unwrap_or(f).to_string())
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Inputs of `prepare_deploy`.
#[derive(Debug, Clone)]
pub struct DeployPrepareOptions {
    pub dir: PathBuf,
    pub cache_dir: PathBuf,
    pub fetch: chart::FetchOptions,
    /// What the live stack recorded (`update`); default for `up`.
    pub recorded: Recorded,
    /// The running Kubernetes version the live stack records (`update`):
    /// when cluster.yaml changes it, the work tree is rendered at it too, to
    /// tell the version change from others (src/aws/lifecycle/version_change.rs).
    pub running_version: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DeployPrepareError {
    #[error(transparent)]
    Pipeline(#[from] Box<PipelineError>),
    #[error(transparent)]
    Lock(#[from] chart::LockError),
    #[error(transparent)]
    Fetch(#[from] Box<chart::FetchError>),
    /// The helm client cluster.yaml sets does not match its sha256.
    #[error(transparent)]
    HelmBinary(Box<crate::located::Located>),
    #[error(transparent)]
    Render(#[from] crate::render::RenderError),
    #[error(transparent)]
    Write(#[from] crate::render::WriteError),
    #[error(transparent)]
    Aws(#[from] crate::aws::AwsError),
}

/// What `up` and `update` publish: a fresh render in `<dir>/rendered`, every
/// locked chart from the cache (fetched and verified when missing), and the
/// plugins' secret values, named by the reference templates saw.
///
/// Rendering is pure and takes milliseconds, so deploys always render anew
/// rather than trust an older `rendered/` that may not match the work tree.
pub async fn prepare_deploy(
    opts: &DeployPrepareOptions,
) -> Result<crate::aws::lifecycle::deploy::ArtifactsOptions, DeployPrepareError> {
    prepare_deploy_then(opts, &mut |_| Ok(())).await
}

/// [`prepare_deploy`], running `before_swap` on the new render before it
/// replaces `<dir>/rendered` ([`crate::render::write_rendered_then`]).
pub async fn prepare_deploy_then(
    opts: &DeployPrepareOptions,
    before_swap: crate::render::BeforeSwap<'_>,
) -> Result<crate::aws::lifecycle::deploy::ArtifactsOptions, DeployPrepareError> {
    let releases = load_releases_recorded(&opts.dir, &opts.recorded).map_err(Box::new)?;
    let lock = chart::load_lock(&opts.dir)?;
    let mut locked = chart::check_lock(&lock, &releases.releases)?;
    // The helm client goes to the cache with the charts, checked against its
    // sha256, and is published with them (aws::deploy::charts_from_plan):
    // the nodes never download it. Only a plan with releases needs it.
    let helm = crate::render::HelmBinary::for_cluster(&releases.cluster.config.helm);
    if !releases.releases.is_empty() {
        locked.push(chart::LockedChart {
            release: "helm client".into(),
            chart: "helm".into(),
            version: helm.version.clone(),
            digest: Some(helm.sha256.clone()),
            urls: vec![helm.url.clone()],
            source: helm.url.clone(),
            kube_version: None,
        });
    }
    chart::fetch_charts(chart::FetchChartsOptions {
        dir: opts.dir.clone(),
        charts: locked,
        fetch: opts.fetch.clone(),
        cache_dir: opts.cache_dir.clone(),
    })
    .await
    .map_err(|e| match e {
        chart::FetchError::DigestMismatch {
            ref chart,
            ref url,
            ref expected,
            ref actual,
            ..
        } if chart == "helm" && url == &helm.url && releases.cluster.config.helm.binary.is_some() => {
            let at = "helm.binary.sha256";
            DeployPrepareError::HelmBinary(Box::new(crate::located::Located::new(
                &releases.cluster.file,
                releases
                    .cluster
                    .source
                    .value(at)
                    .unwrap_or_else(|| releases.cluster.source.locate(at)),
                at,
                format!(
                    "{url} has sha256 {actual}, not {expected:?}: nothing was cached or published \
                     (set helm.binary.sha256 to the tarball's published sha256, or fix helm.binary.url)"
                ),
            )))
        }
        _ => DeployPrepareError::Fetch(Box::new(e)),
    })?;
    let p = prepare_releases(
        &PrepareOptions {
            dir: opts.dir.clone(),
            cache_dir: opts.cache_dir.clone(),
            require_charts: true,
        },
        releases,
    )
    .map_err(Box::new)?;
    let rendered = crate::render::render(&p.input)?;
    let baseline = baseline(&p.input, opts.running_version.as_deref());
    let rendered_dir = crate::aws::lifecycle::deploy::rendered_dir(&opts.dir);
    crate::render::write_rendered_then(&opts.dir, &rendered_dir, &rendered, before_swap)?;
    let charts = crate::aws::lifecycle::deploy::charts_from_plan(&rendered, &opts.cache_dir)?;
    let secrets = p
        .releases
        .plugins
        .secrets
        .iter()
        .map(|s| crate::aws::publish::secrets::NamedSecret {
            name: s.reference.clone(),
            value: crate::aws::publish::secrets::Secret::new(match s.value.expose() {
                serde_json::Value::String(v) => v.clone(),
                other => other.to_string(),
            }),
        })
        .collect();
    Ok(crate::aws::lifecycle::deploy::ArtifactsOptions {
        rendered_dir,
        rendered,
        charts,
        secrets,
        baseline,
    })
}

/// The render input rendered again at `running` (the live stack's
/// version), when cluster.yaml's version resolves to another; the version
/// enters the render through the input's cluster alone. Kept in memory,
/// never written; the post-render hooks do not run on it.
fn baseline(input: &RenderInput, running: Option<&str>) -> Option<crate::aws::lifecycle::deploy::Baseline> {
    let running = running?;
    let wanted = crate::config::resolve_version(&input.cluster.kubernetes_version).ok()?;
    if wanted.version == running {
        return None;
    }
    let mut at_running = input.clone();
    at_running.cluster.kubernetes_version = running.to_string();
    Some(crate::aws::lifecycle::deploy::Baseline {
        version: running.to_string(),
        rendered: crate::render::render(&at_running)
            .map_err(|e| format!("rendering the work tree at the running {running}: {e}")),
    })
}
