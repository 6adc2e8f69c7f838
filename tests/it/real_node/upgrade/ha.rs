//! A patch release rolled over three controllers one at a time (ignored by
//! `make test`; `make test-upgrade`), the API answering throughout (the
//! test's own header says what it does in the bed's place). Not covered: a
//! minor roll of three controllers, the load balancer, a replacement that
//! fails (upgrade/ha_failure.rs).

use super::*;

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
    let test = "real_node::upgrade::ha::upgrade_an_ha_control_plane_one_controller_at_a_time";
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
