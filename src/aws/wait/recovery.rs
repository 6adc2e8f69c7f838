//! A stopped update and the one command that continues it, decided from the
//! stack statuses and the latest operation's events (pure: `status`,
//! `update` and the wait's failure all say the same).
//!
//! Two states leave the stack stopped, and each has its own way on:
//! - `UPDATE_FAILED`: the update ran with rollback disabled (kube-aws
//!   disables it for a Kubernetes version change, src/aws/lifecycle/version_change.rs)
//!   and stopped at its first failure; what had succeeded stays. An update
//!   of such a stack is allowed and retries the failed resources ("Choose
//!   how to handle failures when provisioning resources",
//!   https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/stack-failure-options.html):
//!   fix the cause, then `kube-aws update` resumes where it stopped.
//! - `UPDATE_ROLLBACK_FAILED`: the rollback of a failed update failed too.
//!   The stack cannot be updated until `ContinueUpdateRollback` finishes the
//!   rollback; the resources whose rollback failed may be skipped, only
//!   those in `UPDATE_FAILED` because a rollback failed, a nested stack's as
//!   `NestedStackName.ResourceLogicalID` with the nested stack's logical ID
//!   in its parent, never the nested stack resource itself while its stack
//!   is not being deleted (CloudFormation API Reference,
//!   ContinueUpdateRollback `ResourcesToSkip`,
//!   https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html;
//!   "Continue rolling back an update",
//!   https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-continueupdaterollback.html).
//!   A skipped resource is marked `UPDATE_COMPLETE` without being rolled
//!   back, so it no longer matches the template until the next update.

use serde::Serialize;

use crate::aws::wait::{current_operation_events, is_cascade, nested_logical_id, StackEvent, StackState, STACK_TYPE};

/// One resource a stopped update left failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedResource {
    /// "root", or the nested stack's logical ID in the root.
    pub stack: String,
    pub logical_id: String,
    pub resource_type: String,
    pub status: String,
    pub reason: String,
}

impl FailedResource {
    /// Its name in `--resources-to-skip`: `Logical`, or `Nested.Logical`.
    pub fn skip_name(&self) -> String {
        if self.stack == "root" {
            self.logical_id.clone()
        } else {
            format!("{}.{}", self.stack, self.logical_id)
        }
    }

    fn line(&self) -> String {
        let at = if self.stack == "root" {
            self.logical_id.clone()
        } else {
            format!("{}/{}", self.stack, self.logical_id)
        };
        if self.reason.is_empty() {
            format!("{at} ({}) {}", self.resource_type, self.status)
        } else {
            format!("{at} ({}) {}: {}", self.resource_type, self.status, self.reason)
        }
    }
}

/// How a stopped update continues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Recovery {
    /// `UPDATE_FAILED`, rollback disabled: `kube-aws update` resumes.
    UpdateFailed {
        stack: String,
        /// What stopped it, root causes first.
        failed: Vec<FailedResource>,
    },
    /// `UPDATE_ROLLBACK_FAILED`: finish the rollback, skipping `skip`.
    UpdateRollbackFailed {
        stack: String,
        region: String,
        /// What failed the update in the first place.
        failed: Vec<FailedResource>,
        /// The resources whose rollback failed: the ones to skip.
        skip: Vec<FailedResource>,
        /// The command that finishes the rollback.
        command: String,
    },
}

/// The stopped state the root or any nested stack is in; None when the
/// stack is not stopped in either.
pub fn stopped_state<'a>(root_status: &'a str, nested: &'a [StackState]) -> Option<&'a str> {
    let all = || std::iter::once(root_status).chain(nested.iter().map(|n| n.status.as_str()));
    if all().any(|s| s == "UPDATE_ROLLBACK_FAILED") {
        Some("UPDATE_ROLLBACK_FAILED")
    } else if all().any(|s| s == "UPDATE_FAILED") {
        Some("UPDATE_FAILED")
    } else {
        None
    }
}

