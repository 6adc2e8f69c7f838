//! The addon plan: every release in install order (bootstrap addons first, then
//! dependency order), with what the installer needs to fetch, check, install,
//! report and signal. It is the only input of the reconciler (`kube-aws-node
//! reconcile`, src/node/kube_aws_node/reconcile.py).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::input::{HelmBinary, RenderInput};
use super::layout;
use super::timeouts::{release_budget, wait_timeouts, Schedule, Step};
use super::{Ctx, RenderError};
use crate::config::{GraphProblem, Origin, Release, ReleaseGraph};

/// Installer retry policy.
pub const ATTEMPTS: u32 = 3;
/// Seconds between attempts (the installer multiplies it by the attempt number).
pub const RETRY_DELAY_SECONDS: u64 = 10;
/// How long the installer waits for `/readyz`, then (once the bootstrap
/// releases, the CNI among them, are ready) for a Ready node: a kubelet
/// reports Ready within seconds of its CNI's config, so ten minutes is ample
/// and every non-bootstrap release's wait condition includes it.
pub const READYZ_TIMEOUT_SECONDS: u64 = 900;
pub const NODE_READY_TIMEOUT_SECONDS: u64 = 600;
/// One controller's share of the worker gate: its group's signal timeout
/// (src/render/cfn/nodes.rs NODE_SIGNAL_TIMEOUT, 30 minutes).
pub const CONTROLLER_ROLL_SECONDS: u64 = 1800;

fn is_zero(n: &u64) -> bool {
    *n == 0
}
/// Releases the reconciler installs at once (each once its dependencies are ready).
pub const CONCURRENCY: u32 = 4;
/// The annotation (value `"true"`) that puts a Deployment, DaemonSet or
/// StatefulSet of a plugin's manifests into the plan's `manifestRollouts`:
/// the reconciler waits for its rollout after the Ready-node gate and before
/// any release that is not a bootstrap one starts. The pod identity webhook
/// carries it: the pods of the kube-aws roles' releases cannot be created
/// before it answers (its failurePolicy is Fail for them).
pub const READY_BEFORE_RELEASES: &str = "kube-aws.io/ready-before-releases";
/// How long the reconciler waits for each of the plan's `manifestRollouts`:
/// two replicas of a small image, on nodes that are Ready.
pub const MANIFEST_ROLLOUT_TIMEOUT_SECONDS: u64 = 300;
/// The plugin whose webhook gives pods their service account's IAM role.
pub const POD_IDENTITY_WEBHOOK_PLUGIN: &str = "pod-identity-webhook";
/// The Tiller image for Helm v2 mode.
pub const TILLER_IMAGE: &str = "ghcr.io/helm/tiller:v2.17.0";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Plan {
    pub api_version: String,
    pub kind: String,
    pub cluster: String,
    pub region: String,
    /// The cluster's Kubernetes version: the reconciler installs the plan
    /// only once every controller's kubelet runs this minor, and, while the
    /// stack is being updated, every worker's, so an upgrade's minor-pinned
    /// addons (cloud controller manager, cluster-autoscaler) follow the
    /// control plane and then the pools (src/node/kube_aws_node/upgrade.py
    /// `nodes_behind`, reconcile.py `held_by_versions`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubernetes_version: String,
    /// How long the Ready-node gate waits for a worker (a Ready node that is
    /// not a controller), while the root stack is in progress, before it
    /// settles for any Ready node: the pools start only once the control
    /// plane is done (root stack DependsOn), so this covers each
    /// controller's boot ([`CONTROLLER_ROLL_SECONDS`]) plus
    /// [`NODE_READY_TIMEOUT_SECONDS`]. Zero (left out) when no pool starts
    /// with a node (every pool at minimum 0 waits for cluster-autoscaler, an
    /// addon itself).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub worker_ready_timeout_seconds: u64,
    /// `s3://…/<cluster>/status/addons/`; the installer appends `<release>.json`.
    #[serde(rename = "statusURI")]
    pub status_uri: String,
    pub helm: PlanHelm,
    pub retries: Retries,
    pub readyz_timeout_seconds: u64,
    pub node_ready_timeout_seconds: u64,
    /// How many releases the reconciler installs at once, each as soon as its
    /// dependencies are ready.
    pub concurrency: u32,
    /// Plugin manifests, relative to the addon directory, applied after the bootstrap addons.
    pub manifests: Vec<String>,
    /// Workloads of those manifests annotated [`READY_BEFORE_RELEASES`]: after
    /// the Ready-node gate the reconciler waits for each one's rollout
    /// (`kubectl rollout status`, at most its `timeoutSeconds`) before it
    /// starts any release that is not a bootstrap one. Every such release's
    /// wait-condition timeout includes those waits. Left out when empty, so
    /// a plan without any is the same as before the field existed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manifest_rollouts: Vec<ManifestRollout>,
    pub releases: Vec<PlanRelease>,
}

