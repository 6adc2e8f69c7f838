//! The deploy commands as library calls: `up`, `status`, `update`, `destroy`,
//! and `follow`, the wait shared by all of them (Ctrl-C, timeout, outcome →
//! error; the progress goes to a [`ProgressSink`] the CLI draws). The CLI
//! files only parse flags and print.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use crate::aws::lifecycle::version_change::Baseline;
pub use crate::aws::publish::ami::PinnedAmi;
use crate::aws::publish::ami::{pin_amis, resolve_ami};
use crate::aws::publish::previous::PreviousBundle;
use crate::aws::publish::secrets::NamedSecret;
use crate::aws::publish::{self, ChartTarball, PublishInput, Published};
use crate::aws::services::s3::{delete_under, Location};
use crate::aws::services::stack::{self, ChangeSet, NestedStack, OnFailureMode, StackInfo, StackRequest};
use crate::aws::wait::recovery::Recovery;
use crate::aws::wait::watch::{self, AwsSource, Pacer, TokioClock};
use crate::aws::wait::{AddonReport, ExpectedAddon, NodeReport, Operation, Outcome, StackProgress};
use crate::aws::{AwsError, Clients};
use crate::config::ClusterConfig;
use crate::digest::Sha256Digest;
use crate::render::layout;

pub use crate::render::layout::rendered_dir;

/// The chart tarballs the addon plan's releases pin (`sha256`), found in the
/// cache at `sha256/<hex>.tgz`.
pub fn charts_from_plan(rendered: &Path, cache: &Path) -> Result<Vec<ChartTarball>, AwsError> {
    let path = rendered.join(publish::ADDON_PLAN);
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(Vec::new());
    };
    let plan = publish::parse_plan(&bytes, &path.display().to_string())?;
    // The releases' archives, and the helm client they are installed with
    // (its object is `charts/<sha256>.tgz` too: the installer reads it there).
    let cache = crate::chart::ChartCache::new(cache);
    let helm = (!plan.releases.is_empty()).then_some(plan.helm.binary.pinned.sha256.as_str());
    let digests: std::collections::BTreeSet<Sha256Digest> = plan
        .releases
        .iter()
        .filter_map(|r| r.sha256.as_deref())
        .chain(helm)
        .filter_map(Sha256Digest::parse)
        .collect();
    Ok(digests
        .into_iter()
        .map(|digest| ChartTarball {
            path: cache.path_for(digest.hex()),
            digest,
        })
        .collect())
}

/// Tags on the root stack (CloudFormation copies them to every resource).
pub fn stack_tags(cluster: &ClusterConfig) -> Vec<(String, String)> {
    vec![
        ("kube-aws:cluster".into(), cluster.cluster_name.clone()),
        ("kube-aws:version".into(), env!("CARGO_PKG_VERSION").into()),
    ]
}

/// What `publish` needs besides the clients.
#[derive(Debug, Clone)]
pub struct ArtifactsOptions {
    pub rendered_dir: PathBuf,
    pub charts: Vec<ChartTarball>,
    pub secrets: Vec<NamedSecret>,
    /// The same work tree rendered at the running Kubernetes version, when
    /// cluster.yaml changes it (src/aws/lifecycle/version_change.rs); None otherwise,
    /// and for `--use-rendered`.
    pub baseline: Option<Baseline>,
}

/// What `update` renders with from the live stack: the zone count and the
/// role names `up` recorded (src/aws/state/zones.rs, src/aws/state/role_names.rs) and
/// the running Kubernetes version (src/aws/lifecycle/update_order.rs); all None when
/// there is no stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveRecord {
    pub zone_count: Option<usize>,
    pub kubernetes_version: Option<String>,
    /// How its service-account roles are named (src/aws/state/role_names.rs).
    pub role_names: Option<crate::irsa::RoleNames>,
}

/// Reads the [`LiveRecord`].
pub async fn live_record(clients: &Clients, cluster: &ClusterConfig) -> Result<LiveRecord, AwsError> {
    let live = stack::describe_stack(clients, &cluster.cluster_name).await?;
    Ok(LiveRecord {
        zone_count: live.as_ref().and_then(crate::aws::state::zones::recorded_zone_count),
        kubernetes_version: live
            .as_ref()
            .and_then(crate::aws::lifecycle::update_order::running_version)
            .map(str::to_string),
        role_names: live
            .as_ref()
            .map(crate::aws::state::role_names::recorded_role_names)
            .transpose()?,
    })
}

