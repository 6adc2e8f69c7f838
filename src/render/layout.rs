//! Every path in the rendered directory (`rendered/`, docs/rendered-layout.md)
//! and every key under the cluster's S3 prefix (`s3URI/<cluster>/`,
//! docs/deploy.md). Render writes these paths, `aws` publishes and reads them
//! back, the nodes' IAM policies grant them: each is spelled here once.

use std::path::{Path, PathBuf};

/// The rendered directory inside a work tree, when `--output-dir` is not given.
pub const RENDERED_DIR: &str = "rendered";

/// The top-level directories of the rendered layout.
pub const ADDONS_DIR: &str = "addons";
pub const MANIFESTS_DIR: &str = "manifests";
pub const STACKS_DIR: &str = "stacks";
pub const USERDATA_DIR: &str = "userdata";
/// Every top-level directory a render writes.
pub const RENDERED_DIRS: [&str; 4] = [ADDONS_DIR, MANIFESTS_DIR, STACKS_DIR, USERDATA_DIR];

/// The addon plan, the reconciler's only input.
pub const ADDON_PLAN: &str = "addons/plan.json";
/// The addon bundle (plan, values, Tiller's and plugin manifests in one object).
pub const ADDON_BUNDLE: &str = "addons/bundle.json";
/// Tiller's manifest in Helm v2 mode.
pub const TILLER_MANIFEST: &str = "addons/tiller.yaml";
/// The root stack's template.
pub const ROOT_TEMPLATE: &str = "stacks/root.json";

/// The secret bundle (KMS-encrypted values), in the rendered directory and in S3.
/// In S3 this key holds the latest bundle, which only `kube-aws` reads (the
/// next publish keeps its secrets); nodes read the content-addressed copy
/// `secrets/<sha256>/bundle.json` their own stack names ([`secret_bundle_parameter`]).
pub const SECRET_BUNDLE: &str = "secrets/bundle.json";

/// The SSM parameter a node stack owns, holding the content-addressed key of
/// the secret bundle that stack version was published with: a node boots
/// with the bundle of its own stack version, a declined or rolled-back update
/// leaves it (CloudFormation restores the parameter), and a changed value
/// replaces no node (user data does not hold it).
pub fn secret_bundle_parameter(cluster: &str, role: &str) -> String {
    format!("/kube-aws/{cluster}/secret-bundle/{role}")
}

/// The SecureString parameter holding the current join token, minted by the
/// controllers (src/node/kube_aws_node/join_token.py, never by a stack:
/// CloudFormation cannot create a SecureString), read by joining nodes.
pub fn bootstrap_token_parameter(cluster: &str) -> String {
    format!("/kube-aws/{cluster}/bootstrap-token")
}

