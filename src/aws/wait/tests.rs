//! Recorded event sequences, written from the CloudFormation documentation
//! (stack status codes, the rollback cascade, WaitCondition and signal reasons).
//! Moto cannot produce these (no per-resource events, no rollback, WaitConditions
//! ignored), so this is where those behaviours are covered.

use super::*;

pub(in crate::aws) const ROOT: &str = "demo";
const ACCT: &str = "arn:aws:cloudformation:us-west-2:123456789012:stack";

/// One recorded event (also the recovery tests': src/aws/wait/recovery/tests.rs).
pub(in crate::aws) fn ev(id: u32, stack: &str, logical: &str, ty: &str, status: &str, reason: &str) -> StackEvent {
    StackEvent {
        event_id: format!("e{id:03}"),
        stack_name: stack.into(),
        logical_id: logical.into(),
        physical_id: if ty == STACK_TYPE && logical != stack {
            format!("{ACCT}/{ROOT}-{logical}-ABC123/1111")
        } else if logical == stack {
            format!("{ACCT}/{stack}/0000")
        } else {
            String::new()
        },
        resource_type: ty.into(),
        status: status.into(),
        reason: (!reason.is_empty()).then(|| reason.to_string()),
        timestamp: 1_700_000_000_000 + i64::from(id) * 1000,
    }
}

pub(in crate::aws) fn nested_name(logical: &str) -> String {
    format!("{ROOT}-{logical}-ABC123")
}

pub(in crate::aws) fn state(name: &str, status: &str) -> StackState {
    StackState {
        name: name.into(),
        status: status.into(),
        reason: None,
    }
}

fn obs(op: Operation, root: &str, nested: &[(&str, &str)], events: Vec<StackEvent>) -> Observation {
    Observation {
        operation: op,
        root: Some(state("root", root)),
        nested: nested.iter().map(|(n, s)| state(n, s)).collect(),
        events,
        addons: vec![
            ExpectedAddon {
                release: "cert-manager".into(),
                wait_condition: Some("AddonCertManagerReady".into()),
                wait_timeout_secs: Some(3600),
            },
            ExpectedAddon {
                release: "dex".into(),
                wait_condition: Some("AddonDexReady".into()),
                wait_timeout_secs: Some(5400),
            },
        ],
        reports: vec![],
        node_reports: vec![],
        upgrade: None,
        elapsed_secs: 60,
        timeout_secs: Some(45 * 60),
    }
}

fn report(release: &str, phase: AddonPhase, message: &str) -> AddonReport {
    AddonReport {
        release: release.into(),
        phase,
        message: message.into(),
        started_at: Some("2026-11-29T20:00:00Z".into()),
        updated_at: Some("2026-11-29T20:03:00Z".into()),
    }
}

/// A create that goes well: root starts, the network nested stack completes,
/// the control plane's addon WaitConditions complete, the root completes.
fn success_events() -> Vec<StackEvent> {
    let net = nested_name("Network");
    let cp = nested_name("ControlPlane");
    vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(2, ROOT, "Network", STACK_TYPE, "CREATE_IN_PROGRESS", ""),
        ev(
            3,
            ROOT,
            "Network",
            STACK_TYPE,
            "CREATE_IN_PROGRESS",
            "Resource creation Initiated",
        ),
        ev(4, &net, &net, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(5, &net, "VPC", "AWS::EC2::VPC", "CREATE_IN_PROGRESS", ""),
        ev(6, &net, "VPC", "AWS::EC2::VPC", "CREATE_COMPLETE", ""),
        ev(7, &net, &net, STACK_TYPE, "CREATE_COMPLETE", ""),
        ev(8, ROOT, "Network", STACK_TYPE, "CREATE_COMPLETE", ""),
        ev(
            9,
            ROOT,
            "ControlPlane",
            STACK_TYPE,
            "CREATE_IN_PROGRESS",
            "Resource creation Initiated",
        ),
        ev(10, &cp, &cp, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(11, &cp, "AddonDexReady", WAIT_CONDITION, "CREATE_IN_PROGRESS", ""),
        ev(12, &cp, "AddonDexReady", WAIT_CONDITION, "CREATE_COMPLETE", ""),
        ev(13, &cp, &cp, STACK_TYPE, "CREATE_COMPLETE", ""),
        ev(14, ROOT, "ControlPlane", STACK_TYPE, "CREATE_COMPLETE", ""),
        ev(15, ROOT, ROOT, STACK_TYPE, "CREATE_COMPLETE", ""),
    ]
}

#[test]
fn success_is_done_with_one_line_per_stack_and_addon() {
    let mut o = obs(
        Operation::Create,
        "CREATE_COMPLETE",
        &[("Network", "CREATE_COMPLETE"), ("ControlPlane", "CREATE_COMPLETE")],
        success_events(),
    );
    o.reports = vec![
        report("cert-manager", AddonPhase::Ready, "deployed"),
        report("dex", AddonPhase::Ready, "deployed"),
    ];
    let a = assess(&o);
    assert_eq!(a.outcome, Outcome::Done);
    let names: Vec<&str> = a.progress.stacks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["root", "Network", "ControlPlane"]);
    assert_eq!(a.progress.stacks[1].detail, "VPC CREATE_COMPLETE");
    assert_eq!(a.progress.addons.len(), 2);
    assert!(a.progress.addons.iter().all(|l| l.status == "ready" && l.finished));
}

