//! Certificate renewal on a real node (issue 27, item 1's must-show): a
//! controller boots from its rendered user-data on the real-node bed (as in
//! real_node.rs, IAM enforced on moto), with kubeadm's
//! `certificateValidityPeriod` (ClusterConfiguration, kubeadm v1beta4) at 8
//! minutes, so every leaf certificate kubeadm issues expires 8 minutes after
//! `kubeadm init`. The controllers' own `kube-aws-certs.timer` (enabled by
//! the boot, its schedule and the renewal window shortened by the test's
//! `certbed` plugin: every 30 s, renew inside 5 minutes instead of daily and
//! 60 days) runs `kube-aws-node certs`, which renews under the S3 lock and
//! restarts the static pods; the test waits for the renewal in the node's
//! `status/certs` object, then past the original certificates' expiry, and
//! checks that the API server still answers with the renewed admin.conf and
//! serves a certificate that expires later than the original.
//!
//! Not covered: a renewal inside a multi-controller cluster (the S3 lock
//! keeps them one at a time: src/node/tests/test_certs.py), the CAs (ten
//! years, not renewed).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use crate::common::nodebed::{self, Node};
use crate::common::output_text;
use crate::real_node::{
    launch_template_user_data, moto_instance, BED_BUCKET, BED_CLUSTER, BED_PLUGIN, BED_REGION, BOOT_LIMIT,
    READY_LIMIT,
};

/// What the test changes on the node, as a plugin of its work tree: the
/// certificate validity, the timer's schedule and the renewal window.
const CERTBED_PLUGIN: &str = r#"apiVersion: kube-aws/v1
kind: Plugin
metadata:
  name: certbed
  version: 0.1.0
  description: short-lived certificates, renewed every 30 s (tests/it/real_node_certs.rs)
enabledByDefault: true
spec:
  nodes:
    controller:
      files:
        - path: /etc/kube-aws/kubeadm.d/60-certbed.json
          content: |
            [{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration", "certificateValidityPeriod": "8m0s"}]
        - path: /etc/systemd/system/kube-aws-certs.timer.d/60-certbed.conf
          content: |
            [Timer]
            OnBootSec=
            OnCalendar=
            OnCalendar=*:*:0/30
            AccuracySec=1s
            RandomizedDelaySec=0
        - path: /etc/systemd/system/kube-aws-certs.service.d/60-certbed.conf
          content: |
            [Service]
            Environment=KUBE_AWS_CERTS_RENEW_BEFORE_SECONDS=300
"#;

/// notAfter of the PEM certificate at `path`, as seconds since the epoch.
fn not_after(path: &Path) -> i64 {
    let pem = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, p) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
    let cert = p.parse_x509().unwrap();
    cert.validity().not_after.timestamp()
}

fn now() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
}

