//! The node program `kube-aws-node` (src/node/kube_aws_node, Python 3.9
//! standard library; botocore when the node has it, for the calls of
//! sdkcall.py), shipped as files in every node's cloud-config: the
//! package under [`LIB_DIR`] and its launcher at [`LAUNCHER`]. Its
//! subcommands (`bootstrap`, `secrets`, `reconcile`, …) are dispatched by
//! src/node/kube_aws_node/cli.py.

/// Where the package lives on a node.
pub const LIB_DIR: &str = "/opt/kube-aws/lib/kube_aws_node";
/// The launcher: `kube-aws-node COMMAND`.
pub const LAUNCHER: &str = "/opt/kube-aws/bin/kube-aws-node";

/// Every module of the package, as shipped: adding a module is one line here.
pub const MODULES: &[(&str, &str)] = &[
    ("__init__.py", include_str!("../node/kube_aws_node/__init__.py")),
    ("addon_gates.py", include_str!("../node/kube_aws_node/addon_gates.py")),
    ("addon_record.py", include_str!("../node/kube_aws_node/addon_record.py")),
    ("apihost.py", include_str!("../node/kube_aws_node/apihost.py")),
    ("awscall.py", include_str!("../node/kube_aws_node/awscall.py")),
    ("bootstrap.py", include_str!("../node/kube_aws_node/bootstrap.py")),
    ("bundle.py", include_str!("../node/kube_aws_node/bundle.py")),
    ("certs.py", include_str!("../node/kube_aws_node/certs.py")),
    ("cfn.py", include_str!("../node/kube_aws_node/cfn.py")),
    ("cli.py", include_str!("../node/kube_aws_node/cli.py")),
    ("console.py", include_str!("../node/kube_aws_node/console.py")),
    ("csr_approver.py", include_str!("../node/kube_aws_node/csr_approver.py")),
    ("defrag.py", include_str!("../node/kube_aws_node/defrag.py")),
    ("encryption.py", include_str!("../node/kube_aws_node/encryption.py")),
    ("etcd.py", include_str!("../node/kube_aws_node/etcd.py")),
    ("etcd_backup.py", include_str!("../node/kube_aws_node/etcd_backup.py")),
    (
        "etcd_lifecycle.py",
        include_str!("../node/kube_aws_node/etcd_lifecycle.py"),
    ),
    ("etcd_restore.py", include_str!("../node/kube_aws_node/etcd_restore.py")),
    ("fsutil.py", include_str!("../node/kube_aws_node/fsutil.py")),
    ("health.py", include_str!("../node/kube_aws_node/health.py")),
    ("helm_release.py", include_str!("../node/kube_aws_node/helm_release.py")),
    ("host_checks.py", include_str!("../node/kube_aws_node/host_checks.py")),
    ("join_token.py", include_str!("../node/kube_aws_node/join_token.py")),
    ("jsonio.py", include_str!("../node/kube_aws_node/jsonio.py")),
    ("kubeadmcfg.py", include_str!("../node/kube_aws_node/kubeadmcfg.py")),
    ("lease.py", include_str!("../node/kube_aws_node/lease.py")),
    ("locks.py", include_str!("../node/kube_aws_node/locks.py")),
    ("metrics.py", include_str!("../node/kube_aws_node/metrics.py")),
    ("paths.py", include_str!("../node/kube_aws_node/paths.py")),
    ("reconcile.py", include_str!("../node/kube_aws_node/reconcile.py")),
    ("reconfigure.py", include_str!("../node/kube_aws_node/reconfigure.py")),
    (
        "restore_takeover.py",
        include_str!("../node/kube_aws_node/restore_takeover.py"),
    ),
    ("retry.py", include_str!("../node/kube_aws_node/retry.py")),
    ("schedule.py", include_str!("../node/kube_aws_node/schedule.py")),
    ("sdkcall.py", include_str!("../node/kube_aws_node/sdkcall.py")),
    ("secrets.py", include_str!("../node/kube_aws_node/secrets.py")),
    ("testrestore.py", include_str!("../node/kube_aws_node/testrestore.py")),
    ("upgrade.py", include_str!("../node/kube_aws_node/upgrade.py")),
    ("webhook_cert.py", include_str!("../node/kube_aws_node/webhook_cert.py")),
];

const LAUNCHER_PY: &str = include_str!("../node/kube-aws-node");

/// (path, mode, content) of every file of the program on a node.
pub fn files() -> Vec<(String, &'static str, &'static str)> {
    let mut v = vec![(LAUNCHER.to_string(), "0755", LAUNCHER_PY)];
    v.extend(
        MODULES
            .iter()
            .map(|(name, text)| (format!("{LIB_DIR}/{name}"), "0644", *text)),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipping list is the package: no module left out, none listed twice.
    #[test]
    fn every_module_of_the_package_is_shipped_once() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node/kube_aws_node");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py"))
            .collect();
        on_disk.sort();
        let shipped: Vec<String> = MODULES.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            shipped, on_disk,
            "src/render/node_program.rs MODULES must list every module, sorted"
        );
        assert!(files().iter().any(|(p, m, _)| p == LAUNCHER && *m == "0755"));
    }
}
