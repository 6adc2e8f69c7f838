//! What render, validate and up need from the chart stage, offline: each
//! release's locked chart (from the lock), its archive (from the cache or the
//! work tree), and its checked values (schema, kubeVersion) as one YAML
//! document for the node. In Helm v2 mode, charts Helm 2 cannot install
//! (`apiVersion: v2`) are refused here, before anything is written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::chart::archive::{read_chart_archive, read_chart_dir, ArchiveError, ChartFiles};
use crate::chart::cache::ChartCache;
use crate::chart::lock::{check_lock, load_lock, Lock, LockError, LockedChart};
use crate::chart::values::{
    check_release_values, load_user_layers, merge_layers, to_yaml_document, ReleaseValues, ValuesError, ValuesLayer,
};
use crate::config::{Origin, Release};
use crate::located::{Diagnostics, Located, Pos};

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("release {release:?}: chart {chart:?} {version} is not in the chart cache {}: run `kube-aws charts fetch`", cache.display())]
    NotFetched {
        release: String,
        chart: String,
        version: String,
        cache: PathBuf,
    },
    #[error("release {release:?}: {source}")]
    Cache { release: String, source: std::io::Error },
    #[error("release {release:?}: {source}")]
    Archive { release: String, source: ArchiveError },
    #[error(transparent)]
    Values(#[from] ValuesError),
    /// Charts Helm 2 cannot install, in Helm v2 mode.
    #[error("{0}")]
    NeedsHelm3(Diagnostics),
}

/// Helm v2 mode (cluster.yaml `helm.version: 2`) and where it is set, so a
/// chart that needs Helm 3 is refused at that place.
#[derive(Debug, Clone)]
pub struct HelmV2Mode {
    /// cluster.yaml, as shown in messages.
    pub file: PathBuf,
    /// Where `helm.version` is set.
    pub pos: Pos,
}

/// Inputs of `prepare_releases`.
#[derive(Debug, Clone)]
pub struct PrepareReleasesOptions {
    /// The work tree.
    pub dir: PathBuf,
    pub releases: Vec<Release>,
    /// cluster.yaml `kubernetesVersion`.
    pub kubernetes_version: String,
    /// Rendered plugin values by release name (the layer between the chart's
    /// values.yaml and values/<release>.yaml).
    pub plugin_values: HashMap<String, ValuesLayer>,
    pub cache_dir: PathBuf,
    /// Fail when a chart is not in the cache; otherwise its checks are skipped
    /// (offline `validate` and `render` say which).
    pub require_charts: bool,
    /// Set in Helm v2 mode: every chart must then be `apiVersion: v1`.
    pub helm_v2: Option<HelmV2Mode>,
}

/// One release, ready to render.
#[derive(Debug, Clone)]
pub struct PreparedRelease {
    pub locked: LockedChart,
    /// The chart's files; None when the archive is not in the cache yet (then
    /// values were layered but not checked against the chart's schema).
    pub chart: Option<ChartFiles>,
    pub values: ReleaseValues,
    /// The layered user values as one YAML document
    /// (render writes it to rendered/addons/values/<release>.yaml).
    pub values_yaml: String,
}

