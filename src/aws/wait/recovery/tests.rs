//! Recorded event sequences of stopped updates, written from the
//! CloudFormation documentation (stack status codes, the rollback's events,
//! "Embedded stack … was not successfully updated"). Moto cannot produce
//! them: it has no per-resource events and never fails or rolls back an
//! update.

use super::*;

use crate::aws::wait::tests::{ev, nested_name, state, ROOT};

const ASG: &str = "AWS::AutoScaling::AutoScalingGroup";
const WC: &str = "AWS::CloudFormation::WaitCondition";

/// An earlier update that went well: it must not count.
fn earlier() -> Vec<StackEvent> {
    let cp = nested_name("ControlPlane");
    vec![
        ev(1, ROOT, ROOT, STACK_TYPE, "UPDATE_IN_PROGRESS", "User Initiated"),
        ev(
            2,
            &cp,
            "ControllerGroup",
            ASG,
            "UPDATE_FAILED",
            "an old failure, retried",
        ),
        ev(3, &cp, "ControllerGroup", ASG, "UPDATE_COMPLETE", ""),
        ev(4, ROOT, ROOT, STACK_TYPE, "UPDATE_COMPLETE", ""),
    ]
}

/// The earlier update, then this one's start, down into the control plane.
fn update_started() -> Vec<StackEvent> {
    let cp = nested_name("ControlPlane");
    let mut e = earlier();
    e.extend([
        ev(10, ROOT, ROOT, STACK_TYPE, "UPDATE_IN_PROGRESS", "User Initiated"),
        ev(11, ROOT, "ControlPlane", STACK_TYPE, "UPDATE_IN_PROGRESS", ""),
        ev(12, &cp, &cp, STACK_TYPE, "UPDATE_IN_PROGRESS", ""),
    ]);
    e
}

/// A version change run with rollback disabled: the second controller's
/// boot fails, the control-plane stack stops, the pools' update is cancelled.
fn stopped_upgrade() -> Vec<StackEvent> {
    let cp = nested_name("ControlPlane");
    let mut e = update_started();
    e.extend([
        ev(
            13,
            &cp,
            "ControllerLaunchTemplate",
            "AWS::EC2::LaunchTemplate",
            "UPDATE_COMPLETE",
            "",
        ),
        ev(14, &cp, "ControllerGroup", ASG, "UPDATE_IN_PROGRESS", ""),
        ev(
            15,
            &cp,
            "ControllerGroup",
            ASG,
            "UPDATE_FAILED",
            "Received 1 FAILURE signal(s) out of 1. Unable to satisfy 100% MinSuccessfulInstancesPercent requirement",
        ),
        ev(
            16,
            &cp,
            "EtcdDbSizeAlarm",
            "AWS::CloudWatch::Alarm",
            "UPDATE_FAILED",
            "Resource update cancelled",
        ),
        ev(
            17,
            &cp,
            &cp,
            STACK_TYPE,
            "UPDATE_FAILED",
            "The following resource(s) failed to update: [ControllerGroup].",
        ),
        ev(
            18,
            ROOT,
            "ControlPlane",
            STACK_TYPE,
            "UPDATE_FAILED",
            "Embedded stack arn:aws:cloudformation:… was not successfully updated. Currently in UPDATE_FAILED.",
        ),
        ev(
            19,
            ROOT,
            ROOT,
            STACK_TYPE,
            "UPDATE_FAILED",
            "The following resource(s) failed to update: [ControlPlane].",
        ),
    ]);
    e
}

