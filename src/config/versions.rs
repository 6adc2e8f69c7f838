//! The Kubernetes releases kube-aws supports: one row per minor, with the exact
//! patch nodes install and the addon versions that must match the minor.
//!
//! Invariant: a cluster runs only a minor listed here, at an exact patch (the
//! row's default unless cluster.yaml names one), so no node floats to a newer
//! patch at boot and no addon is skewed from the control plane.
//!
//! Sources (checked 2026-11-30):
//! - Upstream supports the three newest minors
//!   (<https://kubernetes.io/releases/version-skew-policy/#supported-versions>);
//!   1.34 reached end of life in October 2026, so 1.35 is the oldest here.
//! - The patches are the newest `k8s.io/kubernetes` tags of each minor served
//!   by the Go module proxy; pkgs.k8s.io publishes an RPM for every tag.
//! - cluster-autoscaler's minor must equal the cluster's ("use the Cluster
//!   Autoscaler version that matches the Kubernetes control plane version",
//!   kubernetes/autoscaler cluster-autoscaler/README.md); chart 9.59.0 ships
//!   v1.35.0.
//! - aws-cloud-controller-manager follows the same rule
//!   (kubernetes/cloud-provider-aws docs/README "compatibility"): its tags
//!   v1.35.3, v1.36.2 and v1.37.1 are the newest per minor on the Go proxy.

use serde::Serialize;

/// One supported Kubernetes minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct K8sRelease {
    /// `1.35`.
    pub minor: &'static str,
    /// The exact patch nodes install unless cluster.yaml names one: `1.35.4`.
    pub default_patch: &'static str,
    /// cluster-autoscaler image tag for this minor.
    pub cluster_autoscaler: &'static str,
    /// aws-cloud-controller-manager image tag for this minor.
    pub cloud_controller_manager: &'static str,
}

/// Supported minors, oldest first.
pub const RELEASES: &[K8sRelease] = &[
    K8sRelease {
        minor: "1.35",
        default_patch: "1.35.4",
        cluster_autoscaler: "v1.35.0",
        cloud_controller_manager: "v1.35.3",
    },
    K8sRelease {
        minor: "1.36",
        default_patch: "1.36.3",
        cluster_autoscaler: "v1.36.0",
        cloud_controller_manager: "v1.36.2",
    },
    K8sRelease {
        minor: "1.37",
        default_patch: "1.37.2",
        cluster_autoscaler: "v1.37.0",
        cloud_controller_manager: "v1.37.1",
    },
];

/// The minor `init` writes and a cluster.yaml without `kubernetesVersion` gets.
pub const DEFAULT_MINOR: &str = "1.35";

/// A cluster's Kubernetes version, resolved against the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct K8sVersion {
    /// `1.35`.
    pub minor: String,
    /// `1.35.4`: what kubelet, kubeadm and kubectl are pinned to.
    pub version: String,
    /// The addon pins of the minor.
    #[serde(flatten)]
    pub release: K8sRelease,
}

/// The supported minors, for messages: `1.35, 1.36, 1.37`.
pub fn supported_minors() -> String {
    RELEASES.iter().map(|r| r.minor).collect::<Vec<_>>().join(", ")
}

/// Resolves `MAJOR.MINOR` or `MAJOR.MINOR.PATCH` to a supported release.
/// The error says what is wrong with the value, without quoting its location.
pub fn resolve_version(s: &str) -> Result<K8sVersion, String> {
    let parts: Vec<&str> = s.split('.').collect();
    let numeric = |p: &str| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit());
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| numeric(p)) {
        return Err(format!(
            "{s:?} is not a Kubernetes version (use MAJOR.MINOR, for example \"{DEFAULT_MINOR}\", quoted)"
        ));
    }
    let minor = format!("{}.{}", parts[0], parts[1]);
    let Some(release) = RELEASES.iter().find(|r| r.minor == minor) else {
        return Err(format!(
            "Kubernetes {minor} is not supported (supported minors: {}; use \"{DEFAULT_MINOR}\")",
            supported_minors()
        ));
    };
    let version = match parts.get(2) {
        Some(p) => format!("{minor}.{}", p.parse::<u32>().unwrap_or(0)),
        None => release.default_patch.to_string(),
    };
    Ok(K8sVersion {
        minor,
        version,
        release: *release,
    })
}

/// The minor of a version string such as `v1.35.0` or `1.35`, if it has one.
pub fn minor_of(version: &str) -> Option<String> {
    let v = version.trim_start_matches('v');
    let mut it = v.split('.');
    let major = it
        .next()
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))?;
    let minor: String = it.next()?.chars().take_while(char::is_ascii_digit).collect();
    (!minor.is_empty()).then(|| format!("{major}.{minor}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_minor_is_in_the_table_and_patches_match_their_minor() {
        assert!(RELEASES.iter().any(|r| r.minor == DEFAULT_MINOR));
        for r in RELEASES {
            assert_eq!(minor_of(r.default_patch).as_deref(), Some(r.minor), "{r:?}");
            assert_eq!(minor_of(r.cluster_autoscaler).as_deref(), Some(r.minor), "{r:?}");
            assert_eq!(minor_of(r.cloud_controller_manager).as_deref(), Some(r.minor), "{r:?}");
        }
    }

    #[test]
    fn minor_resolves_to_the_pinned_patch() {
        let v = resolve_version("1.35").unwrap();
        assert_eq!(v.version, "1.35.4");
        assert_eq!(v.release.cluster_autoscaler, "v1.35.0");
        let v = resolve_version("1.36.1").unwrap();
        assert_eq!((v.minor.as_str(), v.version.as_str()), ("1.36", "1.36.1"));
    }

    #[test]
    fn unsupported_and_malformed_versions_are_refused() {
        let e = resolve_version("1.31").unwrap_err();
        assert!(
            e.contains("1.31 is not supported") && e.contains("1.35, 1.36, 1.37"),
            "{e}"
        );
        for bad in ["1", "v1.35", "1.35.x", "1..35", "1.35.4.1", ""] {
            assert!(
                resolve_version(bad)
                    .unwrap_err()
                    .contains("is not a Kubernetes version"),
                "{bad}"
            );
        }
    }

    #[test]
    fn minor_of_reads_tags() {
        assert_eq!(minor_of("v1.35.0").as_deref(), Some("1.35"));
        assert_eq!(minor_of("1.36").as_deref(), Some("1.36"));
        assert_eq!(minor_of("1.36.0-beta.1").as_deref(), Some("1.36"));
        assert_eq!(minor_of("latest"), None);
    }
}
