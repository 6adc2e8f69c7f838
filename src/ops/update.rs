//! `update`: renders and publishes, shows the change set (and the AMIs and
//! releases it changes), asks, applies it with the cluster-autoscaler paused
//! for the roll, follows it with `wait`, and runs the hooks.

use std::time::Duration;

use super::{artifacts, stack_outputs, Events, OpsError, WorkTree};
use crate::aws::lifecycle::autoscaler;
use crate::aws::lifecycle::deploy::{self, rendered_dir};
use crate::aws::lifecycle::rollback_scope;
use crate::aws::lifecycle::update_order;
use crate::aws::lifecycle::update_plan::{self, Apply, UpdatePlan};
use crate::aws::services::stack::format_changes;
use crate::aws::wait::Operation;
use crate::aws::{connect, AwsError, AwsOptions, Clients};
use crate::config::{load_cluster, ClusterConfig};
use crate::plugin::exec::{Step, When};

/// What `update` is asked to do.
#[derive(Debug, Clone)]
pub struct UpdateOptions {
    pub tree: WorkTree,
    pub aws: AwsOptions,
    /// Publish `<dir>/rendered` as it is instead of rendering again.
    pub use_rendered: bool,
    /// Resolve the Amazon Linux 2023 AMI again.
    pub refresh_ami: bool,
    /// Mint a new cluster PKI.
    pub rotate_ca: bool,
    /// Follow the update and the addons to their end.
    pub wait: bool,
    /// Give up following after this long (the stack is left as it is).
    pub timeout: Option<Duration>,
}

/// How `update` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// The stack is up to date: nothing to apply.
    NoChanges,
    /// The changes were shown and not applied (the answer was no).
    NotApplied,
    /// The update was started and not followed.
    Started,
    /// The stack is UPDATE_COMPLETE; `addons` summarises the addons' reports.
    Complete { addons: String },
}