#[test]
fn an_update_stopped_with_rollback_disabled_resumes_with_kube_aws_update() {
    let nested = [
        state("Network", "UPDATE_COMPLETE"),
        state("ControlPlane", "UPDATE_FAILED"),
    ];
    let r = recovery(ROOT, "us-west-2", "UPDATE_FAILED", &nested, &stopped_upgrade()).unwrap();
    let Recovery::UpdateFailed { stack, failed } = &r else {
        panic!("{r:?}")
    };
    assert_eq!(stack, ROOT);
    // The root cause only: not the cancelled alarm, not the stacks that only point inside.
    assert_eq!(
        failed
            .iter()
            .map(|f| (f.stack.as_str(), f.logical_id.as_str()))
            .collect::<Vec<_>>(),
        [("ControlPlane", "ControllerGroup")]
    );
    assert_eq!(r.command(), "kube-aws update");
    let lines = r.lines();
    assert!(lines[0].starts_with("stack demo is UPDATE_FAILED"), "{lines:?}");
    assert!(
        lines[1].contains("ControlPlane/ControllerGroup (AWS::AutoScaling::AutoScalingGroup) UPDATE_FAILED: Received 1 FAILURE signal"),
        "{lines:?}"
    );
    assert!(lines.last().unwrap().contains("run `kube-aws update`"), "{lines:?}");
    // What the update that resumes it prints first: the same, without the way on.
    assert_eq!(r.state_lines(), lines[..lines.len() - 1]);
}

/// A nested stack stopped while the root has not said so yet is recognised too.
#[test]
fn a_nested_stack_in_update_failed_is_recognised() {
    let nested = [state("ControlPlane", "UPDATE_FAILED")];
    let events: Vec<StackEvent> = stopped_upgrade()
        .into_iter()
        .filter(|e| e.event_id.as_str() < "e18")
        .collect();
    let r = recovery(ROOT, "us-west-2", "UPDATE_IN_PROGRESS", &nested, &events);
    assert!(matches!(r, Some(Recovery::UpdateFailed { .. })), "{r:?}");
    assert_eq!(
        recovery(
            ROOT,
            "us-west-2",
            "UPDATE_COMPLETE",
            &[state("ControlPlane", "UPDATE_COMPLETE")],
            &events
        ),
        None
    );
    assert_eq!(
        recovery(ROOT, "us-west-2", "UPDATE_ROLLBACK_COMPLETE", &[], &events),
        None
    );
}

/// An update that rolled back, and whose rollback failed: the controller
/// group could not go back (old-version controllers refused to join), and a
/// root resource failed to roll back as well.
fn failed_rollback() -> Vec<StackEvent> {
    let cp = nested_name("ControlPlane");
    let mut e = update_started();
    e.extend([
        ev(13, &cp, "ControllerGroup", ASG, "UPDATE_IN_PROGRESS", ""),
        ev(14, &cp, "ControllerGroup", ASG, "UPDATE_COMPLETE", ""),
        ev(15, ROOT, "ControlPlane", STACK_TYPE, "UPDATE_COMPLETE", ""),
        ev(16, ROOT, "AddonDexReady", WC, "UPDATE_FAILED", "WaitCondition received failed message: 'timed out' for uniqueId: dex"),
        ev(17, ROOT, ROOT, STACK_TYPE, "UPDATE_ROLLBACK_IN_PROGRESS", "The following resource(s) failed to update: [AddonDexReady]."),
        ev(18, ROOT, "ControlPlane", STACK_TYPE, "UPDATE_IN_PROGRESS", ""),
        ev(19, &cp, &cp, STACK_TYPE, "UPDATE_ROLLBACK_IN_PROGRESS", ""),
        ev(20, &cp, "ControllerGroup", ASG, "UPDATE_IN_PROGRESS", ""),
        ev(21, &cp, "ControllerGroup", ASG, "UPDATE_FAILED", "Received 1 FAILURE signal(s) out of 1."),
        ev(22, &cp, &cp, STACK_TYPE, "UPDATE_ROLLBACK_FAILED", "The following resource(s) failed to update: [ControllerGroup]."),
        ev(
            23,
            ROOT,
            "ControlPlane",
            STACK_TYPE,
            "UPDATE_FAILED",
            "Embedded stack arn:aws:cloudformation:… was not successfully updated. Currently in UPDATE_ROLLBACK_FAILED.",
        ),
        ev(24, ROOT, "PlanPointer", "AWS::SSM::Parameter", "UPDATE_FAILED", "Parameter was deleted outside CloudFormation"),
        ev(25, ROOT, ROOT, STACK_TYPE, "UPDATE_ROLLBACK_FAILED", "The following resource(s) failed to update: [ControlPlane, PlanPointer]."),
    ]);
    e
}

