//! Secrets encrypted at rest and the API audit log (issue 36 §4), on the
//! real control plane (tests/it/common/testbed.rs: real etcd and
//! kube-apiserver built from source).
//!
//! The kube-apiserver runs with the example controller's flags (its
//! cloud-config's files under a test root: the audit policy; the
//! EncryptionConfiguration kube-aws builds, src/render/security.rs, with a
//! test key where a controller gets the bundle's). The test reads etcd's raw
//! values through etcd's own JSON gateway (what `etcdctl get` reads), and
//! shows:
//! - a Secret written before encryption was on is plaintext in etcd; one
//!   written after is `k8s:enc:secretbox:v1:<key>:` and holds no plaintext;
//! - the node program's rewrite (`kube-aws-node encryption`,
//!   src/node/kube_aws_node/encryption.py, run as the controllers' timer runs
//!   it) waits while no control-plane node runs an API server with the flag,
//!   then writes every Secret again, so the old one is encrypted too and
//!   still reads back the same through the API, records the key, and does
//!   nothing on its next run;
//! - the audit log records the Secret's creation at `Metadata`, and no
//!   Secret value appears in it.
//!
//! Not covered here: the static pod's mounts and the file's placement from
//! the KMS-encrypted bundle on a booted controller (the real-node tests boot
//! controllers with both: tests/it/real_node.rs), the mirror pods (kubelet;
//! here plain Pod objects stand in for them, with the same labels and
//! command), and CloudWatch Logs (not shipped).

use std::path::Path;
use std::process::Command;

use crate::common::{self, testbed};
use crate::testbed::{example_cloud_configs, plugin_flags, rooted};

const BEFORE: &str = "plaintext-before-6b1f0c";
const AFTER: &str = "plaintext-after-93d2aa";

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// `kube-aws-node encryption` as the controller's timer runs it, with
/// `root` as the node's file system: its exit status and output.
fn rewrite(cp: &testbed::ControlPlane, root: &Path) -> (bool, String) {
    let mut c = Command::new(common::tool("python"));
    let path = format!("{}:{}:/usr/bin:/bin", cp.bin.display(), common::tools_bin().display());
    c.env("PATH", path)
        .env("KUBE_AWS_ROOT", root)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node/kube-aws-node"))
        .arg("encryption");
    let o = c.output().unwrap();
    (o.status.success(), common::output_text(&o))
}

