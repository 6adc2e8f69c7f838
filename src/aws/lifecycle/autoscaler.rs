//! The cluster-autoscaler kept out of a worker roll (issue 28): AWS warns that
//! a scaling action during a CloudFormation rolling update can make the update
//! fail (knowledge center, auto-scaling-group-rolling-updates), and a failed
//! update here rolls the whole cluster back. Suspending the group's processes
//! does not stop the autoscaler, which calls `SetDesiredCapacity` and
//! `TerminateInstanceInAutoScalingGroup` itself, so `update --wait` scales the
//! autoscaler release's Deployments to 0 replicas through the API server
//! before the change set runs, recording the count each had on the
//! Deployment itself ([`PAUSED_REPLICAS_ANNOTATION`], in the same write), and
//! once the wait ends, however it ends (`UPDATE_COMPLETE`, a rollback, an
//! error, the timeout), gives back the recorded count and removes the record.
//! The record is what keeps the pause through the roll (issue 38): the
//! reconciler upgrades a release whose Deployment carries it with its
//! replicas value at 0 (a minor upgrade bumps the autoscaler's chart, and
//! Helm 3's three-way merge would set the chart's count back mid-roll), and a
//! record an `update` left behind (killed before its resume) is kept by the
//! next pause and given back by the next resume. The client patches the
//! Deployments with a client certificate minted as `kube-aws kubeconfig`
//! mints one.

use std::time::Duration;

use serde_json::{json, Value};

use crate::kubeconfig::Entry;

/// The autoscaler's release (the cluster-autoscaler plugin's, in
/// `kube-system`). Its Deployment is not named after the release: chart
/// 9.59.0's fullname is `<release>-<cloudProvider>-cluster-autoscaler`
/// (templates/_helpers.tpl), so the release's Deployments are found by the
/// label Helm's chart conventions give every object of a release,
/// [`RELEASE_LABEL`].
pub const AUTOSCALER_NAMESPACE: &str = "kube-system";
pub const AUTOSCALER_RELEASE: &str = "cluster-autoscaler";

/// `app.kubernetes.io/instance: <release>` (Helm docs, "Labels and
/// Annotations"; the reconciler finds a release's Deployments by the same
/// label, src/node/kube_aws_node/helm_release.py `RELEASE_LABEL`).
pub const RELEASE_LABEL: &str = "app.kubernetes.io/instance";

/// The pause recorded on the Deployment itself, with the replicas it had: it
/// outlives the `update` that wrote it (a killed process, a lost
/// connection), the reconciler installs a release with a paused Deployment at
/// 0 replicas (Helm 3's three-way merge would otherwise put the chart's count
/// back mid-roll, src/node/kube_aws_node/helm_release.py `paused_overrides`),
/// and a resume gives back this count and removes it.
pub const PAUSED_REPLICAS_ANNOTATION: &str = "kube-aws.io/paused-replicas";

#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    #[error("cannot reach the API server {server:?} to pause the cluster-autoscaler: {reason}")]
    Unreachable { server: String, reason: String },
    #[error("the API server {server:?} answered {status} to {what} of deployment {namespace}/{name}: {body}")]
    Refused {
        server: String,
        what: &'static str,
        namespace: String,
        name: String,
        status: u16,
        body: String,
    },
    #[error("the client certificate or the cluster CA is not usable: {0}")]
    Tls(String),
    #[error("cannot mint a certificate to pause the cluster-autoscaler: {0}")]
    Mint(Box<crate::aws::AwsError>),
    #[error(
        "deployment {namespace}/{name} records a pause of {value:?} replicas ({PAUSED_REPLICAS_ANNOTATION}), \
         which is not a count; set its replicas and remove the annotation by hand"
    )]
    BadRecord {
        namespace: String,
        name: String,
        value: String,
    },
}

/// Deployments on one API server: listed by release, patched.
pub struct ScaleClient {
    client: reqwest::Client,
    server: String,
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

/// One Deployment of a release as the API server has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub name: String,
    pub replicas: u32,
    /// The [`PAUSED_REPLICAS_ANNOTATION`]'s value, when there is one.
    pub paused: Option<String>,
}

impl Live {
    fn from_json(v: &Value) -> Live {
        Live {
            name: v["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            replicas: v["spec"]["replicas"].as_u64().unwrap_or(0) as u32,
            paused: v["metadata"]["annotations"][PAUSED_REPLICAS_ANNOTATION]
                .as_str()
                .map(str::to_string),
        }
    }

    fn recorded(&self, namespace: &str) -> Result<Option<u32>, PauseError> {
        match &self.paused {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| PauseError::BadRecord {
                namespace: namespace.into(),
                name: self.name.clone(),
                value: v.clone(),
            }),
        }
    }
}