/// How to wait.
#[derive(Debug, Clone, Copy)]
pub struct WaitOptions {
    pub wait: bool,
    pub timeout: Option<Duration>,
}

/// Publishes the artifacts and sets the snapshots' lifecycle rules. For an
/// update (`live`, the stack as it is), a result with another cluster CA is
/// refused before anything is written, unless `previous` rotates the CA
/// (src/aws/publish/previous.rs). The latest bundle and the issuer's documents wait
/// for [`publish::publish_confirmed`].
pub async fn publish_artifacts(
    clients: &Clients,
    cluster: &ClusterConfig,
    opts: &ArtifactsOptions,
    previous: PreviousBundle,
    live: Option<&StackInfo>,
) -> Result<Published, AwsError> {
    let rotate_ca = previous.rotates_ca();
    let prepared = publish::prepare(
        clients,
        &PublishInput {
            rendered_dir: &opts.rendered_dir,
            charts: &opts.charts,
            cluster,
            secrets: &opts.secrets,
            previous,
        },
    )
    .await?;
    if let Some(live) = live {
        crate::aws::publish::previous::check_ca(&live.parameters, prepared.parameters(), rotate_ca)?;
    }
    let published = publish::upload(clients, prepared).await?;
    // The snapshots' retention is the bucket's (src/aws/services/retention.rs).
    crate::aws::services::retention::apply(clients, cluster, &published.location).await?;
    Ok(published)
}

/// `up`: publish and create the root stack. Returns the stack ID.
pub async fn up(
    clients: &Clients,
    cluster: &ClusterConfig,
    artifacts: &ArtifactsOptions,
    on_failure: OnFailureMode,
) -> Result<(Published, String), AwsError> {
    let name = &cluster.cluster_name;
    if let Some(existing) = stack::describe_stack(clients, name).await? {
        if existing.status == "ROLLBACK_COMPLETE" {
            return Err(AwsError::RolledBack { stack: name.clone() });
        }
        return Err(AwsError::StackExists { stack: name.clone() });
    }
    let mut published = publish_artifacts(clients, cluster, artifacts, PreviousBundle::Latest, None).await?;
    pin_amis(&mut published, None, false, |n| resolve_ami(clients, n)).await?;
    // No confirmation to wait for: the create is what was asked.
    let issuer = publish::publish_confirmed(clients, cluster, &published).await?;
    published.objects.extend(issuer);
    clear_runtime_state(clients, &Location::new(cluster)?).await?;
    crate::aws::state::join_token::delete_published(clients, &cluster.cluster_name).await?;
    let req = StackRequest {
        name: name.clone(),
        template_url: published.root_template_url.clone(),
        parameters: published.parameters.clone(),
        tags: stack_tags(cluster),
    };
    let id = stack::create_stack(clients, &req, on_failure).await?;
    Ok((published, id))
}

/// Where [`follow`] reports the wait's progress: the CLI draws it (aws has no
/// terminal code).
pub trait ProgressSink {
    /// The latest progress model, after each poll.
    fn draw(&mut self, progress: &StackProgress);
    /// The wait ended (done, failed, timed out or interrupted).
    fn finish(&mut self) {}
}

/// Follows a stack operation to its end, reporting progress to `view`.
/// Ctrl-C stops the waiting only; the stack is never touched.
pub async fn follow(
    clients: &Clients,
    stack_id: &str,
    operation: Operation,
    location: &Location,
    addons: &[ExpectedAddon],
    timeout: Option<Duration>,
    view: &mut dyn ProgressSink,
) -> Result<(), AwsError> {
    let mut source = AwsSource::new(
        clients,
        stack_id.to_string(),
        operation,
        location.clone(),
        addons.to_vec(),
    );
    let mut clock = TokioClock::start();
    let mut pacer = Pacer::default();
    let result = tokio::select! {
        r = watch::drive(&mut source, &mut clock, &mut pacer, timeout, |a| view.draw(&a.progress)) => r,
        _ = tokio::signal::ctrl_c() => Err(AwsError::Interrupted),
    };
    view.finish();
    match result?.outcome {
        Outcome::Done | Outcome::InProgress => Ok(()),
        Outcome::Failed(mut f) => {
            // A stopped update: say what it left and the command that continues.
            if operation == Operation::Update {
                if let Some(live) = stack::describe_stack(clients, stack_id).await? {
                    let nested = stack::nested_stacks(clients, &live.stack_id).await?;
                    f.recovery = stopped_update(clients, &live, &nested, location).await?.map(Box::new);
                }
            }
            Err(AwsError::Failed(Box::new(f)))
        }
        Outcome::TimedOut { pending } => Err(AwsError::TimedOut {
            waited: timeout
                .map(|t| humantime::format_duration(t).to_string())
                .unwrap_or_default(),
            pending,
        }),
    }
}

