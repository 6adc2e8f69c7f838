//! Stack operations on the root stack: create, describe (with nested stacks and
//! outputs), events, change sets (update), delete. Thin wrappers over the SDK
//! that speak in our types and our errors.

use aws_sdk_cloudformation::types::{Capability, ChangeSetType, OnFailure, Parameter, Tag, TemplateStage};
use serde::Serialize;

use crate::aws::{error_code, error_message, sdk_error, AwsError, Clients};

/// `--on-failure` of `up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnFailureMode {
    #[default]
    Rollback,
    Delete,
    DoNothing,
}

/// What CreateStack needs.
#[derive(Debug, Clone)]
pub struct StackRequest {
    pub name: String,
    pub template_url: String,
    pub parameters: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
}

/// A stack output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackOutput {
    pub key: String,
    pub value: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// The root stack as DescribeStacks gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackInfo {
    pub name: String,
    pub stack_id: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub outputs: Vec<StackOutput>,
    pub parameters: Vec<(String, String)>,
}

impl StackInfo {
    /// A `CREATE_COMPLETE` stack "demo" with these outputs, for tests of what
    /// the stack records (src/aws/state/zones.rs, src/aws/state/role_names.rs).
    #[cfg(test)]
    pub(crate) fn with_outputs(outputs: &[(&str, &str)]) -> StackInfo {
        StackInfo {
            name: "demo".into(),
            stack_id: "id".into(),
            status: "CREATE_COMPLETE".into(),
            reason: None,
            outputs: outputs
                .iter()
                .map(|(k, v)| StackOutput {
                    key: k.to_string(),
                    value: v.to_string(),
                    description: String::new(),
                })
                .collect(),
            parameters: Vec::new(),
        }
    }
}

/// A nested stack, seen through the root's resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NestedStack {
    pub logical_id: String,
    /// The nested stack's ARN (empty before it is created).
    pub stack_id: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl NestedStack {
    pub fn state(&self) -> StackState {
        StackState {
            name: self.logical_id.clone(),
            status: self.status.clone(),
            reason: self.reason.clone(),
        }
    }
}

fn is_missing_stack<E: aws_sdk_cloudformation::error::ProvideErrorMetadata, R>(
    err: &aws_sdk_cloudformation::error::SdkError<E, R>,
) -> bool {
    error_code(err) == Some("ValidationError") && error_message(err).is_some_and(|m| m.contains("does not exist"))
}

fn params(list: &[(String, String)]) -> Vec<Parameter> {
    list.iter()
        .map(|(k, v)| Parameter::builder().parameter_key(k).parameter_value(v).build())
        .collect()
}

fn tags(list: &[(String, String)]) -> Vec<Tag> {
    list.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

/// Creates the root stack; an existing one is an error pointing at `update`.
pub async fn create_stack(
    clients: &Clients,
    req: &StackRequest,
    on_failure: OnFailureMode,
) -> Result<String, AwsError> {
    let on_failure = match on_failure {
        OnFailureMode::Rollback => OnFailure::Rollback,
        OnFailureMode::Delete => OnFailure::Delete,
        OnFailureMode::DoNothing => OnFailure::DoNothing,
    };
    let out = clients
        .cfn
        .create_stack()
        .stack_name(&req.name)
        .template_url(&req.template_url)
        .set_parameters(Some(params(&req.parameters)))
        .capabilities(Capability::CapabilityIam)
        .capabilities(Capability::CapabilityNamedIam)
        .on_failure(on_failure)
        .set_tags(Some(tags(&req.tags)))
        .send()
        .await
        .map_err(|e| {
            if e.as_service_error().is_some_and(|s| s.is_already_exists_exception()) {
                AwsError::StackExists {
                    stack: req.name.clone(),
                }
            } else {
                sdk_error("cloudformation:CreateStack", e)
            }
        })?;
    Ok(out.stack_id().unwrap_or(&req.name).to_string())
}

/// The stack, for an operation that changes it: refused when it does not
/// exist (use `up`) or another operation is in progress on it.
pub async fn settled_stack(clients: &Clients, name: &str) -> Result<StackInfo, AwsError> {
    let live = describe_stack(clients, name)
        .await?
        .ok_or_else(|| AwsError::StackMissing {
            stack: name.to_string(),
        })?;
    if live.status.ends_with("_IN_PROGRESS") {
        return Err(AwsError::StackBusy {
            stack: name.to_string(),
            status: live.status,
        });
    }
    Ok(live)
}

/// The stack, or None when it does not exist. `name` may be a name or an ID.
pub async fn describe_stack(clients: &Clients, name: &str) -> Result<Option<StackInfo>, AwsError> {
    let out = match clients.cfn.describe_stacks().stack_name(name).send().await {
        Ok(out) => out,
        Err(e) if is_missing_stack(&e) => return Ok(None),
        Err(e) => return Err(sdk_error("cloudformation:DescribeStacks", e)),
    };
    let Some(s) = out.stacks().first() else {
        return Ok(None);
    };
    // A deleted stack is gone by name (AWS answers "does not exist"; moto
    // answers DELETE_COMPLETE); by ID it stays visible, which the delete wait uses.
    if !name.starts_with("arn:") && s.stack_status().is_some_and(|x| x.as_str() == "DELETE_COMPLETE") {
        return Ok(None);
    }
    Ok(Some(StackInfo {
        name: s.stack_name().unwrap_or(name).to_string(),
        stack_id: s.stack_id().unwrap_or_default().to_string(),
        status: s.stack_status().map(|x| x.as_str().to_string()).unwrap_or_default(),
        reason: s.stack_status_reason().map(str::to_string),
        outputs: s
            .outputs()
            .iter()
            .map(|o| StackOutput {
                key: o.output_key().unwrap_or_default().to_string(),
                value: o.output_value().unwrap_or_default().to_string(),
                description: o.description().unwrap_or_default().to_string(),
            })
            .collect(),
        parameters: s
            .parameters()
            .iter()
            .map(|p| {
                (
                    p.parameter_key().unwrap_or_default().to_string(),
                    p.parameter_value().unwrap_or_default().to_string(),
                )
            })
            .collect(),
    }))
}

/// One resource of a stack, as ListStackResources lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackResource {
    pub resource_type: String,
    pub logical_id: String,
    /// Empty before it is created.
    pub physical_id: String,
    pub status: String,
    pub reason: Option<String>,
}

