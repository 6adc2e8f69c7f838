//! The zone count of a new VPC, recorded in the stack when `up` created it
//! (the root stack's `ZoneCount` output, src/render/cfn/root.rs) rather than
//! derived from controller.count at every render: without
//! network.availabilityZones, 1 controller means 2 zones and 3 or 5 mean 3,
//! so scaling the controllers (3 → 1 in an outage) used to add or delete a
//! subnet and roll every group. `update` renders with the record (growing
//! to 3 or more controllers on 2 zones re-spreads them over 3:
//! `config::zone_count_with_record`), and refuses a render (`--use-rendered`,
//! another machine's) that differs.
//! Pure: `update` reads the record with src/aws/lifecycle/deploy.rs `live_record`.

use crate::aws::services::stack::StackInfo;
use crate::aws::AwsError;
use crate::config::ClusterConfig;
use crate::render::cfn::ZONE_COUNT_OUTPUT;

/// The count the live stack records; None for an existing VPC or a stack
/// created before the record existed.
pub fn recorded_zone_count(live: &StackInfo) -> Option<usize> {
    live.outputs
        .iter()
        .find(|o| o.key == ZONE_COUNT_OUTPUT)
        .and_then(|o| o.value.trim().parse().ok())
}

/// The count a rendered root template records.
pub fn rendered_zone_count(root_template: &serde_json::Value) -> Option<usize> {
    root_template["Outputs"][ZONE_COUNT_OUTPUT]["Value"]
        .as_str()
        .and_then(|v| v.trim().parse().ok())
}

/// Refuses a render whose default zones differ from the stack's record
/// (listing network.availabilityZones is how zones change on purpose).
pub fn check_zone_count(
    live: &StackInfo,
    cluster: &ClusterConfig,
    root_template: &serde_json::Value,
) -> Result<(), AwsError> {
    if !cluster.network.availability_zones.is_empty() {
        return Ok(());
    }
    match (recorded_zone_count(live), rendered_zone_count(root_template)) {
        (Some(recorded), Some(rendered))
            if crate::config::zone_count_with_record(recorded, cluster.controller.count) != rendered =>
        {
            Err(AwsError::ZoneCountChanged { recorded, rendered })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(outputs: &[(&str, &str)]) -> StackInfo {
        StackInfo::with_outputs(outputs)
    }

    #[test]
    fn a_render_with_other_default_zones_is_refused() {
        let cluster: ClusterConfig = serde_yaml::from_str(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://b/c\nkmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n",
        )
        .unwrap();
        let three = live(&[("ApiEndpoint", "x"), ("ZoneCount", "3")]);
        assert_eq!(recorded_zone_count(&three), Some(3));
        let two = serde_json::json!({"Outputs": {"ZoneCount": {"Value": "2"}}});
        let err = check_zone_count(&three, &cluster, &two).unwrap_err();
        assert!(err.to_string().contains("3 zones"), "{err}");
        assert!(check_zone_count(
            &three,
            &cluster,
            &serde_json::json!({"Outputs": {"ZoneCount": {"Value": "3"}}})
        )
        .is_ok());
        // A stack from before the record, or an existing VPC: nothing to check.
        assert!(check_zone_count(&live(&[]), &cluster, &two).is_ok());
        assert!(check_zone_count(&three, &cluster, &serde_json::json!({"Outputs": {}})).is_ok());
        // Growing to 3 controllers on a record of 2 zones re-spreads them: 3 is expected, 2 refused.
        let two_zones = live(&[("ZoneCount", "2")]);
        let mut grown = cluster.clone();
        grown.controller.count = 3;
        assert!(check_zone_count(
            &two_zones,
            &grown,
            &serde_json::json!({"Outputs": {"ZoneCount": {"Value": "3"}}})
        )
        .is_ok());
        assert!(check_zone_count(&two_zones, &grown, &two).is_err());
        assert!(check_zone_count(&two_zones, &cluster, &two).is_ok());
        // Zones listed in cluster.yaml change on purpose.
        let mut listed = cluster.clone();
        listed.network.availability_zones = vec!["us-west-2a".into(), "us-west-2b".into()];
        assert!(check_zone_count(&three, &listed, &two).is_ok());
    }
}
