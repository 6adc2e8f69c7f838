//! The nodes' IAM, statically: every grant in the node program's call table
//! (src/node/iam-calls.json, one entry per call site, kept complete by
//! src/node/tests/test_calls.py) is allowed by the rendered policies of the
//! role it runs as, and every `denied` entry is refused, for the built-in
//! example (3 controllers, two pools, a KMS key).
//!
//! The evaluator below is IAM's for identity policies as far as the rendered
//! statements use it: Allow/Deny, Action and Resource with `*` and `?`,
//! Condition with StringEquals and StringLike (a key absent from the request
//! fails its condition); any other operator fails the test rather than
//! pass unread. Not covered: service control policies, bucket and key
//! policies, permission boundaries (kube-aws renders none of them), and
//! whether AWS's own action and resource names are what the table says
//! (tests/it/node_iam_moto.rs makes the calls against moto under the roles).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const ACCOUNT: &str = "123456789012";
const STACK: &str = "the-nodes-stack";
const CONTROLLER_GROUP: &str = "the-controller-group";
/// A key a rotation retired (issue 27 item 5): the publisher passes it after
/// `kmsKeyARN` in the node stacks' `DecryptKmsKeyARNs` parameter.
const RETIRED_KMS: &str = "arn:aws:kms:us-west-2:123456789012:key/retired-by-a-rotation";

thread_local! {
    /// `DecryptKmsKeyARNs` as the publisher passes it for the rendered example.
    static DECRYPT_KEYS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Glob match with `*` (any run) and `?` (one character), as IAM matches.
fn glob(pattern: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().flat_map(strings).collect(),
        _ => vec![],
    }
}

/// A statement's element with `Fn::Sub` resolved for the node's own stack,
/// and the decrypt keys' `Fn::Split` of their parameter.
fn resolved(v: &Value) -> Value {
    if v == &serde_json::json!({"Fn::Split": [",", {"Ref": "DecryptKmsKeyARNs"}]}) {
        let keys = DECRYPT_KEYS.with(|k| k.borrow().clone());
        assert!(!keys.is_empty(), "DecryptKmsKeyARNs is not set: render_example sets it");
        return Value::Array(keys.into_iter().map(Value::String).collect());
    }
    match v {
        Value::Object(o) if o.len() == 1 && o.contains_key("Fn::Sub") => Value::String(
            o["Fn::Sub"]
                .as_str()
                .unwrap_or_else(|| panic!("Fn::Sub with variables is not read here: {v}"))
                .replace("${AWS::Partition}", "aws")
                .replace("${AWS::Region}", "us-west-2")
                .replace("${AWS::AccountId}", ACCOUNT)
                .replace("${AWS::StackName}", STACK)
                .replace("${ControllerGroup}", CONTROLLER_GROUP),
        ),
        Value::Array(a) => Value::Array(a.iter().map(resolved).collect()),
        Value::Object(o) => {
            assert!(
                !o.keys().any(|k| k.starts_with("Fn::") || k == "Ref"),
                "unresolved intrinsic {v}"
            );
            v.clone()
        }
        _ => v.clone(),
    }
}

struct Request<'a> {
    action: &'a str,
    resource: &'a str,
    context: &'a BTreeMap<String, String>,
}

fn conditions_hold(cond: Option<&Value>, r: &Request) -> bool {
    let Some(cond) = cond else { return true };
    cond.as_object().unwrap().iter().all(|(op, keys)| {
        keys.as_object().unwrap().iter().all(|(key, want)| {
            let Some(have) = r.context.get(key) else { return false };
            let want = strings(&resolved(want));
            match op.as_str() {
                "StringEquals" => want.iter().any(|w| w == have),
                "StringLike" => want.iter().any(|w| glob(w, have)),
                _ => panic!("condition operator {op} is not evaluated here: teach node_iam.rs"),
            }
        })
    })
}

/// "allow", "deny" (explicitly) or "implicit deny".
fn evaluate(statements: &[Value], r: &Request) -> &'static str {
    let mut allowed = false;
    for s in statements {
        let matches = strings(&s["Action"])
            .iter()
            .any(|a| glob(&a.to_lowercase(), &r.action.to_lowercase()))
            && strings(&resolved(&s["Resource"])).iter().any(|p| glob(p, r.resource))
            && conditions_hold(s.get("Condition"), r);
        if matches {
            if s["Effect"] == "Deny" {
                return "deny";
            }
            allowed = true;
        }
    }
    if allowed {
        "allow"
    } else {
        "implicit deny"
    }
}

struct Rendered {
    stacks: BTreeMap<String, Value>,
    vars: BTreeMap<&'static str, String>,
}

