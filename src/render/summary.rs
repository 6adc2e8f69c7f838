//! The summary `render` prints: each stack with its size, each user-data part
//! with its size, the addons in install order with their chart versions, and
//! where IAM privileges live: roles and policy statements per scope.
//! Read back from the rendered files, so it shows exactly what was written.

use std::fmt;

use serde::Serialize;

use super::Rendered;

/// A rendered file's name and size in bytes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FileSize {
    pub name: String,
    pub bytes: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AddonLine {
    pub name: String,
    pub chart: String,
    pub chart_version: String,
    pub namespace: String,
    pub bootstrap: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub stacks: Vec<FileSize>,
    pub user_data: Vec<FileSize>,
    /// In install order, as the plan lists them.
    pub addons: Vec<AddonLine>,
    /// IAM roles and their statements, per scope.
    pub iam: Vec<IamScope>,
    /// Each role's policy sizes against IAM's limits, as IAM counts them
    /// with every substitution at its longest (src/render/cfn/iam_size.rs).
    pub iam_sizes: Vec<super::cfn::iam_size::RoleSize>,
}

/// The IAM roles of one scope: a node role's stack (`control-plane`,
/// `node-pool-<name>`), or `service accounts` for every role a web identity assumes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct IamScope {
    pub scope: String,
    pub roles: usize,
    pub statements: usize,
}

/// Roles and statements per scope, from the rendered stack templates.
fn iam_scopes(r: &Rendered) -> Vec<IamScope> {
    let mut out: Vec<IamScope> = Vec::new();
    for (path, bytes) in &r.files {
        let Some(stack) = super::layout::stack_name(path) else {
            continue;
        };
        let Ok(t) = serde_json::from_slice::<serde_json::Value>(bytes) else {
            continue;
        };
        let resources = t.get("Resources").and_then(|v| v.as_object()).into_iter().flatten();
        for (id, res) in resources {
            if res.get("Type").and_then(|v| v.as_str()) != Some("AWS::IAM::Role") {
                continue;
            }
            let props = &res["Properties"];
            let federated = props["AssumeRolePolicyDocument"]["Statement"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|st| st["Principal"].get("Federated").is_some());
            let scope = if federated { "service accounts" } else { stack };
            // Inline, and the policies of their own attached to it (iam_size.rs).
            let statements = super::cfn::iam_size::role_statements(&t, id).len();
            match out.iter_mut().find(|s| s.scope == scope) {
                Some(s) => {
                    s.roles += 1;
                    s.statements += statements;
                }
                None => out.push(IamScope {
                    scope: scope.to_string(),
                    roles: 1,
                    statements,
                }),
            }
        }
    }
    out
}

/// Summarizes rendered output.
pub fn summarize(r: &Rendered) -> Summary {
    let sizes = |prefix: &str| -> Vec<FileSize> {
        r.files
            .iter()
            .filter_map(|(path, bytes)| {
                path.strip_prefix(prefix).map(|name| FileSize {
                    name: name.to_string(),
                    bytes: bytes.len(),
                })
            })
            .collect()
    };
    let addons = r
        .text(super::layout::ADDON_PLAN)
        .and_then(|t| super::plan::Plan::from_json(t.as_bytes()).ok())
        .map(|plan| plan.releases)
        .unwrap_or_default()
        .into_iter()
        .map(|rel| AddonLine {
            name: rel.name,
            chart: rel.chart,
            chart_version: rel.chart_version,
            namespace: rel.namespace,
            bootstrap: rel.bootstrap,
        })
        .collect();
    Summary {
        stacks: sizes(&format!("{}/", super::layout::STACKS_DIR)),
        user_data: sizes(&format!("{}/", super::layout::USERDATA_DIR)),
        addons,
        iam: iam_scopes(r),
        iam_sizes: r.iam.clone(),
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "stacks:")?;
        for s in &self.stacks {
            writeln!(f, "  {:<40} {:>9} bytes", s.name, s.bytes)?;
        }
        writeln!(f, "user-data:")?;
        for s in &self.user_data {
            writeln!(f, "  {:<40} {:>9} bytes", s.name, s.bytes)?;
        }
        let iam: Vec<String> = self
            .iam
            .iter()
            .map(|s| format!("{} {} role(s), {} statement(s)", s.scope, s.roles, s.statements))
            .collect();
        writeln!(
            f,
            "IAM: {}",
            if iam.is_empty() {
                "(none)".into()
            } else {
                iam.join("; ")
            }
        )?;
        use super::cfn::iam_size::{MANAGED_POLICY_LIMIT, ROLE_ATTACHMENT_LIMIT, ROLE_INLINE_LIMIT};
        for r in &self.iam_sizes {
            let managed: Vec<String> = r
                .managed
                .iter()
                .map(|p| format!("{} {}/{MANAGED_POLICY_LIMIT}", p.name, p.chars))
                .collect();
            writeln!(
                f,
                "  {} {}: {} statement(s); inline {}/{ROLE_INLINE_LIMIT} characters; {} managed/{ROLE_ATTACHMENT_LIMIT}{}{}",
                r.stack,
                r.role,
                r.statements(),
                r.inline_chars(),
                r.attached,
                if managed.is_empty() { "" } else { ": " },
                managed.join(", ")
            )?;
        }
        writeln!(f, "addons, in install order:")?;
        if self.addons.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for (i, a) in self.addons.iter().enumerate() {
            let boot = if a.bootstrap { " (bootstrap)" } else { "" };
            writeln!(
                f,
                "  {:>2}. {:<24} {} {} in {}{boot}",
                i + 1,
                a.name,
                a.chart,
                a.chart_version,
                a.namespace
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod iam_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn iam_line_counts_roles_and_statements_per_scope() {
        let node = json!({"Resources": {"WorkerRole": {"Type": "AWS::IAM::Role", "Properties": {
            "AssumeRolePolicyDocument": {"Statement": [{"Principal": {"Service": "ec2.amazonaws.com"}}]},
            "Policies": [{"PolicyDocument": {"Statement": [{}, {}, {}]}}]}}}});
        let sa = |n: usize| {
            json!({"Type": "AWS::IAM::Role", "Properties": {
            "AssumeRolePolicyDocument": {"Statement": [{"Principal": {"Federated": {"Ref": "P"}}}]},
            "Policies": [{"PolicyDocument": {"Statement": vec![json!({}); n]}}]}})
        };
        let root = json!({"Resources": {"A": sa(2), "B": sa(5), "P": {"Type": "AWS::IAM::OIDCProvider"}}});
        let mut r = Rendered::default();
        r.files
            .insert("stacks/node-pool-a.json".into(), node.to_string().into_bytes());
        r.files.insert("stacks/root.json".into(), root.to_string().into_bytes());
        let s = summarize(&r);
        assert_eq!(
            s.iam,
            vec![
                IamScope {
                    scope: "node-pool-a".into(),
                    roles: 1,
                    statements: 3
                },
                IamScope {
                    scope: "service accounts".into(),
                    roles: 2,
                    statements: 7
                },
            ]
        );
        assert!(s
            .to_string()
            .contains("IAM: node-pool-a 1 role(s), 3 statement(s); service accounts 2 role(s), 7 statement(s)\n"));
    }
}