#[test]
fn short_lived_certificates_are_renewed_by_the_timer_and_the_api_answers_after_they_expire() {
    let test = "real_node_certs::short_lived_certificates_are_renewed_by_the_timer_and_the_api_answers_after_they_expire";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let t0 = Instant::now();
    let _bridge = nodebed::bridge();
    let env = crate::common::MotoEnv::new();
    let relay_port = crate::common::free_port();
    let mut relay = Command::new("python3");
    relay
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/tcp_relay.py"))
        .args([nodebed::HOST_IP, &relay_port.to_string(), "127.0.0.1", &env.moto.port.to_string()]);
    let relay = crate::common::Server::start_on(relay, nodebed::HOST_IP, relay_port);
    env.aws(&["s3", "mb", &format!("s3://{BED_BUCKET}")]);
    let kms = env.create_kms_key();
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path();
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: {BED_CLUSTER}\nregion: {BED_REGION}\ns3URI: s3://{BED_BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    for (name, text) in [("nodebed", BED_PLUGIN), ("certbed", CERTBED_PLUGIN)] {
        std::fs::create_dir_all(dir.join("plugins").join(name)).unwrap();
        std::fs::write(dir.join("plugins").join(name).join("plugin.yaml"), text).unwrap();
    }
    let up = env.kube_aws(dir, &["up"]);
    assert!(up.status.success(), "kube-aws up: {}", output_text(&up));

    let stub = launch_template_user_data(&env, "controller");
    let userdata = dir.join("controller.user-data");
    std::fs::write(&userdata, &stub).unwrap();
    let api = {
        let doc: serde_yaml::Value = serde_yaml::from_str(&stub).unwrap();
        let f = doc["write_files"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|f| f["path"].as_str() == Some("/etc/kube-aws/runtime.json"))
            .expect("runtime.json in the stub");
        let rt: serde_json::Value = serde_json::from_str(f["content"].as_str().unwrap()).unwrap();
        rt["apiEndpoint"].as_str().unwrap().to_string()
    };
    let (instance_id, dns_name) = moto_instance(&env, &format!("{BED_CLUSTER}-controller"));
    let roles = env.aws_json(&["iam", "list-roles"]);
    let role_name = roles["Roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["RoleName"].as_str().unwrap_or_default().to_string())
        .find(|n| n.contains("-ControllerRole-"))
        .unwrap_or_else(|| panic!("no controller role in moto: {roles}"));
    let (admin, admin_arn) = crate::node_iam_moto::admin(&env);
    crate::node_iam_moto::enforce_iam(&env);
    let c = crate::node_iam_moto::assume(&env, &admin, &admin_arn, "ControllerRole");
    let creds = serde_json::json!({"AccessKeyId": c.key, "SecretAccessKey": c.secret, "Token": c.token});
    let plan = Node::plan("certs");
    let node_ip = plan.ip.clone();
    let mac = {
        let o: Vec<u8> = plan.ip.split('.').map(|p| p.parse().unwrap()).collect();
        format!("02:42:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
    };
    let imds_conf = dir.join("imds.json");
    std::fs::write(
        &imds_conf,
        serde_json::json!({"instanceId": instance_id, "localHostname": dns_name, "localIpv4": plan.ip,
            "mac": mac, "region": BED_REGION, "availabilityZone": format!("{BED_REGION}a"),
            "role": role_name, "credentials": creds})
        .to_string(),
    )
    .unwrap();
    let imds_port = crate::common::free_port();
    let mut cmd = Command::new("python3");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/imds.py"))
        .args(["--bind", nodebed::HOST_IP, "--port", &imds_port.to_string(), "--config"])
        .arg(&imds_conf);
    let _imds = crate::common::Server::start_on(cmd, nodebed::HOST_IP, imds_port);
    let node = Node::boot(
        &image,
        plan,
        &nodebed::Boot {
            userdata: Some(&userdata),
            env: vec![
                ("NODEBED_AWS_ENDPOINT", relay.url()),
                ("NODEBED_IMDS", format!("{}:{imds_port}", nodebed::HOST_IP)),
                ("NODEBED_MAC", mac.clone()),
                ("NODEBED_HOSTS", format!("{node_ip} {dns_name};{node_ip} {api}")),
            ],
        },
    );
    let log = node.rootfs().join("var/lib/kube-aws/bootstrap.log");
    let ready_line = format!("node {dns_name} is Ready");
    let limit = BOOT_LIMIT + READY_LIMIT;
    let t_boot = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&ready_line) {
            break;
        }
        let failed = text.lines().find(|l| l.contains(" failed (exit "));
        if failed.is_some() || t_boot.elapsed() > limit {
            panic!(
                "the controller did not boot ({failed:?}):\n{text}\n{}",
                node.diagnostics()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let booted = t0.elapsed();

    // kubeadm issued the leaves for 8 minutes.
    let pki = node.rootfs().join("etc/kubernetes/pki");
    let original = not_after(&pki.join("apiserver.crt"));
    let left = original - now();
    assert!((300..=480).contains(&left), "the API server's certificate expires in {left}s, not within 8 minutes");

    // The timer renews them: the node's status object says so.
    let key = format!("clusters/{BED_CLUSTER}/status/certs/{instance_id}.json");
    let deadline = Instant::now() + Duration::from_secs((left + 60) as u64);
    let report = loop {
        let (ok, out) = crate::node_iam_moto::aws_as(
            &env,
            &admin,
            &["s3", "cp", &format!("s3://{BED_BUCKET}/{key}"), "-"],
        );
        if ok {
            let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
            if r["renewed"].as_array().is_some_and(|a| !a.is_empty()) {
                break r;
            }
            assert_ne!(r["ok"], false, "the renewal failed: {r:#}\n{}", node.diagnostics());
        }
        assert!(
            Instant::now() < deadline,
            "no renewal before the certificates expired; last report: {out}\n{}\n{}",
            output_text(&node.exec(&["journalctl", "--no-pager", "-n", "60", "-u", "kube-aws-certs"])),
            node.diagnostics()
        );
        std::thread::sleep(Duration::from_secs(5));
    };
    let renewed_at = t0.elapsed();
    assert!(report["renewed"].to_string().contains("apiserver"), "{report:#}");
    let renewed = not_after(&pki.join("apiserver.crt"));
    assert!(renewed > original, "apiserver.crt still expires at {original}");

    // Past the original certificates' expiry the cluster still answers, with
    // the renewed admin.conf, and the API server serves the renewed certificate.
    let wait = original + 5 - now();
    if wait > 0 {
        std::thread::sleep(Duration::from_secs(wait as u64));
    }
    let kubectl = crate::common::testbed::bin_dir(test)
        .expect("the control-plane test bed")
        .join("kubectl");
    let kctl = |args: &[&str]| {
        Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(node.rootfs().join("etc/kubernetes/admin.conf"))
            .args(["--server", &format!("https://{}:6443", node.ip)])
            .args(["--tls-server-name", &api.to_lowercase()])
            .args(args)
            .output()
            .unwrap()
    };
    let readyz = kctl(&["get", "--raw", "/readyz"]);
    assert_eq!(
        String::from_utf8_lossy(&readyz.stdout).trim(),
        "ok",
        "/readyz after the original expiry: {}\n{}",
        output_text(&readyz),
        node.diagnostics()
    );
    let ready = kctl(&[
        "get",
        "node",
        &dns_name,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ]);
    assert_eq!(String::from_utf8_lossy(&ready.stdout).trim(), "True", "{}", output_text(&ready));
    eprintln!(
        "{test}: booted in {:.1}s; renewed {:.1}s after the start; apiserver.crt expired at {original}, renewed to \
         {renewed}; the API answered {}s after the original expiry",
        booted.as_secs_f64(),
        renewed_at.as_secs_f64(),
        now() - original
    );
}
