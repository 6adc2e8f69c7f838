//! Issue 26 on the real-node bed (docs/testing.md "The real-node bed"): a
//! configuration change after `up` reaches the running control plane by
//! kubeadm's own path. Each test's name contains `upgrade`.
//!
//! `upgrade_a_dex_oidc_flag_added_after_up_reaches_the_running_apiserver`:
//! a one-controller cluster is up and Ready (its boot from the rendered
//! user-data checked first by real_node.rs `check_rendered_controller`, on
//! the same controller: one boot for both, issue 37); then a plugin bringing Dex's
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
//! `upgrade_a_minor_release_reaches_the_control_plane_kube_proxy_and_coredns`
//! (in `make test`, whose beds build the next minor's node image): the same path from the default patch (1.35.8, the
//! default node image) to the next minor's default patch (1.36.5, the image
//! `.testbed/node/upgrade-to-minor`): the static pods (etcd 3.6.6 → 3.6.8
//! with them), kube-proxy and CoreDNS (v1.13.1 → v1.14.2) run what kubeadm
//! 1.36.5 names.
//!
//! `upgrade_an_ha_control_plane_one_controller_at_a_time` (ignored
//! likewise): three controllers at 1.35.4 replaced one at a time by 1.35.8
//! ones (its own header says what the test does in the bed's place).
//!
//! Not here: the termination lifecycle hook (the bed has none: the
//! single-controller tests take the final snapshot themselves by starting
//! the backup service), the load balancer (a controller's address stands for
//! the API's name), and a minor roll of three controllers (the HA test rolls
//! a patch; the minor's path differs from it only by kubeadm's own version
//! checks, against fakes in tests/it/node_bootstrap.rs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::bed::{self, MotoBed, READY_LIMIT};
use super::{etcd_members, member_ips, pod_net};
use crate::common::{nodebed, output_text};

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

/// A ConfigMap written at the old version, which the upgrade must keep.
fn write_marker(bed: &MotoBed, via: &bed::BedNode, version: &str) {
    let made = bed.kubectl(
        via,
        &[
            "-n",
            "default",
            "create",
            "configmap",
            "written-at-old-patch",
            &format!("--from-literal=version={version}"),
        ],
    );
    assert!(made.status.success(), "{}", output_text(&made));
}

