//! What the controllers carry for a cluster that lives for years (pure):
//! the API server's admission configuration (Pod Security admission, from
//! cluster.yaml `podSecurity`), the flag and volume that hand it to the
//! kube-apiserver static pod, the certificate renewal's timer, service
//! and settings file (`kube-aws-node certs`, src/node/kube_aws_node/certs.py),
//! the join tokens' (`kube-aws-node bootstrap-token`, join_token.py), the
//! encryption of Secrets at rest and the API audit log.
//!
//! Encryption at rest: the API server encrypts Secrets with the `secretbox`
//! provider (XSalsa20-Poly1305) under a 32-byte key of the secret bundle.
//! The upstream table ("Encrypting Confidential Data at Rest",
//! https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/) rates
//! `aescbc` weak (CBC's padding-oracle attacks), `aesgcm` safe only under
//! automated rotation every 200,000 writes, and `secretbox` strong; the
//! `kms` v2 provider is stronger still but needs a KMS plugin process
//! (aws-encryption-provider) on every controller, whose failure stops the
//! API server from reading any Secret, and which kube-aws does not run yet.
//! The whole EncryptionConfiguration is one KMS-encrypted bundle entry
//! ([`ENCRYPTION_ENTRY`]), placed by the node program with the PKI in
//! kubeadm's certificate directory (0600), which kubeadm already mounts
//! read-only into the kube-apiserver static pod: the key never appears in a
//! template, the user data or S3 in plaintext. `identity` stays as the last
//! provider so that Secrets written before encryption was turned on stay
//! readable until `kube-aws-node encryption` rewrites them
//! (src/node/kube_aws_node/encryption.py). The key is kept across CA
//! rotations and key (`kmsKeyARN`) rotations: etcd's data and every etcd
//! snapshot need it (src/aws/publish/secrets.rs).
//!
//! The audit log: [`audit_policy`] records every request at `Metadata` (who,
//! what, when, the response code; never a body, so never a Secret's value),
//! drops the health probes and the nodes' own lease and status chatter, and
//! the API server writes it to [`AUDIT_LOG`] on the controller's root
//! volume, rotated by the API server itself (`--audit-log-maxsize`,
//! `--audit-log-maxbackup`, `--audit-log-maxage`: at most 6 × 100 MB)
//! ("Auditing", https://kubernetes.io/docs/tasks/debug/debug-cluster/audit/).

use serde_json::{json, Value};

use crate::config::ClusterConfig;

const CERTS_SERVICE: &str = include_str!("templates/kube-aws-certs.service");
const CERTS_TIMER: &str = include_str!("templates/kube-aws-certs.timer");
const TOKEN_SERVICE: &str = include_str!("templates/kube-aws-bootstrap-token.service");
const TOKEN_TIMER: &str = include_str!("templates/kube-aws-bootstrap-token.timer");
const ENCRYPTION_SERVICE: &str = include_str!("templates/kube-aws-encryption.service");
const ENCRYPTION_TIMER: &str = include_str!("templates/kube-aws-encryption.timer");

/// The directory of the API server's admission configuration on a controller,
/// mounted read-only into the kube-apiserver static pod at the same path.
pub const ADMISSION_DIR: &str = "/etc/kube-aws/apiserver";
/// The admission configuration file (JSON, which the API server reads as YAML).
pub const ADMISSION_FILE: &str = "/etc/kube-aws/apiserver/admission.json";
/// The flag kube-aws owns for it.
pub const ADMISSION_FLAG: &str = "admission-control-config-file";
/// The secret bundle entry holding the EncryptionConfiguration (JSON, which
/// the API server reads as YAML); it lands at `/etc/kubernetes/pki/encryption.json`.
pub const ENCRYPTION_ENTRY: &str = "pki/encryption.json";
/// The flag kube-aws owns for it, and its value on a controller.
pub const ENCRYPTION_FLAG: &str = "encryption-provider-config";
pub const ENCRYPTION_FILE: &str = "/etc/kubernetes/pki/encryption.json";
/// The resources encrypted at rest.
pub const ENCRYPTED_RESOURCES: &[&str] = &["secrets"];
/// The audit policy (in [`ADMISSION_DIR`], mounted read-only).
pub const AUDIT_POLICY_FILE: &str = "/etc/kube-aws/apiserver/audit-policy.json";
/// The audit log's directory on the controller (mounted read-write) and file.
pub const AUDIT_DIR: &str = "/var/log/kubernetes/audit";
pub const AUDIT_LOG: &str = "/var/log/kubernetes/audit/audit.log";
/// The API server's own rotation of the audit log: a file is rotated at
/// 100 MB, five rotated files are kept, none older than 30 days.
pub const AUDIT_MAX_SIZE_MB: u32 = 100;
pub const AUDIT_MAX_BACKUPS: u32 = 5;
pub const AUDIT_MAX_AGE_DAYS: u32 = 30;
/// The API server flags kube-aws owns here; a plugin may not set them
/// (src/plugin/merge.rs).
pub const OWNED_APISERVER_FLAGS: &[&str] = &[
    ADMISSION_FLAG,
    ENCRYPTION_FLAG,
    "audit-policy-file",
    "audit-log-path",
    "audit-log-maxsize",
    "audit-log-maxbackup",
    "audit-log-maxage",
];
/// Where certs.py reads its settings.
pub const CERTS_JSON: &str = "/etc/kube-aws/certs.json";
/// The units controllers enable (`--now`) at boot with the plugin units:
/// the services wait for what they need themselves (ConditionPathExists).
pub const CONTROLLER_UNITS: &[&str] = &["kube-aws-certs.timer", "kube-aws-encryption.timer"];

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