/// Runs `update`.
pub async fn run(opts: &UpdateOptions, events: &mut dyn Events) -> Result<UpdateOutcome, OpsError> {
    let _lock = opts.tree.lock("update", &mut |l| events.note(l))?;
    let cluster = load_cluster(&opts.tree.dir)?;
    let cfg = &cluster.config;
    opts.tree
        .hooks(&cluster, Step::Update, When::Pre, &rendered_dir(&opts.tree.dir), None)?;
    // The zones `up` recorded (the render keeps the stack's subnets) and the
    // running version (a version change is checked to come alone).
    let clients = connect(&opts.aws, &cfg.region).await?;
    let recorded = deploy::live_record(&clients, cfg).await?;
    let artifacts = artifacts(&opts.tree, &cluster, opts.use_rendered, &recorded).await?;
    // A new kmsKeyARN the caller cannot use is refused before anything is published.
    match crate::aws::publish::check_kms_key(&clients, cfg).await {
        Ok(Some(previous)) => events.say(&format!(
            "kmsKeyARN changes from {previous}: every secret is re-encrypted under the new key; the node roles \
             keep kms:Decrypt on the old one while etcd snapshots under it are kept ({} days)",
            crate::aws::publish::secrets::retired_key_lifetime(&cfg.etcd.backup.retention).as_secs() / 86_400
        )),
        Ok(None) => {}
        Err(e @ AwsError::KmsKeyUnusable { .. }) => {
            let at = cluster.source.locate("kmsKeyARN");
            return Err(crate::located::Located::new(&cluster.file, at, "kmsKeyARN", e.to_string()).into());
        }
        Err(e) => return Err(e.into()),
    }
    let (plan, amis) = update_plan::plan_update(&clients, cfg, &artifacts, opts.refresh_ami, opts.rotate_ca).await?;
    if opts.refresh_ami {
        for a in amis.iter().filter(|a| a.explicit) {
            events.say(&format!("{} is set in cluster.yaml (ami): not refreshed", a.parameter));
        }
        for a in amis
            .iter()
            .filter(|a| !a.explicit && a.before.as_deref() == Some(a.after.as_str()))
        {
            events.say(&format!("no newer AMI: {} stays {}", a.parameter, a.after));
        }
    }
    let (published, how, stack_id) = match plan {
        UpdatePlan::NoChanges => {
            events.say(&format!("no changes: stack {:?} is up to date", cfg.cluster_name));
            return Ok(UpdateOutcome::NoChanges);
        }
        UpdatePlan::Resume {
            published,
            request,
            stack_id,
            recovery,
        } => {
            for l in recovery.state_lines() {
                events.say(&l);
            }
            events.say(
                "resuming: the same template and parameters again, rollback disabled: CloudFormation retries what \
                 failed",
            );
            (published, Apply::Retry(request), stack_id)
        }
        changes @ UpdatePlan::Changes { .. } => {
            let shown = show_changes(opts, cfg, &amis, changes, events);
            (shown.published, shown.how, shown.stack_id)
        }
    };
    let go = match events.confirm("apply these changes?") {
        Ok(go) => go,
        Err(e) => {
            let _ = update_plan::discard(&clients, &cfg.cluster_name, &how).await;
            return Err(e.into());
        }
    };
    if !go {
        update_plan::discard(&clients, &cfg.cluster_name, &how).await?;
        events.say("not applied; the stack is unchanged");
        return Ok(UpdateOutcome::NotApplied);
    }
    // Confirmed: the latest bundle and the issuer's documents (the JWKS
    // keeps a rotated service-account key while its tokens are valid).
    crate::aws::publish::publish_confirmed(&clients, cfg, &published).await?;
    // Instances that ran before the termination handler covered their
    // pool get its managed tag before the roll (src/aws/lifecycle/nth_tags.rs).
    #[cfg(feature = "nodes")]
    match crate::aws::lifecycle::nth_tags::tag_running_instances(&clients, &cfg.cluster_name, &published).await {
        Ok(tagged) => tagged.iter().for_each(|t| events.say(&t.to_string())),
        Err(e) => events.say(&format!(
            "warning: the running instances were not given the termination handler's tag, so it will not drain \
             them until they are replaced: {e} (run `kube-aws update` again, or tag them with `aws ec2 \
             create-tags`)"
        )),
    }
    let autoscaled = published
        .addons
        .iter()
        .any(|a| a.release == autoscaler::AUTOSCALER_RELEASE);
    let paused = pause_autoscaler(opts, &clients, cfg, autoscaled, events).await;
    let executed = update_plan::apply(&clients, &cfg.cluster_name, &how).await;
    if executed.is_err() || !opts.wait {
        resume_autoscaler(paused.as_ref(), events).await;
    }
    executed?;
    events.say(&format!("updating stack {:?}", cfg.cluster_name));
    let (outcome, outputs) = if opts.wait {
        let followed = deploy::follow_published(
            &clients,
            &stack_id,
            Operation::Update,
            &published,
            opts.timeout,
            events.progress(),
        )
        .await;
        resume_autoscaler(paused.as_ref(), events).await;
        let addons = followed?;
        events.say(&format!("stack {:?} is UPDATE_COMPLETE; {addons}", cfg.cluster_name));
        let outputs = stack_outputs(&clients, &cfg.cluster_name).await?;
        (UpdateOutcome::Complete { addons }, outputs)
    } else {
        events.say("follow it with `kube-aws status --wait`");
        (UpdateOutcome::Started, None)
    };
    // Post-update hooks run only when the change set was applied.
    opts.tree.hooks(
        &cluster,
        Step::Update,
        When::Post,
        &artifacts.rendered_dir,
        outputs.as_ref(),
    )?;
    Ok(outcome)
}

/// A change set's plan, once shown.
struct Shown {
    published: Box<crate::aws::publish::Published>,
    how: Apply,
    stack_id: String,
}

