//! An HA upgrade to the next minor whose second replacement fails (run by
//! tests/it/controllers_real_node.rs on the cluster it boots): the API
//! keeps answering on the controllers left, and a second `kube-aws update`
//! finishes the roll (the function's own header says what it checks and
//! what it does not cover). No test of its own here.

use super::*;

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
    // apply` runs its health-check Job on any of them (bed/node.rs `share_image`).
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