#[test]
fn halfway_through_a_create_is_in_progress() {
    let events: Vec<StackEvent> = success_events().into_iter().take(11).collect();
    let mut o = obs(
        Operation::Create,
        "CREATE_IN_PROGRESS",
        &[("Network", "CREATE_COMPLETE"), ("ControlPlane", "CREATE_IN_PROGRESS")],
        events,
    );
    o.reports = vec![report("cert-manager", AddonPhase::Installing, "helm upgrade --install")];
    let a = assess(&o);
    assert_eq!(a.outcome, Outcome::InProgress);
    assert_eq!(a.progress.stacks[2].detail, "AddonDexReady CREATE_IN_PROGRESS");
    assert_eq!(a.progress.addons[0].status, "installing");
    assert_eq!(a.progress.addons[1].status, "pending");
    // dex's wait condition started at event 11 (22:13:31 UTC) with a 1h30m timeout.
    assert_eq!(
        a.progress.waiting,
        [WaitingOn {
            release: "dex".into(),
            wait_condition: "AddonDexReady".into(),
            timeout_secs: 5400,
            since_ms: 1_700_000_011_000,
        }]
    );
    assert_eq!(
        a.progress.waiting[0].describe(),
        "dex: at most 1h30m, until 23:43:31 UTC"
    );
    assert_eq!(
        a.progress.addons[1].detail,
        "signal awaited until 23:43:31 UTC at most (1h30m)"
    );
    // cert-manager's wait condition has not started: its timeout, not a time.
    assert_eq!(
        a.progress.addons[0].detail,
        "helm upgrade --install; timeout 1h once its wait condition starts"
    );
}

