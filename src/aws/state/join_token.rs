//! The join tokens the controllers mint (issue 27; the node side is
//! src/node/kube_aws_node/join_token.py): `kube-aws rotate bootstrap-token`
//! asks for a new token (and the old one's revocation) by writing the request
//! object `bootstrap/token-rotate`, whose LastModified the controllers' timer
//! compares with the published token's mint time (within 10 minutes); and
//! `kube-aws status` reads the token's status object
//! (`status/bootstrap-token.json`: id, minted, expires, the last run's
//! result; never the token). `summarize` is pure.

use serde::{Deserialize, Serialize};

use crate::aws::services::s3::{get_object, Location};
use crate::aws::{sdk_error, AwsError, Clients};
use crate::config::ClusterConfig;
use crate::render::layout::{TOKEN_ROTATE, TOKEN_STATUS};

/// A status older than this means no controller's timer runs (it runs every 10 minutes).
pub const FRESH_SECONDS: i64 = 3600;

/// The request `rotate bootstrap-token` wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RotationRequest {
    /// `s3://bucket/prefix/<cluster>/bootstrap/token-rotate`.
    pub request: String,
    /// RFC 3339.
    pub requested_at: String,
}

/// Asks the controllers for a new join token; the one published now is
/// revoked once the new one is (the next run of their timer).
pub async fn request_rotation(clients: &Clients, cluster: &ClusterConfig) -> Result<RotationRequest, AwsError> {
    let location = Location::new(cluster)?;
    let key = location.key(TOKEN_ROTATE);
    let requested_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let body = serde_json::json!({"requestedAt": requested_at, "by": "kube-aws rotate bootstrap-token"});
    clients
        .s3
        .put_object()
        .bucket(&location.bucket)
        .key(&key)
        .content_type("application/json")
        .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
        .body(aws_sdk_s3::primitives::ByteStream::from(body.to_string().into_bytes()))
        .send()
        .await
        .map_err(|e| sdk_error("s3:PutObject", e))?;
    Ok(RotationRequest {
        request: format!("s3://{}/{key}", location.bucket),
        requested_at,
    })
}

/// Deletes the published join token (`up` of a cluster with no stack, and
/// `destroy --purge`): nodes of a new cluster of the same name must not join
/// with an earlier cluster's token. The controllers create the parameter
/// (CloudFormation cannot create a SecureString), so no stack deletes it.
pub async fn delete_published(clients: &Clients, cluster_name: &str) -> Result<bool, AwsError> {
    let name = crate::render::layout::bootstrap_token_parameter(cluster_name);
    match clients.ssm.delete_parameter().name(&name).send().await {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_parameter_not_found()) => Ok(false),
        Err(e) => Err(sdk_error("ssm:DeleteParameter", e)),
    }
}

/// The status object join_token.py writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReport {
    #[serde(default)]
    pub instance_id: String,
    pub checked_at: String,
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub token_id: String,
    #[serde(default)]
    pub minted_at: Option<String>,
    #[serde(default)]
    pub expires: Option<String>,
    #[serde(default)]
    pub ok: bool,
    #[serde(default)]
    pub error: String,
}

/// What `status` shows of the join token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenStatus {
    /// The published token's id (its public half).
    pub token_id: Option<String>,
    pub minted_at: Option<String>,
    /// Seconds since it was minted.
    pub age_seconds: Option<i64>,
    pub expires: Option<String>,
    pub warnings: Vec<String>,
}

fn epoch_of(rfc3339: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339(rfc3339).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok())
}

/// The join token's status at `now`; None (no object) is a cluster whose
/// first controller has not published one yet, or one from before issue 27.
pub fn summarize(report: Option<&TokenReport>, now: i64) -> TokenStatus {
    let Some(r) = report else {
        return TokenStatus::default();
    };
    let mut warnings = Vec::new();
    if !r.ok {
        warnings.push(format!(
            "the join token run failed on {} at {}: {}",
            r.instance_id, r.checked_at, r.error
        ));
    }
    if epoch_of(&r.checked_at).is_some_and(|t| now - t > FRESH_SECONDS) {
        warnings.push(format!(
            "no controller checked the join token since {} (kube-aws-bootstrap-token.timer; `kube-aws logs`)",
            r.checked_at
        ));
    }
    let expires = r.expires.as_deref().and_then(epoch_of);
    if let (Some(e), Some(text)) = (expires, &r.expires) {
        if e <= now {
            warnings.push(format!(
                "the published join token expired at {text}: new nodes cannot join"
            ));
        }
    }
    TokenStatus {
        token_id: Some(r.token_id.clone()).filter(|t| !t.is_empty()),
        minted_at: r.minted_at.clone(),
        age_seconds: r.minted_at.as_deref().and_then(epoch_of).map(|m| now - m),
        expires: r.expires.clone(),
        warnings,
    }
}

/// The status object, None when there is none (or it does not parse).
pub async fn read_report(clients: &Clients, location: &Location) -> Result<Option<TokenReport>, AwsError> {
    let Some(bytes) = get_object(clients, &location.bucket, &location.key(TOKEN_STATUS)).await? else {
        return Ok(None);
    };
    Ok(serde_json::from_slice(&bytes).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_156_046; // 2026-12-01T20:14:06Z

    fn at(t: i64) -> String {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t as u64)).to_string()
    }

    fn report(checked: i64, minted: i64, expires: i64, ok: bool) -> TokenReport {
        // The shape join_token.py writes (src/node/kube_aws_node/join_token.py `status`).
        serde_json::from_value(serde_json::json!({
            "instanceId": "i-1", "checkedAt": at(checked), "action": "kept", "reason": "",
            "tokenId": "abcdef", "mintedAt": at(minted), "expires": at(expires), "ok": ok,
            "error": if ok { "" } else { "publish: cannot write /kube-aws/c/bootstrap-token: AccessDenied" },
        }))
        .unwrap()
    }

    #[test]
    fn a_fresh_token_shows_its_id_and_age_without_warning() {
        let s = summarize(Some(&report(NOW - 60, NOW - 7200, NOW + 3600, true)), NOW);
        assert_eq!(s.token_id.as_deref(), Some("abcdef"));
        assert_eq!(s.age_seconds, Some(7200));
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert_eq!(summarize(None, NOW), TokenStatus::default());
    }

    #[test]
    fn a_failed_run_an_idle_timer_and_an_expired_token_warn() {
        let s = summarize(Some(&report(NOW - 7200, NOW - 90000, NOW - 10, false)), NOW);
        assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("run failed on i-1"), "{:?}", s.warnings);
        assert!(s.warnings[1].starts_with("no controller checked"), "{:?}", s.warnings);
        assert!(s.warnings[2].contains("new nodes cannot join"), "{:?}", s.warnings);
    }
}
