//! The service-account issuer's discovery documents (src/irsa.rs): `up` and
//! `update` publish `oidc/.well-known/openid-configuration` and
//! `oidc/keys.json` under the cluster's prefix, built from the bundle's
//! `sa.pub`, so IAM can verify the tokens kube-apiserver signs.
//!
//! With the default issuer, IAM must read them anonymously over HTTPS: one
//! bucket policy statement, owned by this cluster (its Sid names the cluster's
//! prefix), grants `s3:GetObject` to everyone on exactly those two object
//! keys, and nothing else of the bucket becomes public. S3 Block Public Access
//! refuses such a statement (`BlockPublicPolicy`, on by default for buckets
//! created since April 2023) or ignores it (`RestrictPublicBuckets`): the
//! publish checks the bucket's setting first and says what to change, or to
//! host the documents elsewhere with `issuerURL` (then they are published
//! privately for you to copy, and the bucket policy is left alone). The
//! account-wide Block Public Access setting cannot be read with the S3 API;
//! when it blocks the statement, PutBucketPolicy is refused with AccessDenied
//! and the same advice.

use serde_json::{json, Value};

use super::publish::{get_object, Location, PublishedObject};
use super::secrets::SecretBundle;
use super::{sdk_error, AwsError, BundleError, Clients};
use crate::config::ClusterConfig;
use crate::digest::sha256_hex;
use crate::irsa::{discovery_objects, partition, DISCOVERY_KEY, JWKS_KEY};

/// The Sid of this cluster's public-read statement: one per cluster prefix,
/// so clusters sharing a bucket keep their own.
pub fn statement_sid(location: &Location) -> String {
    let h = sha256_hex(location.prefix.as_bytes());
    format!("KubeAwsIssuer{}", &h[..16])
}

/// The bucket policy statement: anonymous `s3:GetObject` on exactly the two
/// discovery objects.
pub fn public_read_statement(region: &str, location: &Location) -> Value {
    let arn = |rel: &str| {
        format!(
            "arn:{}:s3:::{}/{}",
            partition(region),
            location.bucket,
            location.key(rel)
        )
    };
    json!({
        "Sid": statement_sid(location),
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": [arn(DISCOVERY_KEY), arn(JWKS_KEY)],
    })
}

/// The bucket policy with this cluster's statement in place (replacing an
/// older one of the same Sid, keeping every other statement), or None when
/// the policy has it already.
pub fn merged_policy(existing: Option<&str>, statement: &Value) -> Result<Option<String>, AwsError> {
    let mut policy: Value = match existing {
        Some(text) => serde_json::from_str(text).map_err(|e| AwsError::BucketPolicy { detail: e.to_string() })?,
        None => json!({"Version": "2012-10-17", "Statement": []}),
    };
    let sid = &statement["Sid"];
    let statements = match policy.get_mut("Statement") {
        Some(Value::Array(a)) => a,
        Some(one @ Value::Object(_)) => {
            *one = Value::Array(vec![one.take()]);
            one.as_array_mut().expect("just made an array")
        }
        _ => {
            policy["Statement"] = json!([]);
            policy["Statement"].as_array_mut().expect("just made an array")
        }
    };
    if statements.iter().any(|s| s == statement) {
        return Ok(None);
    }
    statements.retain(|s| &s["Sid"] != sid);
    statements.push(statement.clone());
    Ok(Some(policy.to_string()))
}

/// What withdrawing this cluster's statement does to the bucket policy: None
/// when it has none, `Some(None)` when nothing else is left (delete the policy),
/// `Some(Some(policy))` for the rest.
pub fn policy_without(existing: &str, sid: &str) -> Result<Option<Option<String>>, AwsError> {
    let mut policy: Value =
        serde_json::from_str(existing).map_err(|e| AwsError::BucketPolicy { detail: e.to_string() })?;
    let mut statements = match policy.get("Statement") {
        Some(Value::Array(a)) => a.clone(),
        Some(one @ Value::Object(_)) => vec![one.clone()],
        _ => return Ok(None),
    };
    let before = statements.len();
    statements.retain(|s| s["Sid"] != sid);
    if statements.len() == before {
        return Ok(None);
    }
    if statements.is_empty() {
        return Ok(Some(None));
    }
    policy["Statement"] = Value::Array(statements);
    Ok(Some(Some(policy.to_string())))
}

/// `destroy --purge`: takes this cluster's public-read statement out of the
/// bucket policy (deleting the policy when it was the only statement).
pub async fn withdraw_public_read(clients: &Clients, location: &Location) -> Result<(), AwsError> {
    let existing = match clients.s3.get_bucket_policy().bucket(&location.bucket).send().await {
        Ok(o) => o.policy().map(str::to_string),
        Err(e) if e.as_service_error().and_then(|s| s.meta().code()) == Some("NoSuchBucketPolicy") => None,
        Err(e) => return Err(sdk_error("s3:GetBucketPolicy", e)),
    };
    let Some(existing) = existing else { return Ok(()) };
    match policy_without(&existing, &statement_sid(location))? {
        None => {}
        Some(None) => {
            clients
                .s3
                .delete_bucket_policy()
                .bucket(&location.bucket)
                .send()
                .await
                .map_err(|e| sdk_error("s3:DeleteBucketPolicy", e))?;
        }
        Some(Some(policy)) => {
            clients
                .s3
                .put_bucket_policy()
                .bucket(&location.bucket)
                .policy(policy)
                .send()
                .await
                .map_err(|e| sdk_error("s3:PutBucketPolicy", e))?;
        }
    }
    Ok(())
}

