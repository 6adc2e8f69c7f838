//! The nodes' bootstrap reports in the wait: a node failure signal carries
//! the node's report, and a failure elsewhere shows every node that failed.

use super::*;

fn node_report(instance: &str, stack: &str, asg: &str, role: &str, step: &str, secs: i64) -> NodeReport {
    NodeReport {
        instance_id: instance.into(),
        node_name: format!("ip-{instance}.eu-west-1.compute.internal"),
        role: role.into(),
        stack: stack.into(),
        asg_logical_id: asg.into(),
        step: step.into(),
        exit_code: 1,
        command: "kubeadm join --config /var/lib/kube-aws/kubeadm.yaml".into(),
        log: (1..=30).map(|i| format!("line {i}\n")).collect::<String>()
            + "error: couldn't validate the identity of the API Server\n",
        timestamp: secs,
    }
}

/// A node's bootstrap fails a step and signals FAILURE: the group fails at once
/// (CloudFormation's reason counts the FAILURE signal), and the failure carries
/// that node's report, naming the node and the step, with the end of its log.
/// A report of an earlier operation and one of another group are not blamed.
#[test]
fn a_node_failure_signal_carries_the_nodes_report() {
    let np = nested_name("NodePoolGeneral");
    let cp = nested_name("ControlPlane");
    let events =
        vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(2, ROOT, "NodePoolGeneral", STACK_TYPE, "CREATE_IN_PROGRESS", "Resource creation Initiated"),
        ev(3, &np, &np, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            9,
            &np,
            "WorkerGroup",
            "AWS::AutoScaling::AutoScalingGroup",
            "CREATE_FAILED",
            "Received 1 FAILURE signal(s) out of 2.  Unable to satisfy 100% MinSuccessfulInstancesPercent requirement",
        ),
    ];
    let start = 1_700_000_001; // seconds: the root's User Initiated event
    let mut o = obs(
        Operation::Create,
        "ROLLBACK_IN_PROGRESS",
        &[("NodePoolGeneral", "CREATE_FAILED")],
        events,
    );
    o.node_reports = vec![
        node_report("i-old", &np, "WorkerGroup", "worker-general", "packages", start - 3600),
        node_report("i-ctl", &cp, "ControlPlaneGroup", "controller", "installer", start + 7),
        node_report(
            "i-0abc",
            &np,
            "WorkerGroup",
            "worker-general",
            "kubeadm-join",
            start + 5,
        ),
    ];
    let a = assess(&o);
    let Outcome::Failed(f) = &a.outcome else {
        panic!("expected a failure: {:?}", a.outcome)
    };
    assert_eq!(f.resource, "WorkerGroup");
    assert_eq!(f.nodes.len(), 1, "{:#?}", f.nodes);
    assert_eq!(f.nodes[0].instance_id, "i-0abc");
    let text = f.to_string();
    assert!(
        text.contains("node ip-i-0abc.eu-west-1.compute.internal (i-0abc, worker-general) failed at step kubeadm-join (exit 1): kubeadm join"),
        "{text}"
    );
    assert!(text.contains("couldn't validate the identity"), "{text}");
    assert!(
        !text.contains("line 10\n") && text.contains("line 30"),
        "only the end of the log: {text}"
    );
    // Progress shows every node that failed in this operation, not the old one.
    let names: Vec<&str> = a.progress.nodes.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ip-i-0abc.eu-west-1.compute.internal",
            "ip-i-ctl.eu-west-1.compute.internal"
        ]
    );
    assert!(a.progress.nodes.iter().all(|l| l.failed));
}

/// A failure no node report matches (an addon's wait condition timing out after
/// the controller failed to start the installer) still shows the nodes that failed.
#[test]
fn a_failure_elsewhere_shows_every_node_that_failed_in_the_operation() {
    let events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(5, ROOT, "Network", STACK_TYPE, "CREATE_FAILED", "Subnet quota exceeded"),
    ];
    let mut o = obs(Operation::Create, "ROLLBACK_IN_PROGRESS", &[], events);
    o.node_reports = vec![node_report(
        "i-ctl",
        &nested_name("ControlPlane"),
        "ControlPlaneGroup",
        "controller",
        "installer",
        1_700_000_003,
    )];
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.nodes.len(), 1);
    // Without the operation's start (events not reaching back), every report counts.
    assert_eq!(node_reports_since(&o.node_reports, None).len(), 1);
    assert_eq!(node_reports_since(&o.node_reports, Some(1_700_000_004_000)).len(), 0);
    // A report stamped in the start's own second (whole seconds) is of this operation.
    assert_eq!(node_reports_since(&o.node_reports, Some(1_700_000_003_900)).len(), 1);
    assert_eq!(operation_start(&o.events), Some(1_700_000_001_000));
    assert_eq!(operation_start(&o.events[1..]), None);
}