/// Every resource of a stack (none for a stack that does not exist).
pub async fn stack_resources(clients: &Clients, stack: &str) -> Result<Vec<StackResource>, AwsError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = match clients
            .cfn
            .list_stack_resources()
            .stack_name(stack)
            .set_next_token(token.take())
            .send()
            .await
        {
            Ok(p) => p,
            Err(e) if is_missing_stack(&e) => return Ok(out),
            Err(e) => return Err(sdk_error("cloudformation:ListStackResources", e)),
        };
        for r in page.stack_resource_summaries() {
            out.push(StackResource {
                resource_type: r.resource_type().unwrap_or_default().to_string(),
                logical_id: r.logical_resource_id().unwrap_or_default().to_string(),
                physical_id: r.physical_resource_id().unwrap_or_default().to_string(),
                status: r.resource_status().map(|s| s.as_str().to_string()).unwrap_or_default(),
                reason: r.resource_status_reason().map(str::to_string),
            });
        }
        match page.next_token() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => return Ok(out),
        }
    }
}

/// The nested stacks of a stack, from its resources.
pub async fn nested_stacks(clients: &Clients, stack: &str) -> Result<Vec<NestedStack>, AwsError> {
    Ok(stack_resources(clients, stack)
        .await?
        .into_iter()
        .filter(|r| r.resource_type == "AWS::CloudFormation::Stack")
        .map(|r| NestedStack {
            logical_id: r.logical_id,
            stack_id: r.physical_id,
            status: r.status,
            reason: r.reason,
        })
        .collect())
}

/// One page of events, newest first, and the token for the next (older) page.
pub async fn events_page(
    clients: &Clients,
    stack: &str,
    token: Option<String>,
) -> Result<(Vec<StackEvent>, Option<String>), AwsError> {
    let page = match clients
        .cfn
        .describe_stack_events()
        .stack_name(stack)
        .set_next_token(token)
        .send()
        .await
    {
        Ok(p) => p,
        Err(e) if is_missing_stack(&e) => return Ok((Vec::new(), None)),
        Err(e) => return Err(sdk_error("cloudformation:DescribeStackEvents", e)),
    };
    let events = page
        .stack_events()
        .iter()
        .map(|e| StackEvent {
            event_id: e.event_id().unwrap_or_default().to_string(),
            stack_name: e.stack_name().unwrap_or_default().to_string(),
            logical_id: e.logical_resource_id().unwrap_or_default().to_string(),
            physical_id: e.physical_resource_id().unwrap_or_default().to_string(),
            resource_type: e.resource_type().unwrap_or_default().to_string(),
            status: e.resource_status().map(|s| s.as_str().to_string()).unwrap_or_default(),
            reason: e.resource_status_reason().map(str::to_string),
            timestamp: e.timestamp().and_then(|t| t.to_millis().ok()).unwrap_or_default(),
        })
        .collect();
    Ok((events, page.next_token().filter(|t| !t.is_empty()).map(str::to_string)))
}

