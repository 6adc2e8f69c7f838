//! `destroy`, before the stacks go and while the cluster's API answers:
//! delete every Service of type LoadBalancer and (unless `--keep-volumes`)
//! every PersistentVolumeClaim, and wait until the controllers that made
//! their cloud resources have removed them. The cloud controller manager
//! holds a Service with its `service.kubernetes.io/load-balancer-cleanup`
//! finalizer until the load balancer is deleted (cloud-provider
//! controllers/service/controller.go), and a dynamically provisioned
//! PersistentVolume with reclaim policy `Delete` disappears once the CSI
//! driver has deleted its EBS volume (kubernetes-csi/external-provisioner):
//! so "gone from the API" is "gone from AWS". What does not go within the
//! wait is left to the sweep after the stacks (src/aws/lifecycle/sweep.rs).
//!
//! The decisions are pure ([`lb_services`], [`claims`], [`pending`]); the
//! calls are plain HTTPS with the minted client certificate
//! (src/aws/lifecycle/kubeconfig.rs).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::kubeconfig::Entry;

/// A namespaced object, as the report names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

fn object_ref(item: &Value) -> Option<ObjectRef> {
    Some(ObjectRef {
        namespace: item["metadata"]["namespace"].as_str()?.to_string(),
        name: item["metadata"]["name"].as_str()?.to_string(),
    })
}

/// The Services of type LoadBalancer in a `/api/v1/services` list.
pub fn lb_services(list: &Value) -> Vec<ObjectRef> {
    items(list)
        .filter(|i| i["spec"]["type"] == "LoadBalancer")
        .filter_map(object_ref)
        .collect()
}

/// Every claim in a `/api/v1/persistentvolumeclaims` list.
pub fn claims(list: &Value) -> Vec<ObjectRef> {
    items(list).filter_map(object_ref).collect()
}

fn items(list: &Value) -> impl Iterator<Item = &Value> {
    list["items"].as_array().into_iter().flatten()
}

