//! Resolving a deployment's values down to what CloudFormation would pass
//! (rolls.rs's module doc says how): parameters, nested stacks' outputs, and
//! resources' identities.

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::*;

/// The variables of an `Fn::Sub` string (`${X}`, `${X.Y}`; `${!X}` is a literal).
pub(super) fn sub_vars(s: &str) -> Vec<String> {
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
pub(super) struct Resolver<'a> {
    d: &'a Deployment,
    /// What is being resolved, to stop on a cycle (which CloudFormation refuses).
    visiting: RefCell<BTreeSet<(String, String)>>,
}

const ROOT: &str = "";

impl<'a> Resolver<'a> {
    pub(super) fn new(d: &'a Deployment) -> Self {
        Resolver {
            d,
            visiting: RefCell::new(BTreeSet::new()),
        }
    }

    pub(super) fn template(&self, stack: &str) -> &'a Value {
        if stack == ROOT {
            &self.d.root
        } else {
            self.d.nested.get(stack).unwrap_or(&Value::Null)
        }
    }

    /// Every group: (stack, logical ID).
    pub(super) fn groups(&self) -> Vec<(String, String)> {
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

    pub(super) fn group(&self, stack: &str, id: &str) -> Option<&'a Value> {
        let r = self.template(stack)["Resources"].get(id)?;
        (r["Type"] == GROUP).then_some(r)
    }

    pub(super) fn size(&self, stack: &str, g: &Value) -> Size {
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
    pub(super) fn guarded(&self, stack: &str, key: String, f: impl FnOnce() -> Value) -> Value {
        let k = (stack.to_string(), key);
        if !self.visiting.borrow_mut().insert(k.clone()) {
            return json!({"$cycle": k.1});
        }
        let v = f();
        self.visiting.borrow_mut().remove(&k);
        v
    }

    /// A resource's identity: what changes only when it is replaced.
    pub(super) fn identity(&self, stack: &str, id: &str) -> Value {
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
    pub(super) fn parameter(&self, stack: &str, name: &str) -> Value {
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

    pub(super) fn reference(&self, stack: &str, name: &str) -> Value {
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

    pub(super) fn attribute(&self, stack: &str, res: &str, attr: &str) -> Value {
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
    pub(super) fn resolve(&self, stack: &str, v: &Value) -> Value {
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

    pub(super) fn resolve_all(&self, stack: &str, v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), self.resolve(stack, x))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.resolve(stack, x)).collect()),
            other => other.clone(),
        }
    }

    /// `Fn::Sub`: the text, with each variable's resolved value beside it.
    pub(super) fn sub(&self, stack: &str, s: &str, vars: &Map<String, Value>) -> Value {
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