/// Says what an `UpdatePlan::Changes` changes: the upgrade's order, the
/// change set, the parameters, AMIs, rolls and uninstalls, and what a
/// failure does (resume, or the rollback's scope).
fn show_changes(
    opts: &UpdateOptions,
    cfg: &ClusterConfig,
    amis: &[deploy::PinnedAmi],
    plan: UpdatePlan,
    events: &mut dyn Events,
) -> Shown {
    let UpdatePlan::Changes {
        published,
        change_set,
        stack_id,
        changed_parameters,
        uninstalls,
        version,
        rolls,
        disable_rollback,
        resumes,
    } = plan
    else {
        unreachable!("show_changes is given UpdatePlan::Changes")
    };
    if let Some(r) = &resumes {
        for l in r.state_lines() {
            events.say(&l);
        }
        events.say("resuming it with these changes, rollback still disabled");
    }
    events.say(&format!("changes to stack {:?}:", cfg.cluster_name));
    if opts.rotate_ca {
        events.say(&format!(
            "rotate-ca: a new cluster CA and service-account key: every node is replaced, every kubeconfig must be \
             minted again; the issuer keeps the old key for {} days",
            crate::aws::publish::secrets::SERVICE_ACCOUNT_KEY_RETENTION.as_secs() / 86_400
        ));
    }
    if let Some(v) = &version {
        let addons: Vec<String> = published.addons.iter().map(|a| a.release.clone()).collect();
        if let Some(line) = v.order(cfg, &addons) {
            events.say(&format!("upgrade: {line}"));
        }
    }
    let changes = format_changes(&change_set.changes);
    for l in changes.lines() {
        events.say(l);
    }
    if !changed_parameters.is_empty() {
        events.say(&format!("parameters changed: {}", changed_parameters.join(", ")));
    }
    for line in amis.iter().filter_map(|a| a.describe_change()) {
        events.say(&line);
    }
    match &*rolls {
        Ok(rolls) => events.say(&format!("rolls: {}", update_order::rolls_in_words(rolls))),
        Err(why) => events.say(&format!("rolls: not known ({why})")),
    }
    if !uninstalls.is_empty() {
        events.say(&format!(
            "releases to uninstall (installed, no longer in the plan): {}",
            uninstalls.join(", ")
        ));
    }
    if disable_rollback {
        events.say(
            "rollback disabled: a failure stops the update where it is (UPDATE_FAILED); fix the cause and run \
             `kube-aws update` to resume (docs/deploy.md, \"Upgrading Kubernetes\")",
        );
    } else if let Some(note) = rollback_scope::rollback_notice(&change_set.changes) {
        events.say(&note);
    }
    Shown {
        published,
        how: Apply::ChangeSet {
            id: change_set.id,
            disable_rollback,
        },
        stack_id,
    }
}

/// Pauses the cluster-autoscaler for the roll (src/aws/lifecycle/autoscaler.rs), and
/// returns the client that puts it back however the wait ends; without
/// `wait` nothing could put it back, so it is left alone. The resume gives
/// back what the Deployments record, so a pause that failed halfway, or one
/// an earlier `update` left, is undone too.
async fn pause_autoscaler(
    opts: &UpdateOptions,
    clients: &Clients,
    cfg: &ClusterConfig,
    autoscaled: bool,
    events: &mut dyn Events,
) -> Option<autoscaler::ScaleClient> {
    const NOT_PAUSED: &str = "warning: cluster-autoscaler not paused, it may scale the groups during the roll";
    if !autoscaled {
        return None;
    }
    if !opts.wait {
        events.note("warning: cluster-autoscaler not paused: only `update --wait` can put it back afterwards");
        return None;
    }
    let api = match autoscaler::client_for_update(clients, cfg, opts.timeout).await {
        Ok(api) => api,
        Err(e) => {
            events.note(&format!("{NOT_PAUSED}: {e}"));
            return None;
        }
    };
    match autoscaler::pause(&api).await {
        Ok(p) => {
            if p.replicas() > 0 {
                events.say(&format!(
                    "cluster-autoscaler paused (0 of {} replicas) until the update ends",
                    p.replicas()
                ));
            }
            Some(api)
        }
        Err(e) => {
            events.note(&format!("{NOT_PAUSED}: {e}"));
            // A pause refused or failed halfway is undone at the end (the
            // resume reads what the Deployments record); an API server this
            // run could not reach is not tried again.
            (!matches!(e, autoscaler::PauseError::Unreachable { .. })).then_some(api)
        }
    }
}

/// Puts back the autoscaler's replicas its Deployments record; a failure is
/// reported with the fix, never hidden.
async fn resume_autoscaler(api: Option<&autoscaler::ScaleClient>, events: &mut dyn Events) {
    let Some(api) = api else { return };
    match autoscaler::resume(api).await {
        Ok(p) => {
            if p.replicas() > 0 {
                events.say(&format!("cluster-autoscaler resumed ({} replicas)", p.replicas()));
            }
        }
        Err(e) => events.note(&format!(
            "error: cluster-autoscaler may still be paused: {e}; read the count each Deployment records with \
             `kubectl -n {ns} get deployments -l {label}={release} -o yaml` (annotation {annotation}) and give \
             it back with {fix}",
            ns = autoscaler::AUTOSCALER_NAMESPACE,
            label = autoscaler::RELEASE_LABEL,
            release = autoscaler::AUTOSCALER_RELEASE,
            annotation = autoscaler::PAUSED_REPLICAS_ANNOTATION,
            fix = autoscaler::resume_by_hand(autoscaler::AUTOSCALER_NAMESPACE, "<deployment>", "<count>"),
        )),
    }
}
