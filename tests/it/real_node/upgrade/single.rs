//! A Kubernetes release change of a one-controller cluster (the header of
//! tests/it/real_node/upgrade.rs says more): the patch (ignored by `make
//! test`; `make test-upgrade`) and the next minor, each by `kube-aws
//! update`, the controller replaced (the old one gone first), the
//! replacement restoring etcd's snapshot and running `kubeadm upgrade
//! apply`; then what runs at the new version, the data written before, the
//! upgrade record, and no kubelet newer than the API server. Not covered:
//! three controllers (upgrade/ha.rs), the termination lifecycle hook.

use super::*;

#[test]
#[ignore = "needs a second Kubernetes patch on the real-node bed: `make test-upgrade` (docs/testing.md)"]
fn upgrade_a_patch_release_reaches_the_running_apiserver() {
    let test = "real_node::upgrade::single::upgrade_a_patch_release_reaches_the_running_apiserver";
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
    let test = "real_node::upgrade::single::upgrade_a_minor_release_reaches_the_control_plane_kube_proxy_and_coredns";
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
