//! The Kubernetes releases kube-aws supports: one row per minor, with the exact
//! patch nodes install and the addon versions that must match the minor.
//!
//! Invariant: a cluster runs only a minor listed here, at an exact patch (the
//! row's default unless cluster.yaml names one), so no node floats to a newer
//! patch at boot and no addon is skewed from the control plane.
//!
//! Sources (checked 2026-11-30; the patches 2026-12-02):
//! - Upstream supports the three newest minors
//!   (<https://kubernetes.io/releases/version-skew-policy/#supported-versions>);
//!   1.34 reached end of life in October 2026, so 1.35 is the oldest here.
//! - The patches are the `k8s.io/kubernetes` tags of each minor the Go module
//!   proxy serves (pkgs.k8s.io publishes an RPM for every tag), and each
//!   minor's default is its newest: the proxy's version list names only
//!   v1.35.4, v1.36.1, v1.36.3 and v1.37.2, but it serves newer tags when
//!   asked for them (`/@v/vX.Y.Z.info`, 2026-12-02): v1.35.5 (2026-05-12),
//!   v1.35.6, v1.35.8 (2026-08-20), v1.36.4 and v1.36.5 (2026-09-23);
//!   v1.35.7, v1.35.9 and v1.37.3 it refuses, so they are not listed. The
//!   test beds build the default minor's default patch, and `make
//!   test-upgrade` upgrades a real node to it from the row's oldest patch
//!   (docs/testing.md).
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
    /// The exact patch nodes install unless cluster.yaml names one: `1.35.8`.
    pub default_patch: &'static str,
    /// cluster-autoscaler image tag for this minor.
    pub cluster_autoscaler: &'static str,
    /// aws-cloud-controller-manager image tag for this minor.
    pub cloud_controller_manager: &'static str,
    /// Every patch of this minor a cluster may run (cluster.yaml may name
    /// one), oldest first; `default_patch` is the newest.
    #[serde(skip)]
    pub patches: &'static [&'static str],
}

/// Supported minors, oldest first.
pub const RELEASES: &[K8sRelease] = &[
    K8sRelease {
        minor: "1.35",
        default_patch: "1.35.8",
        cluster_autoscaler: "v1.35.0",
        cloud_controller_manager: "v1.35.3",
        patches: &["1.35.4", "1.35.5", "1.35.6", "1.35.8"],
    },
    K8sRelease {
        minor: "1.36",
        default_patch: "1.36.5",
        cluster_autoscaler: "v1.36.0",
        cloud_controller_manager: "v1.36.2",
        patches: &["1.36.1", "1.36.3", "1.36.4", "1.36.5"],
    },
    K8sRelease {
        minor: "1.37",
        default_patch: "1.37.2",
        cluster_autoscaler: "v1.37.0",
        cloud_controller_manager: "v1.37.1",
        patches: &["1.37.2"],
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
    /// `1.35.8`: what kubelet, kubeadm and kubectl are pinned to.
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
    if !release.patches.contains(&version.as_str()) {
        return Err(format!(
            "Kubernetes {version} is not in kube-aws's version table (known {minor} patches: {}; use \"{minor}\" for {})",
            release.patches.join(", "),
            release.default_patch
        ));
    }
    Ok(K8sVersion {
        minor,
        version,
        release: *release,
    })
}

/// What moving a running cluster to a new `kubernetesVersion` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum VersionChange {
    /// The same version: nothing to upgrade.
    Same,
    /// A newer patch of the same minor.
    Patch,
    /// The next minor.
    Minor,
}

/// `1.35.4` as numbers; None when it is not `MAJOR.MINOR.PATCH`.
fn triple(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.trim_start_matches('v').split('.').map(|p| p.parse::<u32>().ok());
    let t = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(t)
}

/// The versions of the table a cluster running `running` may move to next,
/// oldest first: a newer patch of its minor, or a patch of the next minor
/// (kubeadm upgrades one minor at a time:
/// <https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/>,
/// "Skipping MINOR versions when upgrading is unsupported").
pub fn allowed_next(running: &str) -> Vec<&'static str> {
    let Some((major, minor, patch)) = triple(running) else {
        return Vec::new();
    };
    RELEASES
        .iter()
        .flat_map(|r| r.patches.iter().copied())
        .filter(|v| match triple(v) {
            Some((a, b, c)) => a == major && ((b == minor && c > patch) || b == minor + 1),
            None => false,
        })
        .collect()
}

fn allowed_text(running: &str) -> String {
    match allowed_next(running) {
        v if v.is_empty() => {
            format!("none: {running} is the newest version kube-aws knows; keep kubernetesVersion at it")
        }
        v => v.join(", "),
    }
}