fn render_example(dir: &Path) -> Rendered {
    let exe = env!("CARGO_BIN_EXE_kube-aws");
    let tree = dir.join("example");
    for args in [
        vec!["init", "--example", tree.to_str().unwrap(), "--force"],
        vec!["--dir", tree.to_str().unwrap(), "render"],
    ] {
        let o = Command::new(exe).args(&args).output().unwrap();
        assert!(
            o.status.success(),
            "kube-aws {args:?}: {}",
            crate::common::output_text(&o)
        );
    }
    let mut stacks = BTreeMap::new();
    for e in std::fs::read_dir(tree.join("rendered/stacks")).unwrap() {
        let p = e.unwrap().path();
        let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        stacks.insert(p.file_stem().unwrap().to_string_lossy().into_owned(), v);
    }
    let cluster: serde_yaml::Value =
        serde_yaml::from_slice(&std::fs::read(tree.join("cluster.yaml")).unwrap()).unwrap();
    let name = cluster["clusterName"].as_str().unwrap().to_string();
    let s3 = cluster["s3URI"]
        .as_str()
        .unwrap()
        .trim_start_matches("s3://")
        .trim_end_matches('/');
    let (bucket, prefix) = s3.split_once('/').unwrap();
    let parameter = |logical: &str| {
        stacks
            .values()
            .find_map(|t| {
                t["Resources"][logical]["Properties"]["Name"]
                    .as_str()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| panic!("no stack renders {logical}"))
    };
    let vars = BTreeMap::from([
        ("bucket", bucket.to_string()),
        ("prefix", format!("{prefix}/{name}")),
        ("cluster", name.clone()),
        ("region", cluster["region"].as_str().unwrap().to_string()),
        ("account", ACCOUNT.to_string()),
        ("stack", STACK.to_string()),
        ("controller_group", CONTROLLER_GROUP.to_string()),
        ("kms", cluster["kmsKeyARN"].as_str().unwrap().to_string()),
        ("retired_kms", RETIRED_KMS.to_string()),
        ("plan_parameter", parameter("AddonPlan")),
        ("etcd_parameter", parameter("EtcdSettings")),
    ]);
    DECRYPT_KEYS.with(|k| *k.borrow_mut() = vec![vars["kms"].clone(), RETIRED_KMS.to_string()]);
    Rendered { stacks, vars }
}

/// Per stack that renders the role `logical` (every pool has its own worker
/// role): its inline policies and the policies of that stack attached to it
/// (kube_aws::render::cfn::iam_size::role_statements).
fn role_statements(r: &Rendered, logical: &str) -> Vec<(String, Vec<Value>)> {
    let mut out = vec![];
    for (stack, t) in &r.stacks {
        let Some(res) = t["Resources"].as_object() else {
            continue;
        };
        if !res.get(logical).is_some_and(|v| v["Type"] == "AWS::IAM::Role") {
            continue;
        }
        let st = kube_aws::render::cfn::iam_size::role_statements(t, logical);
        out.push((stack.clone(), st));
    }
    assert!(!out.is_empty(), "no stack renders the role {logical}");
    out
}

/// The node role a stack's nodes run as: `controller`, `worker-<pool>`.
fn node_role(stack: &str) -> String {
    match stack.strip_prefix("node-pool-") {
        Some(pool) => format!("worker-{pool}"),
        None => "controller".to_string(),
    }
}

fn fill(r: &Rendered, stack: &str, template: &str) -> String {
    let mut s = template.replace("{node_role}", &node_role(stack));
    for (k, v) in &r.vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    assert!(!s.contains('{'), "unknown placeholder in {template:?}");
    // A `*` in the table stands for any name the call uses there.
    s.replace('*', "any-name")
}

fn request_parts(r: &Rendered, stack: &str, g: &Value) -> (String, String, BTreeMap<String, String>) {
    let ctx = g["context"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), fill(r, stack, v.as_str().unwrap())))
                .collect()
        })
        .unwrap_or_default();
    (
        g["action"].as_str().unwrap().to_string(),
        fill(r, stack, g["resource"].as_str().unwrap()),
        ctx,
    )
}

fn table() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node/iam-calls.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn role_logical_id(role: &str) -> &'static str {
    match role {
        "controller" => "ControllerRole",
        "worker" => "WorkerRole",
        other => panic!("unknown role {other}"),
    }
}

/// (role, stack, action, resource, answer) of every entry whose answer, in
/// any stack rendering its role, is other than `want`.
fn check(r: &Rendered, entries: &[&Value], want: &str) -> Vec<String> {
    let mut policies: BTreeMap<&str, Vec<(String, Vec<Value>)>> = BTreeMap::new();
    let mut wrong = vec![];
    for g in entries {
        let role = g["role"].as_str().unwrap();
        let per_stack = policies
            .entry(role)
            .or_insert_with(|| role_statements(r, role_logical_id(role)));
        for (stack, st) in per_stack.iter() {
            let (action, resource, context) = request_parts(r, stack, g);
            let answer = evaluate(
                st,
                &Request {
                    action: &action,
                    resource: &resource,
                    context: &context,
                },
            );
            let ok = if want == "allow" {
                answer == "allow"
            } else {
                answer != "allow"
            };
            if !ok {
                wrong.push(format!(
                    "{role} ({stack}) {action} {resource} {context:?}: {answer} ({})",
                    g["why"]
                ));
            }
        }
    }
    wrong
}

