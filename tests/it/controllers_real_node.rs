//! The three-controller test of the real-node bed (tests/it/real_node.rs
//! says what the bed is and what it does not cover), with the faults of
//! real_node/faults.rs (issue 38) injected into the same cluster, one after
//! another, so that no second three-controller cluster boots. Its module
//! name sorts early on purpose: libtest starts tests in name order, and the
//! longest test started last would trail the run (as
//! cert_renewal_real_node's did; docs/testing.md).

use std::time::{Duration, Instant};

use crate::common::{nodebed, output_text};
use crate::real_node::bed::{self, MotoBed, READY_LIMIT as BOOT_READY_LIMIT};
use crate::real_node::{expect_members, faults, node_ready_status, pod_net};

/// Three controllers: the first takes the init lock and `kubeadm init`s,
/// the second and third (booted at the same time, once the first holds the
/// init lock: the bed's API name is the first's address) join one at a time under
/// the S3 join lock, and etcd has three members. Then the third's container
/// is killed (an instance lost without its lifecycle hook: its etcd member
/// stays) and its auto scaling group replaces it; the replacement prunes the
/// stale member (etcd.py `prune`, under the join lock, before its join) and
/// joins: etcd has three members again, the lost one's gone. Then, on the
/// same cluster, the faults of real_node/faults.rs, in turn: a two-minute
/// loss of etcd's quorum (every `/readyz` failing) replaces no controller
/// and loses no data; a leaving controller holds its termination while
/// removing its member would lose etcd's quorum; all controllers lost,
/// `kube-aws restore` brings the snapshot back on three new ones; and on
/// those, a reconfiguration (Dex's OIDC flags published by `kube-aws
/// update`) restarting every controller's API server at once costs no
/// controller and leaves a ready API server at every moment.
#[test]
fn three_controllers_join_keep_quorum_through_faults_and_restarts_and_restore_when_all_are_lost() {
    let test = "controllers_real_node::three_controllers_join_keep_quorum_through_faults_and_restarts_and_restore_when_all_are_lost";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let t0 = Instant::now();
    let bed = MotoBed::up(test, &image, "controller: {count: 3}\n", &[]);
    let group = format!("{}-controller", bed::BED_CLUSTER);
    // The first initialises, the other two join it under the join lock (on
    // EC2 the load balancer routes to whichever controller won the init
    // lock: in CI the second won once, and the first, joining, found no API
    // server at its own address; the bed's API name is the first's address).
    let (insts, [c1, c2, c3], f) = crate::real_node::boot_three_controllers(&bed, BOOT_READY_LIMIT);
    let api_ip = insts[0].ip.clone();
    let t_three = t0.elapsed();
    let has = |f: &bed::Followed, s: &str| f.steps.iter().any(|(n, _)| n == s);
    assert!(
        has(&f[0], "kubeadm-init") && !has(&f[0], "join-lock"),
        "{}",
        f[0].times()
    );
    for (i, fi) in f.iter().enumerate().skip(1) {
        assert!(
            has(fi, "init-lock") && has(fi, "join-lock") && has(fi, "etcd-prune") && has(fi, "kubeadm-join"),
            "controller {}: {}",
            i + 1,
            fi.times()
        );
    }
    // How long each joiner held on to take the join lock (the later one
    // waits for the other's join; locks.acquire says nothing while it waits).
    let at = |f: &bed::Followed, s: &str| f.steps.iter().find(|(n, _)| n == s).map(|(_, t)| *t).unwrap();
    let waited: Vec<String> = f[1..]
        .iter()
        .map(|fi| format!("{:.1}s", (at(fi, "etcd-prune") - at(fi, "join-lock")).as_secs_f64()))
        .collect();
    expect_members(
        &c1,
        &[&insts[0].ip, &insts[1].ip, &insts[2].ip],
        Duration::from_secs(120),
    );
    // The join lock is released after each join.
    crate::real_node::expect_join_lock_released(&bed);

    // The third is lost: its container killed, its instance replaced.
    let lost = insts[2].clone();
    drop(c3);
    bed.aws(&[
        "autoscaling",
        "terminate-instance-in-auto-scaling-group",
        "--instance-id",
        &lost.id,
        "--no-should-decrement-desired-capacity",
    ]);
    let now = bed.instances(&group);
    let new = now
        .iter()
        .find(|i| !insts.iter().any(|o| o.id == i.id))
        .unwrap_or_else(|| panic!("moto's group did not replace {}: {now:?}", lost.id))
        .clone();
    let t_replace = Instant::now();
    let c4 = bed.boot(
        "controller",
        "ControllerRole",
        &new,
        &api_ip,
        pod_net(3, &[(&c1, 0), (&c2, 1)]),
    );
    let f4 = c4.expect_ready(BOOT_READY_LIMIT + Duration::from_secs(120));
    expect_members(&c1, &[&insts[0].ip, &insts[1].ip, &new.ip], Duration::from_secs(120));
    // kube-aws removed the lost member (kubeadm never does): the
    // replacement's prune, or the lifecycle watch of a survivor, which looks
    // every minute and may get there first (then the prune's second look
    // finds nothing left).
    let removed = |l: &str| l.contains("removed stale etcd member") && l.contains(&lost.ip);
    let by_prune = c4.log().lines().any(removed);
    let by_watch: Vec<String> = [&c1, &c2]
        .iter()
        .filter(|c| {
            c.node
                .sh("journalctl --no-pager -u kube-aws-lifecycle.service")
                .lines()
                .any(removed)
        })
        .map(|c| c.inst.dns.clone())
        .collect();
    assert!(
        by_prune || !by_watch.is_empty(),
        "no kube-aws log says it removed {}'s member; the replacement's:\n{}",
        lost.ip,
        c4.log()
    );
    // Every controller's Node Ready but the lost one's (its Node object
    // stays until the cloud controller manager, not run here, deletes it).
    for i in [&insts[0], &insts[1], &new] {
        let get = node_ready_status(&bed, &c1, &i.dns);
        assert_eq!(
            String::from_utf8_lossy(&get.stdout).trim(),
            "True",
            "{}: {}",
            i.dns,
            output_text(&get)
        );
    }
    // The same three controllers (real_node/faults.rs): a two-minute loss of
    // etcd's quorum, every /readyz failing, costs no controller and no data;
    let t_outage = Instant::now();
    faults::a_whole_cluster_readyz_outage_costs_no_controller_and_no_data(&bed, [&c1, &c2, &c4]);
    let t_outage = t_outage.elapsed();
    // a certificate renewal's restarts on every controller at once cost no
    // controller and leave a ready API server at every moment;
    let t_renew = Instant::now();
    faults::a_renewal_restart_on_every_controller_at_once_costs_no_controller(&bed, [&c1, &c2, &c4]);
    let t_renew = t_renew.elapsed();
    // a leaving one holds while its removal would cost etcd its quorum;
    let t_hold = Instant::now();
    let mut c2 = c2;
    faults::a_leaving_controller_holds_while_its_removal_would_lose_quorum(&bed, &mut c2, &c4, &c1);
    let t_hold = t_hold.elapsed();
    // and all of them lost, `kube-aws restore` brings the snapshot back on
    // three new ones.
    let t_restore = Instant::now();
    let news =
        faults::an_ha_restore_on_three_new_controllers_brings_the_snapshot_back(&bed, &group, vec![c1, c4, c2], 4);
    let t_restore = t_restore.elapsed();
    // Last (moto recreates the nested stacks on an update): a
    // reconfiguration's restarts on the three new controllers at once cost
    // no controller and leave a ready API server at every moment.
    let t_reconfigure = Instant::now();
    let mut bed = bed;
    faults::a_reconfiguration_on_every_controller_at_once_costs_no_controller(&mut bed, news);
    let t_reconfigure = t_reconfigure.elapsed();
    eprintln!(
        "{test}: up {:.1}s; three controllers Ready {:.1}s after the test began (first: {}; second: {}; third: {}); \
         join lock waits {waited:?}; replacement Ready {:.1}s after its start ({}); the lost member removed by {}; \
         faults: readyz outage {:.1}s, renewal restarts {:.1}s, quorum hold {:.1}s, HA restore {:.1}s, \
         reconfiguration restarts {:.1}s; test {:.1}s",
        bed.up.as_secs_f64(),
        t_three.as_secs_f64(),
        f[0].times(),
        f[1].times(),
        f[2].times(),
        t_replace.elapsed().as_secs_f64(),
        f4.times(),
        if by_prune {
            "the replacement's prune".to_string()
        } else {
            format!("the lifecycle watch on {by_watch:?}")
        },
        t_outage.as_secs_f64(),
        t_renew.as_secs_f64(),
        t_hold.as_secs_f64(),
        t_restore.as_secs_f64(),
        t_reconfigure.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// A failed HA upgrade (issue 38): the second replacement's join fails
/// halfway after the first ran `kubeadm upgrade apply`, and then an old
/// controller is lost mid-roll; the API keeps serving, etcd its quorum and
/// its data, no old-version controller is launched, the group's retry
/// joins, and after a second `kube-aws update` the last old controller's
/// replacement finishes the upgrade (real_node/upgrade.rs says what the
/// bed does in AWS's place). Here for its module's early name: it is one of
/// the longest tests (docs/testing.md).
#[test]
fn an_ha_upgrade_whose_second_replacement_fails_keeps_the_api_and_a_second_update_finishes_it() {
    crate::real_node::upgrade::a_failed_ha_upgrade_keeps_the_api_and_a_second_update_finishes_it(
        "controllers_real_node::an_ha_upgrade_whose_second_replacement_fails_keeps_the_api_and_a_second_update_finishes_it",
    );
}
