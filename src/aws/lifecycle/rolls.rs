//! Which Auto Scaling groups an update rolls, and how many instances each:
//! decided from the templates alone (the deployed root and nested templates
//! with their parameters, against the ones about to be deployed). Pure; the
//! preview's words are src/aws/lifecycle/update_order.rs's.
//!
//! CloudFormation replaces a group's instances under its
//! `AutoScalingRollingUpdate` policy when the update changes the group's
//! `LaunchTemplate` (a changed launch template gets a new
//! `LatestVersionNumber`), `LaunchConfigurationName`, `MixedInstancesPolicy`,
//! `VPCZoneIdentifier` or `PlacementGroup` ("UpdatePolicy attribute",
//! https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-updatepolicy.html).
//! A change of size alone launches or terminates the difference and replaces
//! nothing.
//!
//! So each of those properties is resolved, on both sides, down to what
//! CloudFormation would pass: a `Ref` to a parameter becomes its value (a
//! nested stack's parameter the root's expression for it, resolved in turn; a
//! root parameter the value the stack gets); `Fn::GetAtt` of a nested stack's
//! output becomes that output's expression, resolved in the nested stack; a
//! `Ref` or `Fn::GetAtt` of a resource becomes the resource's identity, which
//! changes only when the resource would be replaced (its create-only
//! properties, [`CREATE_ONLY`]; every property for a type not listed), except
//! a launch template's version numbers, which change with its
//! `LaunchTemplateData`. Two sides that resolve alike roll nothing, whatever
//! else changed in the text (an addon's wait condition, a plan pointer).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value};

mod resolve;
use resolve::{sub_vars, Resolver};

const GROUP: &str = "AWS::AutoScaling::AutoScalingGroup";
const LAUNCH_TEMPLATE: &str = "AWS::EC2::LaunchTemplate";
const NESTED_STACK: &str = "AWS::CloudFormation::Stack";

/// The group properties whose change replaces its instances (see the module doc).
pub const ROLLING_PROPERTIES: &[&str] = &[
    "LaunchTemplate",
    "LaunchConfigurationName",
    "MixedInstancesPolicy",
    "VPCZoneIdentifier",
    "PlacementGroup",
];

/// Per resource type, the properties whose change replaces the resource (a
/// new physical ID): "Update requires: Replacement" in each type's
/// CloudFormation reference. A type not listed is taken to be replaced by any
/// change of its properties (the cautious reading: it may roll a group that
/// names it).
pub const CREATE_ONLY: &[(&str, &[&str])] = &[
    ("AWS::EC2::VPC", &["CidrBlock", "Ipv4IpamPoolId", "Ipv4NetmaskLength"]),
    (
        "AWS::EC2::Subnet",
        &[
            "AvailabilityZone",
            "AvailabilityZoneId",
            "CidrBlock",
            "VpcId",
            "OutpostArn",
        ],
    ),
    ("AWS::EC2::SecurityGroup", &["GroupDescription", "GroupName", "VpcId"]),
    ("AWS::IAM::Role", &["RoleName", "Path"]),
    ("AWS::IAM::InstanceProfile", &["InstanceProfileName", "Path"]),
    ("AWS::IAM::Policy", &[]),
    ("AWS::ElasticLoadBalancingV2::LoadBalancer", &["Name", "Scheme", "Type"]),
    (
        "AWS::ElasticLoadBalancingV2::TargetGroup",
        &[
            "Name",
            "Port",
            "Protocol",
            "ProtocolVersion",
            "TargetType",
            "VpcId",
            "IpAddressType",
        ],
    ),
    (LAUNCH_TEMPLATE, &["LaunchTemplateName"]),
    (GROUP, &["AutoScalingGroupName"]),
    ("AWS::SSM::Parameter", &["Name"]),
    ("AWS::SNS::Topic", &["TopicName", "FifoTopic"]),
];

/// A deployed (or about to be deployed) cluster, as templates: the root, its
/// parameters' values, and each nested stack's template by the root's
/// logical ID for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Deployment {
    pub root: Value,
    pub parameters: BTreeMap<String, String>,
    pub nested: BTreeMap<String, Value>,
}

/// A template that is not JSON.
#[derive(Debug, thiserror::Error)]
#[error("{which}: not a JSON template: {detail}")]
pub struct TemplateError {
    pub which: String,
    pub detail: String,
}

fn parse(which: &str, body: &str) -> Result<Value, TemplateError> {
    serde_json::from_str(body).map_err(|e| TemplateError {
        which: which.to_string(),
        detail: e.to_string(),
    })
}

impl Deployment {
    /// The live side: the root template, the stack's parameters, and each
    /// nested stack's template (GetTemplate), by logical ID.
    pub fn from_live(
        root: &str,
        parameters: &[(String, String)],
        nested: &BTreeMap<String, String>,
    ) -> Result<Deployment, TemplateError> {
        Ok(Deployment {
            root: parse("the live root template", root)?,
            parameters: parameters.iter().cloned().collect(),
            nested: nested
                .iter()
                .map(|(id, body)| Ok((id.clone(), parse(&format!("the live template of {id}"), body)?)))
                .collect::<Result<_, TemplateError>>()?,
        })
    }