/// A workload of a plugin manifest that is Ready before the releases that
/// are not bootstrap ones start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManifestRollout {
    /// The manifest, relative to the addon directory (one of the plan's `manifests`).
    pub manifest: String,
    /// `Deployment`, `DaemonSet` or `StatefulSet`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// [`MANIFEST_ROLLOUT_TIMEOUT_SECONDS`].
    pub timeout_seconds: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PlanHelm {
    pub version: u32,
    pub binary: PlanHelmBinary,
    pub tiller: PlanTiller,
}

/// The helm client of the plan: the pin, and the published copy the
/// installer reads (`s3://…/charts/<sha256>.tgz`, content-addressed as the
/// chart archives are, so no node downloads it from the internet).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PlanHelmBinary {
    #[serde(flatten)]
    pub pinned: HelmBinary,
    pub object: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PlanTiller {
    /// Helm v2 mode with at least one release.
    pub install: bool,
    pub namespace: String,
    pub history_max: u32,
    /// The manifest the installer applies, relative to the addon directory.
    pub manifest: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Retries {
    pub attempts: u32,
    pub delay_seconds: u64,
}

/// One release as the installer sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PlanRelease {
    pub name: String,
    pub chart: String,
    pub chart_version: String,
    pub namespace: String,
    pub create_namespace: bool,
    pub timeout_seconds: u64,
    pub bootstrap: bool,
    /// The chart value that sets the replicas of the release's Deployments:
    /// when one of them carries the pause `update --wait` records
    /// (src/aws/lifecycle/autoscaler.rs `PAUSED_REPLICAS_ANNOTATION`), the reconciler
    /// upgrades the release with this value at 0, so a chart upgrade during
    /// the roll keeps it paused (helm_release.py `paused_overrides`). Left out
    /// when empty, so the other releases' entries, and their wait
    /// conditions, are as before the field existed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub replicas_value: String,
    pub depends_on: Vec<String>,
    /// False when the chart has no pinned digest: the installer refuses it.
    pub locked: bool,
    pub sha256: Option<String>,
    /// The published archive, `s3://…/<cluster>/charts/<sha256>.tgz`.
    pub chart_object: String,
    pub chart_url: String,
    /// Relative to the addon directory.
    pub values_file: String,
    pub values_sha256: String,
    /// Files under the chart's `crds/`: the installer waits for them to be Established.
    pub crds: Vec<String>,
    pub origin: String,
    /// The control-plane stack's wait condition this release signals.
    pub wait_condition: String,
    /// Its CreationPolicy timeout: the reconciler's start, this release and
    /// the longest chain of releases before it (src/render/timeouts.rs).
    pub wait_timeout_seconds: u64,
}

