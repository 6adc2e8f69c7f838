//! IAM's size limits, checked before AWS does (IAM and AWS STS quotas,
//! <https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html>):
//! a role's inline policies together hold at most 10,240 characters, a
//! managed policy at most 6,144, and a role takes at most 10 managed
//! policies by default; IAM does not count white space.
//!
//! The invariant: a rendered role is refused here, not 20 minutes into
//! `up`, whenever IAM could refuse it. IAM sees a policy with
//! CloudFormation's substitutions resolved (`Fn::Sub` of the account, the
//! region, the partition and the stack's name; `Ref` of a resource's
//! generated name and of the decrypt-key list), so a size here is the
//! resolved document's with every substitution at its longest: the 12-digit
//! account, the cluster's region and its partition, a nested stack's and a
//! resource's generated names with CloudFormation's 13-character suffix, and
//! the decrypt-key list with room for [`MAX_RETIRED_KEYS`] retired keys.
//! Never the template text. Pure.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

/// The aggregate of a role's inline policies (not adjustable).
pub const ROLE_INLINE_LIMIT: usize = 10_240;
/// One managed policy (not adjustable).
pub const MANAGED_POLICY_LIMIT: usize = 6_144;
/// Managed policies attached to a role: the default quota (adjustable to 20).
pub const ROLE_ATTACHMENT_LIMIT: usize = 10;
/// Retired KMS keys the decrypt-key list has room for: `update` refuses a
/// rotation that would retire more within the retention window
/// (src/aws/publish/secrets.rs `retired_keys`).
pub const MAX_RETIRED_KEYS: usize = 4;
/// The longest generated suffix CloudFormation appends to a nested stack's
/// or a resource's name (`<stack>-<LogicalId>-<suffix>`: 12 or 13 characters).
const GENERATED_SUFFIX: usize = 13;
/// An account ID is always 12 digits.
const ACCOUNT: &str = "123456789012";
/// A key ID (a UUID, or `mrk-` and 32 hex digits for a multi-Region key).
const KEY_ID_LEN: usize = 36;

/// A policy's size as IAM counts it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PolicySize {
    /// The policy's logical ID, or the inline policy's name.
    pub name: String,
    pub statements: usize,
    pub chars: usize,
    /// The document as sized (substitutions resolved), to find what makes it long.
    #[serde(skip)]
    pub resolved: String,
}

/// One role's IAM sizes against IAM's limits.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RoleSize {
    pub stack: String,
    pub role: String,
    /// Inline policies (the role's `Policies` and AWS::IAM::Policy resources).
    pub inline: Vec<PolicySize>,
    /// Managed policies of the stack attached to the role.
    pub managed: Vec<PolicySize>,
    /// Every attached managed policy, AWS-managed ones included.
    pub attached: usize,
}

impl RoleSize {
    pub fn inline_chars(&self) -> usize {
        self.inline.iter().map(|p| p.chars).sum()
    }
    pub fn statements(&self) -> usize {
        self.inline.iter().chain(&self.managed).map(|p| p.statements).sum()
    }
}

/// What CloudFormation substitutes in one stack, at its longest.
#[derive(Debug, Clone)]
pub struct Longest {
    partition: &'static str,
    region: String,
    stack_name: String,
    params: BTreeMap<String, String>,
}

impl Longest {
    /// For stack `stack` (`root`, `control-plane`, `node-pool-<name>`) of
    /// cluster `cluster` in `region`; `kms_key` is the current key, whose
    /// ARN is known.
    pub fn new(cluster: &str, region: &str, stack: &str, kms_key: Option<&str>) -> Self {
        let partition = crate::irsa::partition(region);
        let stack_name = match nested_logical_id(stack) {
            None => cluster.to_string(),
            Some(id) => generated(cluster, &id),
        };
        let mut params = BTreeMap::new();
        if let Some(key) = kms_key {
            let retired = format!("arn:{partition}:kms:{region}:{ACCOUNT}:key/{}", "k".repeat(KEY_ID_LEN));
            let keys: Vec<String> = std::iter::once(key.to_string())
                .chain(std::iter::repeat_n(retired, MAX_RETIRED_KEYS))
                .collect();
            params.insert(super::names::DECRYPT_KMS_KEYS.to_string(), keys.join(","));
        }
        Longest {
            partition,
            region: region.to_string(),
            stack_name,
            params,
        }
    }