// Under `s3URI/<cluster>/`, written by the nodes at run time.
/// The prefixes the nodes write at run time (`update`/`destroy --purge` treat them apart).
pub const BOOTSTRAP_DIR: &str = "bootstrap/";
/// The control plane's lock (src/node/kube_aws_node/locks.py `JOIN_LOCK`):
/// one controller at a time joins (and upgrades), reconfigures or renews its
/// certificates, each of which restarts its static pods; taken, listed and
/// released.
pub const JOIN_LOCK: &str = "bootstrap/join-lock";
/// The controllers' join token lock: one controller mints at a time (join_token.py).
pub const TOKEN_LOCK: &str = "bootstrap/token-lock";
/// `kube-aws rotate bootstrap-token`'s request: its LastModified is when a
/// new token (and the old one's revocation) was asked for.
pub const TOKEN_ROTATE: &str = "bootstrap/token-rotate";
/// The join token's status (id, minted, expires; never the token).
pub const TOKEN_STATUS: &str = "status/bootstrap-token.json";
/// Each controller's certificate status, `<instance-id>.json` (certs.py).
pub const CERTS_STATUS_DIR: &str = "status/certs/";
pub const STATUS_DIR: &str = "status/";
/// The reconciler's per-release status objects, `<release>.json`.
pub const ADDON_STATUS_DIR: &str = "status/addons/";
/// What the controllers' reconciler installed: `update` reads it to list the
/// releases a new plan drops.
pub const INSTALLED_RELEASES: &str = "status/addons/installed.json";
/// The controllers' upgrade status object (src/node/kube_aws_node/upgrade.py):
/// phase, step, reason, and the version the control plane last reached;
/// `kube-aws status` and a failed wait read it (src/aws/state/control_plane_status.rs).
pub const UPGRADE_STATUS: &str = "status/control-plane/upgrade.json";
/// The controllers' reconfiguration status object
/// (src/node/kube_aws_node/reconfigure.py): the configuration last applied
/// or failed, on which controller, at which step; a failed one stops the others;
/// `kube-aws status` reads it (src/aws/state/control_plane_status.rs).
pub const RECONFIGURE_STATUS: &str = "status/control-plane/reconfigure.json";
/// The nodes' bootstrap reports.
pub const NODE_REPORTS_DIR: &str = "status/nodes/";
/// The last etcd backup run.
pub const BACKUP_STATUS: &str = "status/etcd/backup.json";
/// The last etcd maintenance pass (src/node/kube_aws_node/defrag.py): sizes, alarms.
pub const MAINTENANCE_STATUS: &str = "status/etcd/maintenance.json";
/// The last weekly test restore (src/node/kube_aws_node/testrestore.py).
pub const TEST_RESTORE_STATUS: &str = "status/etcd/test-restore.json";
/// Where the controllers' etcd snapshots go (no trailing slash: the nodes' settings name it).
pub const ETCD_BACKUP_DIR: &str = "etcd";
/// The published chart archives, `charts/<sha256>.tgz`.
pub const CHARTS_DIR: &str = "charts/";
/// The service-account issuer's documents, relative to the issuer's root:
/// the keys of the issuer bucket (src/aws/publish/issuer.rs), which serves them
/// publicly, and of the private copies under `s3URI/<cluster>/oidc/`.
pub const ISSUER_DISCOVERY: &str = ".well-known/openid-configuration";
pub const ISSUER_JWKS: &str = "keys.json";
/// The private copies' directory in the cluster's prefix, and their keys
/// (for copying to the host of `issuerURL`; never public).
pub const OIDC_DIR: &str = "oidc";
pub const OIDC_DISCOVERY: &str = "oidc/.well-known/openid-configuration";
pub const OIDC_JWKS: &str = "oidc/keys.json";

/// `<work tree>/rendered`.
pub fn rendered_dir(work_tree: &Path) -> PathBuf {
    work_tree.join(RENDERED_DIR)
}

/// `addons/values/<release>.yaml`.
pub fn addon_values(release: &str) -> String {
    format!("{ADDONS_DIR}/{}", values_in_addons(release))
}

/// `values/<release>.yaml`: a release's values file, relative to the addon directory.
pub fn values_in_addons(release: &str) -> String {
    format!("values/{release}.yaml")
}

/// `manifests/<plugin>/<name>`: a plugin manifest.
pub fn plugin_manifest(plugin: &str, name: &str) -> String {
    format!("{MANIFESTS_DIR}/{plugin}/{name}")
}

/// `stacks/<name>.json`.
pub fn stack(name: &str) -> String {
    format!("{STACKS_DIR}/{name}.json")
}

/// How a stack template names another rendered file, `path` (a stack):
/// `${ArtifactBaseURL}/<path>`, the `Fn::Sub` string of the root's
/// `TemplateURL`s (render/cfn/root.rs). Publish rewrites it to the
/// content-addressed key (src/aws/publish/mod.rs), so the text is spelled here once.
pub fn template_url(path: &str) -> String {
    format!("${{ArtifactBaseURL}}/{path}")
}

/// [`template_url`] as it stands in a rendered template: a whole JSON
/// string, quotes included, so that no longer name and no other text matches it.
pub fn template_url_json(path: &str) -> String {
    serde_json::Value::String(template_url(path)).to_string()
}

/// The stacks each stack template names by [`template_url_json`], from the
/// files alone: what a render records in `Rendered::stack_refs`, found again
/// in a rendered directory read back (`--use-rendered`).
pub fn named_stacks(
    files: &std::collections::BTreeMap<String, Vec<u8>>,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let stacks: Vec<&String> = files.keys().filter(|p| is_stack(p)).collect();
    let mut out = std::collections::BTreeMap::new();
    for from in &stacks {
        let Ok(text) = std::str::from_utf8(&files[from.as_str()]) else {
            continue;
        };
        let named: std::collections::BTreeSet<String> = stacks
            .iter()
            .filter(|to| to != &from && text.contains(&template_url_json(to)))
            .map(|to| to.to_string())
            .collect();
        if !named.is_empty() {
            out.insert(from.to_string(), named);
        }
    }
    out
}

