//! S3 objects under a cluster's prefix: where they live (`Location`), and
//! the reads and writes every room uses. Every object is written with SSE
//! (AES256 here; the secret bundle's values are KMS-encrypted before).
//! Thin wrappers over the SDK, each failure an `AwsError` naming the call.

use std::collections::BTreeMap;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ServerSideEncryption;
use serde::Serialize;

use crate::aws::{sdk_error, AwsError, Clients};
use crate::config::{parse_s3_uri, ClusterConfig};

/// Where a cluster's objects live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub bucket: String,
    /// `prefix/<cluster>`, no leading or trailing slash.
    pub prefix: String,
}

impl Location {
    pub fn new(cluster: &ClusterConfig) -> Result<Location, AwsError> {
        let (bucket, prefix) = parse_s3_uri(&cluster.s3_uri).map_err(|why| AwsError::S3Uri {
            uri: cluster.s3_uri.clone(),
            why,
        })?;
        let prefix = if prefix.is_empty() {
            cluster.cluster_name.clone()
        } else {
            format!("{prefix}/{}", cluster.cluster_name)
        };
        Ok(Location { bucket, prefix })
    }

    /// The full key of a key relative to the cluster prefix.
    pub fn key(&self, rel: &str) -> String {
        format!("{}/{rel}", self.prefix)
    }

    pub fn s3_uri(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}

fn content_type(key: &str) -> &'static str {
    match key.rsplit('.').next() {
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("tgz") => "application/gzip",
        Some("sh") => "text/x-shellscript",
        _ => "text/plain",
    }
}

/// Fails with a clear message when the bucket is missing; never creates it.
pub async fn check_bucket(clients: &Clients, bucket: &str) -> Result<(), AwsError> {
    match clients.s3.head_bucket().bucket(bucket).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Err(AwsError::BucketMissing {
            bucket: bucket.to_string(),
        }),
        Err(e) => Err(sdk_error("s3:HeadBucket", e)),
    }
}

pub async fn exists(clients: &Clients, bucket: &str, key: &str) -> Result<bool, AwsError> {
    match clients.s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
        Err(e) => Err(sdk_error("s3:HeadObject", e)),
    }
}

pub async fn put(clients: &Clients, bucket: &str, key: &str, body: Vec<u8>) -> Result<(), AwsError> {
    clients
        .s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .content_type(content_type(key))
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(ByteStream::from(body))
        .send()
        .await
        .map_err(|e| sdk_error("s3:PutObject", e))?;
    Ok(())
}

/// Reads an object, None when it does not exist.
pub async fn get_object(clients: &Clients, bucket: &str, key: &str) -> Result<Option<Vec<u8>>, AwsError> {
    match clients.s3.get_object().bucket(bucket).key(key).send().await {
        Ok(out) => {
            let data = out.body.collect().await.map_err(|e| AwsError::Network {
                operation: "s3:GetObject".into(),
                detail: e.to_string(),
            })?;
            Ok(Some(data.into_bytes().to_vec()))
        }
        Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
        Err(e) => Err(sdk_error("s3:GetObject", e)),
    }
}

/// Deletes every object under `prefix` (all of the bucket for ""); how many.
pub async fn delete_under(clients: &Clients, bucket: &str, prefix: &str) -> Result<usize, AwsError> {
    let mut count = 0;
    let mut token = None;
    loop {
        let page = clients
            .s3
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .map_err(|e| sdk_error("s3:ListObjectsV2", e))?;
        for obj in page.contents() {
            if let Some(key) = obj.key() {
                clients
                    .s3
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|e| sdk_error("s3:DeleteObject", e))?;
                count += 1;
            }
        }
        match page.next_continuation_token() {
            Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_string()),
            _ => return Ok(count),
        }
    }
}

/// Reads the JSON objects under `prefix` whose ETag changed since they were
/// cached, keyed by the name between the prefix and `.json`. A half-written or
/// foreign object is ignored rather than failing the wait.
pub async fn read_changed<T: serde::de::DeserializeOwned>(
    clients: &Clients,
    bucket: &str,
    prefix: &str,
    cache: &mut BTreeMap<String, (String, T)>,
) -> Result<(), AwsError> {
    let list = clients
        .s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .send()
        .await
        .map_err(|e| sdk_error("s3:ListObjectsV2", e))?;
    for obj in list.contents() {
        let (Some(key), etag) = (obj.key(), obj.e_tag().unwrap_or_default().to_string()) else {
            continue;
        };
        let Some(name) = key.strip_prefix(prefix).and_then(|k| k.strip_suffix(".json")) else {
            continue;
        };
        if cache.get(name).is_some_and(|(t, _)| *t == etag) {
            continue;
        }
        if let Some(bytes) = get_object(clients, bucket, key).await? {
            if let Ok(v) = serde_json::from_slice::<T>(&bytes) {
                cache.insert(name.to_string(), (etag, v));
            }
        }
    }
    Ok(())
}