/// A chain: dex depends on cert-manager, so CloudFormation creates dex's
/// wait condition (and starts its clock) only when cert-manager's completes.
/// The wait names the release it waits on, and until when, at each step.
#[test]
fn the_wait_names_the_release_it_waits_on_and_until_when() {
    let cp = nested_name("ControlPlane");
    let mut events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            2,
            ROOT,
            "ControlPlane",
            STACK_TYPE,
            "CREATE_IN_PROGRESS",
            "Resource creation Initiated",
        ),
        ev(3, &cp, &cp, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            10,
            &cp,
            "AddonCertManagerReady",
            WAIT_CONDITION,
            "CREATE_IN_PROGRESS",
            "",
        ),
        ev(
            11,
            &cp,
            "AddonCertManagerReady",
            WAIT_CONDITION,
            "CREATE_IN_PROGRESS",
            "Resource creation Initiated",
        ),
    ];
    let stacks = [("ControlPlane", "CREATE_IN_PROGRESS")];
    let o = obs(Operation::Create, "CREATE_IN_PROGRESS", &stacks, events.clone());
    let a = assess(&o);
    let waiting: Vec<String> = a.progress.waiting.iter().map(WaitingOn::describe).collect();
    // The clock starts at the first CREATE_IN_PROGRESS (22:13:30) and runs 1h.
    assert_eq!(waiting, ["cert-manager: at most 1h, until 23:13:30 UTC"]);
    assert_eq!(
        a.progress.addons[1].detail,
        "timeout 1h30m once its wait condition starts"
    );

    // Its signal arrives (the status object says ready before CloudFormation's
    // CREATE_COMPLETE): nothing is waited on for it any more.
    let mut o2 = obs(Operation::Create, "CREATE_IN_PROGRESS", &stacks, events.clone());
    o2.reports = vec![report("cert-manager", AddonPhase::Ready, "")];
    let a = assess(&o2);
    assert!(a.progress.waiting.is_empty(), "{:?}", a.progress.waiting);
    assert_eq!(a.progress.addons[0].detail, "");

    // cert-manager completes at 22:23:20 and dex's wait condition starts.
    events.push(ev(
        600,
        &cp,
        "AddonCertManagerReady",
        WAIT_CONDITION,
        "CREATE_COMPLETE",
        "",
    ));
    events.push(ev(601, &cp, "AddonDexReady", WAIT_CONDITION, "CREATE_IN_PROGRESS", ""));
    let mut o3 = obs(Operation::Create, "CREATE_IN_PROGRESS", &stacks, events.clone());
    // Without its status object (moto completes wait conditions unsignalled),
    // a completed wait condition has no limit left to show either.
    let settled = assess(&o3);
    assert_eq!(settled.progress.addons[0].status, "pending");
    assert_eq!(settled.progress.addons[0].detail, "");
    o3.reports = vec![report("cert-manager", AddonPhase::Ready, "")];
    let a = assess(&o3);
    let waiting: Vec<String> = a.progress.waiting.iter().map(WaitingOn::describe).collect();
    assert_eq!(waiting, ["dex: at most 1h30m, until 23:53:21 UTC"]);
    assert_eq!(a.progress.addons[0].detail, "", "cert-manager's wait is over");
}

#[test]
fn durations_read_as_people_write_them() {
    assert_eq!(short_duration(3780), "1h3m");
    assert_eq!(short_duration(3600), "1h");
    assert_eq!(short_duration(2700), "45m");
    assert_eq!(short_duration(90), "1m30s");
    assert_eq!(short_duration(0), "0s");
    assert_eq!(utc_time(1_700_000_000_000), "22:13:20 UTC");
}