fn upgrade_record(
    phase: &str,
    step: &str,
    message: &str,
    secs: i64,
) -> crate::aws::state::control_plane_status::UpgradeRecord {
    // The shape src/node/kube_aws_node/upgrade.py `Upgrader.report` writes.
    serde_json::from_value(serde_json::json!({
        "phase": phase, "version": "1.35.4", "from": "1.35.4", "to": "1.36.3", "step": step,
        "message": message, "node": "ip-i-ctl.eu-west-1.compute.internal", "updatedAt": secs,
    }))
    .unwrap()
}

/// The first controller of a new version fails `kubeadm upgrade apply` in an
/// update: its group fails on its FAILURE signal, and the failure shows,
/// after the node's report, the upgrade record's step and message. A record
/// of an earlier operation, one that did not fail, or a failure no
/// controller is behind adds nothing.
#[test]
fn a_controller_failure_carries_the_failed_upgrade_record() {
    let cp = nested_name("ControlPlane");
    let events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "UPDATE_IN_PROGRESS", "User Initiated"),
        ev(2, ROOT, "ControlPlane", STACK_TYPE, "UPDATE_IN_PROGRESS", ""),
        ev(3, &cp, &cp, STACK_TYPE, "UPDATE_IN_PROGRESS", "User Initiated"),
        ev(
            9,
            &cp,
            "ControlPlaneGroup",
            "AWS::AutoScaling::AutoScalingGroup",
            "UPDATE_FAILED",
            "Received 1 FAILURE signal(s) out of 1.  Unable to satisfy 100% MinSuccessfulInstancesPercent requirement",
        ),
    ];
    let start = 1_700_000_001; // seconds: the root's User Initiated event
    let mut o = obs(
        Operation::Update,
        "UPDATE_ROLLBACK_IN_PROGRESS",
        &[("ControlPlane", "UPDATE_FAILED")],
        events,
    );
    o.node_reports = vec![node_report(
        "i-ctl",
        &cp,
        "ControlPlaneGroup",
        "controller",
        "kubeadm-upgrade-apply",
        start + 6,
    )];
    let message = "kubeadm upgrade apply v1.36.3 exited 1 (see the boot log); kubeadm-config and kubelet-config \
                   are back as they were (1.35.4)";
    o.upgrade = Some(upgrade_record("failed", "kubeadm-upgrade-apply", message, start + 5));
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(
        f.upgrade.as_deref(),
        Some(format!("failed at step kubeadm-upgrade-apply: {message}").as_str())
    );
    let text = f.to_string();
    let last = text.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "  the control-plane upgrade record (status/control-plane/upgrade.json): failed at step \
             kubeadm-upgrade-apply: {message}"
        ),
        "{text}"
    );
    assert!(
        text.contains("(i-ctl, controller) failed at step kubeadm-upgrade-apply"),
        "{text}"
    );

    // A refusal (an older controller joining) says so the same way.
    o.upgrade = Some(upgrade_record(
        "refused",
        "version-check",
        "this node is older",
        start + 5,
    ));
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(
        f.upgrade.as_deref(),
        Some("refused at step version-check: this node is older")
    );

    // Not of this operation, or not a failure: nothing.
    for record in [
        upgrade_record("failed", "kubeadm-join", "old", start - 3600),
        upgrade_record("upgraded", "done", "", start + 5),
    ] {
        o.upgrade = Some(record);
        let Outcome::Failed(f) = assess(&o).outcome else {
            panic!("expected a failure")
        };
        assert_eq!(f.upgrade, None, "{o:?}");
        assert!(!f.to_string().contains("upgrade record"));
    }

    // A worker's failure with a failed record in S3: not the controller's.
    o.upgrade = Some(upgrade_record("failed", "kubeadm-upgrade-apply", message, start + 5));
    o.node_reports[0].role = "worker-general".into();
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.upgrade, None);
}

/// A step a signal ended (Python's subprocess reports -9 for SIGKILL) reads
/// as the signal, not as `exit -9`; a hold (code 0) says nothing of an exit.
#[test]
fn a_step_killed_by_a_signal_says_the_signal() {
    let mut r = node_report("i-0abc", "np", "WorkerGroup", "controller", "kubeadm-join", 1);
    assert_eq!(r.how_it_ended().as_deref(), Some("exit 1"));
    r.exit_code = -9;
    assert_eq!(r.how_it_ended().as_deref(), Some("killed by signal 9 (SIGKILL)"));
    assert!(
        r.headline()
            .contains("failed at step kubeadm-join (killed by signal 9 (SIGKILL)): kubeadm join"),
        "{}",
        r.headline()
    );
    r.exit_code = -64;
    assert_eq!(r.how_it_ended().as_deref(), Some("killed by signal 64"));
    r.exit_code = 0;
    r.step = "etcd-quorum-hold".into();
    assert_eq!(r.how_it_ended(), None);
    assert!(!r.headline().contains("exit"), "{}", r.headline());
}