/// Follows a create or update of what was just published, then reads the
/// addon status objects once more (the last ones may land after the loop's
/// last look) and says what they show.
pub async fn follow_published(
    clients: &Clients,
    stack_id: &str,
    operation: Operation,
    published: &Published,
    timeout: Option<Duration>,
    view: &mut dyn ProgressSink,
) -> Result<String, AwsError> {
    let (location, addons) = (&published.location, &published.addons);
    follow(clients, stack_id, operation, location, addons, timeout, view).await?;
    let reports = watch::read_addon_reports(clients, location, addons).await?;
    Ok(crate::aws::wait::addons_summary(addons, &reports))
}

/// Everything `status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub stack: StackInfo,
    pub nested: Vec<NestedStack>,
    pub addons: Vec<AddonStatus>,
    /// Nodes whose bootstrap failed during the stack's latest operation.
    pub nodes: Vec<NodeReport>,
    /// The controllers' certificate expiry (issue 27, src/aws/state/expiry.rs).
    pub certificates: crate::aws::state::expiry::CertificateStatus,
    /// The published join token's id and age (src/aws/state/join_token.rs).
    #[serde(rename = "bootstrapToken")]
    pub bootstrap_token: crate::aws::state::join_token::TokenStatus,
    /// The newest etcd snapshot's age (src/aws/state/expiry.rs).
    #[serde(rename = "etcdSnapshot")]
    pub etcd_snapshot: crate::aws::state::expiry::SnapshotStatus,
    /// etcd's alarms and last maintenance pass (src/aws/state/etcd_status.rs).
    pub etcd: crate::aws::state::etcd_status::EtcdStatus,
    /// The control plane's recorded version, last upgrade and last
    /// reconfiguration (issue 26, src/aws/state/control_plane_status.rs).
    #[serde(rename = "controlPlane")]
    pub control_plane: crate::aws::state::control_plane_status::ControlPlaneStatus,
    /// The state of each KMS key the cluster uses (src/aws/state/kms_keys.rs).
    #[serde(rename = "kmsKeys")]
    pub kms_keys: Vec<crate::aws::state::kms_keys::KeyState>,
    /// A stopped update (`UPDATE_FAILED`, `UPDATE_ROLLBACK_FAILED`): what
    /// failed and the command that continues (src/aws/wait/recovery.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

/// What a stopped update left, when the root or a nested stack is
/// `UPDATE_FAILED` or `UPDATE_ROLLBACK_FAILED`: the latest operation's
/// events of the root and its nested stacks, judged by
/// [`crate::aws::wait::recovery::recovery`]. None (and no events read) otherwise.
pub async fn stopped_update(
    clients: &Clients,
    live: &StackInfo,
    nested: &[NestedStack],
    location: &Location,
) -> Result<Option<Recovery>, AwsError> {
    let states: Vec<_> = nested.iter().map(NestedStack::state).collect();
    if crate::aws::wait::recovery::stopped_state(&live.status, &states).is_none() {
        return Ok(None);
    }
    let mut source = AwsSource::new(
        clients,
        live.stack_id.clone(),
        Operation::Update,
        location.clone(),
        Vec::new(),
    );
    let (obs, _) = watch::Source::observe(&mut source).await?;
    Ok(crate::aws::wait::recovery::recovery(
        &live.name,
        &clients.region,
        &live.status,
        &obs.nested,
        &obs.events,
    ))
}

