//! Issue 27 item 1, the pod identity webhook's serving certificate renewed in
//! the cluster (src/node/kube_aws_node/webhook_cert.py, run by the
//! controllers' daily certificate timer), on the control-plane test bed's
//! real kube-apiserver with a kube-aws PKI: the Secret as the reconciler
//! applies it (server-side apply, the published one-year certificate), a
//! Deployment of the webhook's name; then the node program's renewal, with
//! the window widened so the published certificate is due
//! (KUBE_AWS_WEBHOOK_RENEW_BEFORE_SECONDS), writes a new certificate signed
//! by the cluster CA for the Service's names (checked with src/pki.rs
//! `webhook_cert_current`, the rule a publish keeps one by), owned by the
//! reconciler's field manager only, and restarts the Deployment. The
//! reconciler's next apply of the manifest then goes through without a
//! conflict, and a run with the default window keeps what is there.
//!
//! Not covered here: a Deployment rolling (no kubelet on this bed:
//! KUBE_AWS_WEBHOOK_ROLLOUT_TIMEOUT=0 skips the wait for it) and the
//! webhook serving the new certificate; the timer on a real controller (the
//! real-node bed runs certs.py's timer, not this renewal, yet).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::testbed::{self, ControlPlane};
use serde_json::{json, Value};

const DAY: u64 = 86_400;

/// One renewal run as the certificate timer makes it: the JSON it returns and the output.
fn renew(cp: &ControlPlane, root: &Path, renew_before: Option<u64>) -> (Value, String) {
    let mut c = Command::new(common::tool("python"));
    let path = format!("{}:{}:/usr/bin:/bin", cp.bin.display(), common::tools_bin().display());
    c.env_clear()
        .env("PATH", path)
        .env("HOME", root)
        .env("KUBE_AWS_ROOT", root)
        .env("KUBE_AWS_WEBHOOK_ROLLOUT_TIMEOUT", "0")
        .env("PYTHONPATH", Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node"))
        .args([
            "-c",
            "import json; from kube_aws_node import webhook_cert as w; print(json.dumps(w.renew(say=print)))",
        ]);
    if let Some(s) = renew_before {
        c.env("KUBE_AWS_WEBHOOK_RENEW_BEFORE_SECONDS", s.to_string());
    }
    let o = c.output().unwrap();
    let text = common::output_text(&o);
    assert!(o.status.success(), "{text}");
    let last = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    (
        serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {text}")),
        text,
    )
}

fn secret(cp: &ControlPlane) -> Value {
    let out = cp
        .kubectl(&[
            "-n",
            "kube-system",
            "get",
            "secret",
            "pod-identity-webhook-cert",
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&out).unwrap()
}

fn decoded(s: &Value, field: &str) -> String {
    use base64::Engine;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(s["data"][field].as_str().unwrap())
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn the_webhook_certificate_is_renewed_in_the_cluster_from_the_cluster_ca() {
    let Some(bin) = testbed::bin_dir("the_webhook_certificate_is_renewed_in_the_cluster") else {
        return;
    };
    let now = time::OffsetDateTime::now_utc();
    let pki = kube_aws::pki::generate("testbed", now).unwrap();
    let mut files: Vec<(String, String)> = pki.public.clone().into_iter().collect();
    files.extend(pki.keys.iter().map(|(k, v)| (k.clone(), v.expose().to_string())));
    let cp = ControlPlane::start_api_with_pki(&bin, &files);
    let ca_crt = pki.public[kube_aws::pki::CA_CERT].clone();

    // The Secret as the reconciler applies the plugin's manifest, with the published certificate.
    let published = kube_aws::pki::webhook_entries(&ca_crt, &pki.keys[kube_aws::pki::CA_KEY], now).unwrap();
    let manifest = {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "pod-identity-webhook-cert", "namespace": "kube-system"},
               "data": {"tls.crt": b64(published[0].1.expose()), "tls.key": b64(published[1].1.expose())}})
        .to_string()
    };
    let reconciler_apply = || cp.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &manifest);
    reconciler_apply().unwrap_or_else(|e| panic!("{e}"));
    cp.kubectl(&[
        "-n",
        "kube-system",
        "create",
        "deployment",
        "pod-identity-webhook",
        "--image=public.ecr.aws/eks/amazon-eks-pod-identity-webhook:v0.6.17",
    ])
    .unwrap_or_else(|e| panic!("{e}"));

    // A controller's files: the admin kubeconfig and the cluster CA on disk.
    let node = tempfile::tempdir().unwrap();
    let r = node.path();
    std::fs::create_dir_all(r.join("etc/kubernetes/pki")).unwrap();
    std::os::unix::fs::symlink(&cp.kubeconfig, r.join("etc/kubernetes/admin.conf")).unwrap();
    std::fs::write(r.join("etc/kubernetes/pki/ca.crt"), &ca_crt).unwrap();
    std::fs::write(
        r.join("etc/kubernetes/pki/ca.key"),
        pki.keys[kube_aws::pki::CA_KEY].expose(),
    )
    .unwrap();

    // Default window: the published certificate (a year left) is kept.
    let (kept, out) = renew(&cp, r, None);
    assert_eq!(kept["action"], "kept", "{out}");
    assert_eq!(decoded(&secret(&cp), "tls.crt"), published[0].1.expose());

    // A window wider than its life: renewed, from the cluster CA.
    let started = std::time::Instant::now();
    let (renewed, out) = renew(&cp, r, Some(400 * DAY));
    eprintln!("webhook certificate renewal: {:?}", started.elapsed());
    assert_eq!(renewed["action"], "renewed", "{out}");
    let s = secret(&cp);
    let cert = decoded(&s, "tls.crt");
    assert_ne!(cert, published[0].1.expose(), "the certificate did not change");
    assert!(
        kube_aws::pki::webhook_cert_current(&cert, &ca_crt, time::OffsetDateTime::now_utc()),
        "not the cluster CA's, not for the Service's names, or under 90 days:\n{cert}"
    );
    assert!(decoded(&s, "tls.key").contains("PRIVATE KEY"));
    assert!(!out.contains("PRIVATE KEY"), "the key is in the output:\n{out}");
    // The data is the reconciler's field manager's alone.
    let managers: Vec<&str> = s["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["fieldsV1"].to_string().contains("tls.crt"))
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["kubectl"], "{s:#}");
    // The Deployment was restarted (its pod template changed).
    let d: Value = serde_json::from_str(
        &cp.kubectl(&[
            "-n",
            "kube-system",
            "get",
            "deployment",
            "pod-identity-webhook",
            "-o",
            "json",
        ])
        .unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap();
    assert!(
        d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_string(),
        "{d:#}"
    );

    // The reconciler's next apply of the manifest: no conflict; then the
    // default window keeps the (still valid) published certificate.
    reconciler_apply().unwrap_or_else(|e| panic!("the reconciler's apply conflicts after a renewal: {e}"));
    assert_eq!(decoded(&secret(&cp), "tls.crt"), published[0].1.expose());
    let (again, out) = renew(&cp, r, None);
    assert_eq!(again["action"], "kept", "{out}");
}
