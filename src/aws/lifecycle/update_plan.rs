//! `update`'s AWS half before anything changes: what was published against
//! the live stack, as a change set, the groups it rolls (rolls.rs), the
//! version change's phase (version_change.rs), a stopped update's recovery,
//! and the releases the new plan drops; then applying or discarding it.

use super::deploy::{publish_artifacts, stack_tags, ArtifactsOptions};
use super::status::stopped_update;
use crate::aws::lifecycle::rolls::{group_rolls, Deployment, GroupRoll};
use crate::aws::publish::ami::{pin_amis, resolve_ami, PinnedAmi};
use crate::aws::publish::previous::PreviousBundle;
use crate::aws::publish::{self, Published};
use crate::aws::services::s3::Location;
use crate::aws::services::stack::{self, ChangeSet, StackInfo, StackRequest};
use crate::aws::wait::recovery::Recovery;
use crate::aws::wait::ExpectedAddon;
use crate::aws::{AwsError, Clients};
use crate::config::ClusterConfig;
use crate::render::layout::INSTALLED_RELEASES;

/// The root stack's update request for what was published.
fn update_request(cluster: &ClusterConfig, published: &Published) -> StackRequest {
    StackRequest {
        name: cluster.cluster_name.clone(),
        template_url: published.root_template_url.clone(),
        parameters: published.parameters.clone(),
        tags: stack_tags(cluster),
    }
}

/// What `update` found.
#[derive(Debug)]
pub enum UpdatePlan {
    /// Same template and parameters as the live stack.
    NoChanges,
    /// A stack an update left `UPDATE_FAILED` (rollback disabled), with the
    /// same template and parameters: updating it with them again retries
    /// what failed, rollback still disabled (src/aws/wait/recovery.rs).
    Resume {
        published: Box<Published>,
        request: StackRequest,
        stack_id: String,
        recovery: Recovery,
    },
    /// A change set ready to execute (or delete).
    Changes {
        published: Box<Published>,
        change_set: ChangeSet,
        stack_id: String,
        /// Root parameters whose value changes (e.g. a node stack's secrets version).
        changed_parameters: Vec<String>,
        /// Installed releases the new plan drops: the reconciler uninstalls them.
        uninstalls: Vec<String>,
        /// The Kubernetes version move, when the stack records its version.
        version: Option<crate::aws::lifecycle::update_order::VersionMove>,
        /// The groups the update rolls, in order (src/aws/lifecycle/rolls.rs); why not
        /// known when a template could not be read.
        rolls: Box<Result<Vec<GroupRoll>, String>>,
        /// Execute with rollback disabled: a version change, or the update
        /// of a stack one left `UPDATE_FAILED` (src/aws/lifecycle/version_change.rs).
        disable_rollback: bool,
        /// The stopped update this one resumes, when the stack is `UPDATE_FAILED`.
        resumes: Option<Recovery>,
    },
}

/// How a planned update is applied.
#[derive(Debug)]
pub enum Apply {
    /// Execute the change set.
    ChangeSet { id: String, disable_rollback: bool },
    /// Update the stack with the same template and parameters, rollback
    /// disabled: retries what an update stopped with rollback disabled left failed.
    Retry(StackRequest),
}

/// Applies a confirmed update.
pub async fn apply(clients: &Clients, stack_name: &str, how: &Apply) -> Result<(), AwsError> {
    match how {
        Apply::ChangeSet { id, disable_rollback } => {
            stack::execute_change_set(clients, stack_name, id, *disable_rollback).await
        }
        Apply::Retry(req) => stack::retry_update(clients, req).await,
    }
}

/// Drops a declined update: its change set, if it has one.
pub async fn discard(clients: &Clients, stack_name: &str, how: &Apply) -> Result<(), AwsError> {
    match how {
        Apply::ChangeSet { id, .. } => stack::delete_change_set(clients, stack_name, id).await,
        Apply::Retry(_) => Ok(()),
    }
}

