//! The termination handler's managed tag on instances that already run.
//! aws-node-termination-handler drains only instances carrying its managed
//! tag (`aws-node-termination-handler/<cluster>`; its queue processor checks
//! it before draining, pkg/monitor/sqsevent/sqs-monitor.go at v1.25.6), and a
//! group gives its tags to the instances it launches (`PropagateAtLaunch`),
//! never to those already running. So when `update` turns the handler on for
//! a pool, its group gets the termination hook, and the instances that ran
//! before would be held by the hook for its whole timeout and then
//! terminated undrained. Once the update is confirmed, and before its change
//! set runs, `update` tags those instances (EC2 CreateTags): the groups of
//! the new templates whose tags carry the managed tag, found by their
//! physical names in the live stacks, each running instance without it.
//! Idempotent: an update that stopped halfway tags the rest next time.
//! [`tag_targets`] and [`untagged`] are pure.

use serde_json::Value;

use crate::aws::lifecycle::rolls::Deployment;
use crate::plugin::hooks::NTH_MANAGED_TAG_PREFIX;

const GROUP: &str = "AWS::AutoScaling::AutoScalingGroup";

/// A group whose instances must carry the handler's managed tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagTarget {
    /// The root's logical ID of its nested stack ("" for a group of the root).
    pub stack: String,
    /// Its logical ID in that stack.
    pub group: String,
    pub key: String,
    pub value: String,
}

/// The groups of `new` that propagate the handler's managed tag at launch.
pub fn tag_targets(new: &Deployment) -> Vec<TagTarget> {
    let root = String::new();
    let stacks = std::iter::once((&root, &new.root)).chain(new.nested.iter());
    let mut out = Vec::new();
    for (stack, template) in stacks {
        for (id, r) in template["Resources"].as_object().into_iter().flatten() {
            if r["Type"] != GROUP {
                continue;
            }
            for t in r["Properties"]["Tags"].as_array().into_iter().flatten() {
                let (Some(key), Some(value)) = (t["Key"].as_str(), t["Value"].as_str()) else {
                    continue;
                };
                if key.starts_with(NTH_MANAGED_TAG_PREFIX) && t["PropagateAtLaunch"] == Value::Bool(true) {
                    out.push(TagTarget {
                        stack: stack.clone(),
                        group: id.clone(),
                        key: key.to_string(),
                        value: value.to_string(),
                    });
                }
            }
        }
    }
    out
}

/// A running (or starting) instance of a group, with its tag keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInstance {
    pub instance_id: String,
    /// Its `aws:autoscaling:groupName` tag.
    pub group_name: String,
    pub tag_keys: Vec<String>,
}

/// The instances of `group_name` that lack `key`, sorted.
pub fn untagged(instances: &[GroupInstance], group_name: &str, key: &str) -> Vec<String> {
    let mut ids: Vec<String> = instances
        .iter()
        .filter(|i| i.group_name == group_name && !i.tag_keys.iter().any(|k| k == key))
        .map(|i| i.instance_id.clone())
        .collect();
    ids.sort();
    ids
}

/// Instances tagged in one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tagged {
    pub group_name: String,
    pub key: String,
    pub instances: Vec<String>,
}

impl std::fmt::Display for Tagged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tagged {} running instance(s) of {} with {} (the termination handler drains only tagged instances): {}",
            self.instances.len(),
            self.group_name,
            self.key,
            self.instances.join(", ")
        )
    }
}

#[cfg(feature = "nodes")]
mod calls {
    use super::*;
    use crate::aws::publish::Published;
    use crate::aws::services::stack;
    use crate::aws::{AwsError, Clients};