/// The merge patch that pauses a Deployment and the count it records, or
/// None when there is nothing to do (no replicas and no pause recorded).
/// A pause already recorded (an `update` that died before its resume) is
/// kept: its count is the one to give back, not the 0 it left. Pure.
pub fn pause_patch(live: &Live, namespace: &str) -> Result<Option<(Value, u32)>, PauseError> {
    match live.recorded(namespace)? {
        Some(n) => Ok(Some((json!({"spec": {"replicas": 0}}), n))),
        None if live.replicas == 0 => Ok(None),
        None => Ok(Some((
            json!({
                "metadata": {"annotations": {PAUSED_REPLICAS_ANNOTATION: live.replicas.to_string()}},
                "spec": {"replicas": 0}
            }),
            live.replicas,
        ))),
    }
}

/// The merge patch that resumes a paused Deployment (the recorded count back
/// and the record removed, in one write) and that count; None when no pause
/// is recorded (never paused, or resumed already). Pure.
pub fn resume_patch(live: &Live, namespace: &str) -> Result<Option<(Value, u32)>, PauseError> {
    Ok(live.recorded(namespace)?.map(|n| {
        (
            json!({
                "metadata": {"annotations": {PAUSED_REPLICAS_ANNOTATION: null}},
                "spec": {"replicas": n}
            }),
            n,
        )
    }))
}