/// The live root template, as submitted.
pub async fn live_template(clients: &Clients, stack: &str) -> Result<Option<String>, AwsError> {
    let out = clients
        .cfn
        .get_template()
        .stack_name(stack)
        .template_stage(TemplateStage::Original)
        .send()
        .await
        .map_err(|e| sdk_error("cloudformation:GetTemplate", e))?;
    Ok(out.template_body().map(str::to_string))
}

/// One change of a change set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Add, Modify, Remove, Import, Dynamic.
    pub action: String,
    pub logical_id: String,
    pub resource_type: String,
    /// True, False, Conditional (Modify only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
}

impl Change {
    pub fn replaces(&self) -> bool {
        matches!(self.replacement.as_deref(), Some("True" | "Conditional"))
    }
}

/// A change set that was created, with its changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangeSet {
    pub id: String,
    pub changes: Vec<Change>,
}

/// Creates an update change set and waits for it. None: CloudFormation says
/// there are no changes (the change set is deleted again).
pub async fn create_change_set(clients: &Clients, req: &StackRequest) -> Result<Option<ChangeSet>, AwsError> {
    let name = format!("kube-aws-{}", epoch_seconds());
    let out = clients
        .cfn
        .create_change_set()
        .stack_name(&req.name)
        .change_set_name(&name)
        .change_set_type(ChangeSetType::Update)
        .template_url(&req.template_url)
        .set_parameters(Some(params(&req.parameters)))
        .capabilities(Capability::CapabilityIam)
        .capabilities(Capability::CapabilityNamedIam)
        .set_tags(Some(tags(&req.tags)))
        .send()
        .await
        .map_err(|e| {
            if is_missing_stack(&e) {
                AwsError::StackMissing {
                    stack: req.name.clone(),
                }
            } else {
                sdk_error("cloudformation:CreateChangeSet", e)
            }
        })?;
    let id = out.id().unwrap_or(&name).to_string();
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        let mut changes = Vec::new();
        let mut token = None;
        let (status, reason) = loop {
            let d = clients
                .cfn
                .describe_change_set()
                .change_set_name(&id)
                .stack_name(&req.name)
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| sdk_error("cloudformation:DescribeChangeSet", e))?;
            for c in d.changes() {
                if let Some(rc) = c.resource_change() {
                    changes.push(Change {
                        action: rc.action().map(|a| a.as_str().to_string()).unwrap_or_default(),
                        logical_id: rc.logical_resource_id().unwrap_or_default().to_string(),
                        resource_type: rc.resource_type().unwrap_or_default().to_string(),
                        replacement: rc.replacement().map(|r| r.as_str().to_string()),
                    });
                }
            }
            token = d.next_token().filter(|t| !t.is_empty()).map(str::to_string);
            if token.is_none() {
                break (
                    d.status().map(|s| s.as_str().to_string()).unwrap_or_default(),
                    d.status_reason().unwrap_or_default().to_string(),
                );
            }
        };
        match status.as_str() {
            "CREATE_COMPLETE" => return Ok(Some(ChangeSet { id, changes })),
            "FAILED" => {
                let _ = delete_change_set(clients, &req.name, &id).await;
                if reason.contains("didn't contain changes") || reason.contains("No updates") {
                    return Ok(None);
                }
                return Err(AwsError::Api {
                    operation: "cloudformation:CreateChangeSet".into(),
                    code: "FAILED".into(),
                    message: reason,
                });
            }
            _ => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
            }
        }
    }
}

/// Seconds since the Unix epoch (names each change set apart).
fn epoch_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Executes a change set; `disable_rollback`: a failure leaves the stack
/// `UPDATE_FAILED` with what succeeded kept, instead of rolling it back
/// (src/aws/lifecycle/version_change.rs).
pub async fn execute_change_set(
    clients: &Clients,
    stack: &str,
    id: &str,
    disable_rollback: bool,
) -> Result<(), AwsError> {
    clients
        .cfn
        .execute_change_set()
        .stack_name(stack)
        .change_set_name(id)
        .disable_rollback(disable_rollback)
        .send()
        .await
        .map_err(|e| sdk_error("cloudformation:ExecuteChangeSet", e))?;
    Ok(())
}

