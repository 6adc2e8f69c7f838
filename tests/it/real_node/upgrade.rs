//! Issue 26 on the real-node bed (docs/testing.md "The real-node bed"): a
//! configuration change after `up` reaches the running control plane by
//! kubeadm's own path. Each test's name contains `upgrade`.
//!
//! `upgrade_a_dex_oidc_flag_added_after_up_reaches_the_running_apiserver`:
//! a one-controller cluster is up and Ready; then a plugin bringing Dex's
//! OIDC apiserver flags (those plugins/dex renders, with an issuer of the
//! test's: Dex itself is a chart from the internet, out of reach here) is
//! added to the work tree and `kube-aws update` runs against moto, which
//! gives the controller launch template a new version. A controller booted
//! from that version's user data (moto's group is given one more instance,
//! as a rolling update's new one), uploads its ClusterConfiguration into `kubeadm-config` (kubeadm's
//! reconfiguration path) before `kubeadm join`, and its kube-apiserver runs
//! with the flags. The first controller keeps running beside it, standing
//! for the other controllers of an HA control plane during the roll (a
//! single controller's own roll terminates it first and restores etcd's
//! snapshot: that path is `kubeadm init` with the same documents).
//!
//! Not here: the minor and patch upgrades (`kubeadm upgrade apply` on a real
//! node) need the bed to build a second Kubernetes version; see
//! docs/testing.md. The upgrade's steps run against fakes in
//! tests/it/node_bootstrap.rs and src/node/tests/test_upgrade.py.

use std::time::{Duration, Instant};

use super::bed::{self, MotoBed, READY_LIMIT};
use super::pod_net;
use crate::common::{nodebed, output_text};

/// Dex's OIDC flags on kube-apiserver (plugins/dex/plugin.yaml renders the
/// same names), added after `up`.
const OIDC_PLUGIN: &str = r#"apiVersion: kube-aws/v1
kind: Plugin
metadata:
  name: oidcflags
  version: 0.1.0
  description: Dex's OIDC flags on kube-apiserver (tests/it/real_node/upgrade.rs)
enabledByDefault: true
spec:
  kubernetes:
    apiServer:
      flags:
        oidc-issuer-url: "https://dex.bed.example.com"
        oidc-client-id: "kubernetes"
        oidc-username-claim: "email"
"#;

const ISSUER_FLAG: &str = "--oidc-issuer-url=https://dex.bed.example.com";

#[test]
fn upgrade_a_dex_oidc_flag_added_after_up_reaches_the_running_apiserver() {
    let test = "real_node::upgrade::upgrade_a_dex_oidc_flag_added_after_up_reaches_the_running_apiserver";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let t0 = Instant::now();
    let mut bed = MotoBed::up(test, &image, "", &[]);
    let group = format!("{}-controller", bed::BED_CLUSTER);
    let insts = bed.instances(&group);
    let api_ip = insts[0].ip.clone();
    let c1 = bed.boot("controller", "ControllerRole", &insts[0], &api_ip, pod_net(0, &[]));
    c1.expect_ready(READY_LIMIT);
    let apiserver_args = |n: &bed::BedNode| {
        n.node
            .sh("crictl ps --state running --name kube-apiserver -q | head -1 | xargs -r crictl inspect")
    };
    assert!(!apiserver_args(&c1).contains("oidc-issuer-url"));

    // The flag is added after `up`.
    let dir = bed.dir().join("plugins/oidcflags");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), OIDC_PLUGIN).unwrap();
    let old_stub = bed.stubs["controller"].clone();
    let upd = bed.kube_aws(&["update", "--yes"]);
    assert!(upd.status.success(), "kube-aws update: {}", output_text(&upd));
    bed.refresh_stubs();
    assert_ne!(
        bed.stubs["controller"], old_stub,
        "the controller launch template did not change"
    );

    // The group's next controller: one more instance in moto's group (the
    // bed's stand-in for a rolling update's new instance; see the header).
    let groups = bed.aws(&["autoscaling", "describe-auto-scaling-groups"]);
    let asg = groups["AutoScalingGroups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| {
            g["Instances"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|i| i["InstanceId"] == insts[0].id.as_str())
                || g["AutoScalingGroupName"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("ControllerGroup")
        })
        .unwrap_or_else(|| panic!("no group holds {}: {groups}", insts[0].id))["AutoScalingGroupName"]
        .as_str()
        .unwrap()
        .to_string();
    bed.aws(&[
        "autoscaling",
        "update-auto-scaling-group",
        "--auto-scaling-group-name",
        &asg,
        "--max-size",
        "2",
        "--desired-capacity",
        "2",
    ]);
    let new = bed
        .instances(&group)
        .into_iter()
        .find(|i| !insts.iter().any(|o| o.id == i.id))
        .expect("moto's group started no new instance");
    let t_new = Instant::now();
    let c2 = bed.boot("controller", "ControllerRole", &new, &api_ip, pod_net(1, &[(&c1, 0)]));
    let f2 = c2.expect_ready(READY_LIMIT + Duration::from_secs(120));
    let log = c2.log();
    let at = |s: &str| {
        log.find(s)
            .unwrap_or_else(|| panic!("no {s:?} in the boot log:\n{log}"))
    };
    // Uploaded before the join (kubeadm's reconfiguration path), at the same version: no upgrade apply.
    assert!(
        at("uploaded this node's ClusterConfiguration") < at("This node has joined the cluster"),
        "{log}"
    );
    assert!(!log.contains("kubeadm upgrade apply"), "{log}");

    // kubeadm-config has the flag ...
    let cm = bed.kubectl(
        &c1,
        &[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "kubeadm-config",
            "-o",
            "jsonpath={.data.ClusterConfiguration}",
        ],
    );
    let cc = String::from_utf8_lossy(&cm.stdout).to_string();
    assert!(
        cm.status.success() && cc.contains("oidc-issuer-url") && cc.contains("https://dex.bed.example.com"),
        "{}",
        output_text(&cm)
    );
    // ... the new controller's static pod manifest ...
    let manifest = c2.node.sh("cat /etc/kubernetes/manifests/kube-apiserver.yaml");
    assert!(manifest.contains(ISSUER_FLAG), "{manifest}");
    // ... and its running kube-apiserver, which answers.
    let running = apiserver_args(&c2);
    assert!(
        running.contains(ISSUER_FLAG) && running.contains("--oidc-client-id=kubernetes"),
        "{running}"
    );
    let ready = std::process::Command::new(&bed.kubectl)
        .arg("--kubeconfig")
        .arg(c1.node.rootfs().join("etc/kubernetes/admin.conf"))
        .args([
            "--server",
            &format!("https://{}:6443", c2.node.ip),
            "get",
            "--raw",
            "/readyz",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ready.stdout).trim(),
        "ok",
        "{}",
        output_text(&ready)
    );
    eprintln!(
        "{test}: up {:.1}s; the new controller Ready {:.1}s after its start ({}); test {:.1}s",
        bed.up.as_secs_f64(),
        t_new.elapsed().as_secs_f64(),
        f2.times(),
        t0.elapsed().as_secs_f64()
    );
}
