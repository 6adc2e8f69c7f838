//! The cluster.yaml stage: load it raw with positions, resolve defaults that
//! need the work tree, and validate it. Every error is located.

mod chart_spec;
mod cidr;
mod graph;
mod init;
mod maxpods;
mod mixed;
mod model;
mod reference;
mod resolve;
mod rules;
mod security;
mod validate;
pub use validate::MAX_NODE_POOLS;
mod versions;
mod zonal;

use std::path::{Path, PathBuf};

pub use chart_spec::{chart_release, ChartProblem};
pub use cidr::{cidr, cidr_network, cidr_within, has_host_bits, is_cidr, parse_cidr, Ipv4Net};
pub use graph::{find_cycle, GraphNode, GraphProblem, ReleaseGraph};
pub use init::{init_work_tree, InitError, InitOptions, InitReport, WORK_TREE_DIRS};
pub use maxpods::{
    eni_limits, kubelet_max_pods, max_pods, max_pods_with_prefixes, vcpus, EniLimits, PodAddressing,
    FAMILIES as MAX_PODS_FAMILIES,
};
pub use mixed::{apply_instances_distribution, check_instances_distribution, pool_max_pods};
pub use model::*;
pub use reference::{cluster_reference, schema_markdown};
pub use resolve::{
    default_chart_name, ChartSource, Cluster, Declared, Origin, Release, DEFAULT_NAMESPACE, DEFAULT_TIMEOUT,
};
pub use rules::{
    check_flag_value, check_label_value, check_qualified_name, check_version_constraint, is_ami_id, is_dns_label,
    is_dns_subdomain, is_region, name_problem, normalize_constraint, oci_reference_problem, parse_s3_uri,
    BACKUP_INTERVAL_MAX, BACKUP_INTERVAL_MIN,
};
pub use security::{Certificates, PodSecurity, POD_SECURITY_LEVELS};
pub use versions::{
    allowed_next, check_upgrade, minor_of, resolve_version, supported_minors, K8sRelease, K8sVersion, VersionChange,
    DEFAULT_MINOR, RELEASES,
};
pub use zonal::{check_zonal, controller_zone_warning, default_zone_count, zone_count_with_record};

use crate::located::{parse_yaml, Diagnostics};

/// The cluster file's name inside a work tree.
pub const CLUSTER_FILE: &str = "cluster.yaml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: it does not exist (run `kube-aws init` to create a work tree)", path.display())]
    Missing { path: PathBuf },
    #[error("{0}")]
    Invalid(Diagnostics),
}

/// The path shown in messages for a file inside `dir`: `dir/name`, without a leading `./`.
pub fn display_path(dir: &Path, name: &str) -> PathBuf {
    if dir == Path::new(".") || dir.as_os_str().is_empty() {
        PathBuf::from(name)
    } else {
        dir.join(name)
    }
}

/// Loads, resolves and validates `dir/cluster.yaml`.
pub fn load_cluster(dir: &Path) -> Result<Cluster, ConfigError> {
    let file = display_path(dir, CLUSTER_FILE);
    let text = crate::reader::read_text(dir, Path::new(CLUSTER_FILE), &file, &crate::reader::TEXT_LIMIT).map_err(
        |e| match e {
            crate::reader::ReadError::Missing { file } => ConfigError::Missing { path: file },
            crate::reader::ReadError::Refused(l) => ConfigError::Invalid(l.into()),
        },
    )?;
    parse_cluster(dir, &file, &text)
}

/// Parses, resolves and validates cluster.yaml text; `file` is used in messages.
pub fn parse_cluster(dir: &Path, file: &Path, text: &str) -> Result<Cluster, ConfigError> {
    let (mut config, source): (ClusterConfig, _) =
        parse_yaml(file, text).map_err(|e| ConfigError::Invalid(e.into()))?;
    let releases = validate::validate(file, dir, &config, &source)
        .map_err(|errors| ConfigError::Invalid(Diagnostics::sorted(errors)))?;
    apply_instances_distribution(&mut config);
    Ok(Cluster {
        dir: dir.to_path_buf(),
        file: file.to_path_buf(),
        config,
        source,
        releases,
    })
}

/// A cluster of the unit tests: the three required keys (cluster `demo`,
/// us-west-2, `s3://b/p`), then `extra` (YAML lines).
#[cfg(test)]
pub(crate) fn cluster_for_tests(extra: &str) -> ClusterConfig {
    serde_yaml::from_str(&format!(
        "clusterName: demo\nregion: us-west-2\ns3URI: s3://b/p\n{extra}"
    ))
    .unwrap()
}
