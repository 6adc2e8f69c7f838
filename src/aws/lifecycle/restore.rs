//! `kube-aws restore [--snapshot KEY]`: which snapshot, and the refusals
//! that come before anything changes (issue 29 item 4). A key is refused
//! when it is not one of this cluster's snapshots (another cluster's prefix,
//! another bucket, not under `etcd/hourly/`, `etcd/daily/` or `etcd/`), when
//! it does not exist, or when it cannot be read (S3 or KMS refuses it, or
//! its first page is not an etcd snapshot's: a bbolt database's meta page).
//!
//! `resolve_key` and `is_etcd_snapshot` are pure; `check` reads S3.

use serde::Serialize;

use crate::aws::services::s3::Location;
use crate::aws::state::backups::{self, Snapshot};
use crate::aws::{AwsError, Clients};
use crate::config::ClusterConfig;
use crate::render::layout::ETCD_BACKUP_DIR;

/// Why a restore is refused (nothing was changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "snapshot {key:?} belongs to another cluster: this cluster's snapshots are under s3://{bucket}/{prefix} \
         (see `kube-aws backups`)"
    )]
    OtherCluster {
        key: String,
        bucket: String,
        prefix: String,
    },
    #[error(
        "{key:?} is not an etcd snapshot key: this cluster's are s3://{bucket}/{prefix}hourly/<time>-<node>.db \
         or …/daily/… (see `kube-aws backups`)"
    )]
    NotASnapshotKey {
        key: String,
        bucket: String,
        prefix: String,
    },
    #[error("snapshot s3://{bucket}/{key} does not exist (see `kube-aws backups` for the ones that do)")]
    Missing { bucket: String, key: String },
    #[error("snapshot s3://{bucket}/{key} cannot be read: {why}")]
    Unreadable { bucket: String, key: String, why: String },
    #[error("there is no etcd snapshot in s3://{bucket}/{prefix} to restore")]
    NoSnapshot { bucket: String, prefix: String },
}

/// The snapshot a restore uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chosen {
    pub bucket: String,
    pub key: String,
    pub tier: String,
    pub size: i64,
}

/// The full key of `given` (`s3://bucket/key`, a full key, or a key relative
/// to the cluster's `etcd/` prefix such as `hourly/<name>.db`), when it is
/// one of this cluster's snapshot keys.
pub fn resolve_key(location: &Location, given: &str) -> Result<String, Refusal> {
    let prefix = location.key(&format!("{ETCD_BACKUP_DIR}/"));
    let other = |key: &str| Refusal::OtherCluster {
        key: key.to_string(),
        bucket: location.bucket.clone(),
        prefix: prefix.clone(),
    };
    let given = given.trim();
    let key = match given.strip_prefix("s3://") {
        Some(rest) => {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket != location.bucket {
                return Err(other(given));
            }
            key.to_string()
        }
        None if given.starts_with(&prefix) => given.to_string(),
        // Another cluster's full key: `<…>/<name>/etcd/…`.
        None if given.contains(&format!("/{ETCD_BACKUP_DIR}/")) => return Err(other(given)),
        None => format!("{prefix}{}", given.trim_start_matches('/')),
    };
    if !key.starts_with(&prefix) {
        return Err(other(given));
    }
    let listed = backups::snapshots_of(
        &prefix,
        vec![Snapshot {
            key: key.clone(),
            tier: String::new(),
            size: 0,
            time: String::new(),
        }],
    );
    if listed.is_empty() {
        return Err(Refusal::NotASnapshotKey {
            key: given.to_string(),
            bucket: location.bucket.clone(),
            prefix,
        });
    }
    Ok(key)
}