    fn pseudo(&self, name: &str) -> Option<String> {
        Some(match name {
            "AWS::Partition" => self.partition.to_string(),
            "AWS::Region" => self.region.clone(),
            "AWS::AccountId" => ACCOUNT.to_string(),
            "AWS::StackName" => self.stack_name.clone(),
            "AWS::StackId" => format!(
                "arn:{}:cloudformation:{}:{ACCOUNT}:stack/{}/{}",
                self.partition,
                self.region,
                self.stack_name,
                "u".repeat(KEY_ID_LEN)
            ),
            "AWS::URLSuffix" => "amazonaws.com.cn".to_string(),
            _ => return None,
        })
    }

    /// A `Ref`: a pseudo parameter, a known parameter, or a resource's
    /// generated name.
    fn reference(&self, name: &str) -> String {
        self.pseudo(name)
            .or_else(|| self.params.get(name).cloned())
            .unwrap_or_else(|| generated(&self.stack_name, name))
    }

    fn get_att(&self, id: &str) -> String {
        format!(
            "arn:{}:iam::{ACCOUNT}:role/{}",
            self.partition,
            generated(&self.stack_name, id)
        )
    }

    /// `Fn::Sub`'s template with `${Name}` and `${Name.Attr}` substituted
    /// (`vars` first), `${!Literal}` kept literal.
    fn sub(&self, text: &str, vars: &Map<String, Value>) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return out;
            };
            let name = &after[..end];
            if let Some(lit) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(lit);
                out.push('}');
            } else if let Some(v) = vars.get(name) {
                out.push_str(&as_text(&self.resolve(v)));
            } else if let Some((id, _)) = name.split_once('.') {
                out.push_str(&self.get_att(id));
            } else {
                out.push_str(&self.reference(name));
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// `v` with every intrinsic function resolved at its longest.
    pub fn resolve(&self, v: &Value) -> Value {
        match v {
            Value::Array(a) => Value::Array(a.iter().map(|x| self.resolve(x)).collect()),
            Value::Object(m) if m.len() == 1 => {
                let (k, arg) = m.iter().next().expect("one entry");
                match (k.as_str(), arg) {
                    ("Ref", Value::String(name)) => Value::String(self.reference(name)),
                    ("Fn::Sub", Value::String(t)) => Value::String(self.sub(t, &Map::new())),
                    ("Fn::Sub", Value::Array(a)) if a.len() == 2 => {
                        let vars = a[1].as_object().cloned().unwrap_or_default();
                        Value::String(self.sub(a[0].as_str().unwrap_or_default(), &vars))
                    }
                    ("Fn::GetAtt", Value::Array(a)) => Value::String(self.get_att(a[0].as_str().unwrap_or_default())),
                    ("Fn::GetAtt", Value::String(s)) => {
                        Value::String(self.get_att(s.split('.').next().unwrap_or_default()))
                    }
                    ("Fn::Split", Value::Array(a)) if a.len() == 2 => {
                        let delim = a[0].as_str().unwrap_or(",");
                        let text = as_text(&self.resolve(&a[1]));
                        Value::Array(text.split(delim).map(|s| Value::String(s.into())).collect())
                    }
                    ("Fn::Join", Value::Array(a)) if a.len() == 2 => {
                        let delim = a[0].as_str().unwrap_or_default();
                        let parts = match self.resolve(&a[1]) {
                            Value::Array(p) => p.iter().map(as_text).collect::<Vec<_>>(),
                            other => vec![as_text(&other)],
                        };
                        Value::String(parts.join(delim))
                    }
                    ("Fn::Select", Value::Array(a)) if a.len() == 2 => {
                        let list = self.resolve(&a[1]);
                        let items = list.as_array().cloned().unwrap_or_default();
                        // The longest item: the index may be a parameter.
                        items
                            .into_iter()
                            .max_by_key(|x| as_text(x).len())
                            .unwrap_or(Value::Null)
                    }
                    _ => Value::Object(m.iter().map(|(k, v)| (k.clone(), self.resolve(v))).collect()),
                }
            }
            Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), self.resolve(v))).collect()),
            other => other.clone(),
        }
    }

    /// The size IAM counts for `doc`: its characters, white space excluded,
    /// with every substitution resolved.
    pub fn chars(&self, doc: &Value) -> usize {
        count_chars(&self.resolve(doc))
    }
}