/// A resource fails, the others are cancelled, the nested stack and the root
/// roll back: the answer is the IAM role, not the cascade.
#[test]
fn rollback_cascade_names_the_root_cause() {
    let cp = nested_name("ControlPlane");
    let events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(2, ROOT, "ControlPlane", STACK_TYPE, "CREATE_IN_PROGRESS", "Resource creation Initiated"),
        ev(3, ROOT, "NodePoolGeneral", STACK_TYPE, "CREATE_IN_PROGRESS", "Resource creation Initiated"),
        ev(4, &cp, &cp, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(5, &cp, "ControllerRole", "AWS::IAM::Role", "CREATE_IN_PROGRESS", ""),
        ev(6, &cp, "ControllerSG", "AWS::EC2::SecurityGroup", "CREATE_IN_PROGRESS", ""),
        ev(7, &cp, "ControllerRole", "AWS::IAM::Role", "CREATE_FAILED",
            "User: arn:aws:iam::123456789012:user/ci is not authorized to perform: iam:CreateRole"),
        ev(8, &cp, "ControllerSG", "AWS::EC2::SecurityGroup", "CREATE_FAILED", "Resource creation cancelled"),
        ev(9, &cp, &cp, STACK_TYPE, "ROLLBACK_IN_PROGRESS",
            "The following resource(s) failed to create: [ControllerSG, ControllerRole]. Rollback requested by user."),
        ev(10, ROOT, "ControlPlane", STACK_TYPE, "CREATE_FAILED",
            "Embedded stack arn:aws:cloudformation:us-west-2:123456789012:stack/demo-ControlPlane-ABC123/1111 was not successfully created: The following resource(s) failed to create: [ControllerSG, ControllerRole]."),
        ev(11, ROOT, "NodePoolGeneral", STACK_TYPE, "CREATE_FAILED", "Resource creation cancelled"),
        ev(12, ROOT, ROOT, STACK_TYPE, "ROLLBACK_IN_PROGRESS",
            "The following resource(s) failed to create: [NodePoolGeneral, ControlPlane]. Rollback requested by user."),
        ev(13, &cp, "ControllerSG", "AWS::EC2::SecurityGroup", "DELETE_COMPLETE", ""),
        ev(14, ROOT, "ControlPlane", STACK_TYPE, "DELETE_COMPLETE", ""),
        ev(15, &cp, &cp, STACK_TYPE, "DELETE_IN_PROGRESS", "User Initiated"),
        ev(16, ROOT, ROOT, STACK_TYPE, "ROLLBACK_COMPLETE", ""),
    ];
    for root in ["ROLLBACK_IN_PROGRESS", "ROLLBACK_COMPLETE"] {
        let o = obs(
            Operation::Create,
            root,
            &[
                ("ControlPlane", "DELETE_COMPLETE"),
                ("NodePoolGeneral", "DELETE_COMPLETE"),
            ],
            events.clone(),
        );
        let Outcome::Failed(f) = assess(&o).outcome else {
            panic!("expected a failure for root {root}");
        };
        assert_eq!(f.resource, "ControllerRole");
        assert_eq!(f.stack, "ControlPlane");
        assert_eq!(f.resource_type, "AWS::IAM::Role");
        assert!(f.reason.contains("not authorized to perform: iam:CreateRole"), "{f}");
        assert_eq!(f.addon, None);
        assert!(f
            .to_string()
            .starts_with("ControllerRole CREATE_FAILED (AWS::IAM::Role) in stack ControlPlane"));
    }
}

/// The addon's unit sends a FAILURE signal; the WaitCondition fails with the
/// signal's reason; the status object carries the helm error tail.
#[test]
fn addon_failure_signal_names_the_addon_and_its_reason() {
    let cp = nested_name("ControlPlane");
    let events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            2,
            ROOT,
            "ControlPlane",
            STACK_TYPE,
            "CREATE_IN_PROGRESS",
            "Resource creation Initiated",
        ),
        ev(3, &cp, &cp, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(4, &cp, "AddonCertManagerReady", WAIT_CONDITION, "CREATE_COMPLETE", ""),
        ev(
            5,
            &cp,
            "AddonDexReady",
            WAIT_CONDITION,
            "CREATE_FAILED",
            "WaitCondition received failed message: 'helm install failed' for uniqueId: dex",
        ),
        ev(
            6,
            &cp,
            &cp,
            STACK_TYPE,
            "ROLLBACK_IN_PROGRESS",
            "The following resource(s) failed to create: [AddonDexReady]. Rollback requested by user.",
        ),
        ev(
            7,
            ROOT,
            "ControlPlane",
            STACK_TYPE,
            "CREATE_FAILED",
            "Embedded stack was not successfully created",
        ),
        ev(
            8,
            ROOT,
            ROOT,
            STACK_TYPE,
            "ROLLBACK_IN_PROGRESS",
            "The following resource(s) failed to create: [ControlPlane].",
        ),
    ];
    let mut o = obs(
        Operation::Create,
        "ROLLBACK_IN_PROGRESS",
        &[("ControlPlane", "ROLLBACK_IN_PROGRESS")],
        events,
    );
    o.reports = vec![
        report("cert-manager", AddonPhase::Ready, "deployed"),
        report(
            "dex",
            AddonPhase::Failed,
            "timed out waiting for the condition; pod dex-7c9: ImagePullBackOff",
        ),
    ];
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.addon.as_deref(), Some("dex"));
    assert_eq!(f.resource, "AddonDexReady");
    assert_eq!(f.stack, "ControlPlane");
    let text = f.to_string();
    assert!(
        text.starts_with("addon \"dex\" failed: timed out waiting for the condition; pod dex-7c9: ImagePullBackOff"),
        "{text}"
    );

    // Without the status object, the uniqueId in the signal still names the addon.
    o.reports.clear();
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.addon.as_deref(), Some("dex"));
    assert!(f.to_string().contains("helm install failed"));
}