/// One addon: its phase and message, "pending" without a status object.
#[derive(Debug, Clone, Serialize)]
pub struct AddonStatus {
    pub release: String,
    pub phase: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// The addons of the latest render (empty when there is none).
pub fn expected_addons(rendered: &Path) -> Vec<ExpectedAddon> {
    let Ok(bytes) = std::fs::read(rendered.join(publish::ADDON_PLAN)) else {
        return Vec::new();
    };
    crate::render::plan::Plan::from_json(&bytes)
        .map(|p| publish::addons_of(&p))
        .unwrap_or_default()
}

/// `status`: the stack, its nested stacks and outputs, each addon.
pub async fn status(
    clients: &Clients,
    cluster: &ClusterConfig,
    addons: &[ExpectedAddon],
) -> Result<StatusReport, AwsError> {
    let name = &cluster.cluster_name;
    let stack = stack::describe_stack(clients, name)
        .await?
        .ok_or_else(|| AwsError::StackMissing { stack: name.clone() })?;
    let nested = stack::nested_stacks(clients, &stack.stack_id).await?;
    let location = Location::new(cluster)?;
    let recovery = stopped_update(clients, &stack, &nested, &location).await?;
    let reports: Vec<AddonReport> = watch::read_addon_reports(clients, &location, addons).await?;
    let mut out: Vec<AddonStatus> = addons
        .iter()
        .map(|a| {
            let r = reports.iter().find(|r| r.release == a.release);
            AddonStatus {
                release: a.release.clone(),
                phase: r.map(|r| r.phase.as_str()).unwrap_or("pending").to_string(),
                message: r.map(|r| r.message.clone()).unwrap_or_default(),
                updated_at: r.and_then(|r| r.updated_at.clone()),
            }
        })
        .collect();
    // Reports for addons the local render does not know (another machine's render).
    for r in &reports {
        if !out.iter().any(|a| a.release == r.release) {
            out.push(AddonStatus {
                release: r.release.clone(),
                phase: r.phase.as_str().into(),
                message: r.message.clone(),
                updated_at: r.updated_at.clone(),
            });
        }
    }
    // Node failure reports of the latest operation (its start is on the root's
    // newest page of events; when it is not, every report is shown).
    let (events, _) = stack::events_page(clients, &stack.stack_id, None).await?;
    let all = crate::aws::state::nodes::read_node_reports(clients, &location).await?;
    let nodes = crate::aws::wait::node_reports_since(&all, crate::aws::wait::operation_start(&events));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let certificates = crate::aws::state::expiry::summarize(
        &crate::aws::state::expiry::read_certificate_reports(clients, &location).await?,
        now,
    );
    let bootstrap_token = crate::aws::state::join_token::summarize(
        crate::aws::state::join_token::read_report(clients, &location)
            .await?
            .as_ref(),
        now,
    );
    let backups = crate::aws::state::backups::list_backups(clients, cluster).await?;
    let interval = humantime::parse_duration(cluster.etcd.backup.interval.trim())
        .map(|d| d.as_secs() as i64)
        .unwrap_or(3600);
    let etcd_snapshot = crate::aws::state::expiry::snapshot_status(
        backups.snapshots.first().map(|s| (s.key.as_str(), s.time.as_str())),
        interval,
        now,
    );
    let etcd = crate::aws::state::etcd_status::read(clients, cluster).await?;
    let control_plane = crate::aws::state::control_plane_status::read(clients, &location, now).await;
    let kms_keys = crate::aws::state::kms_keys::describe_all(
        clients,
        &crate::aws::state::kms_keys::keys_of_stack(&stack.parameters, cluster.kms_key_arn.as_deref()),
    )
    .await;
    Ok(StatusReport {
        stack,
        nested,
        addons: out,
        nodes,
        certificates,
        bootstrap_token,
        etcd_snapshot,
        etcd,
        control_plane,
        kms_keys,
        recovery,
    })
}

/// The operation a stack status belongs to, when one is in progress.
pub fn operation_in_progress(status: &str) -> Option<Operation> {
    if !status.ends_with("_IN_PROGRESS") {
        return None;
    }
    Some(if status.starts_with("CREATE") || status.starts_with("ROLLBACK") {
        Operation::Create
    } else if status.starts_with("DELETE") {
        Operation::Delete
    } else {
        Operation::Update
    })
}

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

use crate::aws::lifecycle::rolls::{group_rolls, Deployment, GroupRoll};
use crate::render::layout::INSTALLED_RELEASES;

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
    if let Ok(bytes) = std::fs::read(artifacts.rendered_dir.join(publish::ROOT_TEMPLATE)) {
        if let Ok(root) = serde_json::from_slice::<serde_json::Value>(&bytes) {
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

/// What `destroy --purge` deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purged {
    /// Objects under the cluster's prefix.
    pub objects: usize,
    /// The issuer bucket, when there was one (src/aws/publish/issuer.rs).
    pub issuer_bucket: Option<String>,
}

/// Deletes every object under the cluster's prefix (`destroy --purge`), the
/// cluster's issuer bucket, and an older layout's public-read statement from
/// the bucket policy.
pub async fn purge(clients: &Clients, cluster: &ClusterConfig, location: &Location) -> Result<Purged, AwsError> {
    let objects = delete_under(clients, &location.bucket, &format!("{}/", location.prefix)).await?;
    crate::aws::state::join_token::delete_published(clients, &cluster.cluster_name).await?;
    crate::aws::services::retention::withdraw(clients, cluster, location).await?;
    crate::aws::publish::issuer::withdraw_public_read(clients, location).await?;
    let issuer_bucket = match crate::aws::publish::issuer::delete_issuer_bucket(clients, cluster, location).await? {
        Some(_) => crate::irsa::issuer_bucket(cluster),
        None => None,
    };
    Ok(Purged { objects, issuer_bucket })
}

/// What nodes of an earlier cluster of the same name left behind: the kubeadm
/// init lock and CA hash, and the addon status objects. A new cluster's first
/// controller must not take them for a running cluster's, and `--wait` must
/// not show the old addons' phases.
const RUNTIME_STATE: &[&str] = &[layout::BOOTSTRAP_DIR, layout::STATUS_DIR];

/// Deletes the runtime state of an earlier cluster (only when no stack exists).
pub async fn clear_runtime_state(clients: &Clients, location: &Location) -> Result<usize, AwsError> {
    let mut count = 0;
    for dir in RUNTIME_STATE {
        count += delete_under(clients, &location.bucket, &location.key(dir)).await?;
    }
    Ok(count)
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

    #[test]
    fn chart_digests_are_read_from_the_typed_plan() {
        let dir = tempfile::tempdir().unwrap();
        let a = "a".repeat(64);
        let b = "B".repeat(64);
        std::fs::create_dir_all(dir.path().join("addons")).unwrap();
        std::fs::write(
            dir.path().join(publish::ADDON_PLAN),
            format!(
                r#"{{"helm": {{"binary": {{"sha256": "{}"}}}}, "releases": [{{"name": "x", "sha256": "sha256:{a}"}}, {{"name": "y", "sha256": "{b}"}}, {{"name": "z", "sha256": "nope"}}, {{"name": "w"}}]}}"#,
                "c".repeat(64)
            ),
        )
        .unwrap();
        let charts = charts_from_plan(dir.path(), Path::new("/cache")).unwrap();
        let paths: Vec<String> = charts.iter().map(|c| c.path.display().to_string()).collect();
        // The releases' archives and the helm client they are installed with.
        assert_eq!(
            paths,
            [
                format!("/cache/sha256/{a}.tgz"),
                format!("/cache/sha256/{}.tgz", b.to_lowercase()),
                format!("/cache/sha256/{}.tgz", "c".repeat(64)),
            ]
        );
        // No release: no helm client to publish.
        std::fs::write(
            dir.path().join(publish::ADDON_PLAN),
            format!(
                r#"{{"helm": {{"binary": {{"sha256": "{}"}}}}, "releases": []}}"#,
                "c".repeat(64)
            ),
        )
        .unwrap();
        assert!(charts_from_plan(dir.path(), Path::new("/cache")).unwrap().is_empty());
    }

    #[test]
    fn operations_in_progress() {
        assert_eq!(operation_in_progress("CREATE_IN_PROGRESS"), Some(Operation::Create));
        assert_eq!(operation_in_progress("ROLLBACK_IN_PROGRESS"), Some(Operation::Create));
        assert_eq!(
            operation_in_progress("UPDATE_ROLLBACK_IN_PROGRESS"),
            Some(Operation::Update)
        );
        assert_eq!(operation_in_progress("DELETE_IN_PROGRESS"), Some(Operation::Delete));
        assert_eq!(operation_in_progress("CREATE_COMPLETE"), None);
    }
}
