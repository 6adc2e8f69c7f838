//! What the controllers carry for a cluster that lives for years (pure):
//! the API server's admission configuration (Pod Security admission, from
//! cluster.yaml `podSecurity`), the flag and volume that hand it to the
//! kube-apiserver static pod, the certificate renewal's timer, service
//! and settings file (`kube-aws-node certs`, src/node/kube_aws_node/certs.py),
//! and the join tokens' (`kube-aws-node bootstrap-token`, join_token.py).

use serde_json::{json, Value};

use crate::config::ClusterConfig;

const CERTS_SERVICE: &str = include_str!("templates/kube-aws-certs.service");
const CERTS_TIMER: &str = include_str!("templates/kube-aws-certs.timer");
const TOKEN_SERVICE: &str = include_str!("templates/kube-aws-bootstrap-token.service");
const TOKEN_TIMER: &str = include_str!("templates/kube-aws-bootstrap-token.timer");

/// The directory of the API server's admission configuration on a controller,
/// mounted read-only into the kube-apiserver static pod at the same path.
pub const ADMISSION_DIR: &str = "/etc/kube-aws/apiserver";
/// The admission configuration file (JSON, which the API server reads as YAML).
pub const ADMISSION_FILE: &str = "/etc/kube-aws/apiserver/admission.json";
/// The flag kube-aws owns for it.
pub const ADMISSION_FLAG: &str = "admission-control-config-file";
/// Where certs.py reads its settings.
pub const CERTS_JSON: &str = "/etc/kube-aws/certs.json";
/// The units controllers enable (`--now`) at boot with the plugin units:
/// the service waits for the API server's manifest itself (ConditionPathExists).
pub const CERTS_UNITS: &[&str] = &["kube-aws-certs.timer"];

/// The AdmissionConfiguration with the PodSecurity plugin's
/// PodSecurityConfiguration (pod-security.admission.config.k8s.io/v1, GA in
/// 1.25): the cluster.yaml levels at `latest`, the exempted namespaces
/// (https://kubernetes.io/docs/tasks/configure-pod-container/enforce-standards-admission-controller/).
pub fn admission_configuration(cluster: &ClusterConfig) -> Value {
    let p = &cluster.pod_security;
    json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [{
            "name": "PodSecurity",
            "configuration": {
                "apiVersion": "pod-security.admission.config.k8s.io/v1",
                "kind": "PodSecurityConfiguration",
                "defaults": {
                    "enforce": p.enforce, "enforce-version": "latest",
                    "audit": p.audit, "audit-version": "latest",
                    "warn": p.warn, "warn-version": "latest",
                },
                "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": p.exempt_namespaces},
            },
        }],
    })
}

/// The kube-apiserver `extraVolumes` entry that mounts [`ADMISSION_DIR`]
/// (kubeadm mounts only the PKI and CA directories by itself).
pub fn apiserver_volume() -> Value {
    json!({"name": "kube-aws-apiserver", "hostPath": ADMISSION_DIR, "mountPath": ADMISSION_DIR,
        "readOnly": true, "pathType": "DirectoryOrCreate"})
}

/// (path, mode, content) of the controllers' files: the admission
/// configuration, the renewal's settings and its units.
pub fn controller_files(cluster: &ClusterConfig) -> Vec<(String, String, String)> {
    let pretty = |v: &Value| {
        let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
        s.push('\n');
        s
    };
    vec![
        (
            ADMISSION_FILE.into(),
            "0644".into(),
            pretty(&admission_configuration(cluster)),
        ),
        (
            CERTS_JSON.into(),
            "0644".into(),
            pretty(&json!({"renewBeforeDays": cluster.certificates.renew_before_days})),
        ),
        (
            "/etc/systemd/system/kube-aws-certs.service".into(),
            "0644".into(),
            CERTS_SERVICE.into(),
        ),
        (
            "/etc/systemd/system/kube-aws-certs.timer".into(),
            "0644".into(),
            CERTS_TIMER.into(),
        ),
        // Enabled by the boot once the node is in the cluster (bootstrap.py).
        (
            "/etc/systemd/system/kube-aws-bootstrap-token.service".into(),
            "0644".into(),
            TOKEN_SERVICE.into(),
        ),
        (
            "/etc/systemd/system/kube-aws-bootstrap-token.timer".into(),
            "0644".into(),
            TOKEN_TIMER.into(),
        ),
    ]
}

/// node.json's `bootstrapToken` (every node): where the join token is
/// published and how long each lives (src/node/kube_aws_node/join_token.py).
pub fn bootstrap_token_settings(cluster: &ClusterConfig) -> Value {
    json!({
        "parameter": super::layout::bootstrap_token_parameter(&cluster.cluster_name),
        "ttlSeconds": u64::from(cluster.bootstrap_tokens.ttl_hours) * 3600,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(extra: &str) -> ClusterConfig {
        serde_yaml::from_str(&format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://b/p\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn the_default_enforces_baseline_and_exempts_kube_system() {
        let a = admission_configuration(&cluster(""));
        let c = &a["plugins"][0]["configuration"];
        assert_eq!(a["plugins"][0]["name"], "PodSecurity");
        assert_eq!(c["defaults"]["enforce"], "baseline");
        assert_eq!(c["defaults"]["warn"], "restricted");
        assert_eq!(c["exemptions"]["namespaces"], json!(["kube-system"]));
    }

    #[test]
    fn cluster_yaml_sets_levels_exemptions_and_the_renewal_window() {
        let cfg = cluster(
            "podSecurity: {enforce: restricted, exemptNamespaces: [kube-system, monitoring]}\n\
             certificates: {renewBeforeDays: 90}\n",
        );
        let c = &admission_configuration(&cfg)["plugins"][0]["configuration"];
        assert_eq!(c["defaults"]["enforce"], "restricted");
        assert_eq!(c["exemptions"]["namespaces"], json!(["kube-system", "monitoring"]));
        let files = controller_files(&cfg);
        let certs = files.iter().find(|(p, _, _)| p == CERTS_JSON).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&certs.2).unwrap()["renewBeforeDays"], 90);
    }
}