#[test]
fn every_call_the_nodes_make_is_allowed_by_their_roles_policies() {
    let dir = tempfile::tempdir().unwrap();
    let r = render_example(dir.path());
    let t = table();
    let grants: Vec<&Value> = t["calls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["grants"].as_array().unwrap())
        .collect();
    assert!(grants.len() >= 30, "{} grants: the table lost entries", grants.len());
    let wrong = check(&r, &grants, "allow");
    assert!(
        wrong.is_empty(),
        "calls the rendered policies do not allow:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn what_a_role_must_not_do_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let r = render_example(dir.path());
    let t = table();
    let denied: Vec<&Value> = t["denied"].as_array().unwrap().iter().collect();
    assert!(denied.len() >= 8, "the table lost its refusals");
    let wrong = check(&r, &denied, "deny");
    assert!(
        wrong.is_empty(),
        "calls the rendered policies allow but must not:\n{}",
        wrong.join("\n")
    );
}

/// After a key rotation (the old key retired, still in `DecryptKmsKeyARNs`):
/// every kms:Decrypt grant of the table is allowed under the retired key too
/// (a snapshot taken under it, a join token published under it, a bundle a
/// node's pointer still names), with the same conditions; no other KMS
/// action is (nothing is encrypted under a retired key); and every `denied`
/// KMS entry stays refused under it.
#[test]
fn a_retired_key_only_decrypts_what_the_current_key_decrypts() {
    let dir = tempfile::tempdir().unwrap();
    let r = render_example(dir.path());
    let t = table();
    let retire = |g: &Value| -> Value {
        let mut g = g.clone();
        g["resource"] = Value::String(g["resource"].as_str().unwrap().replace("{kms}", "{retired_kms}"));
        g
    };
    let kms: Vec<Value> = t["calls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["grants"].as_array().unwrap())
        .filter(|g| g["resource"] == "{kms}")
        .map(retire)
        .collect();
    let (decrypt, other): (Vec<&Value>, Vec<&Value>) = kms.iter().partition(|g| g["action"] == "kms:Decrypt");
    assert!(decrypt.len() >= 4 && other.len() >= 2, "{kms:#?}");
    let wrong = check(&r, &decrypt, "allow");
    assert!(
        wrong.is_empty(),
        "not decryptable under the retired key:\n{}",
        wrong.join("\n")
    );
    let wrong = check(&r, &other, "deny");
    assert!(wrong.is_empty(), "allowed under the retired key:\n{}", wrong.join("\n"));
    let denied: Vec<Value> = t["denied"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["resource"] == "{kms}")
        .map(retire)
        .collect();
    assert!(denied.len() >= 3);
    let wrong = check(&r, &denied.iter().collect::<Vec<_>>(), "deny");
    assert!(
        wrong.is_empty(),
        "refusals the retired key lets through:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_evaluator_matches_as_iam_does() {
    assert!(glob("arn:aws:s3:::b/p/*", "arn:aws:s3:::b/p/x/y"));
    assert!(glob("s3:Get*", "s3:GetObject"));
    assert!(!glob("arn:aws:s3:::b/p/*", "arn:aws:s3:::b/q/x"));
    assert!(glob("a?c", "abc") && !glob("a?c", "ac"));
    let ctx = BTreeMap::from([("s3:prefix".to_string(), "c/demo/bootstrap/join-lock".to_string())]);
    let list = serde_json::json!([{"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": ["arn:aws:s3:::b"],
        "Condition": {"StringLike": {"s3:prefix": ["c/demo/bootstrap/*"]}}}]);
    let st = list.as_array().unwrap();
    let req = |resource, context| Request {
        action: "s3:ListBucket",
        resource,
        context,
    };
    assert_eq!(evaluate(st, &req("arn:aws:s3:::b", &ctx)), "allow");
    let elsewhere = BTreeMap::from([("s3:prefix".to_string(), "c/demo/".to_string())]);
    assert_eq!(evaluate(st, &req("arn:aws:s3:::b", &elsewhere)), "implicit deny");
    // A condition key the request does not carry fails the condition.
    assert_eq!(evaluate(st, &req("arn:aws:s3:::b", &BTreeMap::new())), "implicit deny");
    let deny = serde_json::json!([
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "s3:DeleteObject", "Resource": "*"}]);
    let st = deny.as_array().unwrap();
    let empty = BTreeMap::new();
    let del = Request {
        action: "s3:DeleteObject",
        resource: "arn:aws:s3:::b/k",
        context: &empty,
    };
    assert_eq!(evaluate(st, &del), "deny");
}
