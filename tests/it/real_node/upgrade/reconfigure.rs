//! A configuration change after `up` reaching the running control plane
//! without a new instance (the header of tests/it/real_node/upgrade.rs
//! says more): Dex's OIDC flags added to kube-apiserver by a plugin, the
//! controller's `kube-aws-node reconfigure` writing the static pod
//! manifests again, the same node's kube-apiserver running with them. The
//! same boot is first checked as a controller booted from its rendered
//! user-data (real_node/cluster.rs `check_rendered_controller`). Not
//! covered: Dex itself (a chart: tests/it/real_node/addons/dex.rs), workers.

use super::*;

/// Dex's OIDC flags on kube-apiserver (plugins/dex/plugin.yaml renders the
/// same names), added after `up`.
pub(crate) const OIDC_PLUGIN: &str = r#"apiVersion: kube-aws/v1
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

pub(crate) const ISSUER_FLAG: &str = "--oidc-issuer-url=https://dex.bed.example.com";

#[test]
fn upgrade_a_dex_oidc_flag_added_after_up_reaches_the_running_apiserver() {
    let test = "real_node::upgrade::reconfigure::upgrade_a_dex_oidc_flag_added_after_up_reaches_the_running_apiserver";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let t0 = Instant::now();
    let mut bed = MotoBed::up(test, &image, "", &[]);
    let group = format!("{}-controller", bed::BED_CLUSTER);
    let insts = bed.instances(&group);
    let api_ip = insts[0].ip.clone();
    let mut c1 = bed.boot("controller", "ControllerRole", &insts[0], &api_ip, pod_net(0, &[]));
    let f = c1.expect_ready(READY_LIMIT);
    // The boot from the rendered user-data, checked on the same controller.
    super::check_rendered_controller(test, &bed, &insts[0], &c1, &f);
    let apiserver_args = |n: &bed::BedNode| {
        n.node
            .sh("crictl ps --state running --name kube-apiserver -q | head -1 | xargs -r crictl inspect")
    };
    assert!(!apiserver_args(&c1).contains("oidc-issuer-url"));

    // The flag is added after `up`: the launch template stays as it is.
    let dir = bed.dir().join("plugins/oidcflags");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), OIDC_PLUGIN).unwrap();
    let old_stub = bed.stubs["controller"].clone();
    let upd = bed.kube_aws(&["update", "--yes"]);
    assert!(upd.status.success(), "kube-aws update: {}", output_text(&upd));
    assert!(
        output_text(&upd).contains("rolls: nothing: no instance is replaced, launched or terminated"),
        "{}",
        output_text(&upd)
    );
    bed.refresh_stubs();
    assert_eq!(
        cloud_config(&bed.stubs["controller"]),
        cloud_config(&old_stub),
        "the controller's user data changed"
    );

    // The running controller applies it in place (with its recreated role's
    // credentials: a moto artifact, see MotoBed::recredential).
    bed.recredential(&mut c1, "ControllerRole");
    let t_reconfigure = Instant::now();
    // The bed's credential swap (recredential restarts the node's IMDS
    // with the recreated role's keys) has twice left the unit's first run
    // without credentials under make test's load ("Unable to locate
    // credentials" before it read anything): a bed artifact, retried only
    // for that, after a pause; any other failure fails the test.
    let mut started = c1.node.exec(&["systemctl", "start", "kube-aws-reconfigure.service"]);
    for _ in 0..2 {
        let journal = c1
            .node
            .sh("journalctl -u kube-aws-reconfigure.service --no-pager -o cat | tail -5");
        if started.status.success() || !journal.contains("Unable to locate credentials") {
            break;
        }
        eprintln!("{test}: the reconfigure unit found no credentials (the bed's IMDS swap); starting it again");
        std::thread::sleep(std::time::Duration::from_secs(5));
        started = c1.node.exec(&["systemctl", "start", "kube-aws-reconfigure.service"]);
    }
    let took = t_reconfigure.elapsed();
    assert!(
        started.status.success(),
        "kube-aws-reconfigure.service failed ({}):\n{}\n--- its journal ---\n{}\n{}",
        started.status,
        output_text(&started),
        c1.node
            .sh("journalctl -u kube-aws-reconfigure.service --no-pager -o cat | tail -60"),
        c1.node.diagnostics()
    );
    // The run that succeeded, alone (a retried first run's failure is above it).
    let journal = c1.node.sh(
        "journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID --value \
         kube-aws-reconfigure.service) | tail -40",
    );
    assert!(journal.contains("kube-apiserver: manifest written again"), "{journal}");
    assert!(!journal.contains("reconfiguration failed"), "{journal}");
    assert_eq!(bed.instances(&group).len(), 1, "no instance was launched");

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
    // ... the controller's static pod manifest ...
    let manifest = c1.node.sh("cat /etc/kubernetes/manifests/kube-apiserver.yaml");
    assert!(manifest.contains(ISSUER_FLAG), "{manifest}");
    // ... and its running kube-apiserver, which answers.
    let running = apiserver_args(&c1);
    assert!(
        running.contains(ISSUER_FLAG) && running.contains("--oidc-client-id=kubernetes"),
        "{running}"
    );
    let ready = std::process::Command::new(&bed.kubectl)
        .arg("--kubeconfig")
        .arg(c1.node.rootfs().join("etc/kubernetes/admin.conf"))
        .args([
            "--server",
            &format!("https://{}:6443", c1.node.ip),
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
    // A second run finds it applied.
    c1.node.sh("systemctl start kube-aws-reconfigure.service");
    let again = c1
        .node
        .sh("journalctl -u kube-aws-reconfigure.service --no-pager -o cat | tail -3");
    assert!(
        again.contains("the configuration this node runs is the current one"),
        "{again}"
    );
    eprintln!(
        "{test}: up {:.1}s; the in-place reconfiguration {:.1}s; test {:.1}s",
        bed.up.as_secs_f64(),
        took.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