async fn put_json(clients: &Clients, bucket: &str, key: &str, body: Vec<u8>) -> Result<bool, AwsError> {
    if get_object(clients, bucket, key).await?.as_deref() == Some(body.as_slice()) {
        return Ok(false);
    }
    clients
        .s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .content_type("application/json")
        .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
        .body(aws_sdk_s3::primitives::ByteStream::from(body))
        .send()
        .await
        .map_err(|e| sdk_error("s3:PutObject", e))?;
    Ok(true)
}

fn blocked(bucket: &str, which: &str) -> AwsError {
    AwsError::PublicAccessBlocked {
        bucket: bucket.to_string(),
        which: which.to_string(),
    }
}

/// The bucket's own Block Public Access settings that stop a public statement.
async fn public_access_blocked(clients: &Clients, bucket: &str) -> Result<Vec<&'static str>, AwsError> {
    match clients.s3.get_public_access_block().bucket(bucket).send().await {
        Ok(out) => {
            let c = out.public_access_block_configuration();
            let mut on = Vec::new();
            if c.and_then(|c| c.block_public_policy()).unwrap_or(false) {
                on.push("BlockPublicPolicy");
            }
            if c.and_then(|c| c.restrict_public_buckets()).unwrap_or(false) {
                on.push("RestrictPublicBuckets");
            }
            Ok(on)
        }
        Err(e)
            if e.as_service_error().and_then(|s| s.meta().code()) == Some("NoSuchPublicAccessBlockConfiguration") =>
        {
            Ok(Vec::new())
        }
        Err(e) => Err(sdk_error("s3:GetPublicAccessBlock", e)),
    }
}

/// Publishes the two discovery objects from the bundle's `sa.pub` and, for the
/// default issuer, makes exactly them public.
pub async fn publish_issuer(
    clients: &Clients,
    cluster: &ClusterConfig,
    location: &Location,
    bundle: &SecretBundle,
) -> Result<Vec<PublishedObject>, AwsError> {
    let sa_pub = bundle
        .certificates
        .get(crate::pki::SA_PUB)
        .ok_or(BundleError::Incomplete {
            entry: crate::pki::SA_PUB,
        })?;
    let objects = discovery_objects(cluster, sa_pub)?;
    let public = cluster.issuer_url.is_none();
    if public {
        let on = public_access_blocked(clients, &location.bucket).await?;
        if !on.is_empty() {
            return Err(blocked(&location.bucket, &on.join(", ")));
        }
    }
    let mut out = Vec::new();
    for (rel, body) in objects {
        let key = location.key(rel);
        let sha256 = sha256_hex(&body);
        let size = body.len();
        let uploaded = put_json(clients, &location.bucket, &key, body).await?;
        out.push(PublishedObject {
            source: rel.to_string(),
            key,
            sha256,
            size,
            uploaded,
        });
    }
    if public {
        let existing = match clients.s3.get_bucket_policy().bucket(&location.bucket).send().await {
            Ok(o) => o.policy().map(str::to_string),
            Err(e) if e.as_service_error().and_then(|s| s.meta().code()) == Some("NoSuchBucketPolicy") => None,
            Err(e) => return Err(sdk_error("s3:GetBucketPolicy", e)),
        };
        let statement = public_read_statement(&cluster.region, location);
        if let Some(policy) = merged_policy(existing.as_deref(), &statement)? {
            clients
                .s3
                .put_bucket_policy()
                .bucket(&location.bucket)
                .policy(policy)
                .send()
                .await
                .map_err(|e| match sdk_error("s3:PutBucketPolicy", e) {
                    AwsError::Api { code, .. } if code == "AccessDenied" => blocked(
                        &location.bucket,
                        "refused with AccessDenied: the account's setting, or your IAM",
                    ),
                    other => other,
                })?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> Location {
        Location {
            bucket: "b".into(),
            prefix: "team/demo".into(),
        }
    }

    #[test]
    fn the_statement_grants_exactly_the_two_discovery_objects() {
        let st = public_read_statement("us-west-2", &loc());
        assert_eq!(st["Principal"], "*");
        assert_eq!(st["Action"], "s3:GetObject");
        assert_eq!(
            st["Resource"],
            json!([
                "arn:aws:s3:::b/team/demo/oidc/.well-known/openid-configuration",
                "arn:aws:s3:::b/team/demo/oidc/keys.json"
            ])
        );
        assert!(st["Resource"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| !r.as_str().unwrap().contains('*')));
    }

    #[test]
    fn the_policy_keeps_other_statements_and_replaces_only_its_own() {
        let st = public_read_statement("us-west-2", &loc());
        let other = json!({"Sid": "Theirs", "Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "x"});
        let old_ours =
            json!({"Sid": st["Sid"], "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "old"});
        let existing = json!({"Version": "2012-10-17", "Statement": [other, old_ours]}).to_string();
        let merged: Value = serde_json::from_str(&merged_policy(Some(&existing), &st).unwrap().unwrap()).unwrap();
        assert_eq!(merged["Statement"], json!([other, st]));
        assert_eq!(
            merged_policy(Some(&merged.to_string()), &st).unwrap(),
            None,
            "no change, no write"
        );
        let fresh: Value = serde_json::from_str(&merged_policy(None, &st).unwrap().unwrap()).unwrap();
        assert_eq!(fresh["Statement"], json!([st]));
        // Withdrawn on purge: the others stay; alone, the policy goes.
        let sid = st["Sid"].as_str().unwrap();
        let left: Value =
            serde_json::from_str(&policy_without(&merged.to_string(), sid).unwrap().unwrap().unwrap()).unwrap();
        assert_eq!(left["Statement"], json!([other]));
        assert_eq!(policy_without(&fresh.to_string(), sid).unwrap(), Some(None));
        assert_eq!(policy_without(&left.to_string(), sid).unwrap(), None);
    }
}
