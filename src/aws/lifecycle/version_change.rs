//! Forward-only version changes: a `kubernetesVersion` change is applied
//! alone, and with rollback disabled.
//!
//! Alone: the update is refused, before anything is published, when the
//! stacks it would deploy differ from the live ones in anything but the
//! version. The check renders the same work tree once more at the running
//! version (the baseline, src/pipeline.rs) and prepares it the way `update`
//! prepares what it publishes (content-addressed templates, the root's
//! parameters; nothing is written): a baseline that matches the live root
//! template and parameters means the version is the only change, since a
//! nested template or user data that differs changes the root's template
//! URLs. What differs is named.
//!
//! Rollback disabled: once the first new controller has run `kubeadm
//! upgrade apply`, a rollback would launch controllers of the old version,
//! which cannot join the upgraded etcd and API (the node program refuses
//! them). So a version change, and the update that resumes one that
//! stopped (`UPDATE_FAILED`), run with `DisableRollback`: a failure leaves
//! the stack `UPDATE_FAILED` with what succeeded kept, and the next
//! `kube-aws update` retries from there (ExecuteChangeSet and UpdateStack
//! `DisableRollback`; "Choose how to handle failures when provisioning
//! resources",
//! https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/stack-failure-options.html).

use serde_json::Value;

use crate::aws::lifecycle::update_order::VersionMove;
use crate::aws::AwsError;
use crate::config::VersionChange;

/// The same work tree rendered at the running version, to tell a version
/// change from other changes.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// The running version it was rendered at (the stack's record).
    pub version: String,
    /// The render; why not, when it could not be rendered.
    pub rendered: Result<crate::render::Rendered, String>,
}

/// Whether the update runs with rollback disabled: a version change, or
/// any update of a stack a version change left `UPDATE_FAILED` (rolling it
/// back now would bring back the old version too).
pub fn rollback_disabled(live_status: &str, version: Option<&VersionMove>) -> bool {
    version.is_some_and(|m| m.change != VersionChange::Same) || live_status == "UPDATE_FAILED"
}

/// What differs between the live stack and the baseline, by name: root
/// parameters the baseline sets otherwise (`ami` names the AMI parameters,
/// which `update` keeps from the live stack unless `--refresh-ami`), then
/// root resources and other template sections. Empty: the version is the
/// only change. Pure.
pub fn other_changes(
    live_root: Option<&str>,
    live_parameters: &[(String, String)],
    baseline_root: &str,
    baseline_parameters: &[(String, String)],
    ami: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in baseline_parameters {
        if ami.contains(k) {
            continue;
        }
        match live_parameters.iter().find(|(l, _)| l == k) {
            Some((_, lv)) if lv == v => {}
            Some(_) => out.push(format!("parameter {k}")),
            None => out.push(format!("new parameter {k}")),
        }
    }
    let parse = |t: &str| serde_json::from_str::<Value>(t).unwrap_or(Value::String(t.to_string()));
    let Some(live) = live_root.map(parse) else {
        out.push("the root template (the live one is not readable)".to_string());
        return out;
    };
    let base = parse(baseline_root);
    let section = |t: &Value, k: &str| t.get(k).cloned().unwrap_or(Value::Null);
    let (lr, br) = (section(&live, "Resources"), section(&base, "Resources"));
    let empty = serde_json::Map::new();
    let (lr, br) = (lr.as_object().unwrap_or(&empty), br.as_object().unwrap_or(&empty));
    let mut ids: Vec<&String> = lr.keys().chain(br.keys()).collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let ty = |r: Option<&Value>| {
            r.and_then(|r| r["Type"].as_str())
                .map(|t| t.trim_start_matches("AWS::").to_string())
                .unwrap_or_default()
        };
        match (lr.get(id), br.get(id)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(b)) if b["Type"] == "AWS::CloudFormation::Stack" => {
                out.push(format!("stack {id} (its template or parameters)"))
            }
            (Some(_), Some(b)) => out.push(format!("{id} ({})", ty(Some(b)))),
            (None, Some(b)) => out.push(format!("new {id} ({})", ty(Some(b)))),
            (Some(a), None) => out.push(format!("removed {id} ({})", ty(Some(a)))),
            (None, None) => {}
        }
    }
    let mut sections: Vec<&String> = live
        .as_object()
        .into_iter()
        .flatten()
        .chain(base.as_object().into_iter().flatten())
        .map(|(k, _)| k)
        .filter(|k| *k != "Resources")
        .collect();
    sections.sort();
    sections.dedup();
    for k in sections {
        if section(&live, k) != section(&base, k) {
            out.push(format!("the root template's {k}"));
        }
    }
    out
}