/// The stack name of a `stacks/<name>.json` path.
pub fn stack_name(path: &str) -> Option<&str> {
    path.strip_prefix(STACKS_DIR)?.strip_prefix('/')?.strip_suffix(".json")
}

/// Whether `path` is a stack template.
pub fn is_stack(path: &str) -> bool {
    stack_name(path).is_some()
}

/// Whether `path` is under `stacks/`.
pub fn in_stacks(path: &str) -> bool {
    in_dir(path, STACKS_DIR)
}

/// Whether `path` is under `userdata/`.
pub fn in_userdata(path: &str) -> bool {
    in_dir(path, USERDATA_DIR)
}

/// The path relative to `addons/`, when it is under it.
pub fn in_addons(path: &str) -> Option<&str> {
    path.strip_prefix(ADDONS_DIR)?.strip_prefix('/')
}

/// The cluster-wide kubeadm documents (ClusterConfiguration,
/// KubeletConfiguration) in the addon bundle, relative to the addon
/// directory: the controllers read them from there at boot and on their
/// reconfigure timer (src/node/kube_aws_node/reconfigure.py KUBEADM_FILE).
pub const KUBEADM_IN_ADDONS: &str = "kubeadm/cluster.json";

/// `addons/kubeadm/cluster.json`.
pub fn kubeadm_cluster() -> String {
    format!("{ADDONS_DIR}/{KUBEADM_IN_ADDONS}")
}

/// Whether `path` is under `manifests/`.
pub fn in_manifests(path: &str) -> bool {
    in_dir(path, MANIFESTS_DIR)
}

fn in_dir(path: &str, dir: &str) -> bool {
    path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// `userdata/<role>.cloud-config`.
pub fn cloud_config(role: &str) -> String {
    format!("{USERDATA_DIR}/{role}.cloud-config")
}

/// `userdata/<role>.stub`: the user data EC2 runs.
pub fn stub(role: &str) -> String {
    format!("{USERDATA_DIR}/{role}.stub")
}

/// Whether `path` is a user-data stub.
pub fn is_stub(path: &str) -> bool {
    in_userdata(path) && path.ends_with(".stub")
}

/// `userdata/<role>/*`: a role's published cloud-configs (IAM resource).
pub fn userdata_objects(role: &str) -> String {
    format!("{USERDATA_DIR}/{role}/*")
}

/// `charts/<hex>.tgz`: a published chart archive.
pub fn chart_object(hex: &str) -> String {
    format!("{CHARTS_DIR}{hex}.tgz")
}

/// The key a rendered file `DIR/NAME` is published under, relative to
/// `s3URI/<cluster>/`: `DIR/<sha256>/NAME`; a cloud-config
/// `userdata/ROLE.cloud-config` goes to `userdata/ROLE/<sha256>.cloud-config`.
/// The publisher (src/aws/publish/mod.rs) uploads under it; render names it in
/// the stub and in the addon plan pointer.
pub fn content_addressed(rel: &str, hex: &str) -> String {
    if let Some(role) = rel
        .strip_prefix(USERDATA_DIR)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|r| r.strip_suffix(".cloud-config"))
    {
        return format!("{USERDATA_DIR}/{role}/{hex}.cloud-config");
    }
    match rel.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/{hex}/{name}"),
        None => format!("{hex}/{rel}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip() {
        assert_eq!(stack_name(&stack("node-pool-a")), Some("node-pool-a"));
        assert_eq!(stack_name("stacksx/a.json"), None);
        assert!(is_stub(&stub("controller")));
        assert!(!is_stub(&cloud_config("controller")));
        assert_eq!(in_addons(ADDON_PLAN), Some("plan.json"));
        assert_eq!(in_addons("addonsx/plan.json"), None);
        assert_eq!(
            content_addressed(&cloud_config("worker"), "ab"),
            "userdata/worker/ab.cloud-config"
        );
        assert_eq!(content_addressed(ADDON_BUNDLE, "ab"), "addons/ab/bundle.json");
        assert_eq!(content_addressed("x", "ab"), "ab/x");
    }
}