/// Characters of `v`'s JSON text, white space excluded.
fn count_chars(v: &Value) -> usize {
    v.to_string().chars().filter(|c| !c.is_whitespace()).count()
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `<stack>-<LogicalId>-<suffix>`: the longest name CloudFormation generates.
fn generated(stack: &str, id: &str) -> String {
    format!("{stack}-{id}-{}", "X".repeat(GENERATED_SUFFIX))
}

/// The root stack's logical ID of a nested stack, or None for the root.
fn nested_logical_id(stack: &str) -> Option<String> {
    match stack {
        "root" => None,
        "control-plane" => Some("ControlPlane".into()),
        "network" => Some("Network".into()),
        s => Some(match s.strip_prefix("node-pool-") {
            Some(pool) => format!("NodePool{}", super::super::plan::camel(pool)),
            None => super::super::plan::camel(s),
        }),
    }
}

fn statements(doc: &Value) -> usize {
    doc["Statement"].as_array().map_or(1, Vec::len)
}

fn sized(name: &str, doc: &Value, longest: &Longest) -> PolicySize {
    let resolved = longest.resolve(doc).to_string();
    PolicySize {
        name: name.to_string(),
        statements: statements(doc),
        chars: resolved.chars().filter(|c| !c.is_whitespace()).count(),
        resolved,
    }
}

/// Whether a policy resource's `Roles` names role `id` (by `Ref`).
fn attaches(policy: &Value, id: &str) -> bool {
    policy["Properties"]["Roles"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r.get("Ref").and_then(Value::as_str) == Some(id))
}

/// Every statement role `role` of `template` gets: its inline `Policies`, and
/// the AWS::IAM::Policy and AWS::IAM::ManagedPolicy resources attached to it,
/// in that order (template text, substitutions unresolved).
pub fn role_statements(template: &Value, role: &str) -> Vec<Value> {
    let Some(resources) = template.get("Resources").and_then(Value::as_object) else {
        return Vec::new();
    };
    let list = |doc: &Value| doc["Statement"].as_array().cloned().unwrap_or_default();
    let mut out: Vec<Value> = resources
        .get(role)
        .and_then(|r| r["Properties"]["Policies"].as_array())
        .into_iter()
        .flatten()
        .flat_map(|p| list(&p["PolicyDocument"]))
        .collect();
    for kind in ["AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"] {
        for (_, p) in resources.iter().filter(|(_, p)| p["Type"] == kind && attaches(p, role)) {
            out.extend(list(&p["Properties"]["PolicyDocument"]));
        }
    }
    out
}

/// Every role of `template` (stack `stack`) with its policies' sizes.
pub fn role_sizes(stack: &str, template: &Value, longest: &Longest) -> Vec<RoleSize> {
    let Some(resources) = template.get("Resources").and_then(Value::as_object) else {
        return Vec::new();
    };
    let of_type = |t: &'static str| resources.iter().filter(move |(_, r)| r["Type"] == t);
    let mut out = Vec::new();
    for (id, role) in of_type("AWS::IAM::Role") {
        let props = &role["Properties"];
        let mut inline: Vec<PolicySize> = props["Policies"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                sized(
                    p["PolicyName"].as_str().unwrap_or_default(),
                    &p["PolicyDocument"],
                    longest,
                )
            })
            .collect();
        let size = |(pid, p): (&String, &Value)| sized(pid, &p["Properties"]["PolicyDocument"], longest);
        inline.extend(of_type("AWS::IAM::Policy").filter(|(_, p)| attaches(p, id)).map(size));
        let managed: Vec<PolicySize> = of_type("AWS::IAM::ManagedPolicy")
            .filter(|(_, p)| attaches(p, id))
            .map(size)
            .collect();
        let arns = props["ManagedPolicyArns"].as_array().map_or(0, Vec::len);
        out.push(RoleSize {
            stack: stack.to_string(),
            role: id.clone(),
            attached: managed.len() + arns,
            inline,
            managed,
        });
    }
    out
}

/// A limit a role exceeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    pub what: String,
    pub size: usize,
    pub limit: usize,
    /// The resolved documents counted, empty for the attachment count.
    pub texts: Vec<String>,
}

