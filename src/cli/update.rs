//! `kube-aws update`: renders and publishes, shows the change set (and the
//! AMIs and releases it changes), asks, applies it, and runs the hooks.

use super::confirm::confirm;
use super::deploy_args::{artifacts, runtime, AwsArgs, PublishArgs, WaitArgs};
use super::progress_view::ProgressView;
use super::{hooks, stack_outputs, GlobalOptions};
use crate::aws::autoscaler;
use crate::aws::connect;
use crate::aws::deploy::{self, Apply, UpdatePlan};
use crate::aws::rollback_scope;
use crate::aws::stack::format_changes;
use crate::aws::update_order;
use crate::aws::wait::Operation;
use crate::config::load_cluster;
use crate::plugin::exec::{Step, When};

/// Arguments of `kube-aws update`.
#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub publish: PublishArgs,
    /// Apply without asking (required when standard input is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Resolve the Amazon Linux 2023 AMI again (it is pinned at `up`): a newer
    /// one replaces the nodes, one at a time
    #[arg(long)]
    pub refresh_ami: bool,
    /// Mint a new cluster PKI (CAs, service-account key): every node is
    /// replaced and every kubeconfig must be minted again. Without it, an
    /// update that would change the cluster CA, or whose previous secret
    /// bundle is missing, is refused (docs/deploy.md)
    #[arg(long)]
    pub rotate_ca: bool,
}

