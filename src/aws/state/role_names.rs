//! How the stack names its service-account roles, recorded in the root stack
//! when `up` created it (the `RoleNames` output, src/render/cfn/root.rs): IAM
//! role names are global to the account, so a new cluster's names carry the
//! region (src/irsa.rs `RoleNames`), and a stack created before that keeps
//! its names, because renaming a role replaces it and a running pod keeps
//! the old ARN in its environment until it restarts. `update` renders with
//! the record and refuses a render (`--use-rendered`, another machine's)
//! that names the roles otherwise.
//! Pure: `update` reads the record with src/aws/lifecycle/deploy.rs `live_record`.

use crate::aws::services::stack::StackInfo;
use crate::aws::AwsError;
use crate::irsa::{RoleNames, ROLE_NAMES_OUTPUT};

/// The scheme the live stack records: the output's, or [`RoleNames::Cluster`]
/// for a stack created before the record; an unknown value is refused.
pub fn recorded_role_names(live: &StackInfo) -> Result<RoleNames, AwsError> {
    match live.outputs.iter().find(|o| o.key == ROLE_NAMES_OUTPUT) {
        None => Ok(RoleNames::Cluster),
        Some(o) => RoleNames::parse(&o.value).ok_or_else(|| AwsError::UnknownRoleNames {
            stack: live.name.clone(),
            value: o.value.clone(),
        }),
    }
}

/// The scheme a rendered root template records.
pub fn rendered_role_names(root_template: &serde_json::Value) -> Option<RoleNames> {
    root_template["Outputs"][ROLE_NAMES_OUTPUT]["Value"]
        .as_str()
        .and_then(RoleNames::parse)
}

/// Refuses a render whose role names differ from the stack's record.
pub fn check_role_names(live: &StackInfo, root_template: &serde_json::Value) -> Result<(), AwsError> {
    let recorded = recorded_role_names(live)?;
    match rendered_role_names(root_template) {
        Some(rendered) if rendered != recorded => Err(AwsError::RoleNamesChanged {
            recorded: recorded.as_str(),
            rendered: rendered.as_str(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(outputs: &[(&str, &str)]) -> StackInfo {
        StackInfo::with_outputs(outputs)
    }

    fn root(value: &str) -> serde_json::Value {
        serde_json::json!({"Outputs": {"RoleNames": {"Value": value}}})
    }

    #[test]
    fn a_stack_without_the_record_keeps_the_names_it_has() {
        assert_eq!(
            recorded_role_names(&live(&[("ApiEndpoint", "x")])).unwrap(),
            RoleNames::Cluster
        );
        let regional = live(&[("RoleNames", RoleNames::Regional.as_str())]);
        assert_eq!(recorded_role_names(&regional).unwrap(), RoleNames::Regional);
        let newer = recorded_role_names(&live(&[("RoleNames", "something-newer")])).unwrap_err();
        assert!(newer.to_string().contains("\"something-newer\""), "{newer}");
    }

    #[test]
    fn a_render_that_renames_the_roles_is_refused() {
        let old = live(&[]);
        assert!(check_role_names(&old, &root(RoleNames::Cluster.as_str())).is_ok());
        let e = check_role_names(&old, &root(RoleNames::Regional.as_str())).unwrap_err();
        assert!(matches!(e, AwsError::RoleNamesChanged { .. }), "{e}");
        assert!(e.to_string().contains("without --use-rendered"), "{e}");
        // A template without the record (an older render) is not refused here.
        assert!(check_role_names(&old, &serde_json::json!({})).is_ok());
    }
}
