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

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{json, Map, Value};

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

/// The variables of an `Fn::Sub` string (`${X}`, `${X.Y}`; `${!X}` is a literal).
fn sub_vars(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        rest = &rest[i + 2..];
        let Some(j) = rest.find('}') else { break };
        let var = &rest[..j];
        if !var.starts_with('!') {
            out.push(var.trim().to_string());
        }
        rest = &rest[j + 1..];
    }
    out
}

/// Resolves values of one deployment (see the module doc). `stack` is a
/// nested stack's root logical ID, "" for the root.
struct Resolver<'a> {
    d: &'a Deployment,
    /// What is being resolved, to stop on a cycle (which CloudFormation refuses).
    visiting: RefCell<BTreeSet<(String, String)>>,
}

const ROOT: &str = "";

impl<'a> Resolver<'a> {
    fn new(d: &'a Deployment) -> Self {
        Resolver {
            d,
            visiting: RefCell::new(BTreeSet::new()),
        }
    }

    fn template(&self, stack: &str) -> &'a Value {
        if stack == ROOT {
            &self.d.root
        } else {
            self.d.nested.get(stack).unwrap_or(&Value::Null)
        }
    }

    /// Every group: (stack, logical ID).
    fn groups(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for stack in std::iter::once(ROOT).chain(self.d.nested.keys().map(String::as_str)) {
            for (id, r) in resources(self.template(stack)) {
                if r["Type"] == GROUP {
                    out.push((stack.to_string(), id.clone()));
                }
            }
        }
        out
    }

    fn group(&self, stack: &str, id: &str) -> Option<&'a Value> {
        let r = self.template(stack)["Resources"].get(id)?;
        (r["Type"] == GROUP).then_some(r)
    }

    fn size(&self, stack: &str, g: &Value) -> Size {
        let p = &g["Properties"];
        let n = |k: &str| number(&self.resolve(stack, &p[k]));
        let min = n("MinSize").unwrap_or(0);
        Size {
            min,
            max: n("MaxSize").unwrap_or(min),
            desired: n("DesiredCapacity"),
        }
    }

    /// A guarded step: None when `key` is already being resolved (a cycle).
    fn guarded(&self, stack: &str, key: String, f: impl FnOnce() -> Value) -> Value {
        let k = (stack.to_string(), key);
        if !self.visiting.borrow_mut().insert(k.clone()) {
            return json!({"$cycle": k.1});
        }
        let v = f();
        self.visiting.borrow_mut().remove(&k);
        v
    }

    /// A resource's identity: what changes only when it is replaced.
    fn identity(&self, stack: &str, id: &str) -> Value {
        let r = &self.template(stack)["Resources"][id];
        let ty = r["Type"].as_str().unwrap_or_default();
        self.guarded(stack, format!("resource {id}"), || {
            let props = &r["Properties"];
            let kept = match CREATE_ONLY.iter().find(|(t, _)| *t == ty) {
                Some((_, names)) => {
                    let mut m = Map::new();
                    for name in *names {
                        if let Some(v) = props.get(*name) {
                            m.insert(name.to_string(), self.resolve(stack, v));
                        }
                    }
                    Value::Object(m)
                }
                None => self.resolve(stack, props),
            };
            json!({"$resource": [stack, id, ty, kept]})
        })
    }

    /// The value of a parameter of `stack`.
    fn parameter(&self, stack: &str, name: &str) -> Value {
        let default = || self.template(stack)["Parameters"][name]["Default"].clone();
        if stack == ROOT {
            return match self.d.parameters.get(name) {
                Some(v) => Value::String(v.clone()),
                None => default(),
            };
        }
        match self.d.root["Resources"][stack]["Properties"]["Parameters"].get(name) {
            Some(expr) => self.guarded(stack, format!("parameter {name}"), || self.resolve(ROOT, expr)),
            None => default(),
        }
    }

    fn reference(&self, stack: &str, name: &str) -> Value {
        let t = self.template(stack);
        if t["Parameters"].get(name).is_some() {
            self.parameter(stack, name)
        } else if t["Resources"].get(name).is_some() {
            self.identity(stack, name)
        } else {
            // A pseudo parameter (AWS::Region, AWS::StackName): the same on both sides.
            json!({ "Ref": name })
        }
    }

    fn attribute(&self, stack: &str, res: &str, attr: &str) -> Value {
        let r = &self.template(stack)["Resources"][res];
        if r["Type"] == NESTED_STACK {
            if let Some(out) = attr.strip_prefix("Outputs.") {
                let value = &self.template(res)["Outputs"][out]["Value"];
                return self.guarded(res, format!("output {out}"), || self.resolve(res, value));
            }
        }
        let mut v = json!({"$attribute": [self.identity(stack, res), attr]});
        // A launch template's version numbers move with its data.
        if r["Type"] == LAUNCH_TEMPLATE && attr.ends_with("VersionNumber") {
            let data = self.guarded(stack, format!("data {res}"), || {
                self.resolve(stack, &r["Properties"]["LaunchTemplateData"])
            });
            v["$data"] = data;
        }
        v
    }

    /// `v` with every reference resolved (see the module doc).
    fn resolve(&self, stack: &str, v: &Value) -> Value {
        match v {
            Value::Object(m) if m.len() == 1 => {
                let (k, arg) = m.iter().next().expect("one entry");
                match (k.as_str(), arg) {
                    ("Ref", Value::String(name)) => self.reference(stack, name),
                    ("Fn::GetAtt", Value::Array(a)) if a.len() == 2 => match (a[0].as_str(), &a[1]) {
                        (Some(res), Value::String(attr)) => self.attribute(stack, res, attr),
                        _ => self.resolve_all(stack, v),
                    },
                    ("Fn::GetAtt", Value::String(s)) if s.contains('.') => {
                        let (res, attr) = s.split_once('.').expect("a dot");
                        self.attribute(stack, res, attr)
                    }
                    ("Fn::Sub", Value::String(s)) => self.sub(stack, s, &Map::new()),
                    ("Fn::Sub", Value::Array(a)) if a.len() == 2 => match (&a[0], &a[1]) {
                        (Value::String(s), Value::Object(vars)) => self.sub(stack, s, vars),
                        _ => self.resolve_all(stack, v),
                    },
                    _ => self.resolve_all(stack, v),
                }
            }
            _ => self.resolve_all(stack, v),
        }
    }

    fn resolve_all(&self, stack: &str, v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), self.resolve(stack, x))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.resolve(stack, x)).collect()),
            other => other.clone(),
        }
    }

    /// `Fn::Sub`: the text, with each variable's resolved value beside it.
    fn sub(&self, stack: &str, s: &str, vars: &Map<String, Value>) -> Value {
        let mut values = Map::new();
        for var in sub_vars(s) {
            let v = match vars.get(&var) {
                Some(x) => self.resolve(stack, x),
                None => match var.split_once('.') {
                    Some((res, attr)) => self.attribute(stack, res, attr),
                    None => self.reference(stack, &var),
                },
            };
            values.insert(var, v);
        }
        json!({"Fn::Sub": [s, values]})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut network =
            json!({"Resources": {}, "Outputs": {"SubnetIds": {"Value": {"Fn::Join": [",", subnet_refs]}}}});
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
        moved.nested.get_mut("Network").unwrap()["Resources"]["Subnet0"]["Properties"]["CidrBlock"] =
            json!("10.1.0.0/24");
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
        path.nested.get_mut("ControlPlane").unwrap()["Resources"]["ControllerProfile"]["Properties"]["Path"] =
            json!("/x/");
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
}
