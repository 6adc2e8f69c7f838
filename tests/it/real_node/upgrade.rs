//! Issue 26 on the real-node bed (docs/testing.md "The real-node bed"): a
//! configuration change after `up` reaches the running control plane by
//! kubeadm's own path. Each test's name contains `upgrade`.
//!
//! `upgrade_a_dex_oidc_flag_added_after_up_reaches_the_running_apiserver`:
//! a one-controller cluster is up and Ready; then a plugin bringing Dex's
//! OIDC apiserver flags (those plugins/dex renders, with an issuer of the
//! test's: Dex itself is a chart from the internet, out of reach here) is
//! added to the work tree and `kube-aws update` runs against moto. The
//! ClusterConfiguration travels in the addon bundle, not the user data, so
//! the controller's launch template is unchanged and no instance is
//! launched; the running controller's `kube-aws-node reconfigure` (its
//! timer's service, started here rather than waited for: the timer's first
//! run is 5 to 8 minutes after boot) takes the join lock, uploads the
//! ClusterConfiguration into `kubeadm-config` and writes the static pod
//! manifests again (kubeadm's reconfiguration path,
//! src/node/kube_aws_node/reconfigure.py), and the same node's
//! kube-apiserver then runs with the flags and answers /readyz.
//!
//! `upgrade_a_patch_release_reaches_the_running_apiserver` (ignored by `make
//! test`; `make test-upgrade` builds its second Kubernetes patch and runs it,
//! docs/testing.md "The upgrade bed"): a one-controller cluster brought up
//! at the default minor's oldest patch (1.35.4, from the node image of
//! scripts/install-upgradebed.sh) is moved to the default patch (1.35.8) by
//! `kube-aws update`; its controller is replaced as a single controller is
//! (the old one gone first), and the replacement, booted from the new launch
//! template's user data on the default node image, restores etcd's snapshot,
//! runs `kubeadm init` at its version over it and then `kubeadm upgrade
//! apply` (src/node/kube_aws_node/upgrade.py `after_init`). Then the API
//! server, the static pods, kube-proxy and the node's kubelet run the new
//! patch, the data written before is there, the upgrade record says so, and
//! no kubelet was newer than the API server at any sample of the roll.
//!
//! Not here: the minor upgrade (1.35 → 1.36: kubelet 1.36 needs containerd
//! 2.x, which the bed does not build) and an HA roll (a newer controller
//! joining and upgrading under the join lock: against fakes in
//! tests/it/node_bootstrap.rs and src/node/tests/test_upgrade.py); the
//! termination lifecycle hook (the bed has none: the test takes the final
//! snapshot itself by starting the backup service).

use std::sync::atomic::{AtomicBool, Ordering};
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

/// The digest of the cloud-config a stub names (moto recreates a modified
/// nested stack whole, so the stub's stack name moves; its data does not).
fn cloud_config(stub: &str) -> String {
    stub.split("\"cloudConfigSha256\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no cloudConfigSha256 in the stub:\n{stub}"))
        .to_string()
}

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
    let mut c1 = bed.boot("controller", "ControllerRole", &insts[0], &api_ip, pod_net(0, &[]));
    c1.expect_ready(READY_LIMIT);
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
    c1.node.sh("systemctl start kube-aws-reconfigure.service");
    let took = t_reconfigure.elapsed();
    let journal = c1
        .node
        .sh("journalctl -u kube-aws-reconfigure.service --no-pager -o cat | tail -40");
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