impl Plan {
    /// Reads a rendered plan (`addons/plan.json`) back. A key it lacks takes
    /// its default, so `aws` reads only what it needs of the plan.
    pub fn from_json(bytes: &[u8]) -> Result<Plan, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// Orders releases: bootstrap ones first, each group in dependency order, ties
/// in input order (the release graph, src/config/graph.rs, owns the rules;
/// here a problem is named by release, as render input has no file positions).
fn install_order(input: &RenderInput) -> Result<Vec<usize>, RenderError> {
    let releases: Vec<&Release> = input.addons.iter().map(|a| &a.release).collect();
    let err = |i: usize, message: String| RenderError::Addon {
        release: releases[i].name.clone(),
        message,
    };
    ReleaseGraph::new(&releases).install_order().map_err(|p| match p {
        GraphProblem::Duplicate { release, .. } => err(
            release,
            "is declared twice (by cluster.yaml or plugins); rename one release".into(),
        ),
        GraphProblem::Unknown { release, dep } => {
            let d = &releases[release].depends_on[dep];
            err(
                release,
                format!("depends on {d:?}, which is not a release of this cluster"),
            )
        }
        GraphProblem::NotBootstrap { release, dep } => {
            let d = &releases[release].depends_on[dep];
            err(
                release,
                format!("is a bootstrap addon but depends on {d:?}, which is not; mark {d:?} bootstrap too"),
            )
        }
        GraphProblem::Unordered { release } | GraphProblem::SelfDependency { release, .. } => err(
            release,
            "is part of a dependsOn cycle; remove one of the dependencies".into(),
        ),
        GraphProblem::Cycle { cycle } => RenderError::Addon {
            release: cycle.first().cloned().unwrap_or_default(),
            message: "is part of a dependsOn cycle; remove one of the dependencies".into(),
        },
    })
}

/// [`Plan::worker_ready_timeout_seconds`].
fn worker_ready_timeout(input: &RenderInput) -> u64 {
    let default_hooks = crate::plugin::NodeHooks::default();
    let starts_with_a_node = input.cluster.worker.node_pools.iter().any(|p| {
        let hooks = input.plugins.pools.get(&p.name).unwrap_or(&default_hooks);
        super::cfn::pool_bounds(p, hooks).min > 0
    });
    if starts_with_a_node {
        NODE_READY_TIMEOUT_SECONDS + u64::from(input.cluster.controller.count) * CONTROLLER_ROLL_SECONDS
    } else {
        0
    }
}

/// `metrics-server` -> `MetricsServer` (logical IDs are alphanumeric).
pub fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut up = true;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(if up { c.to_ascii_uppercase() } else { c });
            up = false;
        } else {
            up = true;
        }
    }
    out
}

pub use crate::digest::sha256_hex;

/// Builds the plan. Values files are `values/<release>.yaml` next to it.
pub fn build_plan(input: &RenderInput, ctx: &Ctx) -> Result<Plan, RenderError> {
    let helm = &input.cluster.helm;
    if helm.version == 2 && !input.addons.is_empty() && !helm.tiller.enabled {
        return Err(RenderError::TillerDisabled {
            releases: input.addons.len(),
        });
    }
    let order = install_order(input)?;
    check_bootstrap_roles(input)?;
    let manifest_rollouts = manifest_rollouts(input);
    let tiller_install = helm.version == 2 && !input.addons.is_empty();
    let mut releases = Vec::with_capacity(order.len());
    for i in order {
        let a = &input.addons[i];
        let r = &a.release;
        let timeout = r.timeout.as_secs().max(1);
        let chart_object = match &a.digest {
            Some(d) => format!("{}/{}", ctx.s3_base, layout::chart_object(d)),
            None => format!(
                "{}/{}",
                ctx.s3_base,
                layout::chart_object(&format!("{}-{}", r.chart, a.chart_version))
            ),
        };
        let mut entry = PlanRelease {
            name: r.name.clone(),
            chart: r.chart.clone(),
            chart_version: a.chart_version.clone(),
            namespace: r.namespace.clone(),
            create_namespace: r.create_namespace,
            timeout_seconds: timeout,
            bootstrap: r.bootstrap,
            replicas_value: r.replicas_value.clone().unwrap_or_default(),
            depends_on: r.depends_on.clone(),
            locked: a.digest.is_some(),
            sha256: a.digest.clone(),
            chart_object,
            chart_url: a.chart_url.clone(),
            values_file: layout::values_in_addons(&r.name),
            values_sha256: sha256_hex(a.values_yaml.as_bytes()),
            crds: a.crds.clone(),
            origin: match &r.origin {
                Origin::Cluster { index } => format!("cluster.yaml charts[{index}]"),
                Origin::Plugin { plugin, .. } => format!("plugin {plugin}"),
            },
            wait_condition: String::new(),
            wait_timeout_seconds: 0,
        };
        // The hash covers the entry itself (chart, digest, values, namespace, deps…),
        // so a changed addon gets a new wait condition and is waited for again.
        let hashed = serde_json::to_vec(&entry).unwrap_or_default();
        entry.wait_condition = format!("Addon{}{}", camel(&r.name), &sha256_hex(&hashed)[..10]);
        releases.push(entry);
    }
    let steps: Vec<Step> = releases
        .iter()
        .map(|e| Step {
            name: &e.name,
            depends_on: &e.depends_on,
            bootstrap: e.bootstrap,
            budget: release_budget(e.timeout_seconds),
        })
        .collect();
    let mut schedule = Schedule::reconciler(CONCURRENCY);
    if !manifest_rollouts.is_empty() {
        schedule.gate += manifest_rollouts.iter().map(|r| r.timeout_seconds).sum::<u64>();
    }
    let timeouts = wait_timeouts(&steps, &schedule);
    for (e, t) in releases.iter_mut().zip(timeouts) {
        e.wait_timeout_seconds = t;
    }
    Ok(Plan {
        api_version: "kube-aws/v1".into(),
        kind: "AddonPlan".into(),
        cluster: input.cluster.cluster_name.clone(),
        region: input.cluster.region.clone(),
        kubernetes_version: ctx.k8s_version.clone(),
        worker_ready_timeout_seconds: worker_ready_timeout(input),
        status_uri: format!("{}/{}", ctx.s3_base, layout::ADDON_STATUS_DIR),
        helm: PlanHelm {
            version: helm.version,
            binary: PlanHelmBinary {
                pinned: input.helm_binary.clone(),
                object: format!("{}/{}", ctx.s3_base, layout::chart_object(&input.helm_binary.sha256)),
            },
            tiller: PlanTiller {
                install: tiller_install,
                namespace: helm.tiller.namespace.clone(),
                history_max: helm.tiller.history_max,
                manifest: tiller_install.then(|| "tiller.yaml".to_string()),
            },
        },
        retries: Retries {
            attempts: ATTEMPTS,
            delay_seconds: RETRY_DELAY_SECONDS,
        },
        readyz_timeout_seconds: READYZ_TIMEOUT_SECONDS,
        node_ready_timeout_seconds: NODE_READY_TIMEOUT_SECONDS,
        concurrency: CONCURRENCY,
        manifests: input
            .plugins
            .cluster
            .manifests
            .iter()
            .map(|m| layout::plugin_manifest(&m.plugin, &m.name))
            .collect(),
        manifest_rollouts,
        releases,
    })
}

