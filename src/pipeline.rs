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

/// Loads cluster.yaml and resolves its plugins.
pub fn load_releases(dir: &Path) -> Result<Releases, PipelineError> {
    let cluster = load_cluster(dir)?;
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

/// Inputs of `prepare`.
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
    let releases = load_releases(&opts.dir)?;
    let prepared = chart::prepare_releases(&chart::PrepareOptions {
        dir: opts.dir.clone(),
        releases: releases.releases.clone(),
        kubernetes_version: releases.cluster.config.kubernetes_version.clone(),
        plugin_values: releases.plugin_values.clone(),
        cache_dir: opts.cache_dir.clone(),
        require_charts: opts.require_charts,
    })?;
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
    Ok(Prepared {
        releases,
        prepared,
        input,
        not_fetched,
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
        crds: p.chart.as_ref().map(|c| c.crds.clone()).unwrap_or_default(),
    }
}