#[test]
fn an_addon_status_failure_fails_the_wait_before_the_stack_notices() {
    let events: Vec<StackEvent> = success_events().into_iter().take(11).collect();
    let mut o = obs(
        Operation::Create,
        "CREATE_IN_PROGRESS",
        &[("ControlPlane", "CREATE_IN_PROGRESS")],
        events,
    );
    o.reports = vec![report(
        "cert-manager",
        AddonPhase::Failed,
        "CRDs not Established after 5m",
    )];
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.addon.as_deref(), Some("cert-manager"));
    assert!(f.to_string().contains("CRDs not Established after 5m"));
}

/// A broken addon is named (issue 41): the status object the reconciler
/// wrote for metrics-server crash-looping on a flag it does not know, as
/// tests/it/real_node/addons/broken.rs
/// `a_broken_metrics_server_is_named_by_the_reconciler_and_up_wait_exits_3`
/// printed it on the real-node bed (its pod, helm's output, the namespace's
/// events)
/// fails the wait while the stack still waits, and the failure's first line
/// names the release, the pod, the container and its last words; the
/// descheduler, ready, is not named. `up --wait` exits 3 for it
/// (src/cli/exit.rs, AwsError::Failed).
#[test]
fn a_crash_looping_addon_is_named_with_its_pod_container_and_last_words() {
    let events: Vec<StackEvent> = success_events().into_iter().take(11).collect();
    let mut o = obs(
        Operation::Create,
        "CREATE_IN_PROGRESS",
        &[("ControlPlane", "CREATE_COMPLETE")],
        events,
    );
    let recorded: AddonReport =
        serde_json::from_str(include_str!("tests/recorded/metrics-server-failed.json")).unwrap();
    o.addons = ["descheduler", "metrics-server"]
        .iter()
        .map(|r| ExpectedAddon {
            release: r.to_string(),
            wait_condition: None,
            wait_timeout_secs: None,
        })
        .collect();
    o.reports = vec![report("descheduler", AddonPhase::Ready, ""), recorded];
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.addon.as_deref(), Some("metrics-server"));
    let text = f.to_string();
    assert_eq!(
        text.lines().next().unwrap(),
        "addon \"metrics-server\" failed: pod kube-system/metrics-server-644fbbc657-r82pc container metrics-server: \
         CrashLoopBackOff: -v, --v Level                              number for the log level verbosity | \
         --vmodule pattern=N,...                comma-separated list of pattern=N settings for file-filtered \
         logging (only works for text log format) | panic: unknown flag: --no-such-flag"
    );
    assert!(!text.contains("descheduler"), "{text}");
}

#[test]
fn timeout_names_what_is_still_pending() {
    let events: Vec<StackEvent> = success_events().into_iter().take(11).collect();
    let mut o = obs(
        Operation::Create,
        "CREATE_IN_PROGRESS",
        &[("Network", "CREATE_COMPLETE"), ("ControlPlane", "CREATE_IN_PROGRESS")],
        events,
    );
    o.reports = vec![
        report("cert-manager", AddonPhase::Ready, "deployed"),
        report("dex", AddonPhase::Installing, ""),
    ];
    assert_eq!(assess(&o).outcome, Outcome::InProgress);
    o.elapsed_secs = 45 * 60;
    let Outcome::TimedOut { pending } = assess(&o).outcome else {
        panic!("expected a timeout")
    };
    assert_eq!(
        pending,
        [
            "AddonDexReady (AWS::CloudFormation::WaitCondition, addon dex): CloudFormation waits for its signal \
             until 23:43:31 UTC at most",
            "stack ControlPlane",
            "addon dex (installing)"
        ]
    );
    // No limit: never times out.
    o.timeout_secs = None;
    assert_eq!(assess(&o).outcome, Outcome::InProgress);
}