/// `v1.35.8` as numbers, for ordering.
fn triple(v: &str) -> Option<(u32, u32, u32)> {
    let core = v.trim().trim_start_matches('v').split(['-', '+']).next()?;
    let mut it = core.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// The Kubernetes version a node image holds (scripts/install-nodebed.sh writes it).
fn image_version(image: &std::path::Path) -> String {
    std::fs::read_to_string(image.join("kubernetes-version"))
        .unwrap_or_else(|e| panic!("{}: {e}", image.join("kubernetes-version").display()))
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs a second Kubernetes patch on the real-node bed: `make test-upgrade` (docs/testing.md)"]
fn upgrade_a_patch_release_reaches_the_running_apiserver() {
    let test = "real_node::upgrade::upgrade_a_patch_release_reaches_the_running_apiserver";
    let Some(to_image) = nodebed::image_dir(test) else {
        return;
    };
    let (from_image, from) = nodebed::upgrade_image_dir(test, "upgrade-from");
    let to = image_version(&to_image);
    assert!(
        triple(&from) < triple(&to) && triple(&from).map(|t| (t.0, t.1)) == triple(&to).map(|t| (t.0, t.1)),
        "the upgrade bed's {from} is not an older patch of the default {to}"
    );
    upgrade_one_controller(test, &from_image, &from, &to_image, &to);
}

#[test]
#[ignore = "needs the next minor's Kubernetes on the real-node bed: `make test-upgrade` (docs/testing.md)"]
fn upgrade_a_minor_release_reaches_the_control_plane_kube_proxy_and_coredns() {
    let test = "real_node::upgrade::upgrade_a_minor_release_reaches_the_control_plane_kube_proxy_and_coredns";
    let Some(from_image) = nodebed::image_dir(test) else {
        return;
    };
    let from = image_version(&from_image);
    let (to_image, to) = nodebed::upgrade_image_dir(test, "upgrade-to-minor");
    assert!(
        triple(&from).map(|t| (t.0, t.1 + 1)) == triple(&to).map(|t| (t.0, t.1)),
        "the upgrade bed's {to} is not of the minor after the default {from}"
    );
    upgrade_one_controller(test, &from_image, &from, &to_image, &to);
}

/// A one-controller cluster at `from` (on `from_image`) is moved to `to` by
/// `kube-aws update`; its replacement boots on `to_image`.
fn upgrade_one_controller(
    test: &'static str,
    from_image: &std::path::Path,
    from: &str,
    to_image: &std::path::Path,
    to: &str,
) {
    let (from_v, to_v) = (from.trim_start_matches('v'), to.trim_start_matches('v'));
    let t0 = Instant::now();
    let mut bed = MotoBed::up(test, from_image, &format!("kubernetesVersion: \"{from_v}\"\n"), &[]);
    let group = format!("{}-controller", bed::BED_CLUSTER);
    let insts = bed.instances(&group);
    assert_eq!(insts.len(), 1, "{insts:?}");
    let old = insts[0].clone();
    let c1 = bed.boot("controller", "ControllerRole", &old, &old.ip, pod_net(0, &[]));
    c1.expect_ready(READY_LIMIT);
    let t_old = t0.elapsed();
    let server_version = |n: &bed::BedNode, bed: &MotoBed| -> Option<String> {
        let o = bed.kubectl(n, &["version", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        v["serverVersion"]["gitVersion"].as_str().map(str::to_string)
    };
    assert_eq!(server_version(&c1, &bed).as_deref(), Some(from));
    // Data written at the old patch, which the upgrade must keep.
    let made = bed.kubectl(
        &c1,
        &[
            "-n",
            "default",
            "create",
            "configmap",
            "written-at-old-patch",
            &format!("--from-literal=version={from}"),
        ],
    );
    assert!(made.status.success(), "{}", output_text(&made));
    // The final snapshot (the termination hook's, which the bed does not run).
    let backup = c1.node.sh(
        "systemctl start kube-aws-etcd-backup.service; systemctl show -p Result --value kube-aws-etcd-backup.service; \
         journalctl -u kube-aws-etcd-backup.service --no-pager -o cat | tail -5",
    );
    assert!(backup.starts_with("success"), "the etcd backup: {backup}");

    // The version moves to the default patch: the preview says so.
    let yaml = bed.dir().join("cluster.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    std::fs::write(
        &yaml,
        text.replace(
            &format!("kubernetesVersion: \"{from_v}\""),
            &format!("kubernetesVersion: \"{to_v}\""),
        ),
    )
    .unwrap();
    let upd = bed.kube_aws(&["update", "--yes"]);
    let said = output_text(&upd);
    assert!(upd.status.success(), "kube-aws update: {said}");
    assert!(
        said.contains(&format!(
            "control plane {from_v} → {to_v} (1 controller, replaced: its replacement restores etcd's snapshot"
        )),
        "the preview: {said}"
    );
    let old_stub = bed.stubs["controller"].clone();
    bed.refresh_stubs();
    assert_ne!(
        cloud_config(&bed.stubs["controller"]),
        cloud_config(&old_stub),
        "the controller's user data did not change"
    );

    // A single controller is replaced old-first: the old one goes, its group
    // launches the replacement from the new launch template.
    drop(c1);
    let now = bed.instances(&group);
    let new = match now.iter().find(|i| i.id != old.id) {
        Some(i) => i.clone(),
        None => {
            bed.aws(&[
                "autoscaling",
                "terminate-instance-in-auto-scaling-group",
                "--instance-id",
                &old.id,
                "--no-should-decrement-desired-capacity",
            ]);
            let now = bed.instances(&group);
            now.iter()
                .find(|i| i.id != old.id)
                .unwrap_or_else(|| panic!("moto's group did not replace {}: {now:?}", old.id))
                .clone()
        }
    };
    bed.image = to_image.to_path_buf();
    let t_new = Instant::now();
    let c2 = bed.boot("controller", "ControllerRole", &new, &new.ip, pod_net(0, &[]));

    // While it boots: every sample of the Nodes' kubelets against the API
    // server that answers them (the version skew policy: a kubelet is never
    // newer than kube-apiserver).
    let done = AtomicBool::new(false);
    let (followed, samples) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut samples: Vec<(String, Vec<(String, String)>)> = Vec::new();
            let mut untainted = false;
            while !done.load(Ordering::Relaxed) {
                if c2.node.rootfs().join("etc/kubernetes/admin.conf").exists() {
                    // The bed runs no cloud controller manager: the test does
                    // its part, removing the taint of kubelet's
                    // `--cloud-provider=external` once the Node registers
                    // (kubeadm upgrade apply's health check Job needs a node
                    // to run on; upgrade.py wait_schedulable waits for one).
                    if !untainted {
                        let t = bed.kubectl(
                            &c2,
                            &[
                                "taint",
                                "node",
                                &new.dns.to_lowercase(),
                                "node.cloudprovider.kubernetes.io/uninitialized-",
                            ],
                        );
                        untainted = t.status.success();
                    }
                    if let Some(server) = server_version(&c2, &bed) {
                        let o = bed.kubectl(&c2, &["get", "nodes", "-o", "json"]);
                        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) {
                            let kubelets = v["items"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|n| {
                                    (
                                        n["metadata"]["name"].as_str().unwrap_or("?").to_string(),
                                        n["status"]["nodeInfo"]["kubeletVersion"]
                                            .as_str()
                                            .unwrap_or("?")
                                            .to_string(),
                                    )
                                })
                                .collect();
                            samples.push((server, kubelets));
                        }
                    }
                }
                std::thread::sleep(Duration::from_secs(2));
            }
            samples
        });
        let f = c2.follow(READY_LIMIT + Duration::from_secs(300));
        done.store(true, Ordering::Relaxed);
        (f, sampler.join().unwrap())
    });
    if let Err(e) = &followed.outcome {
        panic!("{}", c2.explain(&followed, e));
    }
    let t_upgrade = t_new.elapsed();
    let has = |s: &str| followed.steps.iter().any(|(n, _)| n == s);
    assert!(
        has("etcd-restore-check") && has("kubeadm-init") && has("kubeadm-upgrade-apply"),
        "the replacement did not restore, init and upgrade: {}",
        followed.times()
    );
    let log = c2.log();
    assert!(
        log.contains(&format!(
            "the restored snapshot is of Kubernetes {from_v}; this node is {to_v}"
        )),
        "{log}"
    );
    assert!(
        !samples.is_empty(),
        "no sample of the versions while the replacement booted"
    );
    for (server, kubelets) in &samples {
        for (node, kubelet) in kubelets {
            assert!(
                triple(kubelet) <= triple(server),
                "{node}'s kubelet {kubelet} was newer than the API server {server}: {samples:?}"
            );
        }
    }

    // The API server, the static pods and kube-proxy run the new patch: the
    // images kubeadm names for it (the image's list, written by
    // scripts/install-nodebed.sh from `kubeadm config images list`).
    assert_eq!(server_version(&c2, &bed).as_deref(), Some(to));
    let images = std::fs::read_to_string(to_image.join("images")).unwrap();
    let want = |name: &str| {
        images
            .lines()
            .find(|l| l.rsplit('/').next().is_some_and(|t| t.starts_with(&format!("{name}:"))))
            .unwrap_or_else(|| panic!("no {name} in {images}"))
            .to_string()
    };
    for name in ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"] {
        let pod = format!("{name}-{}", new.dns.to_lowercase());
        let o = bed.kubectl(
            &c2,
            &[
                "-n",
                "kube-system",
                "get",
                "pod",
                &pod,
                "-o",
                "jsonpath={.spec.containers[0].image}",
            ],
        );
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            want(name),
            "{pod}: {}",
            output_text(&o)
        );
        if name != "etcd" {
            assert!(want(name).ends_with(&format!(":{to}")), "{}", want(name));
        }
    }
    let proxy = bed.kubectl(
        &c2,
        &[
            "-n",
            "kube-system",
            "get",
            "daemonset",
            "kube-proxy",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&proxy.stdout),
        want("kube-proxy"),
        "{}",
        output_text(&proxy)
    );
    // CoreDNS: the version kubeadm names for the new version (its
    // constants.go CoreDNSVersion; 1.35.4 and 1.35.8 name the same one).
    let dns = bed.kubectl(
        &c2,
        &[
            "-n",
            "kube-system",
            "get",
            "deployment",
            "coredns",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&dns.stdout),
        want("coredns"),
        "{}",
        output_text(&dns)
    );
    let kubelet = bed.kubectl(
        &c2,
        &[
            "get",
            "node",
            &new.dns.to_lowercase(),
            "-o",
            "jsonpath={.status.nodeInfo.kubeletVersion}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&kubelet.stdout),
        to,
        "{}",
        output_text(&kubelet)
    );
    // What was written at the old patch is there.
    let kept = bed.kubectl(
        &c2,
        &[
            "-n",
            "default",
            "get",
            "configmap",
            "written-at-old-patch",
            "-o",
            "jsonpath={.data.version}",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&kept.stdout), from, "{}", output_text(&kept));
    // The upgrade record.
    let rt = bed::stub_runtime(&bed.stubs["controller"]);
    let record = bed.aws(&[
        "s3",
        "cp",
        &format!(
            "s3://{}/{}/status/control-plane/upgrade.json",
            rt["bucket"].as_str().unwrap(),
            rt["keyPrefix"].as_str().unwrap()
        ),
        "-",
    ]);
    assert_eq!(
        (&record["phase"], &record["from"], &record["to"], &record["version"]),
        (
            &serde_json::json!("upgraded"),
            &serde_json::json!(from_v),
            &serde_json::json!(to_v),
            &serde_json::json!(to_v)
        ),
        "{record}"
    );
    // ... and `kube-aws status` shows it.
    let status = bed.kube_aws(&["status"]);
    let shown = output_text(&status);
    assert!(
        shown.contains(&format!("upgraded {from_v} → {to_v}")) && shown.contains(&format!("version: {to_v}")),
        "kube-aws status: {shown}"
    );
    eprintln!(
        "{test}: up {:.1}s; the {from} controller Ready {:.1}s after the test began; the {to} replacement Ready \
         {:.1}s after its start ({}); {} samples of the versions during its boot; test {:.1}s",
        bed.up.as_secs_f64(),
        t_old.as_secs_f64(),
        t_upgrade.as_secs_f64(),
        followed.times(),
        samples.len(),
        t0.elapsed().as_secs_f64()
    );
}