/// The PersistentVolumes whose cloud volume goes with their claim: reclaim
/// policy `Delete`, bound to one of `claims`. Their names.
pub fn volumes_of(pv_list: &Value, claims: &[ObjectRef]) -> Vec<String> {
    items(pv_list)
        .filter(|pv| pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete")
        .filter(|pv| {
            let c = &pv["spec"]["claimRef"];
            claims
                .iter()
                .any(|r| c["namespace"] == r.namespace.as_str() && c["name"] == r.name.as_str())
        })
        .filter_map(|pv| pv["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// What is still there of what was deleted: the lists as they are now,
/// against what was deleted and which volumes were expected to go.
pub fn pending(services: &Value, claims_now: &Value, pvs: &Value, deleted: &Deleted) -> Vec<String> {
    let mut out = Vec::new();
    for s in lb_services(services) {
        if deleted.services.contains(&s) {
            out.push(format!("service {s}"));
        }
    }
    for c in claims(claims_now) {
        if deleted.claims.contains(&c) {
            out.push(format!("persistentvolumeclaim {c}"));
        }
    }
    for pv in items(pvs).filter_map(|p| p["metadata"]["name"].as_str()) {
        if deleted.volumes.iter().any(|v| v == pv) {
            out.push(format!("persistentvolume {pv}"));
        }
    }
    out
}

/// What was deleted through the API.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Deleted {
    pub services: Vec<ObjectRef>,
    pub claims: Vec<ObjectRef>,
    /// The PersistentVolumes expected to go with the claims.
    pub volumes: Vec<String>,
}

/// How the API part went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiCleanup {
    /// The API did not answer `/readyz`: nothing was deleted through it.
    Unreachable(String),
    /// Deleted; `left` is what had not gone when the wait ended.
    Done { deleted: Deleted, left: Vec<String> },
}

/// Why a call to the API failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot use the minted credentials: {0}")]
    Client(String),
    #[error("{method} {path} failed: {detail}")]
    Call {
        method: &'static str,
        path: String,
        detail: String,
    },
}

/// What to delete and how long to wait.
#[derive(Debug, Clone, Copy)]
pub struct ApiOptions {
    pub keep_volumes: bool,
    pub wait: Duration,
    pub poll: Duration,
}

struct Api {
    http: reqwest::Client,
    server: String,
}

impl Api {
    fn new(entry: &Entry) -> Result<Api, ApiError> {
        let c = |e: reqwest::Error| ApiError::Client(e.to_string());
        let ca = reqwest::Certificate::from_pem(entry.ca_pem.as_bytes()).map_err(c)?;
        let id = reqwest::Identity::from_pem(format!("{}\n{}", entry.cert_pem, entry.key_pem).as_bytes()).map_err(c)?;
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .identity(id)
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(c)?;
        Ok(Api {
            http,
            server: entry.server.trim_end_matches('/').to_string(),
        })
    }

    async fn call(&self, method: &'static str, path: &str) -> Result<Value, ApiError> {
        let err = |detail: String| ApiError::Call {
            method,
            path: path.to_string(),
            detail,
        };
        let url = format!("{}{path}", self.server);
        let req = match method {
            "DELETE" => self.http.delete(&url),
            _ => self.http.get(&url),
        };
        let resp = req.send().await.map_err(|e| err(e.to_string()))?;
        let status = resp.status();
        // Already gone is what a delete wants.
        if method == "DELETE" && status == reqwest::StatusCode::NOT_FOUND {
            return Ok(Value::Null);
        }
        let body = resp.text().await.map_err(|e| err(e.to_string()))?;
        if !status.is_success() {
            return Err(err(format!(
                "HTTP {status}: {}",
                body.chars().take(300).collect::<String>()
            )));
        }
        Ok(serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    async fn lists(&self) -> Result<(Value, Value, Value), ApiError> {
        Ok((
            self.call("GET", "/api/v1/services").await?,
            self.call("GET", "/api/v1/persistentvolumeclaims").await?,
            self.call("GET", "/api/v1/persistentvolumes").await?,
        ))
    }
}

/// Deletes the LoadBalancer Services and the claims, then waits for them
/// (and the claims' volumes) to go, at most `opts.wait`. An API that does
/// not answer `/readyz` is not an error: the sweep after the stacks cleans
/// what it can. Notes go to `note`.
pub async fn cleanup(entry: &Entry, opts: ApiOptions, note: &mut dyn FnMut(String)) -> Result<ApiCleanup, ApiError> {
    let api = Api::new(entry)?;
    if let Err(e) = api.call("GET", "/readyz").await {
        return Ok(ApiCleanup::Unreachable(e.to_string()));
    }
    let (services, claims_list, pvs) = api.lists().await?;
    let mut deleted = Deleted {
        services: lb_services(&services),
        ..Deleted::default()
    };
    if !opts.keep_volumes {
        deleted.claims = claims(&claims_list);
        deleted.volumes = volumes_of(&pvs, &deleted.claims);
    }
    for s in &deleted.services {
        api.call(
            "DELETE",
            &format!("/api/v1/namespaces/{}/services/{}", s.namespace, s.name),
        )
        .await?;
        note(format!("deleting service {s} (type LoadBalancer)"));
    }
    for c in &deleted.claims {
        api.call(
            "DELETE",
            &format!("/api/v1/namespaces/{}/persistentvolumeclaims/{}", c.namespace, c.name),
        )
        .await?;
        note(format!("deleting persistentvolumeclaim {c}"));
    }
    let start = Instant::now();
    loop {
        let (s, c, v) = api.lists().await?;
        let left = pending(&s, &c, &v, &deleted);
        if left.is_empty() || start.elapsed() >= opts.wait {
            return Ok(ApiCleanup::Done { deleted, left });
        }
        tokio::time::sleep(opts.poll).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(ns: &str, n: &str) -> ObjectRef {
        ObjectRef {
            namespace: ns.into(),
            name: n.into(),
        }
    }

    #[test]
    fn only_load_balancer_services_and_the_volumes_of_deleted_claims() {
        let services = json!({"items": [
            {"metadata": {"namespace": "default", "name": "web"}, "spec": {"type": "LoadBalancer"}},
            {"metadata": {"namespace": "default", "name": "kubernetes"}, "spec": {"type": "ClusterIP"}},
            {"metadata": {"namespace": "apps", "name": "np"}, "spec": {"type": "NodePort"}}
        ]});
        assert_eq!(lb_services(&services), [r("default", "web")]);
        let pvs = json!({"items": [
            {"metadata": {"name": "pv-a"}, "spec": {"persistentVolumeReclaimPolicy": "Delete",
              "claimRef": {"namespace": "default", "name": "data"}}},
            {"metadata": {"name": "pv-retained"}, "spec": {"persistentVolumeReclaimPolicy": "Retain",
              "claimRef": {"namespace": "default", "name": "kept"}}},
            {"metadata": {"name": "pv-other"}, "spec": {"persistentVolumeReclaimPolicy": "Delete",
              "claimRef": {"namespace": "other", "name": "data"}}}
        ]});
        let deleted = [r("default", "data"), r("default", "kept")];
        assert_eq!(volumes_of(&pvs, &deleted), ["pv-a"]);
        let d = Deleted {
            services: vec![r("default", "web")],
            claims: deleted.to_vec(),
            volumes: vec!["pv-a".into()],
        };
        assert_eq!(
            pending(&services, &json!({"items": []}), &pvs, &d),
            ["service default/web", "persistentvolume pv-a"]
        );
        assert!(pending(&json!({"items": []}), &json!({}), &json!({"items": []}), &d).is_empty());
    }
}