#[test]
fn a_failed_rollback_names_the_resources_to_skip_nested_ones_by_their_parents_logical_id() {
    let nested = [
        state("Network", "UPDATE_COMPLETE"),
        state("ControlPlane", "UPDATE_ROLLBACK_FAILED"),
    ];
    let r = recovery(ROOT, "eu-west-1", "UPDATE_ROLLBACK_FAILED", &nested, &failed_rollback()).unwrap();
    assert_eq!(
        r.command(),
        "aws cloudformation continue-update-rollback --region eu-west-1 --stack-name demo \
         --resources-to-skip ControlPlane.ControllerGroup PlanPointer"
    );
    let Recovery::UpdateRollbackFailed { failed, skip, .. } = &r else {
        panic!("{r:?}")
    };
    // The update's own failure; the nested stack resource is never skipped itself.
    assert_eq!(
        failed.iter().map(|f| f.logical_id.as_str()).collect::<Vec<_>>(),
        ["AddonDexReady"]
    );
    assert_eq!(
        skip.iter().map(FailedResource::skip_name).collect::<Vec<_>>(),
        ["ControlPlane.ControllerGroup", "PlanPointer"]
    );
    let text = r.lines().join("\n");
    assert!(text.contains("stack demo is UPDATE_ROLLBACK_FAILED"), "{text}");
    assert!(
        text.contains("the update failed: AddonDexReady (AWS::CloudFormation::WaitCondition)"),
        "{text}"
    );
    assert!(
        text.contains("the rollback failed: ControlPlane/ControllerGroup (AWS::AutoScaling::AutoScalingGroup) UPDATE_FAILED: Received 1 FAILURE signal"),
        "{text}"
    );
    assert!(
        text.contains("to continue: aws cloudformation continue-update-rollback"),
        "{text}"
    );
}

/// A resource that failed to roll back and then rolled back on a retry of
/// the rollback is no longer one to skip.
#[test]
fn a_resource_rolled_back_on_a_retry_is_not_skipped() {
    let mut events = failed_rollback();
    events.push(ev(
        30,
        ROOT,
        "PlanPointer",
        "AWS::SSM::Parameter",
        "UPDATE_COMPLETE",
        "",
    ));
    let nested = [state("ControlPlane", "UPDATE_ROLLBACK_FAILED")];
    let r = recovery(ROOT, "eu-west-1", "UPDATE_ROLLBACK_FAILED", &nested, &events).unwrap();
    assert!(
        r.command()
            .ends_with("--resources-to-skip ControlPlane.ControllerGroup"),
        "{}",
        r.command()
    );
}

/// Events that do not reach the rollback's failures: the command skips
/// nothing, and says so.
#[test]
fn without_the_rollbacks_events_nothing_is_skipped() {
    let r = recovery(ROOT, "us-west-2", "UPDATE_ROLLBACK_FAILED", &[], &[]).unwrap();
    assert_eq!(
        r.command(),
        "aws cloudformation continue-update-rollback --region us-west-2 --stack-name demo"
    );
    assert!(r.lines().join("\n").contains("without skipping any"));
}

#[test]
fn the_rollback_failure_wins_over_an_update_failure() {
    assert_eq!(
        stopped_state("UPDATE_FAILED", &[state("A", "UPDATE_ROLLBACK_FAILED")]),
        Some("UPDATE_ROLLBACK_FAILED")
    );
    assert_eq!(
        stopped_state("UPDATE_COMPLETE", &[state("A", "UPDATE_FAILED")]),
        Some("UPDATE_FAILED")
    );
    assert_eq!(stopped_state("UPDATE_ROLLBACK_COMPLETE", &[]), None);
}
