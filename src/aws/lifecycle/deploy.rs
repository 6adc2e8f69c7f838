//! The deploy commands as library calls: `up`, `status`, `update`, `destroy`,
//! and `follow`, the wait shared by all of them (Ctrl-C, timeout, outcome →
//! error; the progress goes to a [`ProgressSink`] the CLI draws). The CLI
//! files only parse flags and print.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::aws::lifecycle::version_change::Baseline;
pub use crate::aws::publish::ami::PinnedAmi;
use crate::aws::publish::ami::{pin_amis, resolve_ami};
use crate::aws::publish::previous::PreviousBundle;
use crate::aws::publish::secrets::NamedSecret;
use crate::aws::publish::{self, ChartTarball, PublishInput, Published};
use crate::aws::services::s3::{delete_under, Location};
use crate::aws::services::stack::{self, OnFailureMode, StackInfo, StackRequest};
use crate::aws::wait::watch::{self, AwsSource, Pacer, TokioClock};
use crate::aws::wait::{ExpectedAddon, Operation, Outcome, StackProgress};
use crate::aws::{AwsError, Clients};
use crate::config::ClusterConfig;
use crate::digest::Sha256Digest;
use crate::render::layout;
use crate::render::Rendered;

pub use crate::render::layout::rendered_dir;

/// The chart tarballs the addon plan's releases pin (`sha256`), found in the
/// cache at `sha256/<hex>.tgz`.
pub fn charts_from_plan(rendered: &Rendered, cache: &Path) -> Result<Vec<ChartTarball>, AwsError> {
    let Some(plan) = publish::read_plan(&rendered.files)? else {
        return Ok(Vec::new());
    };
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
    /// Where the render was written (the hooks' `rendered` directory).
    pub rendered_dir: PathBuf,
    /// What the publish takes: the render as made in memory, or read back
    /// when a post-render hook ran or with `--use-rendered`.
    pub rendered: Rendered,
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
            rendered: &opts.rendered,
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
                    f.recovery = super::status::stopped_update(clients, &live, &nested, location)
                        .await?
                        .map(Box::new);
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
    fn chart_digests_are_read_from_the_typed_plan() {
        let a = "a".repeat(64);
        let b = "B".repeat(64);
        let mut rendered = Rendered::default();
        rendered.files.insert(
            publish::ADDON_PLAN.to_string(),
            format!(
                r#"{{"helm": {{"binary": {{"sha256": "{}"}}}}, "releases": [{{"name": "x", "sha256": "sha256:{a}"}}, {{"name": "y", "sha256": "{b}"}}, {{"name": "z", "sha256": "nope"}}, {{"name": "w"}}]}}"#,
                "c".repeat(64)
            )
            .into_bytes(),
        );
        let charts = charts_from_plan(&rendered, Path::new("/cache")).unwrap();
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
        rendered.files.insert(
            publish::ADDON_PLAN.to_string(),
            format!(
                r#"{{"helm": {{"binary": {{"sha256": "{}"}}}}, "releases": []}}"#,
                "c".repeat(64)
            )
            .into_bytes(),
        );
        assert!(charts_from_plan(&rendered, Path::new("/cache")).unwrap().is_empty());
        // No plan: nothing to publish.
        assert!(charts_from_plan(&Rendered::default(), Path::new("/cache"))
            .unwrap()
            .is_empty());
    }
}
