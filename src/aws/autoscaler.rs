//! The cluster-autoscaler kept out of a worker roll (issue 28): AWS warns that
//! a scaling action during a CloudFormation rolling update can make the update
//! fail (knowledge center, auto-scaling-group-rolling-updates), and a failed
//! update here rolls the whole cluster back. Suspending the group's processes
//! does not stop the autoscaler, which calls `SetDesiredCapacity` and
//! `TerminateInstanceInAutoScalingGroup` itself, so `update --wait` scales its
//! Deployment to 0 replicas through the API server before the change set runs
//! and puts back the count it read once the wait ends, however it ends
//! (`UPDATE_COMPLETE`, a rollback, an error, the timeout). The client is the
//! Deployment's `scale` subresource, with a client certificate minted as
//! `kube-aws kubeconfig` mints one.

use std::time::Duration;

use serde_json::{json, Value};

use crate::kubeconfig::Entry;

/// The autoscaler's Deployment (the cluster-autoscaler plugin's release in
/// `kube-system`; the chart names it after the release).
pub const AUTOSCALER_NAMESPACE: &str = "kube-system";
pub const AUTOSCALER_DEPLOYMENT: &str = "cluster-autoscaler";

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
    Mint(Box<super::AwsError>),
}

/// A Deployment's `scale` subresource on one API server.
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

    fn url(&self, namespace: &str, name: &str) -> String {
        format!(
            "{}/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
            self.server
        )
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

    /// The Deployment's replicas, or None when it does not exist.
    pub async fn replicas(&self, namespace: &str, name: &str) -> Result<Option<u32>, PauseError> {
        let r = self
            .client
            .get(self.url(namespace, name))
            .send()
            .await
            .map_err(|e| PauseError::Unreachable {
                server: self.server.clone(),
                reason: chain(&e),
            })?;
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        match status {
            404 => Ok(None),
            200 => {
                let v: Value = serde_json::from_str(&body)
                    .map_err(|_| self.refused("a read", namespace, name, status, body.clone()))?;
                Ok(Some(v["spec"]["replicas"].as_u64().unwrap_or(0) as u32))
            }
            _ => Err(self.refused("a read", namespace, name, status, body)),
        }
    }

    /// Sets the Deployment's replicas.
    pub async fn set_replicas(&self, namespace: &str, name: &str, replicas: u32) -> Result<(), PauseError> {
        let r = self
            .client
            .patch(self.url(namespace, name))
            .header("Content-Type", "application/merge-patch+json")
            .body(json!({"spec": {"replicas": replicas}}).to_string())
            .send()
            .await
            .map_err(|e| PauseError::Unreachable {
                server: self.server.clone(),
                reason: chain(&e),
            })?;
        let status = r.status().as_u16();
        if status == 200 {
            return Ok(());
        }
        let body = r.text().await.unwrap_or_default();
        Err(self.refused("a scale", namespace, name, status, body))
    }
}

/// What [`pause`] changed, for [`resume`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    /// The replicas before the pause; None when there was no Deployment.
    pub replicas: Option<u32>,
}

/// Scales the autoscaler to 0 and returns what to put back. A cluster
/// without its Deployment (the release not installed yet) is left alone.
pub async fn pause(api: &ScaleClient) -> Result<Paused, PauseError> {
    pause_deployment(api, AUTOSCALER_NAMESPACE, AUTOSCALER_DEPLOYMENT).await
}

/// Puts the replicas [`pause`] read back (nothing when it found none or 0).
pub async fn resume(api: &ScaleClient, paused: &Paused) -> Result<(), PauseError> {
    resume_deployment(api, AUTOSCALER_NAMESPACE, AUTOSCALER_DEPLOYMENT, paused).await
}

/// [`pause`] for any Deployment.
pub async fn pause_deployment(api: &ScaleClient, namespace: &str, name: &str) -> Result<Paused, PauseError> {
    let replicas = api.replicas(namespace, name).await?;
    if replicas.is_some_and(|n| n > 0) {
        api.set_replicas(namespace, name, 0).await?;
    }
    Ok(Paused { replicas })
}

/// [`resume`] for any Deployment.
pub async fn resume_deployment(
    api: &ScaleClient,
    namespace: &str,
    name: &str,
    paused: &Paused,
) -> Result<(), PauseError> {
    match paused.replicas {
        Some(n) if n > 0 => api.set_replicas(namespace, name, n).await,
        _ => Ok(()),
    }
}

/// How long the pause's certificate lasts when `--wait` has no `--timeout`:
/// the wait then lasts as long as CloudFormation's operation, which the
/// rendered timeouts bound (every node batch and addon wait condition; the
/// example's longest chain is about 2 hours), so a day covers it with room.
pub const PAUSE_CERT_WITHOUT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// For `update --wait`: mints a certificate valid for the wait (plus ten
/// minutes; [`PAUSE_CERT_WITHOUT_TIMEOUT`] when the wait is unbounded) and
/// pauses the autoscaler; returns the client and what to put back.
pub async fn pause_for_update(
    clients: &super::Clients,
    cluster: &crate::config::ClusterConfig,
    wait: Option<Duration>,
) -> Result<(ScaleClient, Paused), PauseError> {
    let req = super::kubeconfig::MintRequest {
        user: "kube-aws:update".into(),
        group: Some(crate::pki::DEFAULT_GROUP.into()),
        ttl: wait.map_or(PAUSE_CERT_WITHOUT_TIMEOUT, |w| w + Duration::from_secs(600)),
        context: None,
    };
    let minted = super::kubeconfig::mint(clients, cluster, &req)
        .await
        .map_err(|e| PauseError::Mint(Box::new(e)))?;
    let api = ScaleClient::new(&minted.entry)?;
    let paused = pause(&api).await?;
    Ok((api, paused))
}