/// Whether `head` (the object's first bytes) starts like an etcd snapshot:
/// `etcdctl snapshot save` writes the member's bbolt database, whose first
/// page is a meta page: a 16-byte page header (id u64, flags u16 with 0x04
/// for a meta page, count u16, overflow u32), then the meta's magic
/// 0xED0CDAED and version 2, little-endian on the amd64 and arm64 nodes
/// (go.etcd.io/bbolt page.go `metaPageFlag`, db.go `magic`, `version`).
pub fn is_etcd_snapshot(head: &[u8]) -> bool {
    if head.len() < 24 {
        return false;
    }
    let flags = u16::from_le_bytes([head[8], head[9]]);
    let magic = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
    let version = u32::from_le_bytes([head[20], head[21], head[22], head[23]]);
    flags & 0x04 != 0 && magic == 0xED0C_DAED && version == 2
}

/// The checks, against S3: the snapshot exists, is this cluster's, and its
/// first page reads (through KMS) as an etcd snapshot. Without a key, the
/// newest snapshot of either tier.
pub async fn check(
    clients: &Clients,
    cluster: &ClusterConfig,
    given: Option<&str>,
) -> Result<Result<Chosen, Refusal>, AwsError> {
    let location = Location::new(cluster)?;
    let bucket = location.bucket.clone();
    let key = match given {
        Some(g) => match resolve_key(&location, g) {
            Ok(k) => k,
            Err(r) => return Ok(Err(r)),
        },
        None => {
            let list = backups::list_backups(clients, cluster).await?;
            match list.snapshots.first() {
                Some(s) => s.key.clone(),
                None => {
                    return Ok(Err(Refusal::NoSnapshot {
                        bucket,
                        prefix: location.key(&format!("{ETCD_BACKUP_DIR}/")),
                    }))
                }
            }
        }
    };
    let unreadable = |why: String| Refusal::Unreadable {
        bucket: bucket.clone(),
        key: key.clone(),
        why,
    };
    // The first page, through KMS as a controller reads it: a key the
    // caller cannot decrypt fails here.
    let got = clients
        .s3
        .get_object()
        .bucket(&bucket)
        .key(&key)
        .range("bytes=0-4095")
        .send()
        .await;
    let out = match got {
        Ok(out) => out,
        Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
            return Ok(Err(Refusal::Missing { bucket, key }))
        }
        Err(e) => {
            let err = crate::aws::sdk_error("s3:GetObject", e);
            if err.is_transient() {
                return Err(err);
            }
            return Ok(Err(unreadable(err.to_string())));
        }
    };
    let size = out
        .content_range()
        .and_then(|r| r.rsplit('/').next())
        .and_then(|n| n.parse().ok())
        .or(out.content_length())
        .unwrap_or(0);
    let head = match out.body.collect().await {
        Ok(b) => b.into_bytes(),
        Err(e) => return Ok(Err(unreadable(e.to_string()))),
    };
    if !is_etcd_snapshot(&head) {
        return Ok(Err(unreadable(
            "its first page is not an etcd snapshot's (no bbolt meta page)".into(),
        )));
    }
    let tier = backups::snapshots_of(
        &location.key(&format!("{ETCD_BACKUP_DIR}/")),
        vec![Snapshot {
            key: key.clone(),
            tier: String::new(),
            size,
            time: String::new(),
        }],
    )
    .first()
    .map(|s| s.tier.clone())
    .unwrap_or_default();
    Ok(Ok(Chosen {
        bucket,
        key,
        tier,
        size,
    }))
}

/// What `restore` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Started {
    /// The request's id (`status/etcd/restore.json` names it once restored).
    pub request: String,
    pub snapshot: Chosen,
    /// The controllers terminated (the group replaces them).
    pub terminated: Vec<String>,
}

/// The request object the replacement controllers read
/// (src/node/kube_aws_node/etcd_restore.py `read_restore_request`).
pub fn request_body(id: &str, key: &str, controllers: &[String], now: i64) -> serde_json::Value {
    serde_json::json!({"id": id, "key": key, "controllers": controllers, "requestedAt": now})
}