/// Checks the lock, reads every chart, layers and checks every release's values.
pub fn prepare_releases(opts: &PrepareReleasesOptions) -> Result<Vec<PreparedRelease>, PrepareError> {
    let lock = load_lock(&opts.dir)?;
    let locked = check_lock(&lock, &opts.releases)?;
    let cache = ChartCache::new(&opts.cache_dir);
    let mut out = Vec::new();
    let mut needs_helm3 = Vec::new();
    for (release, locked) in opts.releases.iter().zip(locked) {
        let layers = load_user_layers(&opts.dir, release, opts.plugin_values.get(&release.name).cloned())?;
        let chart = match read_locked_chart(&opts.dir, &cache, &locked) {
            Ok(c) => Some(c),
            Err(PrepareError::NotFetched { .. }) if !opts.require_charts => None,
            Err(e) => return Err(e),
        };
        if let Some(mode) = &opts.helm_v2 {
            let api_version = chart_api_version(&lock, &locked, chart.as_ref());
            if api_version.as_deref() == Some("v2") {
                needs_helm3.push(needs_helm3_error(mode, release, &locked));
            }
        }
        let values = match &chart {
            Some(chart) => check_release_values(&release.name, chart, &layers, &opts.kubernetes_version)?,
            None => {
                let user = merge_layers(&layers);
                crate::chart::values::check_minor_skew(
                    &release.name,
                    &release.chart,
                    &user,
                    &layers,
                    &opts.kubernetes_version,
                )?;
                crate::chart::values::check_plugin_owned_values(&release.name, &release.chart, &layers)?;
                ReleaseValues {
                    release: release.name.clone(),
                    merged: user.clone(),
                    user,
                }
            }
        };
        let values_yaml = to_yaml_document(&values.user);
        out.push(PreparedRelease {
            locked,
            chart,
            values,
            values_yaml,
        });
    }
    if !needs_helm3.is_empty() {
        return Err(PrepareError::NeedsHelm3(Diagnostics::sorted(needs_helm3)));
    }
    Ok(out)
}

/// The chart's `apiVersion`: from its Chart.yaml when the archive is at hand,
/// else from its lock entry (an index entry carries it too).
fn chart_api_version(lock: &Lock, locked: &LockedChart, chart: Option<&ChartFiles>) -> Option<String> {
    if let Some(c) = chart {
        // Helm reads a Chart.yaml without apiVersion as v1.
        return Some(c.metadata.api_version.clone().unwrap_or_else(|| "v1".into()));
    }
    lock.index
        .entries
        .get(&locked.chart)?
        .iter()
        .find(|v| v.version == locked.version && v.digest_hex() == locked.digest)
        .map(|v| v.api_version.clone())
}

/// Helm 2 installs only `apiVersion: v1` charts: v2 (Helm 3's format, with
/// dependencies in Chart.yaml and library charts) is refused by its loader.
fn needs_helm3_error(mode: &HelmV2Mode, release: &Release, locked: &LockedChart) -> Located {
    let declared = match &release.origin {
        Origin::Cluster { index } => format!("charts[{index}]"),
        Origin::Plugin { plugin, .. } => format!("plugin {plugin:?}"),
    };
    Located::new(
        &mode.file,
        mode.pos,
        "helm.version",
        format!(
            "release {:?} ({declared}): chart {:?} {} has apiVersion v2, which Helm 2 cannot install; \
             use Helm v3 mode (helm.version: 3), or a chart with apiVersion v1",
            release.name, locked.chart, locked.version
        ),
    )
}

/// Reads a locked chart: a chart directory in place, anything else from the cache.
pub fn read_locked_chart(dir: &Path, cache: &ChartCache, locked: &LockedChart) -> Result<ChartFiles, PrepareError> {
    let archive_err = |source| PrepareError::Archive {
        release: locked.release.clone(),
        source,
    };
    let Some(hex) = &locked.digest else {
        // Only a local chart directory is locked without a digest (check_lock
        // refuses any other entry without one).
        let Some(path) = locked.source.strip_prefix("path:") else {
            return Err(PrepareError::Lock(LockError::Stale(vec![format!(
                "release {:?}: chart {:?} from {} has no digest in the lock: run `kube-aws charts lock`",
                locked.release, locked.chart, locked.source
            )])));
        };
        return read_chart_dir(dir, Path::new(path)).map_err(archive_err);
    };
    let bytes = cache
        .read(hex)
        .map_err(|source| PrepareError::Cache {
            release: locked.release.clone(),
            source,
        })?
        .ok_or_else(|| PrepareError::NotFetched {
            release: locked.release.clone(),
            chart: locked.chart.clone(),
            version: locked.version.clone(),
            cache: cache.root().to_path_buf(),
        })?;
    let label = format!("{}-{}.tgz", locked.chart, locked.version);
    // The index key can differ from the chart's own name (kubeshop's
    // `common-kubeshop` holds `common`), so the name is not enforced here.
    read_chart_archive(&bytes, &label, None).map_err(archive_err)
}
