//! The service-account issuer's discovery documents (src/irsa.rs): `up` and
//! `update` publish `.well-known/openid-configuration` and `keys.json`,
//! built from the bundle's `sa.pub`, so IAM can verify the tokens
//! kube-apiserver signs. `update` publishes them only once its change set is
//! confirmed (src/aws/publish/mod.rs `publish_confirmed`), and the JWKS keeps a
//! key replaced by `update --rotate-ca` while its tokens can be valid.
//!
//! With the default issuer, IAM must read them anonymously over HTTPS. They
//! live in a bucket of their own, the **issuer bucket**
//! (`<bucket>-oidc-<cluster>`, [`crate::irsa::issuer_bucket_name`]), which
//! `up` creates and tags as this cluster's, and `destroy --purge` deletes.
//! The cluster's own bucket keeps S3's defaults (Block Public Access on,
//! AWS's default for buckets created since April 2023) and nothing in it
//! becomes public. The issuer bucket's own Block Public Access keeps ACLs
//! blocked and ignored and allows one bucket policy statement: anonymous
//! `s3:GetObject` on exactly the two documents. Its objects are owned by the
//! bucket owner (ACLs disabled).
//!
//! The account-wide Block Public Access setting overrides the bucket's
//! (S3 user guide, "Blocking public access to your Amazon S3 storage"):
//! `BlockPublicPolicy` refuses the statement and `RestrictPublicBuckets`
//! silently keeps anonymous readers out. `up` reads it first
//! (s3control:GetPublicAccessBlock, for the account of `kmsKeyARN`) and stops
//! with what to do: turn it off, or host the documents elsewhere over HTTPS
//! and set `issuerURL` (then they are published privately under
//! `s3URI/<cluster>/oidc/` for you to copy, and no bucket is created).
//!
//! CloudFront in front of a private bucket would work under the account
//! setting too, but its `*.cloudfront.net` name is assigned when the
//! distribution is created, and the issuer URL must be known at render time
//! (it is in kube-apiserver's `--service-account-issuer` and the IAM OIDC
//! provider): a distribution with your own domain and certificate is what
//! `issuerURL` is for.
//!
//! Clusters published before the issuer bucket kept the documents public in
//! the cluster's bucket, with one bucket policy statement per cluster (its
//! Sid names the cluster prefix); `destroy --purge` still withdraws that
//! statement ([`withdraw_public_read`]).

use std::time::Duration;

use aws_sdk_s3::types::{
    BucketLocationConstraint, CreateBucketConfiguration, ObjectOwnership, PublicAccessBlockConfiguration, Tag, Tagging,
};
use serde_json::{json, Value};

use crate::aws::publish::secrets::SecretBundle;
use crate::aws::publish::PublishedObject;
use crate::aws::services::s3::{get_object, Location};
use crate::aws::{sdk_error, AwsError, BundleError, Clients};
use crate::config::ClusterConfig;
use crate::digest::sha256_hex;
use crate::irsa::{account_of, discovery_objects_with, issuer_bucket, partition, ISSUER_DISCOVERY, ISSUER_JWKS};
use crate::render::layout::OIDC_DIR;

/// The tag that marks an issuer bucket as a cluster's: its value is the
/// cluster's `s3://bucket/prefix/<cluster>`. `up` uses no bucket without it
/// and `destroy --purge` deletes no bucket without it.
pub const OWNER_TAG: &str = "kube-aws:issuer-of";
/// How often PutBucketPolicy is tried while S3 still applies the bucket's new
/// Block Public Access setting (it answers AccessDenied for a few seconds).
const POLICY_ATTEMPTS: u32 = 5;

/// The owner tag's value: the cluster's location.
pub fn owner_value(location: &Location) -> String {
    location.s3_uri()
}

/// The Sid of this cluster's public-read statement: one per cluster prefix.
pub fn statement_sid(location: &Location) -> String {
    let h = sha256_hex(location.prefix.as_bytes());
    format!("KubeAwsIssuer{}", &h[..16])
}

/// The issuer bucket's policy: anonymous `s3:GetObject` on exactly the two
/// discovery documents, nothing else.
pub fn issuer_bucket_policy(region: &str, bucket: &str, location: &Location) -> Value {
    let arn = |key: &str| format!("arn:{}:s3:::{bucket}/{key}", partition(region));
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": statement_sid(location),
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": [arn(ISSUER_DISCOVERY), arn(ISSUER_JWKS)],
        }],
    })
}

/// The issuer bucket's own Block Public Access: ACLs stay blocked and
/// ignored; a public bucket policy is allowed (the one above).
pub fn issuer_bucket_public_access_block() -> PublicAccessBlockConfiguration {
    PublicAccessBlockConfiguration::builder()
        .block_public_acls(true)
        .ignore_public_acls(true)
        .block_public_policy(false)
        .restrict_public_buckets(false)
        .build()
}