/// Updates a stack an update left `UPDATE_FAILED` with `req` (its same
/// template and parameters), rollback disabled: CloudFormation retries the
/// resources that failed ("Choose how to handle failures when provisioning
/// resources", AWS CloudFormation User Guide).
pub async fn retry_update(clients: &Clients, req: &StackRequest) -> Result<(), AwsError> {
    clients
        .cfn
        .update_stack()
        .stack_name(&req.name)
        .template_url(&req.template_url)
        .set_parameters(Some(params(&req.parameters)))
        .capabilities(Capability::CapabilityIam)
        .capabilities(Capability::CapabilityNamedIam)
        .set_tags(Some(tags(&req.tags)))
        .disable_rollback(true)
        .send()
        .await
        .map_err(|e| sdk_error("cloudformation:UpdateStack", e))?;
    Ok(())
}

pub async fn delete_change_set(clients: &Clients, stack: &str, id: &str) -> Result<(), AwsError> {
    clients
        .cfn
        .delete_change_set()
        .stack_name(stack)
        .change_set_name(id)
        .send()
        .await
        .map_err(|e| sdk_error("cloudformation:DeleteChangeSet", e))?;
    Ok(())
}

pub async fn delete_stack(clients: &Clients, stack: &str) -> Result<(), AwsError> {
    clients
        .cfn
        .delete_stack()
        .stack_name(stack)
        .send()
        .await
        .map_err(|e| sdk_error("cloudformation:DeleteStack", e))?;
    Ok(())
}

/// Do two templates say the same thing (JSON-equal, or text-equal when not JSON)?
pub fn same_template(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.trim() == b.trim(),
    }
}

/// The diff, one line per change, replacements flagged, grouped by action.
pub fn format_changes(changes: &[Change]) -> String {
    let mut out = String::new();
    for (action, sign, word) in [
        ("Add", "+", "added"),
        ("Modify", "~", "modified"),
        ("Remove", "-", "removed"),
        ("Import", "<", "imported"),
        ("Dynamic", "?", "dynamic"),
    ] {
        let list: Vec<&Change> = changes.iter().filter(|c| c.action == action).collect();
        if list.is_empty() {
            continue;
        }
        out.push_str(&format!("{word} ({}):\n", list.len()));
        for c in list {
            let flag = match c.replacement.as_deref() {
                Some("True") => "  REPLACED",
                Some("Conditional") => "  MAY BE REPLACED",
                _ => "",
            };
            out.push_str(&format!("  {sign} {} ({}){flag}\n", c.logical_id, c.resource_type));
        }
    }
    let replaced = changes.iter().filter(|c| c.replaces()).count();
    if replaced > 0 {
        out.push_str(&format!(
            "{replaced} resource(s) will be replaced: their data and IDs are lost and new ones created\n"
        ));
    }
    out
}

/// One stack event, as DescribeStackEvents gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackEvent {
    pub event_id: String,
    /// The stack the event belongs to (its name, for a nested stack the generated name).
    pub stack_name: String,
    pub logical_id: String,
    pub physical_id: String,
    pub resource_type: String,
    pub status: String,
    pub reason: Option<String>,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
}

/// A stack's current state (the root, or a nested stack seen through the root's resources).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackState {
    /// "root" for the root stack, else the nested stack's logical id in the root.
    pub name: String,
    pub status: String,
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(action: &str, id: &str, repl: Option<&str>) -> Change {
        Change {
            action: action.into(),
            logical_id: id.into(),
            resource_type: "AWS::EC2::LaunchTemplate".into(),
            replacement: repl.map(str::to_string),
        }
    }

    #[test]
    fn diff_groups_by_action_and_flags_replacements() {
        let text = format_changes(&[
            change("Modify", "ControllerLT", Some("True")),
            change("Add", "NewPool", None),
            change("Modify", "Workers", Some("False")),
            change("Remove", "OldPool", None),
            change("Modify", "Sg", Some("Conditional")),
        ]);
        assert_eq!(
            text,
            "added (1):\n  + NewPool (AWS::EC2::LaunchTemplate)\n\
             modified (3):\n  ~ ControllerLT (AWS::EC2::LaunchTemplate)  REPLACED\n  ~ Workers (AWS::EC2::LaunchTemplate)\n  ~ Sg (AWS::EC2::LaunchTemplate)  MAY BE REPLACED\n\
             removed (1):\n  - OldPool (AWS::EC2::LaunchTemplate)\n\
             2 resource(s) will be replaced: their data and IDs are lost and new ones created\n"
        );
    }

    #[test]
    fn templates_compare_as_json() {
        assert!(same_template("{\"a\": 1, \"b\": [1]}", "{\"b\":[1],\"a\":1}"));
        assert!(!same_template("{\"a\": 1}", "{\"a\": 2}"));
    }
}