pub fn run(global: &GlobalOptions, args: UpdateArgs) -> anyhow::Result<()> {
    let _lock = super::lock_work_tree(global, "update")?;
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let rendered = crate::aws::deploy::rendered_dir(&global.dir);
    hooks(global, &cluster, Step::Update, When::Pre, &rendered, None)?;
    // The zones `up` recorded (the render keeps the stack's subnets) and the
    // running version (a version change is checked to come alone).
    let recorded = runtime()?.block_on(async {
        let clients = connect(&args.aws.options(), &cfg.region).await?;
        deploy::live_record(&clients, cfg).await
    })?;
    let artifacts = artifacts(global, &cluster, &args.publish, &recorded)?;
    let applied = runtime()?.block_on(async {
        let clients = connect(&args.aws.options(), &cfg.region).await?;
        // A new kmsKeyARN the caller cannot use is refused before anything is published.
        match crate::aws::publish::check_kms_key(&clients, cfg).await {
            Ok(Some(previous)) => println!(
                "kmsKeyARN changes from {previous}: every secret is re-encrypted under the new key; \
                 the node roles keep kms:Decrypt on the old one while etcd snapshots under it are kept \
                 ({} days)",
                crate::aws::secrets::retired_key_lifetime(&cfg.etcd.backup.retention).as_secs() / 86_400
            ),
            Ok(None) => {}
            Err(e @ crate::aws::AwsError::KmsKeyUnusable { .. }) => {
                return Err(crate::located::Located::new(
                    &cluster.file,
                    cluster.source.locate("kmsKeyARN"),
                    "kmsKeyARN",
                    e.to_string(),
                )
                .into())
            }
            Err(e) => return Err(e.into()),
        }
        let (plan, amis) = deploy::plan_update(&clients, cfg, &artifacts, args.refresh_ami, args.rotate_ca).await?;
        if args.refresh_ami {
            for a in amis.iter().filter(|a| a.explicit) {
                println!("{} is set in cluster.yaml (ami): not refreshed", a.parameter);
            }
            for a in amis
                .iter()
                .filter(|a| !a.explicit && a.before.as_deref() == Some(a.after.as_str()))
            {
                println!("no newer AMI: {} stays {}", a.parameter, a.after);
            }
        }
        let (published, how, stack_id) = match plan {
            UpdatePlan::NoChanges => {
                println!("no changes: stack {:?} is up to date", cfg.cluster_name);
                return Ok::<_, anyhow::Error>(None);
            }
            UpdatePlan::Resume {
                published,
                request,
                stack_id,
                recovery,
            } => {
                for l in recovery.state_lines() {
                    println!("{l}");
                }
                println!(
                    "resuming: the same template and parameters again, rollback disabled: CloudFormation retries \
                     what failed"
                );
                (published, Apply::Retry(request), stack_id)
            }
            UpdatePlan::Changes {
                published,
                change_set,
                stack_id,
                changed_parameters,
                uninstalls,
                version,
                rolls,
                disable_rollback,
                resumes,
            } => {
                if let Some(r) = &resumes {
                    for l in r.state_lines() {
                        println!("{l}");
                    }
                    println!("resuming it with these changes, rollback still disabled");
                }
                println!("changes to stack {:?}:", cfg.cluster_name);
                if args.rotate_ca {
                    println!(
                        "rotate-ca: a new cluster CA and service-account key: every node is replaced, every kubeconfig \
                         must be minted again; the issuer keeps the old key for {} days",
                        crate::aws::secrets::SERVICE_ACCOUNT_KEY_RETENTION.as_secs() / 86_400
                    );
                }
                if let Some(v) = &version {
                    let addons: Vec<String> = published.addons.iter().map(|a| a.release.clone()).collect();
                    if let Some(line) = v.order(cfg, &addons) {
                        println!("upgrade: {line}");
                    }
                }
                print!("{}", format_changes(&change_set.changes));
                if !changed_parameters.is_empty() {
                    println!("parameters changed: {}", changed_parameters.join(", "));
                }
                for line in amis.iter().filter_map(|a| a.describe_change()) {
                    println!("{line}");
                }
                match &*rolls {
                    Ok(rolls) => println!("rolls: {}", update_order::rolls_in_words(rolls)),
                    Err(why) => println!("rolls: not known ({why})"),
                }
                if !uninstalls.is_empty() {
                    println!(
                        "releases to uninstall (installed, no longer in the plan): {}",
                        uninstalls.join(", ")
                    );
                }
                if disable_rollback {
                    println!(
                        "rollback disabled: a failure stops the update where it is (UPDATE_FAILED); \
                         fix the cause and run `kube-aws update` to resume (docs/deploy.md, \"Upgrading Kubernetes\")"
                    );
                } else if let Some(note) = rollback_scope::rollback_notice(&change_set.changes) {
                    println!("{note}");
                }
                let how = Apply::ChangeSet {
                    id: change_set.id,
                    disable_rollback,
                };
                (published, how, stack_id)
            }
        };
        let go = match confirm("apply these changes?", args.yes) {
            Ok(go) => go,
            Err(e) => {
                let _ = deploy::discard(&clients, &cfg.cluster_name, &how).await;
                return Err(e.into());
            }
        };
        if !go {
            deploy::discard(&clients, &cfg.cluster_name, &how).await?;
            println!("not applied; the stack is unchanged");
            return Ok(None);
        }
        // Confirmed: the latest bundle and the issuer's documents (the JWKS
        // keeps a rotated service-account key while its tokens are valid).
        crate::aws::publish::publish_confirmed(&clients, cfg, &published).await?;
        // Instances that ran before the termination handler covered their
        // pool get its managed tag before the roll (src/aws/nth_tags.rs).
        #[cfg(feature = "nodes")]
        match crate::aws::nth_tags::tag_running_instances(&clients, &cfg.cluster_name, &published).await {
            Ok(tagged) => tagged.iter().for_each(|t| println!("{t}")),
            Err(e) => println!(
                "warning: the running instances were not given the termination handler's tag, so it will not \
                 drain them until they are replaced: {e} (run `kube-aws update` again, or tag them with \
                 `aws ec2 create-tags`)"
            ),
        }
        // The cluster-autoscaler is paused for the roll and put back however
        // the wait ends (src/aws/autoscaler.rs); without --wait nothing could
        // put it back, so it is left alone. The resume gives back what the
        // Deployments record, so a pause that failed halfway, or one an
        // earlier `update` left, is undone too.
        let autoscaled = published
            .addons
            .iter()
            .any(|a| a.release == autoscaler::AUTOSCALER_RELEASE);
        let paused = if autoscaled && args.wait.wait {
            match autoscaler::client_for_update(&clients, cfg, args.wait.timeout).await {
                Ok(api) => match autoscaler::pause(&api).await {
                    Ok(p) => {
                        if p.replicas() > 0 {
                            println!(
                                "cluster-autoscaler paused (0 of {} replicas) until the update ends",
                                p.replicas()
                            );
                        }
                        Some(api)
                    }
                    Err(e) => {
                        eprintln!(
                            "warning: cluster-autoscaler not paused, it may scale the groups during the roll: {e}"
                        );
                        // A pause refused or failed halfway is undone at the
                        // end (the resume reads what the Deployments record);
                        // an API server this run could not reach is not
                        // tried again.
                        (!matches!(e, autoscaler::PauseError::Unreachable { .. })).then_some(api)
                    }
                },
                Err(e) => {
                    eprintln!("warning: cluster-autoscaler not paused, it may scale the groups during the roll: {e}");
                    None
                }
            }
        } else {
            if autoscaled {
                eprintln!("warning: cluster-autoscaler not paused: only `update --wait` can put it back afterwards");
            }
            None
        };
        let executed = deploy::apply(&clients, &cfg.cluster_name, &how).await;
        if executed.is_err() || !args.wait.wait {
            resume_autoscaler(paused.as_ref()).await;
        }
        executed?;
        println!("updating stack {:?}", cfg.cluster_name);
        if args.wait.wait {
            let followed = deploy::follow_published(
                &clients,
                &stack_id,
                Operation::Update,
                &published,
                args.wait.timeout,
                &mut ProgressView::for_stderr(),
            )
            .await;
            resume_autoscaler(paused.as_ref()).await;
            let addons = followed?;
            println!("stack {:?} is UPDATE_COMPLETE; {addons}", cfg.cluster_name);
            Ok(Some(stack_outputs(&clients, &cfg.cluster_name).await?))
        } else {
            println!("follow it with `kube-aws status --wait`");
            Ok(Some(None))
        }
    })?;
    // Post-update hooks run only when the change set was applied.
    match applied {
        Some(outputs) => hooks(
            global,
            &cluster,
            Step::Update,
            When::Post,
            &artifacts.rendered_dir,
            outputs.as_ref(),
        ),
        None => Ok(()),
    }
}

/// Puts back the autoscaler's replicas its Deployments record; a failure is
/// reported with the fix, never hidden.
async fn resume_autoscaler(api: Option<&autoscaler::ScaleClient>) {
    let Some(api) = api else { return };
    match autoscaler::resume(api).await {
        Ok(p) => {
            if p.replicas() > 0 {
                println!("cluster-autoscaler resumed ({} replicas)", p.replicas());
            }
        }
        Err(e) => eprintln!(
            "error: cluster-autoscaler may still be paused: {e}; read the count each Deployment records with \
             `kubectl -n {ns} get deployments -l {label}={release} -o yaml` (annotation {annotation}) and give \
             it back with {fix}",
            ns = autoscaler::AUTOSCALER_NAMESPACE,
            label = autoscaler::RELEASE_LABEL,
            release = autoscaler::AUTOSCALER_RELEASE,
            annotation = autoscaler::PAUSED_REPLICAS_ANNOTATION,
            fix = autoscaler::resume_by_hand(autoscaler::AUTOSCALER_NAMESPACE, "<deployment>", "<count>"),
        ),
    }
}