/// The kube-apiserver `extraVolumes` entries: [`ADMISSION_DIR`] read-only
/// and [`AUDIT_DIR`] read-write (kubeadm mounts only the PKI and CA
/// directories by itself).
pub fn apiserver_volumes() -> Vec<Value> {
    vec![
        json!({"name": "kube-aws-apiserver", "hostPath": ADMISSION_DIR, "mountPath": ADMISSION_DIR,
            "readOnly": true, "pathType": "DirectoryOrCreate"}),
        json!({"name": "kube-aws-audit", "hostPath": AUDIT_DIR, "mountPath": AUDIT_DIR,
            "readOnly": false, "pathType": "DirectoryOrCreate"}),
    ]
}

/// The API server flags of this module, in order: the admission
/// configuration, the encryption configuration, the audit policy and log.
pub fn apiserver_flags() -> Vec<(String, String)> {
    [
        (ADMISSION_FLAG, ADMISSION_FILE.to_string()),
        (ENCRYPTION_FLAG, ENCRYPTION_FILE.to_string()),
        ("audit-policy-file", AUDIT_POLICY_FILE.to_string()),
        ("audit-log-path", AUDIT_LOG.to_string()),
        ("audit-log-maxsize", AUDIT_MAX_SIZE_MB.to_string()),
        ("audit-log-maxbackup", AUDIT_MAX_BACKUPS.to_string()),
        ("audit-log-maxage", AUDIT_MAX_AGE_DAYS.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The EncryptionConfiguration for `keys` ((name, base64 of 32 bytes), the
/// first encrypts, every one decrypts), then `identity` for what was
/// written before encryption was on. Pure.
pub fn encryption_configuration(keys: &[(String, String)]) -> String {
    let keys: Vec<Value> = keys.iter().map(|(n, s)| json!({"name": n, "secret": s})).collect();
    let doc = json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{
            "resources": ENCRYPTED_RESOURCES,
            "providers": [{"secretbox": {"keys": keys}}, {"identity": {}}],
        }],
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

/// The audit policy (audit.k8s.io/v1): nothing for the health probes, the
/// nodes' leases and their own status updates and events (the bulk of a
/// quiet cluster's requests, and no one's action); `Metadata` for every
/// other request, so no request or response body, and so no Secret,
/// token or ConfigMap value, is ever written; the `RequestReceived` stage
/// omitted (each request is logged once it is answered). Pure.
pub fn audit_policy() -> Value {
    json!({
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*", "/version"]},
            {"level": "None", "userGroups": ["system:nodes"], "verbs": ["get", "update", "patch"],
                "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]},
                              {"group": "", "resources": ["nodes", "nodes/status"]}]},
            {"level": "None", "resources": [{"group": "", "resources": ["events"]},
                                            {"group": "events.k8s.io", "resources": ["events"]}]},
            {"level": "None", "users": ["system:kube-controller-manager", "system:kube-scheduler"],
                "verbs": ["get", "update"], "namespaces": ["kube-system"],
                "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
            {"level": "Metadata"},
        ],
    })
}

/// (path, mode, content) of the controllers' files: the admission
/// configuration, the audit policy, the renewal's settings and its units,
/// the encryption rewrite's units.
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
        (AUDIT_POLICY_FILE.into(), "0644".into(), pretty(&audit_policy())),
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
        (
            "/etc/systemd/system/kube-aws-encryption.service".into(),
            "0644".into(),
            ENCRYPTION_SERVICE.into(),
        ),
        (
            "/etc/systemd/system/kube-aws-encryption.timer".into(),
            "0644".into(),
            ENCRYPTION_TIMER.into(),
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
pub fn bootstrap_token_settings(cluster: &ClusterConfig) -> super::node_files::BootstrapTokenSettings {
    super::node_files::BootstrapTokenSettings {
        parameter: super::layout::bootstrap_token_parameter(&cluster.cluster_name),
        ttl_seconds: u64::from(cluster.bootstrap_tokens.ttl_hours) * 3600,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(extra: &str) -> ClusterConfig {
        crate::config::cluster_for_tests(extra)
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
