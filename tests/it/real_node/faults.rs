//! Faults on the real-node bed (issue 38), run inside the tests that boot
//! the cluster they need, so that no second cluster is booted for them.
//!
//! `a_leaving_controller_holds_while_its_removal_would_lose_quorum`: three
//! controllers; one's etcd stops (its static pod manifest moved away: the
//! kubelet stops the member, the instance runs on, as a failed disk or a
//! crash-looping etcd would); another is terminated through its auto scaling
//! group (moto holds it in `Terminating:Wait` on the `kube-aws-etcd-member`
//! hook, which the test puts as the control-plane stack does: moto's
//! CloudFormation creates no lifecycle hook; tests/support/moto_lifecycle.py),
//! and its
//! IMDS then says `Terminated`, which its `kube-aws-lifecycle.service` acts
//! on. Removing its member would leave two members with one answering, so it
//! holds: the member stays, the cluster keeps its three members and a
//! quorum, and the node's status object says why (step `etcd-quorum-hold`).
//! Once the stopped member is back it removes its member and completes the
//! action, and etcd has the two others.
//!
//! Not covered: the hook's global timeout (moto does not model it), a roll
//! driven by CloudFormation (the bed terminates the instance itself), and
//! the kubelet's own restart of a crashed etcd (the manifest is moved away,
//! so nothing restarts it until the test puts it back).
//!
//! The other faults, each with its own header: a whole-cluster `/readyz`
//! outage and restarts on every controller at once (a renewal, a
//! reconfiguration) in faults/restarts.rs; an HA restore on three new
//! controllers in faults/restore.rs. All run inside
//! tests/it/controllers_real_node.rs's test, on the cluster it boots. Here:
//! the quorum hold, and what the faults share (the group of an instance,
//! its instances' health, the API's answer on a node).

use std::time::{Duration, Instant};

use super::bed::{expect_all_ready, BedNode, MotoBed, BED_BUCKET, BED_CLUSTER, READY_LIMIT};
use super::pod_net;
use super::upgrade;
use super::{etcd_members, expect_members, member_ips};

mod restarts;
mod restore;

pub(crate) use restarts::{
    a_reconfiguration_on_every_controller_at_once_costs_no_controller,
    a_renewal_restart_on_every_controller_at_once_costs_no_controller,
    a_whole_cluster_readyz_outage_costs_no_controller_and_no_data,
};
pub(crate) use restore::an_ha_restore_on_three_new_controllers_brings_the_snapshot_back;

const HELD: &str = "/root/etcd.yaml.held";