/// The refusal of a version change that comes with other changes; Ok when
/// there are none. `flags` are the command's own other changes
/// (`--rotate-ca`, `--refresh-ami`).
pub fn refuse_mixed(m: &VersionMove, flags: &[&str], other: Vec<String>) -> Result<(), AwsError> {
    let mut other: Vec<String> = flags.iter().map(|f| f.to_string()).chain(other).collect();
    if other.is_empty() {
        return Ok(());
    }
    other.dedup();
    Err(AwsError::VersionMixed {
        from: m.from.clone(),
        to: m.to.clone(),
        other,
    })
}

/// Refuses a version change that comes with other changes, before
/// anything is written: prepares the baseline as `update` prepares what it
/// publishes (reads only, and KMS for the secret bundle), and compares it
/// with the live root template and parameters. `flags`: see [`refuse_mixed`].
pub async fn check_alone(
    clients: &crate::aws::Clients,
    cluster: &crate::config::ClusterConfig,
    artifacts: &crate::aws::lifecycle::deploy::ArtifactsOptions,
    live: &crate::aws::services::stack::StackInfo,
    m: &VersionMove,
    previous: crate::aws::publish::previous::PreviousBundle,
    flags: &[&str],
) -> Result<(), AwsError> {
    let uncheckable = |why: String| AwsError::VersionUncheckable {
        from: m.from.clone(),
        to: m.to.clone(),
        why,
    };
    let rendered = match &artifacts.baseline {
        Some(b) if b.version == m.from => b.rendered.as_ref().map_err(|e| uncheckable(e.clone()))?,
        Some(b) => {
            return Err(uncheckable(format!(
            "the work tree was rendered at {} for the comparison, but the stack runs {}: run `kube-aws update` again",
            b.version, m.from
        )))
        }
        None => {
            return Err(uncheckable(
                "--use-rendered publishes a render as it is, and none was made at the running version to \
                 compare with: run `kube-aws update` without --use-rendered"
                    .to_string(),
            ))
        }
    };
    let input = crate::aws::publish::PublishInput {
        rendered,
        charts: &artifacts.charts,
        cluster,
        secrets: &artifacts.secrets,
        previous,
    };
    let prepared = crate::aws::publish::prepare(clients, &input).await?;
    let live_root = crate::aws::services::stack::live_template(clients, &live.stack_id).await?;
    let root = prepared.root_template();
    let ami: Vec<String> = crate::aws::publish::ami::ami_sources(&root)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    refuse_mixed(
        m,
        flags,
        other_changes(
            live_root.as_deref(),
            &live.parameters,
            &root,
            prepared.parameters(),
            &ami,
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn template(cp_url: &str, pool_type: &str) -> String {
        serde_json::json!({
            "Parameters": {"KubernetesVersion": {"Type": "String", "Default": "1.35.8"}},
            "Resources": {
                "ControlPlane": {"Type": "AWS::CloudFormation::Stack", "Properties": {"TemplateURL": cp_url}},
                "PlanPointer": {"Type": "AWS::SSM::Parameter", "Properties": {"Type": pool_type}},
            },
        })
        .to_string()
    }

    fn mv(from: &str, to: &str, change: VersionChange) -> VersionMove {
        VersionMove {
            from: from.into(),
            to: to.into(),
            change,
        }
    }

    #[test]
    fn a_baseline_equal_to_the_live_stack_means_the_version_is_the_only_change() {
        let live = params(&[
            ("KubernetesVersion", "1.35.8"),
            ("ImageIdX86", "ami-live"),
            ("CACertHash", "sha256:a"),
        ]);
        // The AMI is the live one's (not in the baseline's parameters, or
        // resolved anew): not a change of the render.
        let base = params(&[
            ("KubernetesVersion", "1.35.8"),
            ("CACertHash", "sha256:a"),
            ("ImageIdX86", "ami-new"),
        ]);
        let t = template("stacks/aaa/control-plane.json", "String");
        let other = other_changes(Some(&t), &live, &t, &base, &["ImageIdX86".to_string()]);
        assert!(other.is_empty(), "{other:?}");
        assert!(refuse_mixed(&mv("1.35.8", "1.36.5", VersionChange::Minor), &[], other).is_ok());
    }

    #[test]
    fn every_other_change_is_named() {
        let live = params(&[("KubernetesVersion", "1.35.8"), ("CACertHash", "sha256:a")]);
        let base = params(&[
            ("KubernetesVersion", "1.35.8"),
            ("CACertHash", "sha256:b"),
            ("SecretsVersionPool", "x"),
        ]);
        let other = other_changes(
            Some(&template("stacks/aaa/control-plane.json", "String")),
            &live,
            &template("stacks/bbb/control-plane.json", "StringList"),
            &base,
            &[],
        );
        assert_eq!(
            other,
            [
                "parameter CACertHash",
                "new parameter SecretsVersionPool",
                "stack ControlPlane (its template or parameters)",
                "PlanPointer (SSM::Parameter)",
            ]
        );
        let err = refuse_mixed(&mv("1.35.8", "1.36.5", VersionChange::Minor), &["--refresh-ami"], other)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("update refused, nothing was published or changed: kubernetesVersion 1.35.8 → 1.36.5"),
            "{err}"
        );
        assert!(
            err.contains("--refresh-ami, parameter CACertHash, new parameter SecretsVersionPool"),
            "{err}"
        );
        assert!(err.contains("kubernetesVersion: \"1.35.8\""), "{err}");
        // Resources added or removed, and other sections.
        let mut live_t: Value = serde_json::from_str(&template("u", "String")).unwrap();
        let mut base_t = live_t.clone();
        base_t["Resources"]["NodePoolSpot"] = serde_json::json!({"Type": "AWS::CloudFormation::Stack"});
        live_t["Resources"]["Old"] = serde_json::json!({"Type": "AWS::SNS::Topic"});
        base_t["Outputs"] = serde_json::json!({"X": {"Value": "1"}});
        let other = other_changes(Some(&live_t.to_string()), &[], &base_t.to_string(), &[], &[]);
        assert_eq!(
            other,
            [
                "new NodePoolSpot (CloudFormation::Stack)",
                "removed Old (SNS::Topic)",
                "the root template's Outputs"
            ]
        );
        assert_eq!(
            other_changes(None, &[], &base_t.to_string(), &[], &[]),
            ["the root template (the live one is not readable)"]
        );
    }

    #[test]
    fn a_version_change_and_a_stopped_update_run_with_rollback_disabled() {
        let minor = mv("1.35.8", "1.36.5", VersionChange::Minor);
        let patch = mv("1.35.4", "1.35.8", VersionChange::Patch);
        let same = mv("1.36.5", "1.36.5", VersionChange::Same);
        assert!(rollback_disabled("UPDATE_COMPLETE", Some(&minor)));
        assert!(rollback_disabled("UPDATE_ROLLBACK_COMPLETE", Some(&patch)));
        assert!(rollback_disabled("UPDATE_FAILED", Some(&same)));
        assert!(rollback_disabled("UPDATE_FAILED", None));
        assert!(!rollback_disabled("UPDATE_COMPLETE", Some(&same)));
        assert!(!rollback_disabled("CREATE_COMPLETE", None));
    }
}
