//! Retired keys a bundle keeps (secrets.rs's module doc): the KMS keys the
//! etcd snapshots taken under them still need, and the service-account
//! public keys the issuer's JWKS keeps serving while a token they signed can
//! be valid. Pure.

use super::{RetiredKey, RetiredPublicKey, SecretBundle};
use crate::pki;

/// How long a retired key stays decryptable: the longest an etcd snapshot
/// taken under it is kept (the bucket's lifecycle rules, src/aws/services/retention.rs),
/// plus a day for the rule's own lag (S3 expires objects within a day of
/// their expiry date).
pub fn retired_key_lifetime(retention: &crate::config::EtcdRetention) -> std::time::Duration {
    let days = u64::from(retention.hourly_days.max(retention.daily_days)) + 1;
    std::time::Duration::from_secs(days * 86_400)
}

/// The retired keys of a bundle published now under `key`: the previous
/// bundle's, plus its key when it was another one, minus those retired longer
/// than `keep` ago and the current key itself (a rotation back). Pure.
pub fn retired_keys(
    previous: Option<&SecretBundle>,
    key: &str,
    now: std::time::SystemTime,
    keep: std::time::Duration,
) -> Vec<RetiredKey> {
    let Some(prev) = previous else { return Vec::new() };
    let mut out: Vec<RetiredKey> = prev.retired_keys.clone();
    if prev.kms_key_arn != key {
        out.retain(|k| k.arn != prev.kms_key_arn);
        out.push(RetiredKey {
            arn: prev.kms_key_arn.clone(),
            retired_at: humantime::format_rfc3339_seconds(now).to_string(),
        });
    }
    out.retain(|k| {
        k.arn != key
            && humantime::parse_rfc3339(&k.retired_at)
                // An unreadable time keeps the key: losing a snapshot's key is the worse mistake.
                .map_or(true, |at| now.duration_since(at).map_or(true, |age| age <= keep))
    });
    out
}

/// How long a replaced service-account key stays in the issuer's JWKS: the
/// longest token the pod identity webhook projects is 24 hours
/// (amazon-eks-pod-identity-webhook pkg/constants.go, `MaxTokenExpiration`),
/// counted from the last token the old key signed, which is when the last
/// controller under the old key is replaced; a week leaves room for a slow or
/// paused roll.
pub const SERVICE_ACCOUNT_KEY_RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 86_400);

/// The replaced service-account keys of a bundle whose `sa.pub` is
/// `current`: the previous bundle's, plus its `sa.pub` when it was another
/// key, minus those retired longer than `keep` ago and `current` itself. Pure.
pub fn retired_service_account_keys(
    previous: Option<&SecretBundle>,
    current: &str,
    now: std::time::SystemTime,
    keep: std::time::Duration,
) -> Vec<RetiredPublicKey> {
    let Some(prev) = previous else { return Vec::new() };
    let mut out = prev.retired_service_account_keys.clone();
    if let Some(old) = prev.certificates.get(pki::SA_PUB).filter(|old| old.as_str() != current) {
        out.retain(|k| &k.public_key != old);
        out.push(RetiredPublicKey {
            public_key: old.clone(),
            retired_at: humantime::format_rfc3339_seconds(now).to_string(),
        });
    }
    out.retain(|k| {
        k.public_key != current
            && humantime::parse_rfc3339(&k.retired_at)
                // An unreadable time keeps the key: a token refused by IAM is the worse mistake.
                .map_or(true, |at| now.duration_since(at).map_or(true, |age| age <= keep))
    });
    out
}
