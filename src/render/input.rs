//! What render consumes: plain data, owned, with no I/O behind it. The lead's
//! adapter fills it from the config, plugin and chart stages; tests build it by hand.

use serde::Serialize;

use crate::config::{ClusterConfig, Release};
use crate::plugin::ResolvedPlugins;

/// Everything `render` needs. The same input gives byte-identical output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RenderInput {
    pub cluster: ClusterConfig,
    pub plugins: ResolvedPlugins,
    /// Every release to install (cluster.yaml charts and plugin charts), as chart resolution left them.
    pub addons: Vec<AddonInput>,
    /// The helm client installed on the controller.
    pub helm_binary: HelmBinary,
    /// Where cluster.yaml's keys are, to locate a refusal: not part of the output.
    #[serde(skip)]
    pub source: ConfigSource,
}

/// cluster.yaml's name and source map, when the input came from a work tree.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    pub file: std::path::PathBuf,
    pub map: crate::located::SourceMap,
}

/// Where the input came from never changes what it renders.
impl PartialEq for ConfigSource {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl ConfigSource {
    /// A refusal at cluster.yaml's `key` (located when the file is known).
    pub fn refuse(&self, key: Option<&str>, message: String) -> super::RenderError {
        match key {
            Some(key) if !self.file.as_os_str().is_empty() => {
                let pos = self.map.value(key).unwrap_or_else(|| self.map.locate(key));
                super::RenderError::Located(crate::located::Located::new(&self.file, pos, key, message))
            }
            _ => super::RenderError::Iam { message },
        }
    }
}

/// One release after chart resolution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AddonInput {
    pub release: Release,
    /// The exact chart version resolved (e.g. `3.12.2`).
    pub chart_version: String,
    /// sha256 of the chart archive, lowercase hex; None when the chart is not locked yet.
    pub digest: Option<String>,
    /// Where the chart archive was resolved from (repository URL of the .tgz, or a work-tree path).
    pub chart_url: String,
    /// The release's user values, already layered (plugin < values files < set), as YAML text.
    pub values_yaml: String,
    /// File names under the chart's `crds/` directory; empty when the chart ships no CRDs.
    pub crds: Vec<String>,
}

/// The helm client: where `up` downloads it, and the sha256 it and the
/// installer check (the installer reads the copy `up` published: the plan's
/// `helm.binary.object`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct HelmBinary {
    /// e.g. `v3.16.3`.
    pub version: String,
    /// The release tarball (`linux-amd64/helm` inside); override it for airgapped clusters.
    pub url: String,
    /// sha256 of the tarball, lowercase hex.
    pub sha256: String,
}

impl HelmBinary {
    /// The upstream helm v3 client for linux-amd64, pinned.
    pub fn default_v3() -> Self {
        HelmBinary {
            version: "v3.16.3".into(),
            url: "https://get.helm.sh/helm-v3.16.3-linux-amd64.tar.gz".into(),
            sha256: "f5355c79190951eed23c5432a3b920e071f4c00a64f75e077de0dd4cb7b294ea".into(),
        }
    }

    /// The last helm v2 client (talks to Tiller), for linux-amd64, pinned.
    pub fn default_v2() -> Self {
        HelmBinary {
            version: "v2.17.0".into(),
            url: "https://get.helm.sh/helm-v2.17.0-linux-amd64.tar.gz".into(),
            sha256: "f3bec3c7c55f6a9eb9e6586b8c503f370af92fe987fcbf741f37707606d70296".into(),
        }
    }

    /// The client cluster.yaml sets (`helm.binary`), else the default for
    /// its helm major version.
    pub fn for_cluster(helm: &crate::config::Helm) -> Self {
        match &helm.binary {
            Some(b) => HelmBinary {
                version: b.version.clone().unwrap_or_else(|| "set in cluster.yaml".into()),
                url: b.url.clone(),
                sha256: b.sha256.clone(),
            },
            None => Self::default_for(helm.version),
        }
    }

    /// The default client for a helm major version (2 or 3).
    pub fn default_for(helm_version: u32) -> Self {
        if helm_version == 2 {
            Self::default_v2()
        } else {
            Self::default_v3()
        }
    }
}

impl RenderInput {
    /// An input with no plugins and the default helm client for the cluster's helm mode.
    pub fn new(cluster: ClusterConfig, addons: Vec<AddonInput>) -> Self {
        let helm_binary = HelmBinary::for_cluster(&cluster.helm);
        RenderInput {
            cluster,
            plugins: ResolvedPlugins::default(),
            addons,
            helm_binary,
            source: ConfigSource::default(),
        }
    }
}