/// The first limit `r` exceeds.
pub fn exceeded(r: &RoleSize) -> Option<Exceeded> {
    let inline = r.inline_chars();
    if inline > ROLE_INLINE_LIMIT {
        return Some(Exceeded {
            what: format!("stack {:?}: role {}'s inline policies", r.stack, r.role),
            size: inline,
            limit: ROLE_INLINE_LIMIT,
            texts: r.inline.iter().map(|p| p.resolved.clone()).collect(),
        });
    }
    if let Some(p) = r.managed.iter().find(|p| p.chars > MANAGED_POLICY_LIMIT) {
        return Some(Exceeded {
            what: format!("stack {:?}: role {}'s managed policy {}", r.stack, r.role, p.name),
            size: p.chars,
            limit: MANAGED_POLICY_LIMIT,
            texts: vec![p.resolved.clone()],
        });
    }
    if r.attached > ROLE_ATTACHMENT_LIMIT {
        return Some(Exceeded {
            what: format!("stack {:?}: role {}'s attached managed policies", r.stack, r.role),
            size: r.attached,
            limit: ROLE_ATTACHMENT_LIMIT,
            texts: Vec::new(),
        });
    }
    None
}

/// A user-chosen name in the policies: the cluster.yaml key it comes from,
/// and the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    pub key: &'static str,
    pub what: &'static str,
    pub value: String,
}

/// Of `names`, the one that takes the most characters in `e`'s documents,
/// with how many times it appears there.
pub fn longest_contributor<'a>(e: &Exceeded, names: &'a [Name]) -> Option<(&'a Name, usize)> {
    names
        .iter()
        .filter(|n| !n.value.is_empty())
        .map(|n| {
            (
                n,
                e.texts
                    .iter()
                    .map(|t| t.matches(n.value.as_str()).count())
                    .sum::<usize>(),
            )
        })
        .filter(|(_, count)| *count > 0)
        .max_by_key(|(n, count)| n.value.len() * count)
}

/// The refusal's words: what is over, by how much, and the fix.
pub fn explain(e: &Exceeded, names: &[Name]) -> (Option<&'static str>, String) {
    let head = format!(
        "{} would be {} characters as IAM counts them, with every CloudFormation substitution at its longest \
         (IAM's limit: {})",
        e.what, e.size, e.limit
    );
    if e.texts.is_empty() {
        return (
            None,
            format!(
                "{head}: disable a plugin that adds node statements, or ask AWS for a higher quota of managed \
                 policies per role (up to 20) and keep this check's default in mind"
            ),
        );
    }
    match longest_contributor(e, names) {
        Some((n, count)) => {
            let over = e.size - e.limit;
            let by = over.div_ceil(count);
            (
                Some(n.key),
                format!(
                    "{head}: {} {:?} ({} characters) appears {count} times in it; shorten it by at least {by} \
                     characters{}",
                    n.what,
                    n.value,
                    n.value.len(),
                    if by >= n.value.len() {
                        " (that is all of it: the statements themselves are too many; disable a plugin)"
                    } else {
                        ""
                    }
                ),
            )
        }
        None => (
            None,
            format!("{head}: the statements themselves are too many; disable a plugin that adds node statements"),
        ),
    }
}

/// Splits `statements` into managed-policy documents of at most
/// [`MANAGED_POLICY_LIMIT`] characters each (resolved at their longest), in
/// order. A single statement over the limit gets a document of its own, which
/// the check then refuses by name.
pub fn chunk(statements: &[Value], longest: &Longest) -> Vec<Vec<Value>> {
    // {"Version":"2012-10-17","Statement":[...]} around the statements, and the commas.
    let frame = count_chars(&serde_json::json!({"Version": "2012-10-17", "Statement": []}));
    let mut out: Vec<Vec<Value>> = Vec::new();
    let mut size = frame;
    for st in statements {
        let n = longest.chars(st) + 1;
        match out.last_mut() {
            Some(cur) if size + n <= MANAGED_POLICY_LIMIT => cur.push(st.clone()),
            _ => {
                out.push(vec![st.clone()]);
                size = frame;
            }
        }
        size += n;
    }
    out
}

#[cfg(test)]
mod tests;