    /// Tags the running instances of `stack_name`'s groups that the
    /// published templates give the handler's managed tag and that lack it.
    pub async fn tag_running_instances(
        clients: &Clients,
        stack_name: &str,
        published: &Published,
    ) -> Result<Vec<Tagged>, AwsError> {
        let new = Deployment::from_files(&published.root_template_body, &published.parameters, |path| {
            published.stack_templates.get(path).cloned()
        })
        .map_err(crate::aws::error::RenderedError::from)?;
        let targets = tag_targets(&new);
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        // The live groups' physical names, by (nested stack, logical ID).
        let mut names: std::collections::BTreeMap<(String, String), String> = Default::default();
        let root = stack::stack_resources(clients, stack_name).await?;
        for r in &root {
            if r.resource_type == GROUP && !r.physical_id.is_empty() {
                names.insert((String::new(), r.logical_id.clone()), r.physical_id.clone());
            }
        }
        for n in root.iter().filter(|r| r.resource_type == "AWS::CloudFormation::Stack") {
            if n.physical_id.is_empty() || !targets.iter().any(|t| t.stack == n.logical_id) {
                continue;
            }
            for r in stack::stack_resources(clients, &n.physical_id).await? {
                if r.resource_type == GROUP && !r.physical_id.is_empty() {
                    names.insert((n.logical_id.clone(), r.logical_id), r.physical_id);
                }
            }
        }
        let groups: Vec<(&TagTarget, &String)> = targets
            .iter()
            .filter_map(|t| Some((t, names.get(&(t.stack.clone(), t.group.clone()))?)))
            .collect();
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let instances = group_instances(clients, groups.iter().map(|(_, n)| n.as_str())).await?;
        let mut out = Vec::new();
        for (t, name) in groups {
            let ids = untagged(&instances, name, &t.key);
            if ids.is_empty() {
                continue;
            }
            clients
                .ec2
                .create_tags()
                .set_resources(Some(ids.clone()))
                .tags(aws_sdk_ec2::types::Tag::builder().key(&t.key).value(&t.value).build())
                .send()
                .await
                .map_err(|e| crate::aws::sdk_error("ec2:CreateTags", e))?;
            out.push(Tagged {
                group_name: name.clone(),
                key: t.key.clone(),
                instances: ids,
            });
        }
        Ok(out)
    }

    /// The pending and running instances of the named groups.
    async fn group_instances<'a>(
        clients: &Clients,
        names: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<GroupInstance>, AwsError> {
        use aws_sdk_ec2::types::Filter;
        let filters = vec![
            Filter::builder()
                .name("tag:aws:autoscaling:groupName")
                .set_values(Some(names.map(str::to_string).collect()))
                .build(),
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .build(),
        ];
        Ok(crate::aws::state::nodes::instances_matching(clients, filters)
            .await?
            .iter()
            .map(|i| GroupInstance {
                instance_id: i.instance_id().unwrap_or_default().to_string(),
                group_name: crate::aws::state::nodes::tag_of(i, "aws:autoscaling:groupName"),
                tag_keys: i.tags().iter().filter_map(|t| t.key().map(str::to_string)).collect(),
            })
            .collect())
    }
}

#[cfg(feature = "nodes")]
pub use calls::tag_running_instances;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn group(tags: Value) -> Value {
        json!({"Type": GROUP, "Properties": {"Tags": tags}})
    }

    #[test]
    fn only_groups_that_propagate_the_managed_tag_are_targets() {
        let tag = "aws-node-termination-handler/demo";
        let new = Deployment {
            root: json!({"Resources": {"NodePoolGeneral": {"Type": "AWS::CloudFormation::Stack"}}}),
            parameters: Default::default(),
            nested: [(
                "NodePoolGeneral".to_string(),
                json!({"Resources": {
                    "Workers": group(json!([{"Key": "Name", "Value": "demo-worker", "PropagateAtLaunch": true},
                                            {"Key": tag, "Value": "owned", "PropagateAtLaunch": true}])),
                    "Batch": group(json!([{"Key": tag, "Value": "owned", "PropagateAtLaunch": false}])),
                    "Other": group(json!([{"Key": "k8s.io/cluster-autoscaler/enabled", "Value": "true", "PropagateAtLaunch": false}])),
                    "Queue": {"Type": "AWS::SQS::Queue"}
                }}),
            )]
            .into_iter()
            .collect(),
        };
        assert_eq!(
            tag_targets(&new),
            [TagTarget {
                stack: "NodePoolGeneral".into(),
                group: "Workers".into(),
                key: tag.into(),
                value: "owned".into()
            }]
        );
    }

    #[test]
    fn instances_already_tagged_or_of_other_groups_are_left_alone() {
        let i = |id: &str, g: &str, keys: &[&str]| GroupInstance {
            instance_id: id.into(),
            group_name: g.into(),
            tag_keys: keys.iter().map(|k| k.to_string()).collect(),
        };
        let key = "aws-node-termination-handler/demo";
        let instances = [
            i("i-3", "g1", &["Name"]),
            i("i-1", "g1", &["Name"]),
            i("i-2", "g1", &["Name", key]),
            i("i-4", "g2", &["Name"]),
        ];
        assert_eq!(untagged(&instances, "g1", key), ["i-1", "i-3"]);
        assert!(untagged(&instances, "g3", key).is_empty());
    }
}