/// Whether a cluster running `running` (the version its stack records) may
/// move to `target` (cluster.yaml's `kubernetesVersion`, `1.36` or `1.36.3`):
/// the same version, a newer patch in the table, or a patch of the next
/// minor. A downgrade, a skipped minor and a patch the table does not list
/// are refused, naming the versions allowed next. A downgrade is never safe:
/// etcd's data written by a newer control plane is not read by an older one
/// (the version skew policy allows no older API server after an upgrade,
/// <https://kubernetes.io/releases/version-skew-policy/#kube-apiserver>).
pub fn check_upgrade(running: &str, target: &str) -> Result<(VersionChange, K8sVersion), String> {
    let want = resolve_version(target).map_err(|why| {
        format!(
            "{why}; the cluster runs {running}: allowed next versions: {}",
            allowed_text(running)
        )
    })?;
    let (Some(from), Some(to)) = (triple(running), triple(&want.version)) else {
        return Err(format!(
            "the cluster's recorded version {running:?} is not MAJOR.MINOR.PATCH"
        ));
    };
    let same = |what: &str| format!("{what}; allowed next versions: {}", allowed_text(running));
    if to < from {
        return Err(same(&format!(
            "{target:?} ({}) is older than the running {running}: kube-aws never downgrades \
             (an older control plane must not run over etcd data a newer one wrote)",
            want.version
        )));
    }
    if to == from {
        return Ok((VersionChange::Same, want));
    }
    if from.0 != to.0 || to.1 > from.1 + 1 {
        return Err(same(&format!(
            "{target:?} ({}) skips a minor: the cluster runs {running}, and kubeadm upgrades \
             one minor at a time",
            want.version
        )));
    }
    let change = if to.1 == from.1 {
        VersionChange::Patch
    } else {
        VersionChange::Minor
    };
    Ok((change, want))
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
        assert_eq!(v.version, "1.35.8");
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
    fn patches_outside_the_table_are_refused() {
        let e = resolve_version("1.36.2").unwrap_err();
        assert!(
            e.contains("1.36.2 is not in kube-aws's version table") && e.contains("1.36.1, 1.36.3, 1.36.4, 1.36.5"),
            "{e}"
        );
        for r in RELEASES {
            assert_eq!(r.patches.last(), Some(&r.default_patch), "{r:?}");
        }
    }

    #[test]
    fn upgrades_go_one_minor_at_a_time_and_never_back() {
        assert_eq!(check_upgrade("1.35.8", "1.35").unwrap().0, VersionChange::Same);
        assert_eq!(check_upgrade("1.35.4", "1.35").unwrap().0, VersionChange::Patch);
        assert_eq!(check_upgrade("1.36.1", "1.36").unwrap().0, VersionChange::Patch);
        let (c, v) = check_upgrade("1.35.8", "1.36").unwrap();
        assert_eq!((c, v.version.as_str()), (VersionChange::Minor, "1.36.5"));
        assert_eq!(check_upgrade("1.35.4", "1.36.1").unwrap().0, VersionChange::Minor);
        assert_eq!(
            allowed_next("1.35.4"),
            ["1.35.5", "1.35.6", "1.35.8", "1.36.1", "1.36.3", "1.36.4", "1.36.5"]
        );
        assert_eq!(allowed_next("1.36.4"), ["1.36.5", "1.37.2"]);
        assert!(allowed_next("1.37.2").is_empty());

        let skip = check_upgrade("1.35.8", "1.37").unwrap_err();
        assert!(
            skip.contains("skips a minor") && skip.ends_with("allowed next versions: 1.36.1, 1.36.3, 1.36.4, 1.36.5"),
            "{skip}"
        );
        let down = check_upgrade("1.36.5", "1.35").unwrap_err();
        assert!(
            down.contains("never downgrades") && down.ends_with("allowed next versions: 1.37.2"),
            "{down}"
        );
        let down = check_upgrade("1.36.3", "1.36.1").unwrap_err();
        assert!(down.contains("older than the running 1.36.3"), "{down}");
        let unknown = check_upgrade("1.35.8", "1.36.9").unwrap_err();
        assert!(
            unknown.contains("1.36.9 is not in kube-aws's version table")
                && unknown.ends_with("allowed next versions: 1.36.1, 1.36.3, 1.36.4, 1.36.5"),
            "{unknown}"
        );
        let newest = check_upgrade("1.37.2", "1.36").unwrap_err();
        assert!(newest.contains("none: 1.37.2 is the newest"), "{newest}");
    }

    #[test]
    fn minor_of_reads_tags() {
        assert_eq!(minor_of("v1.35.0").as_deref(), Some("1.35"));
        assert_eq!(minor_of("1.36").as_deref(), Some("1.36"));
        assert_eq!(minor_of("1.36.0-beta.1").as_deref(), Some("1.36"));
        assert_eq!(minor_of("latest"), None);
    }
}