/// CloudFormation's own WaitCondition timeout is a failure of that addon.
#[test]
fn wait_condition_timeout_is_the_addon_failure() {
    let cp = nested_name("ControlPlane");
    let events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            2,
            ROOT,
            "ControlPlane",
            STACK_TYPE,
            "CREATE_IN_PROGRESS",
            "Resource creation Initiated",
        ),
        ev(3, &cp, &cp, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            4,
            &cp,
            "AddonCertManagerReady",
            WAIT_CONDITION,
            "CREATE_FAILED",
            "WaitCondition timed out. Received 0 conditions when expecting 1",
        ),
        ev(
            5,
            &cp,
            "AddonDexReady",
            WAIT_CONDITION,
            "CREATE_FAILED",
            "Resource creation cancelled",
        ),
        ev(
            6,
            ROOT,
            ROOT,
            STACK_TYPE,
            "ROLLBACK_IN_PROGRESS",
            "The following resource(s) failed to create: [ControlPlane].",
        ),
    ];
    let o = obs(
        Operation::Create,
        "ROLLBACK_IN_PROGRESS",
        &[("ControlPlane", "ROLLBACK_IN_PROGRESS")],
        events,
    );
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.addon.as_deref(), Some("cert-manager"));
    assert!(f.to_string().contains("WaitCondition timed out"), "{f}");
}

/// `--on-failure do-nothing`: a node pool's nested stack fails and stays failed.
#[test]
fn nested_stack_failure_names_the_resource_inside_it() {
    let np = nested_name("NodePoolGeneral");
    let events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            2,
            ROOT,
            "NodePoolGeneral",
            STACK_TYPE,
            "CREATE_IN_PROGRESS",
            "Resource creation Initiated",
        ),
        ev(3, &np, &np, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            4,
            &np,
            "Workers",
            "AWS::AutoScaling::AutoScalingGroup",
            "CREATE_FAILED",
            "Received 0 SUCCESS signal(s) out of 2.  Unable to satisfy 100% MinSuccessfulInstancesPercent requirement",
        ),
        ev(
            5,
            &np,
            &np,
            STACK_TYPE,
            "CREATE_FAILED",
            "The following resource(s) failed to create: [Workers].",
        ),
        ev(
            6,
            ROOT,
            "NodePoolGeneral",
            STACK_TYPE,
            "CREATE_FAILED",
            "Embedded stack was not successfully created: The following resource(s) failed to create: [Workers].",
        ),
        ev(
            7,
            ROOT,
            ROOT,
            STACK_TYPE,
            "CREATE_FAILED",
            "The following resource(s) failed to create: [NodePoolGeneral].",
        ),
    ];
    let o = obs(
        Operation::Create,
        "CREATE_FAILED",
        &[("NodePoolGeneral", "CREATE_FAILED")],
        events,
    );
    let a = assess(&o);
    let Outcome::Failed(f) = a.outcome else {
        panic!("expected a failure")
    };
    assert_eq!((f.stack.as_str(), f.resource.as_str()), ("NodePoolGeneral", "Workers"));
    assert!(f.reason.contains("Received 0 SUCCESS signal(s) out of 2"));
    assert!(a.progress.stacks[1].failed);
}

/// A nested stack failing with only its own event known (its events not yet
/// fetched): the nested stack itself is named, not nothing.
#[test]
fn nested_failure_without_inner_events_falls_back_to_the_nested_stack() {
    let events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "CREATE_IN_PROGRESS", "User Initiated"),
        ev(
            2,
            ROOT,
            "Network",
            STACK_TYPE,
            "CREATE_FAILED",
            "Embedded stack was not successfully created: The following resource(s) failed to create: [VPC].",
        ),
        ev(3, ROOT, ROOT, STACK_TYPE, "ROLLBACK_COMPLETE", ""),
    ];
    let o = obs(
        Operation::Create,
        "ROLLBACK_COMPLETE",
        &[("Network", "DELETE_COMPLETE")],
        events,
    );
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.resource, "Network");
}