/// What the update rolls: the live root and nested templates (GetTemplate)
/// with the live parameters, against the published ones.
async fn group_rolls_of(
    clients: &Clients,
    live: &StackInfo,
    live_root: Option<&str>,
    published: &Published,
) -> Result<Vec<GroupRoll>, String> {
    let live_root = live_root.ok_or("the live root template is empty")?;
    let mut nested = std::collections::BTreeMap::new();
    for n in stack::nested_stacks(clients, &live.stack_id)
        .await
        .map_err(|e| e.to_string())?
    {
        if n.stack_id.is_empty() {
            continue;
        }
        if let Some(body) = stack::live_template(clients, &n.stack_id)
            .await
            .map_err(|e| e.to_string())?
        {
            nested.insert(n.logical_id, body);
        }
    }
    let old = Deployment::from_live(live_root, &live.parameters, &nested).map_err(|e| e.to_string())?;
    let new = Deployment::from_files(&published.root_template_body, &published.parameters, |path| {
        published.stack_templates.get(path).cloned()
    })
    .map_err(|e| e.to_string())?;
    Ok(group_rolls(&old, &new))
}

/// The releases of the reconciler's record (`{"releases": [{"name"}]}`) that
/// `addons` (the new plan) does not list, sorted. A missing or unreadable
/// record means nothing is known to be installed.
pub fn dropped_releases(installed: Option<&[u8]>, addons: &[ExpectedAddon]) -> Vec<String> {
    let record: serde_json::Value = installed
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default();
    let mut out: Vec<String> = record["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .filter(|n| !addons.iter().any(|a| a.release == *n))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `update`, first half: publish, compare, create a change set. The
/// previous secrets are the live stack's (src/aws/publish/previous.rs); `rotate_ca`
/// mints a new cluster PKI, asked for explicitly. Refused before anything
/// is published: a refused version or zone count, a KMS key that cannot be
/// used (src/aws/state/kms_keys.rs), a missing previous bundle, another CA.
pub async fn plan_update(
    clients: &Clients,
    cluster: &ClusterConfig,
    artifacts: &ArtifactsOptions,
    refresh_ami: bool,
    rotate_ca: bool,
) -> Result<(UpdatePlan, Vec<PinnedAmi>), AwsError> {
    let name = &cluster.cluster_name;
    let live = stack::settled_stack(clients, name).await?;
    // Before anything is published: an update whose rollback failed must be
    // finished first (src/aws/wait/recovery.rs); one stopped with rollback
    // disabled is what this update resumes.
    let nested = stack::nested_stacks(clients, &live.stack_id).await?;
    let stopped = stopped_update(clients, &live, &nested, &Location::new(cluster)?).await?;
    if let Some(r @ Recovery::UpdateRollbackFailed { .. }) = stopped {
        return Err(AwsError::RollbackUnfinished {
            stack: name.clone(),
            recovery: Box::new(r),
        });
    }
    // Before anything is published: a refused version changes nothing.
    let version = crate::aws::lifecycle::update_order::check_version(&live, cluster)?;
    // Before anything is published: a render that would change the recorded
    // zones changes nothing (src/aws/state/zones.rs).
    if let Some(bytes) = artifacts.rendered.get(publish::ROOT_TEMPLATE) {
        if let Ok(root) = serde_json::from_slice::<serde_json::Value>(bytes) {
            crate::aws::state::zones::check_zone_count(&live, cluster, &root)?;
            crate::aws::state::role_names::check_role_names(&live, &root)?;
        }
    }
    // The keys the publish encrypts and decrypts with: the new one, and the live bundle's.
    let mut keys: Vec<String> = cluster.kms_key_arn.iter().cloned().collect();
    keys.extend(
        crate::aws::state::kms_keys::keys_of_stack(&live.parameters, None)
            .into_iter()
            .filter(|(_, u)| *u == crate::aws::state::kms_keys::KeyUse::Current)
            .map(|(k, _)| k),
    );
    crate::aws::state::kms_keys::refuse_unusable(clients, &keys).await?;
    let previous = PreviousBundle::for_update(&live.parameters, rotate_ca);
    // Before anything is published: a version change comes alone.
    if let Some(m) = version
        .as_ref()
        .filter(|m| m.change != crate::config::VersionChange::Same)
    {
        let flags: Vec<&str> = [(rotate_ca, "--rotate-ca"), (refresh_ami, "--refresh-ami")]
            .into_iter()
            .filter_map(|(on, flag)| on.then_some(flag))
            .collect();
        crate::aws::lifecycle::version_change::check_alone(
            clients,
            cluster,
            artifacts,
            &live,
            m,
            previous.clone(),
            &flags,
        )
        .await?;
    }
    let disable_rollback = crate::aws::lifecycle::version_change::rollback_disabled(&live.status, version.as_ref());
    let mut published = publish_artifacts(clients, cluster, artifacts, previous, Some(&live)).await?;
    let amis = pin_amis(&mut published, Some(&live), refresh_ami, |n| resolve_ami(clients, n)).await?;
    // Content-addressed templates: the same root template and parameters mean
    // nothing changed anywhere below it. (Moto lists every resource of any
    // change set as "Add", so this check is also what makes "no changes" visible there.)
    let template = stack::live_template(clients, &live.stack_id).await?;
    let same_params = published
        .parameters
        .iter()
        .all(|p| live.parameters.iter().any(|l| l == p));
    if same_params
        && template
            .as_deref()
            .is_some_and(|t| stack::same_template(t, &published.root_template_body))
    {
        let req = update_request(cluster, &published);
        if let Some(recovery) = stopped {
            // Stopped with rollback disabled: the same template again retries what failed.
            return Ok((
                UpdatePlan::Resume {
                    published: Box::new(published),
                    request: req,
                    stack_id: live.stack_id,
                    recovery,
                },
                amis,
            ));
        }
        // The live bundle itself: nothing to confirm (a retired key's window may have passed).
        publish::publish_confirmed(clients, cluster, &published).await?;
        return Ok((UpdatePlan::NoChanges, amis));
    }
    let req = update_request(cluster, &published);
    let installed = crate::aws::services::s3::get_object(
        clients,
        &published.location.bucket,
        &published.location.key(INSTALLED_RELEASES),
    )
    .await?;
    let uninstalls = dropped_releases(installed.as_deref(), &published.addons);
    let rolls = Box::new(group_rolls_of(clients, &live, template.as_deref(), &published).await);
    let plan = match stack::create_change_set(clients, &req).await? {
        None => match stopped {
            Some(recovery) => UpdatePlan::Resume {
                published: Box::new(published),
                request: req,
                stack_id: live.stack_id,
                recovery,
            },
            None => UpdatePlan::NoChanges,
        },
        Some(change_set) => UpdatePlan::Changes {
            uninstalls,
            version,
            rolls,
            disable_rollback,
            resumes: stopped,
            changed_parameters: published
                .parameters
                .iter()
                .filter(|p| !live.parameters.contains(p))
                .map(|(k, _)| k.clone())
                .collect(),
            published: Box::new(published),
            change_set,
            stack_id: live.stack_id,
        },
    };
    Ok((plan, amis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_releases_are_the_installed_ones_the_plan_no_longer_lists() {
        let plan = |names: &[&str]| -> Vec<ExpectedAddon> {
            names
                .iter()
                .map(|n| ExpectedAddon {
                    release: n.to_string(),
                    wait_condition: None,
                    wait_timeout_secs: None,
                })
                .collect()
        };
        let record = br#"{"plan": "abc", "releases": [{"name": "dex"}, {"name": "calico"}, {"name": "cert-manager"}]}"#;
        assert_eq!(
            dropped_releases(Some(record), &plan(&["calico", "metrics-server"])),
            ["cert-manager", "dex"]
        );
        assert!(dropped_releases(Some(record), &plan(&["calico", "dex", "cert-manager"])).is_empty());
        // Nothing recorded yet (the reconciler has not run), or a record that is not JSON.
        assert!(dropped_releases(None, &plan(&[])).is_empty());
        assert!(dropped_releases(Some(b"not json"), &plan(&[])).is_empty());
    }
}