/// The settings of a Block Public Access configuration that stop the
/// issuer's public statement: `BlockPublicPolicy` refuses it,
/// `RestrictPublicBuckets` keeps anonymous readers out.
pub fn blocking(block_public_policy: Option<bool>, restrict_public_buckets: Option<bool>) -> Vec<&'static str> {
    let mut on = Vec::new();
    if block_public_policy.unwrap_or(false) {
        on.push("BlockPublicPolicy");
    }
    if restrict_public_buckets.unwrap_or(false) {
        on.push("RestrictPublicBuckets");
    }
    on
}

/// The older layout's statement in the cluster's bucket policy, and what
/// withdrawing it does: None when it has none, `Some(None)` when nothing else
/// is left (delete the policy), `Some(Some(policy))` for the rest.
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

fn code_of<E: aws_sdk_s3::error::ProvideErrorMetadata>(
    e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> Option<String> {
    e.as_service_error().and_then(|s| s.code()).map(str::to_string)
}

fn status_of<E>(e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

/// `destroy --purge`: takes a cluster-bucket public-read statement of the
/// older layout out of the bucket policy (deleting the policy when it was the
/// only statement).
pub async fn withdraw_public_read(clients: &Clients, location: &Location) -> Result<(), AwsError> {
    let existing = match clients.s3.get_bucket_policy().bucket(&location.bucket).send().await {
        Ok(o) => o.policy().map(str::to_string),
        Err(e) if code_of(&e).as_deref() == Some("NoSuchBucketPolicy") => None,
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

/// The account-wide Block Public Access settings that stop the issuer
/// (empty when none is set). AccessDenied (the caller may not read it) is
/// not an answer: then PutBucketPolicy tells.
async fn account_blocking(clients: &Clients, account: &str) -> Result<Vec<&'static str>, AwsError> {
    match clients
        .s3control
        .get_public_access_block()
        .account_id(account)
        .send()
        .await
    {
        Ok(out) => {
            let c = out.public_access_block_configuration();
            Ok(blocking(
                c.and_then(|c| c.block_public_policy()),
                c.and_then(|c| c.restrict_public_buckets()),
            ))
        }
        Err(e) => {
            let code = e
                .as_service_error()
                .and_then(|s| aws_sdk_s3control::error::ProvideErrorMetadata::code(s));
            match code {
                Some("NoSuchPublicAccessBlockConfiguration") => Ok(Vec::new()),
                Some("AccessDenied") => Ok(Vec::new()),
                _ => Err(sdk_error("s3control:GetPublicAccessBlock", e)),
            }
        }
    }
}

/// The issuer bucket's owner tag, or None when it has no tags.
async fn owner_tag(clients: &Clients, bucket: &str) -> Result<Option<String>, AwsError> {
    match clients.s3.get_bucket_tagging().bucket(bucket).send().await {
        Ok(out) => Ok(out
            .tag_set()
            .iter()
            .find(|t| t.key() == OWNER_TAG)
            .map(|t| t.value().to_string())),
        Err(e) if code_of(&e).as_deref() == Some("NoSuchTagSet") => Ok(None),
        Err(e) => Err(sdk_error("s3:GetBucketTagging", e)),
    }
}

fn taken(bucket: &str, why: impl Into<String>) -> AwsError {
    AwsError::IssuerBucketTaken {
        bucket: bucket.to_string(),
        why: why.into(),
    }
}

/// Creates the issuer bucket (or finds it, this cluster's), in the cluster's region.
async fn ensure_issuer_bucket(clients: &Clients, region: &str, bucket: &str, owner: &str) -> Result<(), AwsError> {
    match clients.s3.head_bucket().bucket(bucket).send().await {
        Ok(_) => {}
        Err(e) if status_of(&e) == Some(404) => {
            let mut req = clients
                .s3
                .create_bucket()
                .bucket(bucket)
                .object_ownership(ObjectOwnership::BucketOwnerEnforced);
            // us-east-1 takes no location constraint (S3 API reference, CreateBucket).
            if region != "us-east-1" {
                req = req.create_bucket_configuration(
                    CreateBucketConfiguration::builder()
                        .location_constraint(BucketLocationConstraint::from(region))
                        .build(),
                );
            }
            match req.send().await {
                Ok(_) => {
                    let tag = Tag::builder()
                        .key(OWNER_TAG)
                        .value(owner)
                        .build()
                        .map_err(|e| AwsError::Api {
                            operation: "s3:PutBucketTagging".into(),
                            code: "Build".into(),
                            message: e.to_string(),
                        })?;
                    let tagging = Tagging::builder().tag_set(tag).build().map_err(|e| AwsError::Api {
                        operation: "s3:PutBucketTagging".into(),
                        code: "Build".into(),
                        message: e.to_string(),
                    })?;
                    clients
                        .s3
                        .put_bucket_tagging()
                        .bucket(bucket)
                        .tagging(tagging)
                        .send()
                        .await
                        .map_err(|e| sdk_error("s3:PutBucketTagging", e))?;
                    return Ok(());
                }
                Err(e) if code_of(&e).as_deref() == Some("BucketAlreadyOwnedByYou") => {}
                Err(e) if code_of(&e).as_deref() == Some("BucketAlreadyExists") => {
                    return Err(taken(bucket, "another AWS account owns a bucket of that name"));
                }
                Err(e) => return Err(sdk_error("s3:CreateBucket", e)),
            }
        }
        Err(e) if status_of(&e) == Some(403) => {
            return Err(taken(bucket, "it exists and this account may not use it"));
        }
        Err(e) => return Err(sdk_error("s3:HeadBucket", e)),
    }
    match owner_tag(clients, bucket).await? {
        Some(v) if v == owner => Ok(()),
        Some(v) => Err(taken(bucket, format!("its {OWNER_TAG} tag names {v:?}, not {owner:?}"))),
        None => Err(taken(
            bucket,
            format!("it exists in this account without the {OWNER_TAG} tag kube-aws puts on the buckets it creates"),
        )),
    }
}

/// Puts the issuer bucket's policy unless it has it already; AccessDenied is
/// retried a few times (the bucket's Block Public Access change takes a
/// moment), then reported as the block it is.
async fn put_issuer_policy(clients: &Clients, bucket: &str, policy: &Value) -> Result<(), AwsError> {
    let existing = match clients.s3.get_bucket_policy().bucket(bucket).send().await {
        Ok(o) => o.policy().and_then(|p| serde_json::from_str::<Value>(p).ok()),
        Err(e) if code_of(&e).as_deref() == Some("NoSuchBucketPolicy") => None,
        Err(e) => return Err(sdk_error("s3:GetBucketPolicy", e)),
    };
    if existing.as_ref() == Some(policy) {
        return Ok(());
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        match clients
            .s3
            .put_bucket_policy()
            .bucket(bucket)
            .policy(policy.to_string())
            .send()
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if code_of(&e).as_deref() == Some("AccessDenied") => {
                if attempt >= POLICY_ATTEMPTS {
                    return Err(AwsError::PublicAccessBlocked {
                        bucket: bucket.to_string(),
                        which: format!(
                            "PutBucketPolicy refused with AccessDenied: {}",
                            aws_sdk_s3::error::DisplayErrorContext(&e)
                        ),
                    });
                }
                tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
            }
            Err(e) => return Err(sdk_error("s3:PutBucketPolicy", e)),
        }
    }
}

/// Publishes the two discovery documents from the bundle's `sa.pub` (and
/// the service-account keys a CA rotation retired, still in the JWKS): with
/// the default issuer, into the issuer bucket (created on the first `up`)
/// and readable by anyone; with `issuerURL`, privately under
/// `s3URI/<cluster>/oidc/` for you to copy.
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
    let retired: Vec<&str> = bundle
        .retired_service_account_keys
        .iter()
        .map(|k| k.public_key.as_str())
        .collect();
    let objects = discovery_objects_with(cluster, sa_pub, &retired)?;
    let (bucket, prefix) = match issuer_bucket(cluster) {
        None => (location.bucket.clone(), format!("{}/", location.key(OIDC_DIR))),
        Some(ib) => {
            if let Some(account) = cluster.kms_key_arn.as_deref().and_then(account_of) {
                let on = account_blocking(clients, account).await?;
                if !on.is_empty() {
                    return Err(AwsError::AccountPublicAccessBlocked {
                        account: account.to_string(),
                        bucket: ib,
                        which: on.join(", "),
                    });
                }
            }
            ensure_issuer_bucket(clients, &cluster.region, &ib, &owner_value(location)).await?;
            clients
                .s3
                .put_public_access_block()
                .bucket(&ib)
                .public_access_block_configuration(issuer_bucket_public_access_block())
                .send()
                .await
                .map_err(|e| sdk_error("s3:PutPublicAccessBlock", e))?;
            (ib, String::new())
        }
    };
    let mut out = Vec::new();
    for (rel, body) in objects {
        let key = format!("{prefix}{rel}");
        let sha256 = sha256_hex(&body);
        let size = body.len();
        let uploaded = put_json(clients, &bucket, &key, body).await?;
        out.push(PublishedObject {
            source: rel.to_string(),
            key: if prefix.is_empty() {
                format!("s3://{bucket}/{key}")
            } else {
                key
            },
            sha256,
            size,
            uploaded,
        });
    }
    if cluster.issuer_url.is_none() {
        put_issuer_policy(
            clients,
            &bucket,
            &issuer_bucket_policy(&cluster.region, &bucket, location),
        )
        .await?;
    }
    Ok(out)
}

/// `destroy --purge`: deletes the issuer bucket, its objects first, when it
/// is this cluster's (its owner tag says so); a missing bucket is fine.
/// Returns how many objects it deleted, None when there was no bucket.
pub async fn delete_issuer_bucket(
    clients: &Clients,
    cluster: &ClusterConfig,
    location: &Location,
) -> Result<Option<usize>, AwsError> {
    let Some(bucket) = issuer_bucket(cluster) else {
        return Ok(None);
    };
    match clients.s3.head_bucket().bucket(&bucket).send().await {
        Ok(_) => {}
        Err(e) if status_of(&e) == Some(404) => return Ok(None),
        Err(e) if status_of(&e) == Some(403) => return Ok(None),
        Err(e) => return Err(sdk_error("s3:HeadBucket", e)),
    }
    let owner = owner_value(location);
    match owner_tag(clients, &bucket).await? {
        Some(v) if v == owner => {}
        _ => {
            return Err(taken(
                &bucket,
                format!("destroy --purge deletes only a bucket tagged {OWNER_TAG}={owner}"),
            ))
        }
    }
    let n = crate::aws::services::s3::delete_under(clients, &bucket, "").await?;
    clients
        .s3
        .delete_bucket()
        .bucket(&bucket)
        .send()
        .await
        .map_err(|e| sdk_error("s3:DeleteBucket", e))?;
    Ok(Some(n))
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
    fn the_issuer_bucket_policy_grants_exactly_the_two_documents() {
        let p = issuer_bucket_policy("us-west-2", "b-oidc-demo", &loc());
        let st = p["Statement"].as_array().unwrap();
        assert_eq!(st.len(), 1, "{p}");
        assert_eq!(st[0]["Effect"], "Allow");
        assert_eq!(st[0]["Principal"], "*");
        assert_eq!(st[0]["Action"], "s3:GetObject");
        assert_eq!(
            st[0]["Resource"],
            json!([
                "arn:aws:s3:::b-oidc-demo/.well-known/openid-configuration",
                "arn:aws:s3:::b-oidc-demo/keys.json"
            ])
        );
        assert!(st[0]["Resource"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| !r.as_str().unwrap().contains('*')));
        assert!(st[0].get("Condition").is_none());
        // Another partition's ARNs.
        let cn = issuer_bucket_policy("cn-north-1", "b-oidc-demo", &loc());
        assert_eq!(
            cn["Statement"][0]["Resource"][1],
            "arn:aws-cn:s3:::b-oidc-demo/keys.json"
        );
    }

    #[test]
    fn the_issuer_bucket_allows_its_policy_and_never_acls() {
        let c = issuer_bucket_public_access_block();
        assert_eq!(c.block_public_acls(), Some(true));
        assert_eq!(c.ignore_public_acls(), Some(true));
        assert_eq!(c.block_public_policy(), Some(false));
        assert_eq!(c.restrict_public_buckets(), Some(false));
        assert!(blocking(c.block_public_policy(), c.restrict_public_buckets()).is_empty());
    }

    #[test]
    fn what_of_block_public_access_stops_the_issuer() {
        assert_eq!(
            blocking(Some(true), Some(true)),
            ["BlockPublicPolicy", "RestrictPublicBuckets"]
        );
        assert_eq!(blocking(None, Some(true)), ["RestrictPublicBuckets"]);
        // BlockPublicAcls and IgnorePublicAcls do not matter: no ACL is used.
        assert!(blocking(Some(false), None).is_empty());
    }

    #[test]
    fn withdrawing_the_older_layouts_statement_keeps_the_others() {
        let sid = statement_sid(&loc());
        let ours = json!({"Sid": sid, "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "x"});
        let other = json!({"Sid": "Theirs", "Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "x"});
        let both = json!({"Version": "2012-10-17", "Statement": [other, ours]}).to_string();
        let left: Value = serde_json::from_str(&policy_without(&both, &sid).unwrap().unwrap().unwrap()).unwrap();
        assert_eq!(left["Statement"], json!([other]));
        let alone = json!({"Version": "2012-10-17", "Statement": ours}).to_string();
        assert_eq!(policy_without(&alone, &sid).unwrap(), Some(None));
        assert_eq!(policy_without(&left.to_string(), &sid).unwrap(), None);
    }
}