/// Starts the restore once the checks passed: deletes the previous restore
/// lock, writes the request, and terminates every controller; the
/// controller group replaces them from its launch template (no stack
/// update: no subnet, no worker group changes). The first replacement to
/// take the restore lock restores the snapshot as a one-member etcd and runs
/// `kubeadm init` on it; the others join it, one at a time.
#[cfg(feature = "nodes")]
pub async fn start(
    clients: &Clients,
    cluster: &ClusterConfig,
    chosen: Chosen,
    controllers: Vec<String>,
) -> Result<Started, AwsError> {
    let location = Location::new(cluster)?;
    let mut buf = [0u8; 8];
    getrandom::getrandom(&mut buf).map_err(|e| AwsError::Random { detail: e.to_string() })?;
    let id: String = buf.iter().map(|b| format!("{b:02x}")).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    use crate::render::cfn::{ETCD_RESTORE_LOCK, ETCD_RESTORE_REQUEST};
    clients
        .s3
        .delete_object()
        .bucket(&location.bucket)
        .key(location.key(ETCD_RESTORE_LOCK))
        .send()
        .await
        .map_err(|e| crate::aws::sdk_error("s3:DeleteObject", e))?;
    let body = request_body(&id, &chosen.key, &controllers, now).to_string();
    clients
        .s3
        .put_object()
        .bucket(&location.bucket)
        .key(location.key(ETCD_RESTORE_REQUEST))
        .body(body.into_bytes().into())
        .content_type("application/json")
        .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
        .send()
        .await
        .map_err(|e| crate::aws::sdk_error("s3:PutObject", e))?;
    if !controllers.is_empty() {
        clients
            .ec2
            .terminate_instances()
            .set_instance_ids(Some(controllers.clone()))
            .send()
            .await
            .map_err(|e| crate::aws::sdk_error("ec2:TerminateInstances", e))?;
    }
    Ok(Started {
        request: id,
        snapshot: chosen,
        terminated: controllers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> Location {
        Location {
            bucket: "b".into(),
            prefix: "clusters/demo".into(),
        }
    }

    #[test]
    fn keys_of_this_cluster_only() {
        let full = "clusters/demo/etcd/hourly/20261201T000000Z-ip-10-0-1-5.db";
        assert_eq!(resolve_key(&loc(), full).unwrap(), full);
        assert_eq!(resolve_key(&loc(), &format!("s3://b/{full}")).unwrap(), full);
        assert_eq!(
            resolve_key(&loc(), "hourly/20261201T000000Z-ip-10-0-1-5.db").unwrap(),
            full
        );
        assert_eq!(
            resolve_key(&loc(), "daily/20261201T000000Z-a.db").unwrap(),
            "clusters/demo/etcd/daily/20261201T000000Z-a.db"
        );
        for other in [
            "clusters/prod/etcd/hourly/20261201T000000Z-a.db",
            "s3://other/clusters/demo/etcd/hourly/20261201T000000Z-a.db",
            "s3://b/clusters/prod/etcd/hourly/20261201T000000Z-a.db",
            "clusters/demo-2/etcd/hourly/20261201T000000Z-a.db",
        ] {
            let e = resolve_key(&loc(), other).unwrap_err();
            assert!(matches!(e, Refusal::OtherCluster { .. }), "{other}: {e:?}");
            assert!(e.to_string().contains("s3://b/clusters/demo/etcd/"), "{e}");
        }
        for bad in [
            "hourly/notes.txt",
            "hourly/deeper/x.db",
            "clusters/demo/etcd/hourly/x.json",
        ] {
            let e = resolve_key(&loc(), bad).unwrap_err();
            assert!(matches!(e, Refusal::NotASnapshotKey { .. }), "{bad}: {e:?}");
        }
    }

    #[test]
    fn the_first_page_of_a_bbolt_database() {
        let mut page = vec![0u8; 4096];
        page[8] = 0x04;
        page[16..20].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
        page[20..24].copy_from_slice(&2u32.to_le_bytes());
        assert!(is_etcd_snapshot(&page));
        let mut not_meta = page.clone();
        not_meta[8] = 0x10;
        assert!(!is_etcd_snapshot(&not_meta));
        let mut text = page.clone();
        text[16..20].copy_from_slice(b"{\"a\"");
        assert!(!is_etcd_snapshot(&text));
        assert!(!is_etcd_snapshot(b"short"));
    }
}
