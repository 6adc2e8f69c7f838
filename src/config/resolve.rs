//! From the raw cluster.yaml to the resolved cluster: defaults that need the
//! work tree (values files), chart sources, and timeouts.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::model::ClusterConfig;
use crate::located::SourceMap;

/// Where a chart comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChartSource {
    /// An HTTP(S) Helm repository URL.
    Repo(String),
    /// An OCI reference, `oci://host/path/name`.
    Oci(String),
    /// A chart directory or .tgz, relative to the work tree.
    Path(String),
}

/// Which declaration a release came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Origin {
    /// `charts[i]` of cluster.yaml.
    Cluster { index: usize },
    /// A chart declared by a plugin.
    Plugin { plugin: String, index: usize },
}

/// Where a release is declared (cluster.yaml's `charts[i]`, a plugin.yaml's
/// `spec.charts[i]`), for the errors the user fixes there: a chart that is
/// not locked, a locked version its constraint no longer matches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    pub file: PathBuf,
    /// The entry's key path.
    pub path: String,
    pub entry: crate::located::Pos,
    /// The `version` value, when the entry sets one.
    pub version: Option<crate::located::Pos>,
}

impl Declared {
    /// Where `file` declares the entry at `path`, from its source map.
    pub fn at(file: &std::path::Path, map: &SourceMap, path: &str) -> Self {
        Declared {
            file: file.to_path_buf(),
            path: path.to_string(),
            entry: map.locate(path),
            version: map.value(&format!("{path}.version")),
        }
    }
}

/// One Helm release, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Release {
    pub name: String,
    pub chart: String,
    pub source: ChartSource,
    /// Exact version or constraint; None means the newest stable version.
    pub version: Option<String>,
    pub namespace: String,
    /// Values files relative to the work tree, lowest precedence first.
    pub values_files: Vec<String>,
    pub set: serde_json::Map<String, serde_json::Value>,
    pub depends_on: Vec<String>,
    #[serde(with = "duration_secs")]
    pub timeout: Duration,
    pub create_namespace: bool,
    pub bootstrap: bool,
    /// The chart value that sets the replicas of the release's Deployments
    /// (chart_spec.rs checks it is a `--set` key path).
    pub replicas_value: Option<String>,
    pub origin: Origin,
    /// Where it is declared; None for releases made in code (tests).
    #[serde(skip)]
    pub declared: Option<Declared>,
}

mod duration_secs {
    use std::time::Duration;
    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }
}

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
pub const DEFAULT_NAMESPACE: &str = "default";

/// A loaded, resolved and validated work tree.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The work tree directory.
    pub dir: PathBuf,
    /// cluster.yaml, as shown in messages.
    pub file: PathBuf,
    pub config: ClusterConfig,
    pub source: SourceMap,
    /// Releases listed in cluster.yaml, in file order.
    pub releases: Vec<Release>,
}

impl Cluster {
    /// The pool names, in file order.
    /// The Kubernetes version, resolved against the supported table (validated at load).
    pub fn kubernetes(&self) -> super::K8sVersion {
        super::resolve_version(&self.config.kubernetes_version)
            .or_else(|_| super::resolve_version(super::DEFAULT_MINOR))
            .expect("the default minor is in the table")
    }

    pub fn pool_names(&self) -> Vec<&str> {
        self.config.worker.node_pools.iter().map(|p| p.name.as_str()).collect()
    }
}

/// The chart name when `chart:` is not set: an OCI reference's last path
/// segment without its `:tag`, else the release name.
pub fn default_chart_name(source: &ChartSource, release: &str) -> String {
    match source {
        ChartSource::Oci(o) => {
            let last = o.rsplit('/').next().unwrap_or(release);
            last.split(':').next().unwrap_or(last).to_string()
        }
        _ => release.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_chart_names() {
        let oci = |s: &str| ChartSource::Oci(s.into());
        assert_eq!(
            default_chart_name(&oci("oci://r.example.com:5000/charts/app"), "x"),
            "app"
        );
        assert_eq!(
            default_chart_name(&oci("oci://r.example.com:5000/charts/app:1.2.3"), "x"),
            "app"
        );
        assert_eq!(
            default_chart_name(&ChartSource::Repo("https://c.example.com".into()), "web"),
            "web"
        );
    }
}