    /// The new side: the root template, its parameters, and `body(path)`, the
    /// template a nested stack's `TemplateURL` names by its path under the
    /// artifact base (`stacks/<sha256>/network.json` once published,
    /// `stacks/network.json` as rendered). A nested stack whose template is
    /// not found is left out (its groups then read as added or removed).
    pub fn from_files(
        root: &str,
        parameters: &[(String, String)],
        body: impl Fn(&str) -> Option<String>,
    ) -> Result<Deployment, TemplateError> {
        let root = parse("the root template", root)?;
        let mut nested = BTreeMap::new();
        for (id, r) in resources(&root) {
            if r["Type"] != NESTED_STACK {
                continue;
            }
            let Some(path) = template_path(&r["Properties"]["TemplateURL"]) else {
                continue;
            };
            if let Some(text) = body(&path) {
                nested.insert(id.clone(), parse(&path, &text)?);
            }
        }
        Ok(Deployment {
            root,
            parameters: parameters.iter().cloned().collect(),
            nested,
        })
    }
}

/// `stacks/x.json` of `{"Fn::Sub": "${ArtifactBaseURL}/stacks/x.json"}` (or of a plain URL).
fn template_path(url: &Value) -> Option<String> {
    let s = url.get("Fn::Sub").and_then(Value::as_str).or_else(|| url.as_str())?;
    let i = s.find("stacks/")?;
    Some(s[i..].to_string())
}

fn resources(t: &Value) -> impl Iterator<Item = (&String, &Value)> {
    t["Resources"].as_object().into_iter().flatten()
}

/// How a group's instances are replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Replacement {
    /// Nothing is replaced (a change of size, or a new or removed group).
    None,
    /// `AutoScalingRollingUpdate`: `batch` at a time.
    Rolling { batch: u64 },
    /// `AutoScalingReplacingUpdate` with `WillReplace`: a new group, then the old one deleted.
    NewGroup,
    /// The launch template changes but the group has no update policy: the
    /// running instances stay as they are, only new ones get it.
    NotReplaced,
}

/// A group's size: `DesiredCapacity` when the template sets it, else
/// anywhere from `MinSize` to `MaxSize` (what the cluster-autoscaler chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Size {
    pub min: u64,
    pub max: u64,
    pub desired: Option<u64>,
}

/// What an update does to one Auto Scaling group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupRoll {
    /// The root's logical ID of the nested stack ("" for a group of the root).
    pub stack: String,
    /// The group's logical ID in that stack.
    pub group: String,
    /// Its place in the update: CloudFormation updates a stack after those it
    /// depends on (`DependsOn`, `Ref`, `Fn::GetAtt`); equal waves run side by side.
    pub wave: usize,
    /// Its size before (None: a new group) and after (None: removed).
    pub before: Option<Size>,
    pub after: Option<Size>,
    pub replacement: Replacement,
    /// Why its instances are replaced: `launch template (ImageId, UserData)`, `subnets`, ….
    pub because: Vec<String>,
}

/// The groups an update from `old` to `new` changes, in the order
/// CloudFormation updates them; an untouched group is not listed.
pub fn group_rolls(old: &Deployment, new: &Deployment) -> Vec<GroupRoll> {
    let (o, n) = (Resolver::new(old), Resolver::new(new));
    let waves = stack_waves(&new.root);
    let old_waves = stack_waves(&old.root);
    let mut keys: BTreeSet<(String, String)> = BTreeSet::new();
    keys.extend(o.groups());
    keys.extend(n.groups());
    let mut out = Vec::new();
    for (stack, group) in keys {
        let before = o.group(&stack, &group);
        let after = n.group(&stack, &group);
        let wave = waves
            .get(&stack)
            .or_else(|| old_waves.get(&stack))
            .copied()
            .unwrap_or_default();
        let mut roll = GroupRoll {
            stack: stack.clone(),
            group: group.clone(),
            wave,
            before: before.map(|g| o.size(&stack, g)),
            after: after.map(|g| n.size(&stack, g)),
            replacement: Replacement::None,
            because: Vec::new(),
        };
        if let (Some(bg), Some(ag)) = (before, after) {
            if o.identity(&stack, &group) != n.identity(&stack, &group) {
                roll.replacement = Replacement::NewGroup;
                roll.because.push("the group itself is replaced".into());
            } else {
                roll.because = rolling_changes(&o, &n, &stack, bg, ag);
                if !roll.because.is_empty() {
                    roll.replacement = policy(ag);
                }
            }
            if roll.because.is_empty() && roll.before == roll.after {
                continue;
            }
        }
        out.push(roll);
    }
    out.sort_by(|a, b| (a.wave, &a.stack, &a.group).cmp(&(b.wave, &b.stack, &b.group)));
    out
}