/// The plugin manifests' workloads annotated [`READY_BEFORE_RELEASES`], in
/// manifest and document order.
fn manifest_rollouts(input: &RenderInput) -> Vec<ManifestRollout> {
    let mut out = Vec::new();
    for m in &input.plugins.cluster.manifests {
        for doc in serde_yaml::Deserializer::from_str(&m.content) {
            // Plugin resolution has checked that every document parses.
            let Ok(v) = <serde_yaml::Value as Deserialize>::deserialize(doc) else {
                continue;
            };
            let kind = v["kind"].as_str().unwrap_or_default();
            let marked = v["metadata"]["annotations"][READY_BEFORE_RELEASES].as_str() == Some("true");
            if marked && matches!(kind, "Deployment" | "DaemonSet" | "StatefulSet") {
                out.push(ManifestRollout {
                    manifest: layout::plugin_manifest(&m.plugin, &m.name),
                    kind: kind.to_string(),
                    namespace: v["metadata"]["namespace"].as_str().unwrap_or("default").to_string(),
                    name: v["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                    timeout_seconds: MANIFEST_ROLLOUT_TIMEOUT_SECONDS,
                });
            }
        }
    }
    out
}

/// With the pod identity webhook, a release of a plugin whose service
/// accounts have IAM roles cannot be a bootstrap one: the webhook refuses
/// those accounts' pods until it answers (failurePolicy Fail), and it is
/// applied, and waited for, only after every bootstrap release is in.
fn check_bootstrap_roles(input: &RenderInput) -> Result<(), RenderError> {
    if !input.plugins.is_active(POD_IDENTITY_WEBHOOK_PLUGIN) {
        return Ok(());
    }
    for a in input.addons.iter().filter(|a| a.release.bootstrap) {
        let Origin::Plugin { plugin, .. } = &a.release.origin else {
            continue;
        };
        if let Some(sa) = input.plugins.service_accounts.iter().find(|s| &s.plugin == plugin) {
            return Err(RenderError::Addon {
                release: a.release.name.clone(),
                message: format!(
                    "is a bootstrap addon of plugin {plugin:?}, whose service account {}/{} has an IAM role: \
                     its pods are created only once the pod identity webhook answers, which is after the \
                     bootstrap addons; remove `bootstrap: true`",
                    sa.namespace, sa.name
                ),
            });
        }
    }
    Ok(())
}

/// The Tiller manifests (service account, RBAC, deployment) for Helm v2 mode.
/// Tiller runs on the host network and tolerates not-ready and control-plane
/// taints so it can install the CNI before any pod network exists.
pub fn tiller_manifest(namespace: &str, history_max: u32) -> String {
    let ns = super::yaml::quote(namespace);
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: tiller
  namespace: {ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kube-aws-tiller
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
  - kind: ServiceAccount
    name: tiller
    namespace: {ns}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: tiller-deploy
  namespace: {ns}
  labels:
    app: helm
    name: tiller
spec:
  replicas: 1
  selector:
    matchLabels:
      app: helm
      name: tiller
  template:
    metadata:
      labels:
        app: helm
        name: tiller
    spec:
      serviceAccountName: tiller
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      nodeSelector:
        node-role.kubernetes.io/control-plane: ""
      tolerations:
        - key: node-role.kubernetes.io/control-plane
          operator: Exists
          effect: NoSchedule
        - key: node.kubernetes.io/not-ready
          operator: Exists
          effect: NoSchedule
        - key: node.cloudprovider.kubernetes.io/uninitialized
          operator: Exists
          effect: NoSchedule
      containers:
        - name: tiller
          image: {TILLER_IMAGE}
          command: ["/tiller", "--listen=127.0.0.1:44134", "--history-max={history_max}"]
          env:
            - name: TILLER_NAMESPACE
              value: {ns}
          readinessProbe:
            httpGet:
              path: /readiness
              port: 44135
          livenessProbe:
            httpGet:
              path: /liveness
              port: 44135
"#
    )
}

/// What the controllers' reconciler installs, in one content-addressed
/// object: the plan, the values, Tiller's manifest and the plugin manifests,
/// by their path in the addon directory. It is published to
/// `addons/<sha256>/bundle.json` (the publisher's content-addressed key) and
/// the control-plane stack's `AddonPlan` parameter names that key and hash,
/// so an addon change reaches the controllers without touching their user
/// data.
#[derive(Debug, Clone)]
pub struct AddonBundle {
    pub text: String,
    pub sha256: String,
    /// The bundle's key relative to `s3URI/<cluster>/`.
    pub key: String,
    /// The secret bundle entries its files reference: the controller decrypts them.
    pub secret_names: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BundleDoc<'a> {
    api_version: &'static str,
    kind: &'static str,
    /// Path in the addon directory -> content.
    files: BTreeMap<&'a str, &'a str>,
    /// The files holding secret references, which the reconciler fills in
    /// from the secrets the controller decrypted at boot.
    secret_files: Vec<super::secrets::SecretFile>,
}

/// Builds the addon bundle from the addon artifacts already in `out`.
pub fn addon_bundle(input: &RenderInput, out: &super::Rendered) -> Result<AddonBundle, RenderError> {
    let mut files = BTreeMap::new();
    for (rel, bytes) in &out.files {
        let name = if layout::in_manifests(rel) {
            rel.as_str()
        } else {
            match layout::in_addons(rel) {
                Some(r) => r,
                None => continue,
            }
        };
        let text = std::str::from_utf8(bytes).map_err(|_| RenderError::Template {
            name: rel.clone(),
            message: "is not UTF-8".into(),
        })?;
        files.insert(name, text);
    }
    let known = super::secrets::known_references(input);
    let scanned = super::secrets::node_secrets(false, &known, files.iter().map(|(k, v)| (*k, *v)));
    let secret_names = scanned
        .names
        .into_iter()
        .filter(|n| known.contains(&n.as_str()))
        .collect();
    let doc = BundleDoc {
        api_version: "kube-aws/v1",
        kind: "AddonBundle",
        files,
        secret_files: scanned.files,
    };
    let mut text = serde_json::to_string_pretty(&doc).map_err(|e| RenderError::Template {
        name: layout::ADDON_BUNDLE.into(),
        message: e.to_string(),
    })?;
    text.push('\n');
    let sha256 = sha256_hex(text.as_bytes());
    Ok(AddonBundle {
        key: layout::content_addressed(layout::ADDON_BUNDLE, &sha256),
        sha256,
        text,
        secret_names,
    })
}

#[cfg(test)]
mod tests;
