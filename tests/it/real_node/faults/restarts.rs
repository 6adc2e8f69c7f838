//! Planned restarts and outages on the real-node bed (issue 38, "planned
//! restarts never cost a controller"; the helpers of
//! tests/it/real_node/faults.rs), run inside
//! tests/it/controllers_real_node.rs's test: a whole-cluster `/readyz`
//! outage (two etcd members stopped at once), and a certificate renewal's
//! restart and a reconfiguration on every controller at once; each keeps
//! every controller InService and Healthy and loses no data. Each
//! function's header says what it does not cover (the load balancer, EC2's
//! own status checks).

use super::*;

/// `a_whole_cluster_readyz_outage_costs_no_controller_and_no_data` (issue 38,
/// "planned restarts never cost a controller"): three controllers; two
/// members' etcd stop at once (their static pod manifests moved away, as a
/// restart of etcd does for its duration), so etcd loses its quorum and
/// every API server's `/readyz` fails, for two minutes. On EC2 the network
/// load balancer's target group stops routing to them (it checks `/readyz`);
/// the controller group checks EC2 status only (render/cfn/nodes.rs,
/// `HealthCheckType: EC2`), and nothing in kube-aws marks a running
/// controller unhealthy (health.py does only after a failed bootstrap). So:
/// every sample of the outage has the same three instances, Healthy and
/// InService; no etcd member is removed (the survivors' lifecycle watch
/// prunes only members whose instance is gone); once the members are back,
/// every API server answers `/readyz` again within a bound (measured and
/// printed), and a ConfigMap written before is there.
///
/// Not covered: the load balancer itself (the bed has none: `/readyz` is
/// read on each controller), EC2's own status checks (moto runs none), and
/// a renewal or reconfiguration on every controller at once (each takes
/// about 80 to 190 s per controller here, serialised by its lock: the
/// renewal and reconfiguration tests run one controller).
pub(crate) fn a_whole_cluster_readyz_outage_costs_no_controller_and_no_data(bed: &MotoBed, ctls: [&BedNode; 3]) {
    let t0 = Instant::now();
    let [via, a, b] = ctls;
    let group = &group_of(bed, &via.inst.id);
    let cm = bed.kubectl(
        via,
        &[
            "create",
            "configmap",
            "outage-marker",
            "-n",
            "default",
            "--from-literal=kept=yes",
        ],
    );
    assert!(cm.status.success(), "{}", crate::common::output_text(&cm));
    let before = group_health(bed, group);
    assert_eq!(before.len(), 3, "{before:?}");
    for (id, health, state) in &before {
        assert!(health == "Healthy" && state == "InService", "{id}: {health} {state}");
    }
    let ips: Vec<&str> = ctls.iter().map(|c| c.inst.ip.as_str()).collect();
    expect_members(via, &ips, Duration::from_secs(60));
    let restarts_before: Vec<usize> = ctls.iter().map(|c| apiserver_containers(c)).collect();

    // Two of three members stop: no quorum, no /readyz anywhere.
    for n in [a, b] {
        n.node.sh(&format!("mv /etc/kubernetes/manifests/etcd.yaml {HELD}"));
    }
    for n in ctls {
        if let Err(e) = n.node.wait_for(
            "its API server's /readyz failing",
            "! curl -fsk -m 3 https://127.0.0.1:6443/readyz >/dev/null",
            Duration::from_secs(180),
        ) {
            for m in [a, b] {
                m.node.sh(&format!("mv {HELD} /etc/kubernetes/manifests/etcd.yaml"));
            }
            panic!("{e}");
        }
    }
    let outage = Instant::now();
    let t_down = t0.elapsed();
    let mut samples = 0;
    let mut livez_failed = 0;
    let mut readyz_ok = 0;
    while outage.elapsed() < Duration::from_secs(120) {
        let now = group_health(bed, group);
        samples += 1;
        if now != before {
            for m in [a, b] {
                m.node.sh(&format!("mv {HELD} /etc/kubernetes/manifests/etcd.yaml"));
            }
            panic!(
                "the group changed during the outage ({:.0}s in): {now:?}, before {before:?}",
                outage.elapsed().as_secs_f64()
            );
        }
        for n in ctls {
            livez_failed += usize::from(api_code(n, "/livez") != "200");
            readyz_ok += usize::from(api_code(n, "/readyz") == "200");
        }
        std::thread::sleep(Duration::from_secs(10));
    }
    let held_for = outage.elapsed();

    // The members are back: every API server ready again, within a bound.
    for n in [a, b] {
        n.node.sh(&format!("mv {HELD} /etc/kubernetes/manifests/etcd.yaml"));
    }
    let back = Instant::now();
    let mut ready_after = Vec::new();
    for n in ctls {
        n.node
            .wait_for(
                "its API server's /readyz answering again",
                "curl -fsk -m 3 https://127.0.0.1:6443/readyz >/dev/null",
                Duration::from_secs(300).saturating_sub(back.elapsed()),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        ready_after.push(format!("{:.1}s", back.elapsed().as_secs_f64()));
    }
    let t_back = back.elapsed();
    assert_eq!(group_health(bed, group), before, "the group after the outage");
    expect_members(via, &ips, Duration::from_secs(60));
    let got = bed.kubectl(
        via,
        &[
            "get",
            "configmap",
            "outage-marker",
            "-n",
            "default",
            "-o",
            "jsonpath={.data.kept}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "yes",
        "the ConfigMap written before the outage: {}",
        crate::common::output_text(&got)
    );
    let restarts: Vec<usize> = ctls
        .iter()
        .zip(&restarts_before)
        .map(|(c, b)| apiserver_containers(c) - b)
        .collect();
    assert_eq!(readyz_ok, 0, "an API server answered /readyz without etcd's quorum");
    eprintln!(
        "readyz outage: every /readyz failing {:.1}s after the stop; held {:.1}s ({samples} samples of the group, \
         unchanged; /livez failed in {livez_failed} of {} reads; kube-apiserver containers restarted by the kubelet: \
         {restarts:?}); every /readyz ok {:.1}s after etcd's members were put back ({ready_after:?}); {:.1}s in all",
        t_down.as_secs_f64(),
        held_for.as_secs_f64(),
        samples * 3,
        t_back.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// `a_renewal_restart_on_every_controller_at_once_costs_no_controller`
/// (issue 38, "planned restarts never cost a controller"): three
/// controllers; `kube-aws-node certs --force` starts on all three at the
/// same moment (as the daily timers of controllers booted together would,
/// on the day their certificates come due). Each renews kubeadm's
/// certificates and restarts its four static pods one at a time, etcd
/// included, and each takes the cluster's join lock for it (certs.py
/// `S3Lock`): one controller restarts at a time. Sampled every 2 s during
/// the renewals: each controller's own `/readyz`, and whether any of them
/// answers (what the network load balancer, which routes to the ready ones,
/// would serve). Checked: every sample had a controller ready (the API was
/// never down), each controller's own unready time is bounded (measured and
/// printed), the group kept the same three Healthy instances, etcd the same
/// three members, and all three renewed.
///
/// Not covered: the load balancer itself (the bed has none; "any ready" is
/// the test's reading of the three). The reconfiguration's restarts on
/// every controller at once are the next fault, run last on the cluster.
pub(crate) fn a_renewal_restart_on_every_controller_at_once_costs_no_controller(bed: &MotoBed, ctls: [&BedNode; 3]) {
    let group = group_of(bed, &ctls[0].inst.id);
    let said = restarts_on_every_controller_at_once(
        bed,
        &group,
        ctls,
        "systemctl reset-failed kube-aws-forced-renewal.service 2>/dev/null; \
         systemd-run --unit kube-aws-forced-renewal --no-block /opt/kube-aws/bin/kube-aws-node certs --force",
        "kube-aws-forced-renewal.service",
        "renewed ",
    );
    eprintln!("renewal restarts on every controller at once: {said}");
}

/// `a_reconfiguration_on_every_controller_at_once_costs_no_controller`
/// (issue 38, "planned restarts never cost a controller"): three
/// controllers up; a plugin bringing Dex's OIDC flags on kube-apiserver is
/// added to the work tree and `kube-aws update` publishes it (`rolls:
/// nothing`: the ClusterConfiguration travels in the addon bundle, not the
/// user data); then `kube-aws-reconfigure.service` starts on all three at
/// the same moment (as their timers could). Each takes the join lock,
/// uploads the ClusterConfiguration and writes its static pod manifests
/// again (reconfigure.py), so the API servers restart one at a time; sampled
/// as the renewal fault is. Checked: every sample had a ready API server,
/// each one's unready time bounded, the group unchanged while they ran, etcd
/// the same three members, and every running kube-apiserver has the flag.
///
/// Run last on its cluster: moto answers the update by recreating the
/// nested stacks whole (new roles, whose credentials each node gets again:
/// MotoBed::recredential; a group of the same name whose instances are
/// moto's new ones), so the faults that need the group to hold these
/// nodes come before it. Not covered: the load balancer (as above).
pub(crate) fn a_reconfiguration_on_every_controller_at_once_costs_no_controller(
    bed: &mut MotoBed,
    mut ctls: [BedNode; 3],
) {
    let t0 = Instant::now();
    let dir = bed.dir().join("plugins/oidcflags");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), super::upgrade::OIDC_PLUGIN).unwrap();
    let upd = bed.kube_aws(&["update", "--yes"]);
    let said = crate::common::output_text(&upd);
    assert!(upd.status.success(), "kube-aws update: {said}");
    assert!(
        said.contains("rolls: nothing: no instance is replaced, launched or terminated"),
        "{said}"
    );
    let t_update = t0.elapsed();
    for n in ctls.iter_mut() {
        bed.recredential(n, "ControllerRole");
    }
    // The group as moto recreated it (its instances moto's new ones).
    let now = bed.instances(&format!("{BED_CLUSTER}-controller"));
    let group = group_of(bed, &now.first().expect("no controller instance after the update").id);
    let said = restarts_on_every_controller_at_once(
        bed,
        &group,
        [&ctls[0], &ctls[1], &ctls[2]],
        "systemctl reset-failed kube-aws-reconfigure.service 2>/dev/null; \
         systemctl start --no-block kube-aws-reconfigure.service",
        "kube-aws-reconfigure.service",
        "kube-apiserver: manifest written again",
    );
    for n in &ctls {
        let running = n
            .node
            .sh("crictl ps --state running --name kube-apiserver -q | head -1 | xargs -r crictl inspect");
        assert!(
            running.contains(super::upgrade::ISSUER_FLAG),
            "{}'s running kube-apiserver has no {}",
            n.inst.dns,
            super::upgrade::ISSUER_FLAG
        );
    }
    eprintln!(
        "reconfiguration on every controller at once: the update {:.1}s; {said}",
        t_update.as_secs_f64()
    );
}

/// Runs `start` on the three controllers at the same moment and samples
/// each one's `/readyz` every 2 s while `unit` runs on any of them. Asserts
/// that every sample had a ready controller (what the network load
/// balancer, which routes to the ready ones, would serve), that each
/// controller's longest unready stretch is under 5 minutes, that the
/// group and etcd's members did not change, and that `unit` succeeded on
/// each with `done` in its journal. Returns what it measured.
fn restarts_on_every_controller_at_once(
    bed: &MotoBed,
    group: &str,
    ctls: [&BedNode; 3],
    start: &str,
    unit: &str,
    done: &str,
) -> String {
    let t0 = Instant::now();
    let before = group_health(bed, group);
    let ips: Vec<&str> = ctls.iter().map(|c| c.inst.ip.as_str()).collect();
    expect_members(ctls[0], &ips, Duration::from_secs(60));
    for n in ctls {
        n.node.sh(start);
    }
    let running = |n: &BedNode| {
        let s = n.node.sh(&format!("systemctl show -p ActiveState --value {unit}"));
        matches!(s.trim(), "active" | "activating")
    };
    let mut samples = 0usize;
    let mut none_ready = 0usize;
    let mut unready = [0usize; 3];
    let mut longest = [Duration::ZERO; 3];
    let mut since: [Option<Instant>; 3] = [None; 3];
    let mut changed = None;
    while ctls.iter().any(|n| running(n)) {
        assert!(
            t0.elapsed() < Duration::from_secs(1200),
            "{unit} did not end in 20 minutes"
        );
        let ready: Vec<bool> = ctls.iter().map(|n| api_code(n, "/readyz") == "200").collect();
        samples += 1;
        none_ready += usize::from(!ready.iter().any(|r| *r));
        for (k, r) in ready.iter().enumerate() {
            if *r {
                if let Some(s) = since[k].take() {
                    longest[k] = longest[k].max(s.elapsed());
                }
            } else {
                unready[k] += 1;
                since[k].get_or_insert_with(Instant::now);
            }
        }
        if samples.is_multiple_of(10) && changed.is_none() {
            let now = group_health(bed, group);
            if now != before {
                changed = Some(now);
            }
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let took = t0.elapsed();
    for (k, n) in ctls.iter().enumerate() {
        if let Some(s) = since[k].take() {
            longest[k] = longest[k].max(s.elapsed());
        }
        let result = n.node.sh(&format!("systemctl show -p Result --value {unit}"));
        let journal = n.node.sh(&format!("journalctl --no-pager -o cat -u {unit} | tail -15"));
        assert!(
            result.trim() == "success" && journal.contains(done),
            "{}'s {unit} ({}): {journal}",
            n.inst.dns,
            result.trim()
        );
    }
    assert_eq!(changed, None, "the group changed during {unit} (before: {before:?})");
    assert_eq!(group_health(bed, group), before, "the group after {unit}");
    expect_members(ctls[0], &ips, Duration::from_secs(60));
    assert_eq!(
        none_ready, 0,
        "{none_ready} of {samples} samples had no controller ready: the restarts overlapped"
    );
    // Each controller's own API server is unready only while its restarts
    // run (up to four, each up to the kubelet's 20 s look at the manifests,
    // then the start and the health check): bounded at 5 minutes.
    for (k, n) in ctls.iter().enumerate() {
        assert!(
            longest[k] < Duration::from_secs(300),
            "{}'s /readyz failed for {:.0}s in a row",
            n.inst.dns,
            longest[k].as_secs_f64()
        );
    }
    format!(
        "all done {:.1}s after they started; {samples} samples, none without a ready controller; each \
         controller's longest unready stretch {:?}s ({:?} unready samples)",
        took.as_secs_f64(),
        longest.map(|d| d.as_secs()),
        unready
    )
}