/// The ConfigMap `write_marker` wrote is there, with its version.
fn expect_marker(bed: &MotoBed, via: &bed::BedNode, version: &str) {
    let kept = bed.kubectl(
        via,
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
    assert_eq!(String::from_utf8_lossy(&kept.stdout), version, "{}", output_text(&kept));
}

/// `kubernetesVersion` moves from `from` to `to` in the work tree and
/// `kube-aws update --yes` runs: its output (the preview), after it succeeded.
fn move_version(bed: &MotoBed, from: &str, to: &str) -> String {
    let yaml = bed.dir().join("cluster.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    let was = format!("kubernetesVersion: \"{from}\"");
    assert!(text.contains(&was), "no {was} in {}", yaml.display());
    std::fs::write(&yaml, text.replace(&was, &format!("kubernetesVersion: \"{to}\""))).unwrap();
    let upd = bed.kube_aws(&["update", "--yes"]);
    let said = output_text(&upd);
    assert!(upd.status.success(), "kube-aws update: {said}");
    said
}

/// The reference of the image `name` (kube-apiserver, etcd, coredns...) in
/// a node image's list (scripts/install-nodebed.sh writes it from `kubeadm
/// config images list`).
fn image_named(image: &std::path::Path, name: &str) -> String {
    let images = std::fs::read_to_string(image.join("images")).unwrap();
    images
        .lines()
        .find(|l| l.rsplit('/').next().is_some_and(|t| t.starts_with(&format!("{name}:"))))
        .unwrap_or_else(|| panic!("no {name} in {images}"))
        .to_string()
}

/// kube-proxy and CoreDNS run the images of `image`'s version (the node
/// image's list), as `kubeadm upgrade` leaves them once every controller runs it.
fn expect_addon_images(bed: &MotoBed, via: &bed::BedNode, image: &std::path::Path) {
    for (kind, name) in [("daemonset", "kube-proxy"), ("deployment", "coredns")] {
        let o = bed.kubectl(
            via,
            &[
                "-n",
                "kube-system",
                "get",
                kind,
                name,
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ],
        );
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            image_named(image, name),
            "{name}: {}",
            output_text(&o)
        );
    }
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
    write_marker(&bed, &c1, from);
    // The final snapshot (the termination hook's, which the bed does not run).
    let backup = c1.node.sh(
        "systemctl start kube-aws-etcd-backup.service; systemctl show -p Result --value kube-aws-etcd-backup.service; \
         journalctl -u kube-aws-etcd-backup.service --no-pager -o cat | tail -5",
    );
    assert!(backup.starts_with("success"), "the etcd backup: {backup}");

    // The version moves to the default patch: the preview says so.
    let said = move_version(&bed, from_v, to_v);
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
    let want = |name: &str| image_named(to_image, name);
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
    expect_marker(&bed, &c2, from);
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

/// The instance moto's group `group` launches for `old` (terminated here
/// unless an update launched one already): one none of `known` is.
fn replacement(bed: &MotoBed, group: &str, old: &bed::Instance, known: &mut Vec<String>) -> bed::Instance {
    let fresh = |bed: &MotoBed, known: &[String]| bed.instances(group).into_iter().find(|i| !known.contains(&i.id));
    let new = match fresh(bed, known) {
        Some(i) => i,
        None => {
            bed.aws(&[
                "autoscaling",
                "terminate-instance-in-auto-scaling-group",
                "--instance-id",
                &old.id,
                "--no-should-decrement-desired-capacity",
            ]);
            fresh(bed, known)
                .unwrap_or_else(|| panic!("moto's group did not replace {}: {:?}", old.id, bed.instances(group)))
        }
    };
    known.push(new.id.clone());
    new
}

/// moto recreates a modified nested stack whole (MotoBed::recredential), so
/// after `update` the controller group is a new one whose instances are none
/// of the running controllers, and EC2's view of the controllers (the
/// joining controller's etcd prune asks the other controllers' etcd members
/// from it: etcd.py `controller_ips`) lacks them: the first replacement's
/// prune reached none of them and its join then failed to add its member
/// ("etcdserver: unhealthy cluster", the replaced member still counted). On
/// AWS the group is updated in place and its old instances stay until the
/// roll terminates them: each running old controller is put back into
/// EC2's view, an instance with its address and the group's `Name` tag
/// (ids returned, for `replacement` to skip and for the roll to terminate).
/// In a VPC of their own: moto keeps a terminated instance's address taken
/// in its subnet ("IP already in use", moto/ec2/models/subnets.py
/// request_ip), and `controller_ips` filters by tag and state only.
fn keep_in_view(bed: &MotoBed, group: &str, survivors: &[&bed::BedNode]) -> Vec<(String, String)> {
    let listed = bed.instances(group);
    let like = bed.aws(&["ec2", "describe-instances", "--instance-ids", &listed[0].id]);
    let ami = like["Reservations"][0]["Instances"][0]["ImageId"]
        .as_str()
        .unwrap()
        .to_string();
    let vpc = bed.aws(&["ec2", "create-vpc", "--cidr-block", "10.250.0.0/16"]);
    let vpc = vpc["Vpc"]["VpcId"].as_str().unwrap();
    let subnet = bed.aws(&["ec2", "create-subnet", "--vpc-id", vpc, "--cidr-block", "10.250.0.0/16"]);
    let subnet = subnet["Subnet"]["SubnetId"].as_str().unwrap();
    let mut out = Vec::new();
    for s in survivors {
        if listed.iter().any(|i| i.ip == s.node.ip) {
            continue;
        }
        let r = bed.aws(&[
            "ec2",
            "run-instances",
            "--image-id",
            &ami,
            "--instance-type",
            "t3.medium",
            "--subnet-id",
            subnet,
            "--private-ip-address",
            &s.node.ip,
            "--tag-specifications",
            &format!("ResourceType=instance,Tags=[{{Key=Name,Value={group}}}]"),
        ]);
        let id = r["Instances"][0]["InstanceId"].as_str().unwrap().to_string();
        out.push((s.node.ip.clone(), id));
    }
    out
}

/// (Node name, version) pairs.
type ByNode = Vec<(String, String)>;

/// The tag of each running kube-apiserver mirror pod, by Node name.
fn apiserver_versions(bed: &MotoBed, via: &bed::BedNode) -> ByNode {
    let o = bed.kubectl(
        via,
        &[
            "-n",
            "kube-system",
            "get",
            "pods",
            "-l",
            "component=kube-apiserver",
            "-o",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let image = p["spec"]["containers"][0]["image"].as_str().unwrap_or("");
            (
                p["spec"]["nodeName"].as_str().unwrap_or("?").to_string(),
                image.rsplit(':').next().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// Each Node's kubelet version, by Node name.
fn kubelet_versions(bed: &MotoBed, via: &bed::BedNode) -> ByNode {
    let o = bed.kubectl(via, &["get", "nodes", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["items"]
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
        .collect()
}

/// Removes the taint kubelet's `--cloud-provider=external` sets until the
/// cloud controller manager initialises the Node (the bed runs none: the
/// test does its part, as it deletes a replaced controller's Node).
fn untaint(bed: &MotoBed, via: &bed::BedNode, node: &str) -> bool {
    bed.kubectl(
        via,
        &["taint", "node", node, "node.cloudprovider.kubernetes.io/uninitialized-"],
    )
    .status
    .success()
}

/// An HA control plane's patch roll on real nodes (ignored by `make test`:
/// `make test-upgrade`). Three controllers come up at the default minor's
/// oldest patch (1.35.4, the upgrade bed's image); `kube-aws update` moves
/// `kubernetesVersion` to the default patch; then each controller is
/// replaced in turn, as the group's rolling update does (one at a time, each
/// replacement's signal before the next): the old instance goes (its etcd
/// member with it, pruned by the replacement's join), and the replacement,
/// booted on the default image from the new user data, joins under the join
/// lock. The first one uploads its configuration and runs `kubeadm upgrade
/// apply` while two controllers still run 1.35.4 (kubeadm leaves kube-proxy
/// and CoreDNS alone then: an older kube-apiserver still runs); the second
/// and the last find kube-proxy behind and run `kubeadm upgrade node`, which
/// upgrades them on the last (no older kube-apiserver is left). Throughout, each control-plane kubelet talks to its own API server
/// (kubeadm's ControlPlaneKubeletLocalMode: kubelet.conf names the node's own
/// address), and no kubelet is newer than the kube-apiserver on its node.
///
/// The bed's part, which EC2 and the addons do in a cluster: the API's name
/// resolves to a surviving controller's address (no load balancer: the
/// first two replacements use the first controller's, the last the first
/// replacement's); the replaced controller's Node is deleted (the cloud
/// controller manager's node lifecycle controller deletes the Node of a
/// terminated instance) and the `uninitialized` taint removed (its node
/// controller); the group's signals and rolling policy are the test's order.
#[test]
#[ignore = "needs a second Kubernetes patch on the real-node bed: `make test-upgrade` (docs/testing.md)"]
fn upgrade_an_ha_control_plane_one_controller_at_a_time() {
    let test = "real_node::upgrade::upgrade_an_ha_control_plane_one_controller_at_a_time";
    let Some(to_image) = nodebed::image_dir(test) else {
        return;
    };
    let (from_image, from) = nodebed::upgrade_image_dir(test, "upgrade-from");
    let to = image_version(&to_image);
    assert!(
        triple(&from) < triple(&to),
        "the upgrade bed's {from} is not older than {to}"
    );
    let (from_v, to_v) = (from.trim_start_matches('v'), to.trim_start_matches('v'));
    let t0 = Instant::now();
    let mut bed = MotoBed::up(
        test,
        &from_image,
        &format!("controller: {{count: 3}}\nkubernetesVersion: \"{from_v}\"\n"),
        &[],
    );
    let group = format!("{}-controller", bed::BED_CLUSTER);
    let (insts, [c1, c2, c3], _) = super::boot_three_controllers(&bed, READY_LIMIT);
    let api_ip = insts[0].ip.clone();
    let t_up = t0.elapsed();
    for i in &insts {
        untaint(&bed, &c1, &i.dns.to_lowercase());
    }
    write_marker(&bed, &c1, &from);

    let said = move_version(&bed, from_v, to_v);
    assert!(
        said.contains(&format!(
            "control plane {from_v} → {to_v} (3 controllers, one at a time"
        )),
        "the preview: {said}"
    );
    bed.refresh_stubs();
    bed.image = to_image.clone();
    // The old controllers, with their recreated role's credentials (their
    // lifecycle watch calls AWS), in EC2's view again.
    let (mut c1, mut c2, mut c3) = (c1, c2, c3);
    for c in [&mut c1, &mut c2, &mut c3] {
        bed.recredential(c, "ControllerRole");
    }
    let mut known: Vec<String> = insts.iter().map(|i| i.id.clone()).collect();
    let stand_ins = keep_in_view(&bed, &group, &[&c1, &c2, &c3]);
    known.extend(stand_ins.iter().map(|(_, id)| id.clone()));

    // The roll: the third, the second, then the first (whose address is the
    // API's name until then).
    let mut old: Vec<Option<bed::BedNode>> = vec![Some(c1), Some(c2), Some(c3)];
    let mut new: Vec<bed::BedNode> = Vec::new();
    let mut samples = 0usize;
    let mut took = Vec::new();
    for (step, idx) in [2usize, 1, 0].into_iter().enumerate() {
        let gone = old[idx].take().unwrap();
        let gone_inst = gone.inst.clone();
        drop(gone);
        if let Some((_, id)) = stand_ins.iter().find(|(ip, _)| *ip == gone_inst.ip) {
            bed.aws(&["ec2", "terminate-instances", "--instance-ids", id]);
        }
        let inst = replacement(&bed, &group, &gone_inst, &mut known);
        // A survivor to ask, and the API's name for the replacement.
        let via_ip = if step < 2 {
            api_ip.clone()
        } else {
            new[0].node.ip.clone()
        };
        {
            let via: &bed::BedNode = if step < 2 { old[0].as_ref().unwrap() } else { &new[0] };
            let del = bed.kubectl(via, &["delete", "node", &gone_inst.dns.to_lowercase(), "--wait=false"]);
            assert!(del.status.success(), "{}", output_text(&del));
        }
        let mut peers: Vec<(&bed::BedNode, u32)> = Vec::new();
        for (k, o) in old.iter().enumerate() {
            if let Some(o) = o {
                peers.push((o, k as u32));
            }
        }
        for (k, n) in new.iter().enumerate() {
            peers.push((n, 3 + k as u32));
        }
        let t_boot = Instant::now();
        let n = bed.boot(
            "controller",
            "ControllerRole",
            &inst,
            &via_ip,
            pod_net(3 + step as u32, &peers),
        );
        let name = inst.dns.to_lowercase();
        let done = AtomicBool::new(false);
        let (followed, seen) = std::thread::scope(|s| {
            let sampler = s.spawn(|| {
                let via: &bed::BedNode = if step < 2 { old[0].as_ref().unwrap() } else { &new[0] };
                let mut seen: Vec<(ByNode, ByNode)> = Vec::new();
                let mut untainted = false;
                while !done.load(Ordering::Relaxed) {
                    if !untainted {
                        untainted = untaint(&bed, via, &name);
                    }
                    let (a, k) = (apiserver_versions(&bed, via), kubelet_versions(&bed, via));
                    if !a.is_empty() && !k.is_empty() {
                        seen.push((a, k));
                    }
                    std::thread::sleep(Duration::from_secs(2));
                }
                seen
            });
            let f = n.follow(READY_LIMIT + Duration::from_secs(300));
            done.store(true, Ordering::Relaxed);
            (f, sampler.join().unwrap())
        });
        if let Err(e) = &followed.outcome {
            panic!(
                "replacement {} of {}: {}",
                step + 1,
                gone_inst.dns,
                n.explain(&followed, e)
            );
        }
        took.push(format!("{:.1}s ({})", t_boot.elapsed().as_secs_f64(), followed.times()));
        let has = |s: &str| followed.steps.iter().any(|(x, _)| x == s);
        assert!(has("join-lock") && has("kubeadm-join"), "{}", followed.times());
        let log = n.log();
        match step {
            0 => assert!(
                has("kubeadm-upgrade-apply")
                    && log.contains(&format!(
                        "the control plane runs Kubernetes {from_v}; this node is {to_v}: upgrade"
                    )),
                "the first replacement did not upgrade the control plane: {}\n{log}",
                followed.times()
            ),
            1 => assert!(
                !has("kubeadm-upgrade-apply")
                    && log.contains(&format!(
                        "the control plane runs Kubernetes {to_v}; this node is {to_v}: join"
                    )),
                "the second replacement: {}\n{log}",
                followed.times()
            ),
            _ => assert!(
                has("kubeadm-upgrade-node") && log.contains("kubeadm upgrade node"),
                "the last replacement did not upgrade kube-proxy and CoreDNS: {}\n{log}",
                followed.times()
            ),
        }
        // Its kubelet talks to its own API server (ControlPlaneKubeletLocalMode).
        let server = n.node.sh("sed -n 's/^ *server: //p' /etc/kubernetes/kubelet.conf");
        assert_eq!(server.trim(), format!("https://{}:6443", inst.ip), "kubelet.conf");
        // No kubelet newer than the kube-apiserver of its node, at any sample.
        assert!(!seen.is_empty(), "no sample during replacement {}", step + 1);
        for (apis, kubelets) in &seen {
            for (node, kubelet) in kubelets {
                if let Some((_, api)) = apis.iter().find(|(a, _)| a == node) {
                    assert!(
                        triple(kubelet) <= triple(api),
                        "{node}'s kubelet {kubelet} was newer than its kube-apiserver {api}: {seen:?}"
                    );
                }
            }
        }
        samples += seen.len();
        new.push(n);
    }

    // etcd has the three new members, and the data written before.
    let ips: Vec<&str> = new.iter().map(|n| n.node.ip.as_str()).collect();
    super::expect_members(&new[0], &ips, Duration::from_secs(120));
    let via = &new[0];
    expect_marker(&bed, via, &from);
    let want = |name: &str| image_named(&to_image, name);
    for n in &new {
        for name in ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"] {
            let pod = format!("{name}-{}", n.inst.dns.to_lowercase());
            let o = bed.kubectl(
                via,
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
        }
    }
    expect_addon_images(&bed, via, &to_image);
    let cc = bed.kubectl(
        via,
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
    assert!(
        String::from_utf8_lossy(&cc.stdout).contains(&format!("kubernetesVersion: {to}")),
        "{}",
        output_text(&cc)
    );
    for (node, kubelet) in kubelet_versions(&bed, via) {
        assert_eq!(kubelet, to, "{node}");
    }
    eprintln!(
        "{test}: up {:.1}s; three {from} controllers Ready {:.1}s after the test began; replacements Ready after \
         their start: {}; {samples} samples of the versions; test {:.1}s",
        bed.up.as_secs_f64(),
        t_up.as_secs_f64(),
        took.join("; "),
        t0.elapsed().as_secs_f64()
    );
}

/// A failed HA upgrade on real nodes (issue 38: "a failure after the first
/// `kubeadm upgrade apply` never launches old-version controllers"), the
/// minor path `make test`'s beds build (1.35.8 → 1.36.5). Three controllers
/// come up at the default patch; `kube-aws update` moves `kubernetesVersion`
/// to the next minor; the roll is launch-before-terminate (three
/// controllers: render/cfn/nodes.rs `controller_max`):
/// 1. the first replacement boots beside the three old ones, joins under the
///    join lock and runs `kubeadm upgrade apply` (the control plane is now
///    1.36.5); its old controller then goes (killed, its member pruned as a
///    lost one's);
/// 2. the second replacement's `kubeadm join` is killed (SIGKILL, as the
///    OOM killer would) once its etcd member is in the cluster: a join that
///    fails halfway. Its bootstrap reports the step, signals FAILURE, marks
///    itself Unhealthy in its group, and, before releasing the join lock,
///    takes back the member its join added (etcd_lifecycle.py `withdraw`): etcd is
///    back to its three healthy members, not four with a dead vote. The API
///    keeps answering on every survivor, the ConfigMap written before is
///    there, kubeadm-config still says 1.36.5 (nothing went back), and
///    `kube-aws status` names the node and the step;
///    then a second controller is lost mid-roll (an old one, killed without
///    its lifecycle hook): two of three members answer, the API keeps
///    serving and the data is there;
/// 3. the group replaces the Unhealthy instance from its launch template,
///    which is the 1.36.5 one (no old-version controller is launched); that
///    retry prunes the lost member, joins and is Ready: etcd has three
///    healthy members, two of them at 1.36.5;
/// 4. a second `kube-aws update` changes nothing (moto's stack is at the
///    new template; on AWS it resumes the stopped rolling update), and the
///    last old controller's replacement prunes its member, joins and runs
///    `kubeadm upgrade node`: three controllers at 1.36.5 (kubelets and API
///    servers), kube-proxy and CoreDNS at 1.36.5's images, the ConfigMap
///    written at 1.35.8 there, the join lock released.
///
/// What the bed does in AWS's place, and what this does not cover: the
/// rolling update's order and its signals are the test's (moto completes a
/// stack update at once and never fails one, so the stack's UPDATE_FAILED,
/// its rollback disabled and `update` resuming it are shown against recorded
/// events: src/aws/wait/recovery/tests.rs, tests/it/upgrade_moto.rs); the old
/// controllers are put back into EC2's view (`keep_in_view`); the group's
/// health replacement is the test's terminate call; the rest of the roll
/// is the test's, in CloudFormation's order; no load balancer (a
/// controller's address is the API's name; the last replacement is given a
/// new controller's).
pub(crate) fn a_failed_ha_upgrade_keeps_the_api_and_a_second_update_finishes_it(test: &'static str) {
    let Some(from_image) = nodebed::image_dir(test) else {
        return;
    };
    let from = image_version(&from_image);
    let (to_image, to) = nodebed::upgrade_image_dir(test, "upgrade-to-minor");
    let (from_v, to_v) = (from.trim_start_matches('v'), to.trim_start_matches('v'));
    let t0 = Instant::now();
    let mut bed = MotoBed::up(
        test,
        &from_image,
        &format!("controller: {{count: 3}}\nkubernetesVersion: \"{from_v}\"\n"),
        &[],
    );
    let group = format!("{}-controller", bed::BED_CLUSTER);
    let (insts, [c1, c2, c3], _) = super::boot_three_controllers(&bed, READY_LIMIT);
    let api_ip = insts[0].ip.clone();
    let t_up = t0.elapsed();
    for i in &insts {
        untaint(&bed, &c1, &i.dns.to_lowercase());
    }
    write_marker(&bed, &c1, &from);

    let said = move_version(&bed, from_v, to_v);
    assert!(
        said.contains(&format!(
            "control plane {from_v} → {to_v} (3 controllers, one at a time"
        )),
        "the preview: {said}"
    );
    let old_stub = cloud_config(&bed.stubs["controller"]);
    bed.refresh_stubs();
    let new_stub = cloud_config(&bed.stubs["controller"]);
    assert_ne!(new_stub, old_stub, "the controllers' user data did not change");
    bed.image = to_image.clone();
    let (mut c1, mut c2, mut c3) = (c1, c2, c3);
    for c in [&mut c1, &mut c2, &mut c3] {
        bed.recredential(c, "ControllerRole");
    }
    let mut known: Vec<String> = insts.iter().map(|i| i.id.clone()).collect();
    let stand_ins = keep_in_view(&bed, &group, &[&c1, &c2, &c3]);
    known.extend(stand_ins.iter().map(|(_, id)| id.clone()));

    // 1. The first replacement, beside the three old ones, upgrades the
    // control plane.
    let t_r1 = Instant::now();
    let i1 = replacement(&bed, &group, &insts[2], &mut known);
    let r1 = bed.boot(
        "controller",
        "ControllerRole",
        &i1,
        &api_ip,
        pod_net(3, &[(&c1, 0), (&c2, 1), (&c3, 2)]),
    );
    // The registry's part: the new version's pause image on the old
    // controllers too, before the first replacement's `kubeadm upgrade
    // apply` runs its health-check Job on any of them (bed.rs `share_image`).
    r1.wait_step("kubeadm-join", READY_LIMIT);
    r1.share_image(&pause_image(&to_image), &[&c1, &c2, &c3]);
    let f1 = replaced(&bed, &r1, &c1, "the first replacement", Some("kubeadm-upgrade-apply"));
    let t_r1 = t_r1.elapsed();
    // Its old controller goes (the roll terminates it once the replacement
    // signalled): killed here, its member left for the next join's prune.
    let gone = c3.inst.clone();
    drop(c3);
    if let Some((_, id)) = stand_ins.iter().find(|(ip, _)| *ip == gone.ip) {
        bed.aws(&["ec2", "terminate-instances", "--instance-ids", id]);
    }
    let del = bed.kubectl(&c1, &["delete", "node", &gone.dns.to_lowercase(), "--wait=false"]);
    assert!(del.status.success(), "{}", output_text(&del));

    // 2. The second replacement's join is killed once its member is in.
    let t_r2 = Instant::now();
    let i2 = replacement(&bed, &group, &insts[1], &mut known);
    let r2 = bed.boot(
        "controller",
        "ControllerRole",
        &i2,
        &api_ip,
        pod_net(4, &[(&c1, 0), (&c2, 1), (&r1, 3)]),
    );
    let killed = AtomicBool::new(false);
    let f2 = std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            while start.elapsed() < READY_LIMIT + Duration::from_secs(300) && !killed.load(Ordering::Relaxed) {
                let joining = r2.log().contains("step kubeadm-join");
                if joining && member_ips(&etcd_members(&c1)).contains(&i2.ip) {
                    r2.node.sh("pkill -9 -x kubeadm || true");
                    std::thread::sleep(Duration::from_millis(200));
                    if !r2.node.sh("pgrep -x kubeadm || true").trim().is_empty() {
                        continue;
                    }
                    killed.store(true, Ordering::Relaxed);
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let f = r2.follow(READY_LIMIT + Duration::from_secs(300));
        killed.store(true, Ordering::Relaxed);
        f
    });
    let failed_at = f2.outcome.as_ref().err().cloned().unwrap_or_default();
    assert!(
        failed_at.contains("step kubeadm-join failed"),
        "{}",
        r2.explain(&f2, "expected the second replacement's join to fail")
    );
    let t_r2 = t_r2.elapsed();
    // Its report, FAILURE signal and Unhealthy mark follow the failure line.
    let start = Instant::now();
    let log2 = loop {
        let log = r2.log();
        if log.contains("marked this controller Unhealthy") || start.elapsed() > Duration::from_secs(120) {
            break log;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    assert!(
        log2.contains("took back the failed join's etcd member") && log2.contains("marked this controller Unhealthy"),
        "the failed joiner's log:\n{log2}"
    );
    // etcd has its three healthy members again (no dead fourth vote).
    super::expect_members(&c1, &[&c1.inst.ip, &c2.inst.ip, &r1.inst.ip], Duration::from_secs(120));
    // The join lock was released.
    super::expect_join_lock_released(&bed);
    // The API answers on every survivor, the data is there, and nothing
    // went back to the old version.
    for n in [&c1, &c2, &r1] {
        let ready = n.node.sh("curl -sk -m 5 https://127.0.0.1:6443/readyz || true");
        assert_eq!(ready.trim(), "ok", "{}'s /readyz", n.inst.dns);
    }
    expect_marker(&bed, &r1, &from);
    let cc = bed.kubectl(
        &r1,
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
    assert!(
        String::from_utf8_lossy(&cc.stdout).contains(&format!("kubernetesVersion: {to}")),
        "{}",
        output_text(&cc)
    );
    // The group has it Unhealthy; `kube-aws status` names it and the step.
    let health = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-instances",
        "--instance-ids",
        &i2.id,
    ]);
    assert!(
        health
            .to_string()
            .to_lowercase()
            .contains("\"healthstatus\":\"unhealthy\""),
        "{health}"
    );
    let status = output_text(&bed.kube_aws(&["status"]));
    assert!(
        status.contains(&i2.id) && status.contains("kubeadm-join (killed by signal 9 (SIGKILL))"),
        "kube-aws status does not name the failed node, its step and the signal that ended it: {status}"
    );

    // And a second controller is lost mid-roll (an old one, killed without
    // its lifecycle hook): two of the three members answer, a quorum; the
    // API keeps serving and the data is there.
    let lost = c2.inst.clone();
    drop(c2);
    if let Some((_, id)) = stand_ins.iter().find(|(ip, _)| *ip == lost.ip) {
        bed.aws(&["ec2", "terminate-instances", "--instance-ids", id]);
    }
    for n in [&c1, &r1] {
        n.node
            .wait_for(
                "its API server's /readyz with a member lost",
                "curl -fsk -m 3 https://127.0.0.1:6443/readyz >/dev/null",
                Duration::from_secs(120),
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }
    expect_marker(&bed, &c1, &from);

    // 3. The group replaces the failed one from its launch template, the
    // new one (what the retry's log says of its version below); its join
    // prunes the lost member first.
    let t_r3 = Instant::now();
    drop(r2);
    bed.aws(&[
        "autoscaling",
        "terminate-instance-in-auto-scaling-group",
        "--instance-id",
        &i2.id,
        "--no-should-decrement-desired-capacity",
    ]);
    let i3 = replacement(&bed, &group, &i2, &mut known);
    bed.refresh_stubs();
    assert_eq!(
        cloud_config(&bed.stubs["controller"]),
        new_stub,
        "the launch template changed"
    );
    let r3 = bed.boot(
        "controller",
        "ControllerRole",
        &i3,
        &api_ip,
        pod_net(5, &[(&c1, 0), (&r1, 3)]),
    );
    let f3 = replaced(&bed, &r3, &c1, "the retry", None);
    super::expect_members(&c1, &[&c1.inst.ip, &r1.inst.ip, &r3.inst.ip], Duration::from_secs(120));
    assert!(
        r3.log().contains(&format!(
            "the control plane runs Kubernetes {to_v}; this node is {to_v}: join"
        )),
        "the retry:\n{}",
        r3.log()
    );
    expect_marker(&bed, &r3, &from);
    let kubelet = kubelet_versions(&bed, &r3);
    assert!(
        kubelet.iter().any(|(n, v)| *n == i3.dns.to_lowercase() && *v == to),
        "{kubelet:?}"
    );
    let t_r3 = t_r3.elapsed();

    // 4. The second `kube-aws update` finishes the upgrade. On AWS the
    // stack stopped UPDATE_FAILED with its rollback disabled, and `update`
    // resumes the rolling update (src/aws/wait/recovery/tests.rs, against
    // recorded events). moto completed the stack's update at once, so here
    // `update` finds the stack at the template it asks for and changes
    // nothing (nothing goes back to the old version), and the rest of the
    // roll is the test's, in the order CloudFormation's resumed rolling
    // update takes: the last old controller goes (killed: its member is
    // left for the next join's prune, as a lost one's), and its replacement,
    // from the new launch template, prunes it, joins at the new version and,
    // being the last, runs `kubeadm upgrade node` (kube-proxy and CoreDNS).
    let again = bed.kube_aws(&["update", "--yes"]);
    let said = output_text(&again);
    assert!(again.status.success(), "the second kube-aws update: {said}");
    assert!(
        said.contains("no changes") && !said.contains(&format!("→ {from_v}")),
        "the second kube-aws update: {said}"
    );
    let t_r4 = Instant::now();
    let last = c1.inst.clone();
    drop(c1);
    if let Some((_, id)) = stand_ins.iter().find(|(ip, _)| *ip == last.ip) {
        bed.aws(&["ec2", "terminate-instances", "--instance-ids", id]);
    }
    // Its Node goes, and so do those of the controller lost mid-roll and of
    // the failed joiner (its kubelet registered before the kill): on AWS
    // the cloud controller manager's node lifecycle controller deletes the
    // Node of a terminated instance. Else their mirror pods' old
    // kube-apiserver image would keep `kubeadm upgrade node` from upgrading
    // kube-proxy and CoreDNS (shouldUpgradeAddons), rightly.
    for gone in [&last.dns, &lost.dns, &i2.dns] {
        let del = bed.kubectl(
            &r1,
            &[
                "delete",
                "node",
                &gone.to_lowercase(),
                "--ignore-not-found",
                "--wait=false",
            ],
        );
        assert!(del.status.success(), "{}", output_text(&del));
    }
    let i4 = replacement(&bed, &group, &last, &mut known);
    // The API's name was the first old controller's address (the bed has no
    // load balancer); a new controller's stands for it now. The others'
    // kubelets talk to their own API server (ControlPlaneKubeletLocalMode).
    let r4 = bed.boot(
        "controller",
        "ControllerRole",
        &i4,
        &r1.inst.ip,
        pod_net(6, &[(&r1, 3), (&r3, 5)]),
    );
    let f4 = replaced(&bed, &r4, &r1, "the last replacement", Some("kubeadm-upgrade-node"));
    super::expect_members(&r1, &[&r1.inst.ip, &r3.inst.ip, &r4.inst.ip], Duration::from_secs(120));
    expect_marker(&bed, &r4, &from);
    // The three controllers run the new version (the lost and the failed
    // instances' Nodes, which the cloud controller manager would delete on
    // AWS, are not asked).
    let names: Vec<String> = [&r1, &r3, &r4].iter().map(|n| n.inst.dns.to_lowercase()).collect();
    for (what, by_node) in [
        ("kubelet", kubelet_versions(&bed, &r4)),
        ("kube-apiserver", apiserver_versions(&bed, &r4)),
    ] {
        let ours: Vec<&(String, String)> = by_node.iter().filter(|(n, _)| names.contains(n)).collect();
        assert!(
            ours.len() == 3 && ours.iter().all(|(_, v)| *v == to),
            "the {what}s of {names:?}: {by_node:?}"
        );
    }
    expect_addon_images(&bed, &r4, &to_image);
    super::expect_join_lock_released(&bed);
    let status = bed.kube_aws(&["status"]);
    eprintln!(
        "{test}: kube-aws status after the upgrade finished:\n{}",
        output_text(&status)
    );
    eprintln!(
        "{test}: up {:.1}s; three {from} controllers Ready {:.1}s after the test began; the first {to} replacement \
         Ready {:.1}s after its start ({}); the second's join killed and its failure handled {:.1}s after its start \
         ({}); the retry Ready {:.1}s after its start ({}); the last Ready {:.1}s after its start ({}); test {:.1}s",
        bed.up.as_secs_f64(),
        t_up.as_secs_f64(),
        t_r1.as_secs_f64(),
        f1.times(),
        t_r2.as_secs_f64(),
        f2.times(),
        t_r3.as_secs_f64(),
        f3.times(),
        t_r4.elapsed().as_secs_f64(),
        f4.times(),
        t0.elapsed().as_secs_f64()
    );
}

/// The pause image a node image holds (its `images` list, written by
/// scripts/install-nodebed.sh from `kubeadm config images list`).
fn pause_image(image: &std::path::Path) -> String {
    let list = std::fs::read_to_string(image.join("images")).unwrap_or_default();
    list.lines()
        .find(|l| l.contains("/pause:"))
        .unwrap_or_else(|| panic!("no pause image in {}/images: {list}", image.display()))
        .to_string()
}

/// A replacement controller `n` of the failed HA upgrade, followed to Ready
/// (`untainting`, through `via`); `what` names it in a failure, and `step`,
/// when given, is a step its boot must have run.
fn replaced(bed: &MotoBed, n: &bed::BedNode, via: &bed::BedNode, what: &str, step: Option<&str>) -> bed::Followed {
    let f = untainting(bed, n, via, READY_LIMIT + Duration::from_secs(300));
    if let Err(e) = &f.outcome {
        panic!("{what}: {}", n.explain(&f, e));
    }
    if let Some(step) = step {
        assert!(
            f.steps.iter().any(|(s, _)| s == step),
            "{what} did not run {step}: {}\n{}",
            f.times(),
            n.log()
        );
    }
    f
}

/// Follows `n`'s boot while removing, through `via`, the taint of kubelet's
/// `--cloud-provider=external` from its Node once it registers (the bed runs
/// no cloud controller manager; `kubeadm upgrade apply`'s health check Job
/// needs a schedulable node).
fn untainting(bed: &MotoBed, n: &bed::BedNode, via: &bed::BedNode, limit: Duration) -> bed::Followed {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let name = n.inst.dns.to_lowercase();
            while !done.load(Ordering::Relaxed) && !untaint(bed, via, &name) {
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        let f = n.follow(limit);
        done.store(true, Ordering::Relaxed);
        f
    })
}