/// Decides what a stopped update left and how it continues. `stack` is the
/// root stack's name, `nested` the nested stacks by their logical IDs in
/// the root, `events` the root's and the nested stacks' (any order, older
/// operations too). None when neither the root nor a nested stack is in
/// `UPDATE_FAILED` or `UPDATE_ROLLBACK_FAILED`.
pub fn recovery(
    stack: &str,
    region: &str,
    root_status: &str,
    nested: &[StackState],
    events: &[StackEvent],
) -> Option<Recovery> {
    let state = stopped_state(root_status, nested)?;
    let events = current_operation_events(events);
    let stack_of = |e: &StackEvent| {
        if stack_name_matches_root(e, stack) {
            Some("root".to_string())
        } else {
            nested_logical_id(nested, &events, &e.stack_name)
        }
    };
    // The failures of the update itself: before its stack began to roll back.
    let rollback_start = |name: &str| {
        events
            .iter()
            .filter(|e| e.stack_name == name && e.logical_id == name && e.resource_type == STACK_TYPE)
            .filter(|e| e.status.ends_with("ROLLBACK_IN_PROGRESS"))
            .map(|e| e.timestamp)
            .max()
    };
    let mut failed: Vec<FailedResource> = Vec::new();
    let mut skip: Vec<FailedResource> = Vec::new();
    for (i, &e) in events.iter().enumerate() {
        if e.logical_id == e.stack_name || !e.status.ends_with("_FAILED") {
            continue;
        }
        let Some(at) = stack_of(e) else { continue };
        let resource = FailedResource {
            stack: at,
            logical_id: e.logical_id.clone(),
            resource_type: e.resource_type.clone(),
            status: e.status.clone(),
            reason: e.reason.clone().unwrap_or_default(),
        };
        let in_rollback = rollback_start(&e.stack_name).is_some_and(|t| e.timestamp >= t);
        // Only the resource's latest event says what it is now.
        let latest = !events[i + 1..]
            .iter()
            .any(|l| l.stack_name == e.stack_name && l.logical_id == e.logical_id);
        if in_rollback {
            if latest && e.status == "UPDATE_FAILED" && e.resource_type != STACK_TYPE {
                skip.push(resource);
            }
        } else if !is_cascade(e) && (state == "UPDATE_ROLLBACK_FAILED" || latest) {
            failed.push(resource);
        }
    }
    // A nested stack's own failure only points inside it: named when nothing inside is.
    if failed.iter().any(|f| f.resource_type != STACK_TYPE) {
        failed.retain(|f| f.resource_type != STACK_TYPE);
    }
    Some(match state {
        "UPDATE_FAILED" => Recovery::UpdateFailed {
            stack: stack.to_string(),
            failed,
        },
        _ => {
            let mut command =
                format!("aws cloudformation continue-update-rollback --region {region} --stack-name {stack}");
            if !skip.is_empty() {
                command.push_str(" --resources-to-skip");
                for s in &skip {
                    command.push(' ');
                    command.push_str(&s.skip_name());
                }
            }
            Recovery::UpdateRollbackFailed {
                stack: stack.to_string(),
                region: region.to_string(),
                failed,
                skip,
                command,
            }
        }
    })
}

/// A root event carries the root's name; moto and a stack ID may give its ARN.
fn stack_name_matches_root(e: &StackEvent, stack: &str) -> bool {
    crate::aws::wait::stack_name_from_arn(&e.stack_name).as_deref() == Some(stack)
}

impl Recovery {
    /// What `status` and `update` print, one line each.
    pub fn lines(&self) -> Vec<String> {
        let mut out = self.state_lines();
        out.push(match self {
            Recovery::UpdateFailed { .. } => {
                "to continue: fix the cause, then run `kube-aws update`: it resumes where the update stopped"
                    .to_string()
            }
            Recovery::UpdateRollbackFailed { command, .. } => {
                format!("to continue: {command}; then, once the stack is UPDATE_ROLLBACK_COMPLETE, `kube-aws update`")
            }
        });
        out
    }

    /// The state and what failed, without the way on: what the `update`
    /// that resumes a stopped one prints first.
    pub fn state_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            Recovery::UpdateFailed { stack, failed } => {
                out.push(format!(
                    "stack {stack} is UPDATE_FAILED: the update stopped at its first failure with rollback \
                     disabled; what it had done stays (no older control plane is brought back)"
                ));
                for f in failed {
                    out.push(format!("failed: {}", f.line()));
                }
            }
            Recovery::UpdateRollbackFailed {
                stack, failed, skip, ..
            } => {
                out.push(format!(
                    "stack {stack} is UPDATE_ROLLBACK_FAILED: the update failed and so did its rollback; \
                     it cannot be updated until the rollback is finished"
                ));
                for f in failed {
                    out.push(format!("the update failed: {}", f.line()));
                }
                for f in skip {
                    out.push(format!("the rollback failed: {}", f.line()));
                }
                if skip.is_empty() {
                    out.push(
                        "no resource's rollback failure is in the latest events: try the rollback again without \
                         skipping any"
                            .to_string(),
                    );
                } else {
                    out.push(format!(
                        "skipped resources are marked UPDATE_COMPLETE without being rolled back, so they no longer \
                         match the template until the next update: {}",
                        skip.iter()
                            .map(FailedResource::skip_name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
        out
    }

    /// The command to run next.
    pub fn command(&self) -> String {
        match self {
            Recovery::UpdateFailed { .. } => "kube-aws update".to_string(),
            Recovery::UpdateRollbackFailed { command, .. } => command.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