#[test]
fn secrets_are_encrypted_at_rest_rewritten_once_every_apiserver_encrypts_and_audited() {
    let Some(cp) = testbed::shared("secrets_are_encrypted_at_rest_rewritten_once_every_apiserver_encrypts_and_audited")
    else {
        return;
    };
    let example = example_cloud_configs();
    let root = tempfile::tempdir().unwrap();
    let [api, _, _] = plugin_flags(&example).map(|f| rooted(&f, &example["controller"], root.path()));
    let flag = |name: &str| {
        api.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("the controller's apiserver gets --{name}: {api:?}"))
    };
    let under_root = root.path().display().to_string();
    for name in ["encryption-provider-config", "audit-policy-file", "audit-log-path"] {
        assert!(
            flag(name).starts_with(&under_root),
            "--{name} names a node file: {}",
            flag(name)
        );
    }
    let prefix = "/registry-encryption";
    let etcd = |ns: &str, name: &str| {
        cp.etcd_value(&format!("{prefix}/secrets/{ns}/{name}"))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("etcd holds no secret {ns}/{name}"))
    };

    // Before encryption was turned on: the same flags without it.
    let plain: Vec<(String, String)> = api
        .iter()
        .filter(|(k, _)| k != "encryption-provider-config")
        .cloned()
        .collect();
    {
        let (_api, kc) = api_server(&cp, "kube-apiserver-unencrypted", &plain, prefix);
        create_secret(&testbed_kubectl(&cp, &kc), "before", BEFORE);
    }
    assert!(
        contains(&etcd("default", "before"), BEFORE),
        "without the flag a Secret is plaintext in etcd"
    );

    let (_api, kc) = api_server(&cp, "kube-apiserver-encrypted", &api, prefix);
    let kubectl = testbed_kubectl(&cp, &kc);
    create_secret(&kubectl, "after", AFTER);
    let after = etcd("default", "after");
    assert!(
        after.starts_with(b"k8s:enc:secretbox:v1:key-test:"),
        "{:?}",
        String::from_utf8_lossy(&after[..after.len().min(40)])
    );
    assert!(!contains(&after, AFTER), "an encrypted Secret holds no plaintext");
    assert!(
        contains(&etcd("default", "before"), BEFORE),
        "nothing rewrote the old one yet"
    );

    // The node program, with this API server's admin kubeconfig as the node's.
    let admin = root.path().join("etc/kubernetes/admin.conf");
    std::fs::copy(&kc, &admin).unwrap();
    let (ok, out) = rewrite(&cp, root.path());
    assert!(ok, "{out}");
    assert!(out.contains("wait: no control-plane node"), "{out}");

    // A control-plane node and its API server's mirror pod, as kubelet registers them.
    kubectl(&["create", "serviceaccount", "default", "-n", "kube-system"]);
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "cp-1", "labels": {"node-role.kubernetes.io/control-plane": ""}}});
    cp.kubectl_stdin_with(&kc, &["create", "-f", "-"], &node.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    let pod = |flags: &[&str]| {
        let mut command = vec!["kube-apiserver".to_string()];
        command.extend(flags.iter().map(|f| f.to_string()));
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "kube-apiserver-cp-1", "namespace": "kube-system",
                         "labels": {"component": "kube-apiserver", "tier": "control-plane"}},
            "spec": {"nodeName": "cp-1", "containers": [{"name": "kube-apiserver",
                "image": "registry.k8s.io/kube-apiserver:v1.35.8", "command": command}]}})
        .to_string()
    };
    cp.kubectl_stdin_with(&kc, &["create", "-f", "-"], &pod(&["--secure-port=6443"]))
        .unwrap_or_else(|e| panic!("{e}"));
    let ready = r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#;
    let mark_ready = || {
        kubectl(&[
            "patch",
            "pod",
            "kube-apiserver-cp-1",
            "-n",
            "kube-system",
            "--subresource=status",
            "--type=merge",
            "-p",
            ready,
        ])
    };
    mark_ready();
    let (ok, out) = rewrite(&cp, root.path());
    assert!(ok, "{out}");
    assert!(
        out.contains("wait: the kube-apiserver on cp-1 runs without --encryption-provider-config"),
        "{out}"
    );
    assert!(
        contains(&etcd("default", "before"), BEFORE),
        "no rewrite while one API server does not encrypt"
    );

    kubectl(&[
        "delete",
        "pod",
        "kube-apiserver-cp-1",
        "-n",
        "kube-system",
        "--grace-period=0",
        "--force",
    ]);
    cp.kubectl_stdin_with(
        &kc,
        &["create", "-f", "-"],
        &pod(&["--encryption-provider-config=/etc/kubernetes/pki/encryption.json"]),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    mark_ready();
    let (ok, out) = rewrite(&cp, root.path());
    assert!(ok, "{out}");
    assert!(
        out.contains("rewritten:") && out.contains("with secretbox:key-test"),
        "{out}"
    );
    let before = etcd("default", "before");
    assert!(
        before.starts_with(b"k8s:enc:secretbox:v1:key-test:"),
        "the rewrite encrypted the old Secret"
    );
    assert!(!contains(&before, BEFORE));
    let read_back = kubectl(&["get", "secret", "before", "-n", "default", "-o", "jsonpath={.data.v}"]);
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(read_back.trim())
            .unwrap(),
        BEFORE.as_bytes()
    );
    let recorded = kubectl(&[
        "get",
        "configmap",
        "kube-aws-encryption",
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.data.rewrittenWith}",
    ]);
    assert_eq!(recorded.trim(), "secretbox:key-test");
    let (ok, out) = rewrite(&cp, root.path());
    assert!(
        ok && out.contains("done: every Secret was rewritten with secretbox:key-test"),
        "{out}"
    );

    // The audit log: the creation of "after", at Metadata, and no value anywhere.
    let log = std::fs::read_to_string(flag("audit-log-path")).unwrap();
    let events: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let created = events
        .iter()
        .find(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "secrets" && e["objectRef"]["name"] == "after")
        .unwrap_or_else(|| panic!("no audit event for the Secret's creation among {} events", events.len()));
    assert_eq!(created["level"], "Metadata", "{created}");
    assert_eq!(created["stage"], "ResponseComplete", "{created}");
    assert!(created.get("requestObject").is_none(), "{created}");
    assert!(
        !log.contains(AFTER) && !log.contains(BEFORE),
        "no Secret's value is in the audit log"
    );
    assert!(
        !events
            .iter()
            .any(|e| e["requestURI"].as_str().is_some_and(|u| u.starts_with("/readyz"))),
        "the health probes are not audited"
    );
}

/// A kube-apiserver on a port of its own with `flags`, storing under
/// `prefix`, and its admin kubeconfig.
fn api_server(
    cp: &testbed::ControlPlane,
    name: &str,
    flags: &[(String, String)],
    prefix: &str,
) -> (testbed::Proc, std::path::PathBuf) {
    let port = common::free_port();
    let api = cp
        .apiserver_proc(name, port, flags, prefix)
        .unwrap_or_else(|e| panic!("{e}"));
    (api, cp.kubeconfig_for("super-admin.conf", port))
}

/// Secret `name` in `default` with the key `v` holding `value`.
fn create_secret(kubectl: &impl Fn(&[&str]) -> String, name: &str, value: &str) {
    kubectl(&[
        "create",
        "secret",
        "generic",
        name,
        "-n",
        "default",
        &format!("--from-literal=v={value}"),
    ]);
}

/// kubectl against the API server of `kubeconfig`: its stdout (panics with its output on failure).
fn testbed_kubectl<'a>(cp: &'a testbed::ControlPlane, kubeconfig: &'a Path) -> impl Fn(&[&str]) -> String + 'a {
    move |args: &[&str]| {
        let mut c = Command::new(cp.bin.join("kubectl"));
        c.arg("--kubeconfig").arg(kubeconfig).args(args);
        testbed::run(c).unwrap_or_else(|e| panic!("{e}"))
    }
}
