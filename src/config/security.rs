//! cluster.yaml's settings for a cluster that lives for years: the Pod
//! Security admission the API server enforces (`podSecurity`) and when the
//! controllers renew kubeadm's certificates (`certificates`), with their
//! value rules (`problems`, located by the validator).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::name_problem;
use crate::located::did_you_mean;

/// The Pod Security Standards levels
/// (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
pub const POD_SECURITY_LEVELS: &[&str] = &["privileged", "baseline", "restricted"];

/// The Pod Security admission controller's cluster-wide configuration
/// (https://kubernetes.io/docs/tasks/configure-pod-container/enforce-standards-admission-controller/).
/// A namespace's own `pod-security.kubernetes.io/*` labels still override these defaults.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSecurity {
    /// The level pods must meet in every namespace not exempted: `privileged`,
    /// `baseline` (default: no host network, host PID/IPC, host paths or
    /// privileged containers) or `restricted`.
    #[serde(default = "baseline")]
    pub enforce: String,
    /// The level whose violations go to the audit log (default `restricted`).
    #[serde(default = "restricted")]
    pub audit: String,
    /// The level whose violations are returned to the client as warnings (default `restricted`).
    #[serde(default = "restricted")]
    pub warn: String,
    /// Namespaces where no level is enforced (default `[kube-system]`, where
    /// the CNI, kube-proxy and the node agents run with the host's network).
    #[serde(default = "default_exempt")]
    pub exempt_namespaces: Vec<String>,
}

impl Default for PodSecurity {
    fn default() -> Self {
        PodSecurity {
            enforce: baseline(),
            audit: restricted(),
            warn: restricted(),
            exempt_namespaces: default_exempt(),
        }
    }
}

fn baseline() -> String {
    "baseline".into()
}
fn restricted() -> String {
    "restricted".into()
}
fn default_exempt() -> Vec<String> {
    vec!["kube-system".into()]
}

/// When the controllers renew kubeadm's control-plane certificates.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Certificates {
    /// A controller renews its kubeadm certificates (one year) once any is
    /// within this many days of expiry: 7 to 300, default 60. Checked daily.
    #[serde(default = "sixty")]
    pub renew_before_days: u32,
}

impl Default for Certificates {
    fn default() -> Self {
        Certificates {
            renew_before_days: sixty(),
        }
    }
}

fn sixty() -> u32 {
    60
}

/// The join tokens the controllers mint (src/node/kube_aws_node/join_token.py).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootstrapTokens {
    /// How long a join token authenticates, in hours: 1 to 168, default 24.
    /// The controllers mint a new one once the published one is half through
    /// it (checked every 10 minutes); `kube-aws rotate bootstrap-token` forces one.
    #[serde(default = "twenty_four")]
    pub ttl_hours: u32,
}

impl Default for BootstrapTokens {
    fn default() -> Self {
        BootstrapTokens {
            ttl_hours: twenty_four(),
        }
    }
}

fn twenty_four() -> u32 {
    24
}

/// The problems of `bootstrapTokens`, as (key path, message).
pub fn token_problems(tokens: &BootstrapTokens) -> Vec<(String, String)> {
    if (1..=168).contains(&tokens.ttl_hours) {
        return vec![];
    }
    vec![(
        "bootstrapTokens.ttlHours".into(),
        format!(
            "{} hours is outside 1 to 168 (a join token lives this long; controllers mint a new one every half of it)",
            tokens.ttl_hours
        ),
    )]
}

/// Every problem of the two sections, as (key path, message).
pub fn problems(pod_security: &PodSecurity, certificates: &Certificates) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (key, level) in [
        ("enforce", &pod_security.enforce),
        ("audit", &pod_security.audit),
        ("warn", &pod_security.warn),
    ] {
        if !POD_SECURITY_LEVELS.contains(&level.as_str()) {
            out.push((
                format!("podSecurity.{key}"),
                format!(
                    "{level:?} is not a Pod Security level (use privileged, baseline or restricted){}",
                    did_you_mean(level, POD_SECURITY_LEVELS)
                ),
            ));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, ns) in pod_security.exempt_namespaces.iter().enumerate() {
        let path = format!("podSecurity.exemptNamespaces[{i}]");
        if let Some(why) = name_problem(ns, 63) {
            out.push((path, why));
        } else if !seen.insert(ns.as_str()) {
            out.push((path, format!("{ns:?} is listed twice")));
        }
    }
    if !(7..=300).contains(&certificates.renew_before_days) {
        out.push((
            "certificates.renewBeforeDays".into(),
            format!(
                "{} days is outside 7 to 300 (kubeadm's certificates last 365 days; a controller renews once inside this window)",
                certificates.renew_before_days
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_enforce_baseline_except_in_kube_system() {
        let p = PodSecurity::default();
        assert_eq!(p.enforce, "baseline");
        assert_eq!(p.exempt_namespaces, ["kube-system"]);
        assert!(problems(&p, &Certificates::default()).is_empty());
    }

    #[test]
    fn bad_levels_names_and_days_are_named() {
        let p = PodSecurity {
            enforce: "basline".into(),
            exempt_namespaces: vec!["kube-system".into(), "Kube_System".into(), "kube-system".into()],
            ..PodSecurity::default()
        };
        let found = problems(&p, &Certificates { renew_before_days: 400 });
        let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "podSecurity.enforce",
                "podSecurity.exemptNamespaces[1]",
                "podSecurity.exemptNamespaces[2]",
                "certificates.renewBeforeDays"
            ]
        );
        assert!(found[0].1.contains("did you mean \"baseline\""), "{}", found[0].1);
    }

    #[test]
    fn token_ttls_outside_an_hour_to_a_week_are_named() {
        assert!(token_problems(&BootstrapTokens::default()).is_empty());
        for bad in [0, 169] {
            let p = token_problems(&BootstrapTokens { ttl_hours: bad });
            assert_eq!(p[0].0, "bootstrapTokens.ttlHours");
            assert!(p[0].1.starts_with(&format!("{bad} hours")), "{}", p[0].1);
        }
    }
}
