use super::*;
use serde_json::json;

/// A root with a network, a control plane and one pool, the shape
/// kube-aws renders: the pool depends on the control plane, both take the
/// subnets from the network's output and the AMI from a root parameter.
fn deployment(cp_user_data: &str, pool_flag: &str, params: &[(&str, &str)], subnets: usize) -> Deployment {
    let node = |prefix: &str, data: &str, size: &str, policy: Value| {
        json!({
            "Parameters": {"SubnetIds": {"Type": "String"}, "ImageId": {"Type": "String"},
                           "SecretsVersion": {"Type": "String"}},
            "Resources": {
                format!("{prefix}Role"): {"Type": "AWS::IAM::Role", "Properties": {"Path": "/", "Policies": [{"x": data}]}},
                format!("{prefix}Profile"): {"Type": "AWS::IAM::InstanceProfile",
                    "Properties": {"Roles": [{"Ref": format!("{prefix}Role")}]}},
                format!("{prefix}LaunchTemplate"): {"Type": LAUNCH_TEMPLATE, "Properties": {"LaunchTemplateData": {
                    "ImageId": {"Ref": "ImageId"},
                    "IamInstanceProfile": {"Arn": {"Fn::GetAtt": [format!("{prefix}Profile"), "Arn"]}},
                    "UserData": {"Fn::Base64": {"Fn::Sub": format!("{data} version ${{SecretsVersion}} ${{AWS::StackName}}")}}}}},
                format!("{prefix}Group"): {"Type": GROUP, "Properties": {
                    "VPCZoneIdentifier": {"Ref": "SubnetIds"},
                    "LaunchTemplate": {"LaunchTemplateId": {"Ref": format!("{prefix}LaunchTemplate")},
                        "Version": {"Fn::GetAtt": [format!("{prefix}LaunchTemplate"), "LatestVersionNumber"]}},
                    "MinSize": size, "MaxSize": size, "DesiredCapacity": size},
                    "UpdatePolicy": policy},
                "AddonPlan": {"Type": "AWS::SSM::Parameter", "Properties": {"Value": data}}
            }
        })
    };
    let rolling = json!({"AutoScalingRollingUpdate": {"MaxBatchSize": "1", "MinInstancesInService": "2"}});
    let subnet_refs: Vec<Value> = (0..subnets).map(|i| json!({"Ref": format!("Subnet{i}")})).collect();
    let mut network = json!({"Resources": {}, "Outputs": {"SubnetIds": {"Value": {"Fn::Join": [",", subnet_refs]}}}});
    for i in 0..subnets {
        network["Resources"][format!("Subnet{i}")] = json!({"Type": "AWS::EC2::Subnet",
            "Properties": {"CidrBlock": format!("10.0.{i}.0/24"), "Tags": [{"Key": "k", "Value": cp_user_data}]}});
    }
    let stack = |url: &str, extra: Value| {
        let mut p = json!({"SubnetIds": {"Fn::GetAtt": ["Network", "Outputs.SubnetIds"]},
                           "ImageId": {"Ref": "ImageIdX86"}});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        json!({"Type": NESTED_STACK, "Properties": {"TemplateURL": {"Fn::Sub": format!("${{ArtifactBaseURL}}/stacks/{url}")},
               "Parameters": p}})
    };
    let mut pool = stack("pool.json", json!({"SecretsVersion": {"Ref": "PoolSecretsVersion"}}));
    pool["DependsOn"] = json!(["ControlPlane"]);
    let root = json!({
        "Parameters": {"ImageIdX86": {"Type": "String"}, "ControlPlaneSecretsVersion": {"Type": "String", "Default": ""},
                       "PoolSecretsVersion": {"Type": "String", "Default": ""}},
        "Resources": {
            "Network": {"Type": NESTED_STACK, "Properties": {"TemplateURL": {"Fn::Sub": "${ArtifactBaseURL}/stacks/network.json"}}},
            "ControlPlane": stack("cp.json", json!({"SecretsVersion": {"Ref": "ControlPlaneSecretsVersion"}})),
            "NodePoolGeneral": pool,
            "AddonX": {"Type": "AWS::CloudFormation::WaitCondition", "DependsOn": ["ControlPlane", "NodePoolGeneral"]}
        }
    });
    let mut p: BTreeMap<String, String> = [("ImageIdX86", "ami-1")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in params {
        p.insert(k.to_string(), v.to_string());
    }
    Deployment {
        root,
        parameters: p,
        nested: [
            ("Network".to_string(), network),
            (
                "ControlPlane".to_string(),
                node("Controller", cp_user_data, "3", rolling.clone()),
            ),
            ("NodePoolGeneral".to_string(), node("Worker", pool_flag, "2", rolling)),
        ]
        .into_iter()
        .collect(),
    }
}

fn base() -> Deployment {
    deployment("cp", "pool", &[], 3)
}

fn said(rolls: &[GroupRoll]) -> Vec<String> {
    rolls
        .iter()
        .map(|r| format!("{}/{} {:?} {}", r.stack, r.group, r.replacement, r.because.join("; ")))
        .collect()
}

#[test]
fn the_same_deployment_rolls_nothing() {
    assert_eq!(group_rolls(&base(), &base()), []);
}

#[test]
fn a_change_outside_launch_templates_and_groups_rolls_nothing() {
    // The addon plan pointer (an SSM parameter) and a wait condition change.
    let mut new = base();
    new.nested.get_mut("ControlPlane").unwrap()["Resources"]["AddonPlan"]["Properties"]["Value"] = json!("plan-2");
    new.root["Resources"]["AddonY"] = json!({"Type": "AWS::CloudFormation::WaitCondition"});
    assert_eq!(group_rolls(&base(), &new), []);
}

#[test]
fn a_node_file_rolls_its_group_only() {
    let new = deployment("cp", "pool-kubelet-flag", &[], 3);
    assert_eq!(
        said(&group_rolls(&base(), &new)),
        ["NodePoolGeneral/WorkerGroup Rolling { batch: 1 } launch template (UserData)"]
    );
}

#[test]
fn a_secret_rotation_rolls_the_groups_whose_version_changed() {
    let new = deployment("cp", "pool", &[("ControlPlaneSecretsVersion", "v2")], 3);
    let rolls = group_rolls(&base(), &new);
    assert_eq!(
        said(&rolls),
        ["ControlPlane/ControllerGroup Rolling { batch: 1 } launch template (UserData)"]
    );
    let three = Size {
        min: 3,
        max: 3,
        desired: Some(3),
    };
    assert_eq!((rolls[0].before, rolls[0].after), (Some(three), Some(three)));
}

#[test]
fn an_ami_change_rolls_every_group_that_uses_it_control_plane_first() {
    let new = deployment("cp", "pool", &[("ImageIdX86", "ami-2")], 3);
    let rolls = group_rolls(&base(), &new);
    assert_eq!(
        said(&rolls),
        [
            "ControlPlane/ControllerGroup Rolling { batch: 1 } launch template (ImageId)",
            "NodePoolGeneral/WorkerGroup Rolling { batch: 1 } launch template (ImageId)"
        ]
    );
    assert!(rolls[0].wave < rolls[1].wave, "{rolls:?}");
}

#[test]
fn a_new_subnet_rolls_every_group_and_a_tag_on_one_rolls_none() {
    let new = deployment("cp", "pool", &[], 4);
    assert_eq!(
        said(&group_rolls(&base(), &new)),
        [
            "ControlPlane/ControllerGroup Rolling { batch: 1 } subnets",
            "NodePoolGeneral/WorkerGroup Rolling { batch: 1 } subnets"
        ]
    );
    // A subnet's tag changes in place: the subnet keeps its ID.
    let mut tagged = base();
    tagged.nested.get_mut("Network").unwrap()["Resources"]["Subnet0"]["Properties"]["Tags"] = json!([]);
    assert_eq!(group_rolls(&base(), &tagged), []);
    // Its CIDR replaces it: a new ID in every group's subnets.
    let mut moved = base();
    moved.nested.get_mut("Network").unwrap()["Resources"]["Subnet0"]["Properties"]["CidrBlock"] = json!("10.1.0.0/24");
    assert_eq!(group_rolls(&base(), &moved).len(), 2);
}

#[test]
fn a_role_policy_changes_in_place_and_rolls_nothing() {
    let mut new = base();
    new.nested.get_mut("ControlPlane").unwrap()["Resources"]["ControllerRole"]["Properties"]["Policies"] =
        json!([{"x": "more"}]);
    assert_eq!(group_rolls(&base(), &new), []);
    // A new instance profile path replaces the profile: the launch
    // template names another ARN.
    let mut path = base();
    path.nested.get_mut("ControlPlane").unwrap()["Resources"]["ControllerProfile"]["Properties"]["Path"] = json!("/x/");
    assert_eq!(
        said(&group_rolls(&base(), &path)),
        ["ControlPlane/ControllerGroup Rolling { batch: 1 } launch template (IamInstanceProfile)"]
    );
}

#[test]
fn a_size_change_replaces_nothing() {
    let mut new = base();
    let g = &mut new.nested.get_mut("ControlPlane").unwrap()["Resources"]["ControllerGroup"]["Properties"];
    for k in ["MinSize", "MaxSize", "DesiredCapacity"] {
        g[k] = json!("5");
    }
    let rolls = group_rolls(&base(), &new);
    assert_eq!(said(&rolls), ["ControlPlane/ControllerGroup None "]);
    assert_eq!(rolls[0].before.unwrap().desired, Some(3));
    assert_eq!(rolls[0].after.unwrap().desired, Some(5));
}

#[test]
fn a_new_pool_and_a_removed_pool() {
    let mut new = base();
    let pool = new.nested["NodePoolGeneral"].clone();
    new.nested.insert("NodePoolGpu".into(), pool);
    new.root["Resources"]["NodePoolGpu"] = new.root["Resources"]["NodePoolGeneral"].clone();
    let rolls = group_rolls(&base(), &new);
    assert_eq!(said(&rolls), ["NodePoolGpu/WorkerGroup None "]);
    assert_eq!((rolls[0].before, rolls[0].after.map(|s| s.min)), (None, Some(2)));
    let rolls = group_rolls(&new, &base());
    assert_eq!((rolls[0].before.map(|s| s.min), rolls[0].after), (Some(2), None));
}

#[test]
fn no_update_policy_keeps_the_running_instances() {
    let mut old = base();
    let mut new = deployment("cp", "pool-2", &[], 3);
    for d in [&mut old, &mut new] {
        d.nested.get_mut("NodePoolGeneral").unwrap()["Resources"]["WorkerGroup"]
            .as_object_mut()
            .unwrap()
            .remove("UpdatePolicy");
    }
    assert_eq!(
        said(&group_rolls(&old, &new)),
        ["NodePoolGeneral/WorkerGroup NotReplaced launch template (UserData)"]
    );
}

#[test]
fn templates_are_found_by_their_path_rendered_or_published() {
    let b = base();
    let root = b.root.to_string().replace("stacks/cp.json", "stacks/0abc/cp.json");
    let files: BTreeMap<String, String> = [
        ("stacks/network.json", &b.nested["Network"]),
        ("stacks/0abc/cp.json", &b.nested["ControlPlane"]),
        ("stacks/pool.json", &b.nested["NodePoolGeneral"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let params: Vec<(String, String)> = b.parameters.clone().into_iter().collect();
    let d = Deployment::from_files(&root, &params, |p| files.get(p).cloned()).unwrap();
    assert_eq!(d.nested, b.nested);
    assert!(Deployment::from_files("not json", &params, |_| None).is_err());
}

#[test]
fn a_cycle_stops() {
    let mut d = base();
    let cp = d.nested.get_mut("ControlPlane").unwrap();
    cp["Resources"]["ControllerRole"]["Properties"]["Path"] = json!({"Ref": "ControllerProfile"});
    cp["Resources"]["ControllerProfile"]["Properties"]["Path"] = json!({"Ref": "ControllerRole"});
    assert_eq!(group_rolls(&d, &d), []);
}