/// The properties of [`ROLLING_PROPERTIES`] that resolve differently, in words.
fn rolling_changes(o: &Resolver, n: &Resolver, stack: &str, bg: &Value, ag: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in ROLLING_PROPERTIES {
        let (a, b) = (
            o.resolve(stack, &bg["Properties"][*p]),
            n.resolve(stack, &ag["Properties"][*p]),
        );
        if a == b {
            continue;
        }
        out.push(match *p {
            "LaunchTemplate" => {
                let fields = launch_template_fields(o, n, stack, bg, ag);
                if fields.is_empty() {
                    "launch template".to_string()
                } else {
                    format!("launch template ({})", fields.join(", "))
                }
            }
            "VPCZoneIdentifier" => "subnets".to_string(),
            other => other.to_string(),
        });
    }
    out
}

/// The `LaunchTemplateData` fields that resolve differently, for the launch
/// template the group names by `Ref`.
fn launch_template_fields(o: &Resolver, n: &Resolver, stack: &str, bg: &Value, ag: &Value) -> Vec<String> {
    let lt = |g: &Value| {
        g["Properties"]["LaunchTemplate"]["LaunchTemplateId"]["Ref"]
            .as_str()
            .map(str::to_string)
    };
    let (Some(a), Some(b)) = (lt(bg), lt(ag)) else {
        return Vec::new();
    };
    let data = |r: &Resolver, id: &str| -> Map<String, Value> {
        let t = r.template(stack);
        match r.resolve(stack, &t["Resources"][id]["Properties"]["LaunchTemplateData"]) {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    };
    let (da, db) = (data(o, &a), data(n, &b));
    let mut keys: Vec<&String> = da.keys().chain(db.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter().filter(|k| da.get(*k) != db.get(*k)).cloned().collect()
}

fn policy(group: &Value) -> Replacement {
    let p = &group["UpdatePolicy"];
    if matches!(&p["AutoScalingReplacingUpdate"]["WillReplace"], Value::Bool(true))
        || p["AutoScalingReplacingUpdate"]["WillReplace"] == "true"
    {
        return Replacement::NewGroup;
    }
    match p.get("AutoScalingRollingUpdate") {
        // MaxBatchSize defaults to 1 (the UpdatePolicy attribute's reference).
        Some(r) => Replacement::Rolling {
            batch: number(&r["MaxBatchSize"]).unwrap_or(1).max(1),
        },
        None => Replacement::NotReplaced,
    }
}

fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Each root resource's wave: 0 for one that depends on no other, else one
/// more than the latest it depends on (`DependsOn`, or a `Ref`/`Fn::GetAtt`/`${…}`
/// naming it in its properties).
fn stack_waves(root: &Value) -> BTreeMap<String, usize> {
    let ids: BTreeSet<String> = resources(root).map(|(k, _)| k.clone()).collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (id, r) in resources(root) {
        let mut d = BTreeSet::new();
        match &r["DependsOn"] {
            Value::String(s) => {
                d.insert(s.clone());
            }
            Value::Array(a) => d.extend(a.iter().filter_map(|x| x.as_str().map(str::to_string))),
            _ => {}
        }
        names_in(&r["Properties"], &mut d);
        d.retain(|x| ids.contains(x) && x != id);
        deps.insert(id.clone(), d);
    }
    let mut waves: BTreeMap<String, usize> = BTreeMap::new();
    // Longest path, by relaxation (a cycle, which CloudFormation refuses, stops at |ids| rounds).
    for _ in 0..=ids.len() {
        let mut changed = false;
        for (id, d) in &deps {
            let w = d
                .iter()
                .map(|x| waves.get(x).copied().unwrap_or(0) + 1)
                .max()
                .unwrap_or(0);
            if waves.get(id) != Some(&w) {
                waves.insert(id.clone(), w);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    waves
}

/// The logical names a value refers to (`Ref`, `Fn::GetAtt`, `${X}` / `${X.Y}` in `Fn::Sub`).
fn names_in(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("Ref") {
                out.insert(r.clone());
            }
            match m.get("Fn::GetAtt") {
                Some(Value::Array(a)) => {
                    if let Some(r) = a.first().and_then(Value::as_str) {
                        out.insert(r.to_string());
                    }
                }
                Some(Value::String(s)) => {
                    out.insert(s.split('.').next().unwrap_or_default().to_string());
                }
                _ => {}
            }
            let sub = match m.get("Fn::Sub") {
                Some(Value::String(s)) => Some(s.as_str()),
                Some(Value::Array(a)) => a.first().and_then(Value::as_str),
                _ => None,
            };
            for var in sub.map(sub_vars).unwrap_or_default() {
                out.insert(var.split('.').next().unwrap_or_default().to_string());
            }
            m.values().for_each(|x| names_in(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| names_in(x, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
