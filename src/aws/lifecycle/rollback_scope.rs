//! What a failed `update` takes back (issue 28 item 6). The cluster is one
//! root stack whose pools are nested stacks, so CloudFormation updates it as
//! one: when a pool's stack fails (a new node that never signals, no
//! capacity for its type), the root's update fails and CloudFormation rolls
//! every nested stack back, the ones that succeeded included ("Updates to
//! nested stacks": a nested stack's failure rolls back the stack operation of
//! its root). kube-aws keeps that, and says so before asking: docs/deploy.md,
//! "When an update fails", gives the reasons (the root's parameters every
//! node stack shares, the version skew a half-applied update could leave).

use crate::aws::services::stack::Change;

/// The root's logical id prefix of a pool's nested stack (`NodePool<Name>`,
/// src/render/cfn/root.rs).
const POOL_PREFIX: &str = "NodePool";

/// The note `update` prints before it asks, when the change set updates a
/// pool's stack together with anything else (another pool, the control
/// plane, a root resource): a failure of that pool undoes the rest too. None
/// when a failure could only undo the failing pool's own change.
pub fn rollback_notice(changes: &[Change]) -> Option<String> {
    let is_pool = |c: &Change| c.resource_type == "AWS::CloudFormation::Stack" && c.logical_id.starts_with(POOL_PREFIX);
    let pools: Vec<&str> = changes
        .iter()
        // A pool's create fails the same way (a node that never signals);
        // a removed pool's delete runs in the cleanup after the update
        // succeeded, and its failure rolls nothing back.
        .filter(|c| is_pool(c) && matches!(c.action.as_str(), "Modify" | "Add"))
        .map(|c| c.logical_id.as_str())
        .collect();
    if pools.is_empty() || changes.len() < 2 {
        return None;
    }
    let others: Vec<&str> = changes
        .iter()
        .filter(|c| !pools.contains(&c.logical_id.as_str()))
        .map(|c| c.logical_id.as_str())
        .collect();
    let undone = match (pools.len(), others.is_empty()) {
        (1, _) => format!("the other changes ({}) are undone too", others.join(", ")),
        (_, true) => "the other pools are rolled back too".to_string(),
        (_, false) => format!(
            "the other pools are rolled back and the other changes ({}) undone too",
            others.join(", ")
        ),
    };
    Some(format!(
        "note: a failure in {} (a node that never signals, no capacity for its type) rolls back the whole \
         cluster: {undone}, and a pool that already rolled rolls back, replacing its nodes again \
         (docs/deploy.md, \"When an update fails\")",
        pools.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(action: &str, id: &str, ty: &str) -> Change {
        Change {
            action: action.into(),
            logical_id: id.into(),
            resource_type: ty.into(),
            replacement: None,
        }
    }

    const STACK: &str = "AWS::CloudFormation::Stack";

    #[test]
    fn a_pool_with_the_control_plane_names_both() {
        let n = rollback_notice(&[
            change("Modify", "ControlPlane", STACK),
            change("Modify", "NodePoolGeneral", STACK),
        ])
        .unwrap();
        assert!(
            n.starts_with("note: a failure in NodePoolGeneral (a node that never signals"),
            "{n}"
        );
        assert!(
            n.contains("rolls back the whole cluster: the other changes (ControlPlane) are undone too"),
            "{n}"
        );
    }

    #[test]
    fn two_pools_and_a_root_resource() {
        let n = rollback_notice(&[
            change("Modify", "NodePoolA", STACK),
            change("Modify", "NodePoolB", STACK),
            change("Add", "NthQueue", "AWS::SQS::Queue"),
        ])
        .unwrap();
        assert!(n.contains("a failure in NodePoolA, NodePoolB"), "{n}");
        assert!(
            n.contains("the other pools are rolled back and the other changes (NthQueue) undone too"),
            "{n}"
        );
        let n = rollback_notice(&[
            change("Modify", "NodePoolA", STACK),
            change("Modify", "NodePoolB", STACK),
        ])
        .unwrap();
        assert!(n.contains("the other pools are rolled back too,"), "{n}");
    }

    #[test]
    fn nothing_else_to_undo_says_nothing() {
        // One pool alone: its failure undoes only its own change.
        assert_eq!(rollback_notice(&[change("Modify", "NodePoolA", STACK)]), None);
        assert_eq!(rollback_notice(&[change("Add", "NodePoolNew", STACK)]), None);
        // No pool updated or created: a removed pool's delete fails after
        // the update, rolling nothing back.
        assert_eq!(
            rollback_notice(&[
                change("Modify", "ControlPlane", STACK),
                change("Remove", "NodePoolOld", STACK)
            ]),
            None
        );
        // A new pool beside the control plane's change: its create can fail it.
        assert!(rollback_notice(&[
            change("Modify", "ControlPlane", STACK),
            change("Add", "NodePoolNew", STACK)
        ])
        .is_some());
        assert_eq!(rollback_notice(&[]), None);
    }
}