impl ScaleClient {
    /// A client that trusts only the cluster CA and presents the entry's certificate.
    pub fn new(entry: &Entry) -> Result<ScaleClient, PauseError> {
        let ca = reqwest::Certificate::from_pem(entry.ca_pem.as_bytes()).map_err(|e| PauseError::Tls(chain(&e)))?;
        let identity = reqwest::Identity::from_pem(format!("{}\n{}", entry.cert_pem, entry.key_pem).as_bytes())
            .map_err(|e| PauseError::Tls(chain(&e)))?;
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .identity(identity)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| PauseError::Tls(chain(&e)))?;
        Ok(ScaleClient {
            client,
            server: entry.server.trim_end_matches('/').to_string(),
        })
    }

    fn url(&self, namespace: &str) -> String {
        format!("{}/apis/apps/v1/namespaces/{namespace}/deployments", self.server)
    }

    fn refused(&self, what: &'static str, namespace: &str, name: &str, status: u16, body: String) -> PauseError {
        PauseError::Refused {
            server: self.server.clone(),
            what,
            namespace: namespace.into(),
            name: name.into(),
            status,
            body: body.chars().take(300).collect(),
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> PauseError {
        PauseError::Unreachable {
            server: self.server.clone(),
            reason: chain(e),
        }
    }

    /// The release's Deployments in the namespace ([`RELEASE_LABEL`]), by name.
    pub async fn deployments(&self, namespace: &str, release: &str) -> Result<Vec<Live>, PauseError> {
        let r = self
            .client
            .get(self.url(namespace))
            .query(&[("labelSelector", format!("{RELEASE_LABEL}={release}"))])
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        // Named as `kubectl get` selects them: "deployment <ns>/-l <selector>".
        let (what, selected) = ("a list", format!("-l {RELEASE_LABEL}={release}"));
        if status != 200 {
            return Err(self.refused(what, namespace, &selected, status, body));
        }
        let v: Value =
            serde_json::from_str(&body).map_err(|_| self.refused(what, namespace, &selected, status, body.clone()))?;
        let mut out: Vec<Live> = v["items"]
            .as_array()
            .map(|items| items.iter().map(Live::from_json).collect())
            .unwrap_or_default();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Applies a JSON merge patch to the Deployment.
    pub async fn patch(&self, namespace: &str, name: &str, patch: &Value) -> Result<(), PauseError> {
        let r = self
            .client
            .patch(format!("{}/{name}", self.url(namespace)))
            .header("Content-Type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = r.status().as_u16();
        if status == 200 {
            return Ok(());
        }
        let body = r.text().await.unwrap_or_default();
        Err(self.refused("a patch", namespace, name, status, body))
    }
}

/// One Deployment [`pause`] or [`resume`] changed: its name and the replicas
/// recorded for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scaled {
    pub name: String,
    pub replicas: u32,
}

/// What [`pause`] did: the Deployments at 0 with a recorded count (empty when
/// the release has none, or none with replicas).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paused {
    pub deployments: Vec<Scaled>,
}

impl Paused {
    /// The replicas recorded, summed over the release's Deployments.
    pub fn replicas(&self) -> u32 {
        self.deployments.iter().map(|d| d.replicas).sum()
    }
}

/// Pauses the autoscaler; a cluster without its Deployment (the release not
/// installed yet) is left alone.
pub async fn pause(api: &ScaleClient) -> Result<Paused, PauseError> {
    pause_release(api, AUTOSCALER_NAMESPACE, AUTOSCALER_RELEASE).await
}

/// Resumes the autoscaler from the pause recorded on its Deployments,
/// whichever `update` recorded it.
pub async fn resume(api: &ScaleClient) -> Result<Paused, PauseError> {
    resume_release(api, AUTOSCALER_NAMESPACE, AUTOSCALER_RELEASE).await
}

/// [`pause`] for any release: each of its Deployments goes to 0 replicas
/// with its count recorded in [`PAUSED_REPLICAS_ANNOTATION`], in one write.
pub async fn pause_release(api: &ScaleClient, namespace: &str, release: &str) -> Result<Paused, PauseError> {
    patch_release(api, namespace, release, pause_patch).await
}

/// [`resume`] for any release: each Deployment with a recorded pause gets
/// its count back and loses the record, in one write; the others are left
/// alone. Returns what it put back.
pub async fn resume_release(api: &ScaleClient, namespace: &str, release: &str) -> Result<Paused, PauseError> {
    patch_release(api, namespace, release, resume_patch).await
}

/// A decision on one Deployment: its patch and the count it names, or none.
type Decide = fn(&Live, &str) -> Result<Option<(Value, u32)>, PauseError>;

/// Each Deployment of the release that `decide` gives a patch gets it;
/// returns those Deployments with the count `decide` named.
async fn patch_release(
    api: &ScaleClient,
    namespace: &str,
    release: &str,
    decide: Decide,
) -> Result<Paused, PauseError> {
    let mut done = Paused::default();
    for live in api.deployments(namespace, release).await? {
        if let Some((patch, replicas)) = decide(&live, namespace)? {
            api.patch(namespace, &live.name, &patch).await?;
            done.deployments.push(Scaled {
                name: live.name,
                replicas,
            });
        }
    }
    Ok(done)
}

/// The command that resumes a paused Deployment by hand (docs/deploy.md):
/// the recorded count back and the record removed in one write, so a
/// reconciler run in between cannot see one without the other.
pub fn resume_by_hand(namespace: &str, name: &str, replicas: impl std::fmt::Display) -> String {
    format!(
        "kubectl -n {namespace} patch deployment {name} --type merge -p \
         '{{\"metadata\":{{\"annotations\":{{\"{PAUSED_REPLICAS_ANNOTATION}\":null}}}},\"spec\":{{\"replicas\":{replicas}}}}}'"
    )
}

/// How long the pause's certificate lasts when `--wait` has no `--timeout`:
/// the wait then lasts as long as CloudFormation's operation, which the
/// rendered timeouts bound (every node batch and addon wait condition; the
/// example's longest chain is about 2 hours), so a day covers it with room.
pub const PAUSE_CERT_WITHOUT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// For `update --wait`: a client with a certificate minted for the wait
/// (plus ten minutes; [`PAUSE_CERT_WITHOUT_TIMEOUT`] when the wait is
/// unbounded), to [`pause`] before the change set and [`resume`] after it.
pub async fn client_for_update(
    clients: &crate::aws::Clients,
    cluster: &crate::config::ClusterConfig,
    wait: Option<Duration>,
) -> Result<ScaleClient, PauseError> {
    let req = crate::aws::lifecycle::kubeconfig::MintRequest {
        user: "kube-aws:update".into(),
        group: Some(crate::pki::DEFAULT_GROUP.into()),
        ttl: wait.map_or(PAUSE_CERT_WITHOUT_TIMEOUT, |w| w + Duration::from_secs(600)),
        context: None,
    };
    let minted = crate::aws::lifecycle::kubeconfig::mint(clients, cluster, &req)
        .await
        .map_err(|e| PauseError::Mint(Box::new(e)))?;
    ScaleClient::new(&minted.entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(replicas: u32, paused: Option<&str>) -> Live {
        Live {
            name: "ca".into(),
            replicas,
            paused: paused.map(str::to_string),
        }
    }

    #[test]
    fn a_pause_records_the_count_in_the_same_write() {
        let (patch, n) = pause_patch(&live(2, None), "kube-system").unwrap().unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {PAUSED_REPLICAS_ANNOTATION: "2"}}, "spec": {"replicas": 0}})
        );
        // Nothing to pause and nothing recorded: left alone.
        assert_eq!(pause_patch(&live(0, None), "kube-system").unwrap(), None);
    }

    #[test]
    fn a_pause_left_by_an_earlier_update_keeps_its_count() {
        // At 0 from the pause, or put back to the chart's count by a helm
        // upgrade without the reconciler's override: the record is kept.
        for replicas in [0, 1] {
            let (patch, n) = pause_patch(&live(replicas, Some("3")), "kube-system").unwrap().unwrap();
            assert_eq!((patch, n), (json!({"spec": {"replicas": 0}}), 3));
        }
    }

    #[test]
    fn a_resume_gives_back_the_record_and_removes_it() {
        let (patch, n) = resume_patch(&live(0, Some("3")), "kube-system").unwrap().unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {PAUSED_REPLICAS_ANNOTATION: null}}, "spec": {"replicas": 3}})
        );
        assert_eq!(resume_patch(&live(2, None), "kube-system").unwrap(), None);
        let err = resume_patch(&live(0, Some("two")), "kube-system").unwrap_err();
        assert!(
            err.to_string()
                .contains("deployment kube-system/ca records a pause of \"two\" replicas"),
            "{err}"
        );
    }

    #[test]
    fn the_hand_resume_is_one_merge_patch() {
        let cmd = resume_by_hand("kube-system", "ca", 2);
        assert_eq!(
            cmd,
            "kubectl -n kube-system patch deployment ca --type merge -p \
             '{\"metadata\":{\"annotations\":{\"kube-aws.io/paused-replicas\":null}},\"spec\":{\"replicas\":2}}'"
        );
    }
}