/// See the module header. `leaving` is terminated, `down` loses its etcd,
/// `watcher` is the third, whose etcd the test reads.
pub(crate) fn a_leaving_controller_holds_while_its_removal_would_lose_quorum(
    bed: &MotoBed,
    leaving: &mut BedNode,
    down: &BedNode,
    watcher: &BedNode,
) {
    let t0 = Instant::now();
    let all = [&watcher.inst.ip, &leaving.inst.ip, &down.inst.ip];
    expect_members(watcher, &all.map(String::as_str), Duration::from_secs(60));
    down.node.sh(&format!("mv /etc/kubernetes/manifests/etcd.yaml {HELD}"));
    let health = format!(
        "curl -fsS -m 3 --cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/apiserver-etcd-client.crt \
         --key /etc/kubernetes/pki/apiserver-etcd-client.key https://{}:2379/health",
        down.inst.ip
    );
    watcher
        .node
        .wait_for(
            "the stopped member not answering",
            &format!("! {health}"),
            Duration::from_secs(120),
        )
        .unwrap_or_else(|e| panic!("{e}"));

    // The control-plane stack's termination hook, as CloudFormation puts it
    // (moto's CloudFormation does not create AWS::AutoScaling::LifecycleHook).
    let group = group_of(bed, &leaving.inst.id);
    bed.aws(&[
        "autoscaling",
        "put-lifecycle-hook",
        "--auto-scaling-group-name",
        &group,
        "--lifecycle-hook-name",
        "kube-aws-etcd-member",
        "--lifecycle-transition",
        "autoscaling:EC2_INSTANCE_TERMINATING",
        "--heartbeat-timeout",
        "300",
        "--default-result",
        "CONTINUE",
    ]);
    let term = bed.aws(&[
        "autoscaling",
        "terminate-instance-in-auto-scaling-group",
        "--instance-id",
        &leaving.inst.id,
        "--no-should-decrement-desired-capacity",
    ]);
    assert!(term.to_string().contains(&leaving.inst.id), "{term}");
    bed.set_lifecycle_state(leaving, "Terminated");

    // It holds: the reason in its status object, its member still there.
    let key = format!("clusters/{BED_CLUSTER}/status/nodes/{}.json", leaving.inst.id);
    let start = Instant::now();
    let report = loop {
        let got = bed.aws_text(&["s3", "cp", &format!("s3://{BED_BUCKET}/{key}"), "-"]);
        if let Some(r) = got.filter(|r| r.contains("etcd-quorum-hold")) {
            break r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "no hold reported; the leaving controller's lifecycle service:\n{}",
            leaving
                .node
                .sh("journalctl --no-pager -u kube-aws-lifecycle.service | tail -20")
        );
        std::thread::sleep(Duration::from_secs(3));
    };
    assert!(report.contains("do not") && report.contains("quorum"), "{report}");
    let t_hold = t0.elapsed();
    // `kube-aws status` says so: the node, holding, and why.
    let status = crate::common::output_text(&bed.kube_aws(&["status"]));
    assert!(
        status.contains("nodes that failed or hold:")
            && status.contains(&format!(
                "({}, controller) is holding at step etcd-quorum-hold",
                leaving.inst.id
            )),
        "kube-aws status does not name the holding controller: {status}"
    );
    let members = etcd_members(watcher);
    assert_eq!(
        member_ips(&members).len(),
        3,
        "nothing removed while it holds: {members:?}"
    );
    let journal = leaving.node.sh("journalctl --no-pager -u kube-aws-lifecycle.service");
    assert!(journal.contains("holding the termination"), "{journal}");

    // The stopped member is back: the leaving one removes its member and goes.
    down.node.sh(&format!("mv {HELD} /etc/kubernetes/manifests/etcd.yaml"));
    expect_members(
        watcher,
        &[watcher.inst.ip.as_str(), down.inst.ip.as_str()],
        Duration::from_secs(300),
    );
    // etcd may refuse the removal for a few seconds after the member is
    // back (its strict reconfiguration check: "unhealthy cluster", 503): the
    // leaving controller keeps holding and tries again.
    if let Err(e) = leaving.node.wait_for(
        "the leaving controller's removal",
        "journalctl --no-pager -u kube-aws-lifecycle.service | grep -q 'leaving: removed etcd member'",
        Duration::from_secs(60),
    ) {
        panic!(
            "{e}\n{}",
            leaving
                .node
                .sh("journalctl --no-pager -u kube-aws-lifecycle.service | tail -20")
        );
    }
    let state = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-instances",
        "--instance-ids",
        &leaving.inst.id,
    ]);
    assert!(
        !state.to_string().contains("Terminating:Wait"),
        "the lifecycle action was completed: {state}"
    );
    eprintln!(
        "quorum hold: reported {:.1}s after the etcd stop began; the member removed {:.1}s after the test began",
        t_hold.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The name of the auto scaling group that holds instance `id`.
fn group_of(bed: &MotoBed, id: &str) -> String {
    let got = bed.aws(&["autoscaling", "describe-auto-scaling-instances", "--instance-ids", id]);
    got["AutoScalingInstances"][0]["AutoScalingGroupName"]
        .as_str()
        .unwrap_or_else(|| panic!("{id} is in no auto scaling group: {got}"))
        .to_string()
}

/// The group's instances as EC2 Auto Scaling sees them: (id, health, state),
/// sorted.
fn group_health(bed: &MotoBed, group: &str) -> Vec<(String, String, String)> {
    let g = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        group,
    ]);
    let mut v: Vec<(String, String, String)> = g["AutoScalingGroups"][0]["Instances"]
        .as_array()
        .unwrap_or_else(|| panic!("no group {group}: {g}"))
        .iter()
        .map(|i| {
            let s = |k: &str| i[k].as_str().unwrap_or("?").to_string();
            (s("InstanceId"), s("HealthStatus"), s("LifecycleState"))
        })
        .collect();
    v.sort();
    v
}

/// The HTTP status of `path` on the node's own API server (000: no answer).
fn api_code(n: &BedNode, path: &str) -> String {
    let out = n.node.exec(&[
        "curl",
        "-sk",
        "-m",
        "3",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("https://127.0.0.1:6443{path}"),
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// How many kube-apiserver containers the node's containerd has had (a
/// kubelet restart of it adds one).
fn apiserver_containers(n: &BedNode) -> usize {
    n.node
        .sh("crictl --runtime-endpoint unix:///run/containerd/containerd.sock ps -a --name '^kube-apiserver$' -q")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}