/// An update after an earlier failed update: only the latest operation counts
/// (this is how `status --wait` resumes without knowing when it began).
#[test]
fn update_ignores_the_previous_operations_failures() {
    let mut events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "UPDATE_IN_PROGRESS", "User Initiated"),
        ev(2, ROOT, "Bucket", "AWS::S3::Bucket", "UPDATE_FAILED", "old failure"),
        ev(3, ROOT, ROOT, STACK_TYPE, "UPDATE_ROLLBACK_COMPLETE", ""),
        ev(4, ROOT, ROOT, STACK_TYPE, "UPDATE_IN_PROGRESS", "User Initiated"),
        ev(5, ROOT, "Bucket", "AWS::S3::Bucket", "UPDATE_COMPLETE", ""),
    ];
    let o = obs(
        Operation::Update,
        "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS",
        &[],
        events.clone(),
    );
    assert_eq!(assess(&o).outcome, Outcome::InProgress);
    events.push(ev(6, ROOT, "Queue", "AWS::SQS::Queue", "UPDATE_FAILED", "new failure"));
    let o = obs(Operation::Update, "UPDATE_ROLLBACK_IN_PROGRESS", &[], events);
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(
        (f.resource.as_str(), f.reason.as_str(), f.stack.as_str()),
        ("Queue", "new failure", "root")
    );
}

#[test]
fn delete_is_done_when_the_stack_is_gone_and_failed_on_delete_failed() {
    let mut o = obs(Operation::Delete, "DELETE_IN_PROGRESS", &[], vec![]);
    assert_eq!(assess(&o).outcome, Outcome::InProgress);
    o.root = None;
    assert_eq!(assess(&o).outcome, Outcome::Done);
    o.root = Some(state("root", "DELETE_FAILED"));
    o.events = vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "DELETE_IN_PROGRESS", "User Initiated"),
        ev(
            2,
            ROOT,
            "Bucket",
            "AWS::S3::Bucket",
            "DELETE_FAILED",
            "The bucket you tried to delete is not empty",
        ),
    ];
    let Outcome::Failed(f) = assess(&o).outcome else {
        panic!("expected a failure")
    };
    assert_eq!(f.resource, "Bucket");
}

#[test]
fn duplicate_events_from_overlapping_pages_count_once() {
    let mut events = success_events();
    events.extend(success_events());
    assert_eq!(current_operation_events(&events).len(), success_events().len());
}

#[test]
fn stack_name_from_arn_takes_the_name() {
    assert_eq!(
        stack_name_from_arn("arn:aws:cloudformation:us-west-2:1:stack/demo-Network-X/abc").as_deref(),
        Some("demo-Network-X")
    );
    assert_eq!(
        stack_name_from_arn("demo-Network-R1QB").as_deref(),
        Some("demo-Network-R1QB")
    );
    assert_eq!(stack_name_from_arn("arn:aws:s3:::bucket"), None);
    assert_eq!(stack_name_from_arn(""), None);
}

#[test]
fn the_closing_line_claims_only_what_status_objects_show() {
    let expected = |names: &[&str]| -> Vec<ExpectedAddon> {
        names
            .iter()
            .map(|n| ExpectedAddon {
                release: n.to_string(),
                wait_condition: Some(format!("Addon{n}")),
                wait_timeout_secs: None,
            })
            .collect()
    };
    let report = |name: &str, phase: AddonPhase| AddonReport {
        release: name.into(),
        phase,
        message: String::new(),
        started_at: None,
        updated_at: None,
    };
    assert_eq!(addons_summary(&[], &[]), "no addons to install");
    let two = expected(&["dex", "metrics-server"]);
    let both = [
        report("dex", AddonPhase::Ready),
        report("metrics-server", AddonPhase::Ready),
    ];
    assert_eq!(
        addons_summary(&two, &both),
        "every addon is ready (2): dex, metrics-server"
    );
    let one = [report("dex", AddonPhase::Ready)];
    assert_eq!(
        addons_summary(&two, &one),
        "1 of 2 addon(s) report ready; not reported ready: metrics-server (pending) (see `kube-aws status`)"
    );
    let installing = [report("dex", AddonPhase::Installing)];
    assert!(addons_summary(&two, &installing).starts_with("0 of 2"));
}

mod nodes;
