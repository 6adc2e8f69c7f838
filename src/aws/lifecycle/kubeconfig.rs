//! `kube-aws kubeconfig`, the AWS half: the endpoint and name from the stack's
//! outputs, the cluster CA from the published bundle, its key decrypted with
//! the caller's own credentials (kms:Decrypt on the cluster's key under the
//! entry's encryption context is the access control), and a client
//! certificate minted locally (src/pki.rs). Nothing is written here.

use std::time::Duration;

use crate::aws::publish::secrets::{cluster_ca, SecretBundle};
use crate::aws::publish::SECRET_BUNDLE;
use crate::aws::services::s3::{get_object, Location};
use crate::aws::services::stack;
use crate::aws::{AwsError, BundleError, Clients};
use crate::config::ClusterConfig;
use crate::kubeconfig::Entry;
use crate::pki;

/// What to mint.
#[derive(Debug, Clone)]
pub struct MintRequest {
    pub user: String,
    pub group: Option<String>,
    pub ttl: Duration,
    /// The context name (default: the cluster's name).
    pub context: Option<String>,
}

/// The minted entry and when its certificate expires.
#[derive(Debug)]
pub struct Minted {
    pub entry: Entry,
    pub not_after: time::OffsetDateTime,
}

/// The root stack's `ApiEndpoint` output.
pub const ENDPOINT_OUTPUT: &str = "ApiEndpoint";

pub async fn mint(clients: &Clients, cluster: &ClusterConfig, req: &MintRequest) -> Result<Minted, AwsError> {
    let name = &cluster.cluster_name;
    let info = stack::describe_stack(clients, name)
        .await?
        .ok_or_else(|| AwsError::StackMissing { stack: name.clone() })?;
    let endpoint = info
        .outputs
        .iter()
        .find(|o| o.key == ENDPOINT_OUTPUT && !o.value.is_empty())
        .map(|o| o.value.clone())
        .ok_or_else(|| AwsError::NoOutput {
            stack: name.clone(),
            output: ENDPOINT_OUTPUT,
            status: info.status.clone(),
        })?;
    let location = Location::new(cluster)?;
    let bundle: SecretBundle = get_object(clients, &location.bucket, &location.key(SECRET_BUNDLE))
        .await?
        .ok_or_else(|| BundleError::NotPublished {
            bucket: location.bucket.clone(),
            key: location.key(SECRET_BUNDLE),
        })
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| BundleError::Invalid { detail: e.to_string() }))?;
    let (ca_pem, ca_key) = cluster_ca(clients, name, &bundle).await.map_err(|e| match e {
        AwsError::Api { code, message, .. } if code.contains("AccessDenied") || code.contains("NotAuthorized") => {
            BundleError::CaKeyRefused {
                kms_key_arn: bundle.kms_key_arn.clone(),
                cluster: name.clone(),
                entry: pki::CA_KEY,
                code,
                message,
            }
            .into()
        }
        other => other,
    })?;
    let cred = pki::mint_client(
        &ca_pem,
        &ca_key,
        &req.user,
        req.group.as_deref(),
        req.ttl,
        time::OffsetDateTime::now_utc(),
    )?;
    let context = req.context.clone().unwrap_or_else(|| name.clone());
    Ok(Minted {
        entry: Entry {
            user: format!("{context}-{}", req.user),
            cluster: name.clone(),
            context,
            server: format!("https://{endpoint}:6443"),
            ca_pem,
            cert_pem: cred.cert_pem,
            key_pem: cred.key_pem.expose().to_string(),
        },
        not_after: cred.not_after,
    })
}
