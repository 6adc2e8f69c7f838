//! `kube-aws backups`: the etcd snapshots the controllers' leader writes to
//! `s3URI/<cluster>/etcd/` (SSE-KMS), newest first, and the last backup run's
//! status object (`status/etcd/backup.json`, written by the node's
//! `kube-aws-node etcd-backup`). The table is a pure function; `list_backups`
//! is the only part that calls AWS.

use serde::Serialize;

use super::publish::{get_object, Location};
use super::{AwsError, Clients};
use crate::config::ClusterConfig;
use crate::render::layout::{BACKUP_STATUS, ETCD_BACKUP_DIR};

/// One snapshot object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub key: String,
    pub size: i64,
    /// When S3 stored it, RFC 3339 (UTC).
    pub time: String,
}

/// What `kube-aws backups` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Backups {
    /// `s3://bucket/prefix/<cluster>/etcd/`.
    pub location: String,
    /// Newest first.
    pub snapshots: Vec<Snapshot>,
    /// The last run's status object, as the node wrote it (`phase` ok or
    /// failed, `key`, `message`, `updatedAt`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<serde_json::Value>,
}

/// Snapshots under `prefix` (keys ending `.db` directly in it), newest first.
pub fn snapshots_of(prefix: &str, objects: Vec<Snapshot>) -> Vec<Snapshot> {
    let mut out: Vec<Snapshot> = objects
        .into_iter()
        .filter(|o| {
            o.key
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.ends_with(".db") && !rest.contains('/'))
        })
        .collect();
    out.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| b.key.cmp(&a.key)));
    out
}

/// A human size: `512 B`, `3.4 MiB`.
fn size(bytes: i64) -> String {
    let mut v = bytes as f64;
    for unit in ["B", "KiB", "MiB", "GiB"] {
        if v < 1024.0 || unit == "GiB" {
            return if unit == "B" {
                format!("{bytes} B")
            } else {
                format!("{v:.1} {unit}")
            };
        }
        v /= 1024.0;
    }
    format!("{bytes} B")
}

/// The text `kube-aws backups` prints.
pub fn table(b: &Backups) -> String {
    let mut out = String::new();
    if b.snapshots.is_empty() {
        out.push_str(&format!(
            "no etcd snapshots in {} (the etcd leader writes one every etcd.backup.interval)\n",
            b.location
        ));
    } else {
        out.push_str(&format!("etcd snapshots in {} (newest first):\n", b.location));
        let width = b.snapshots.iter().map(|s| s.key.len()).max().unwrap_or(0);
        out.push_str(&format!("  {:width$}  {:>10}  TIME\n", "KEY", "SIZE"));
        for s in &b.snapshots {
            out.push_str(&format!("  {:width$}  {:>10}  {}\n", s.key, size(s.size), s.time));
        }
    }
    if let Some(run) = &b.last_run {
        let phase = run["phase"].as_str().unwrap_or("unknown");
        let what = run["message"].as_str().or_else(|| run["key"].as_str()).unwrap_or("");
        out.push_str(&format!("last backup run: {phase}: {what}\n"));
    }
    out
}

/// Lists the cluster's snapshots and reads the last run's status.
pub async fn list_backups(clients: &Clients, cluster: &ClusterConfig) -> Result<Backups, AwsError> {
    let location = Location::new(cluster)?;
    let prefix = location.key(&format!("{ETCD_BACKUP_DIR}/"));
    let mut objects = Vec::new();
    let mut token = None;
    loop {
        let page = clients
            .s3
            .list_objects_v2()
            .bucket(&location.bucket)
            .prefix(&prefix)
            .set_continuation_token(token)
            .send()
            .await
            .map_err(|e| super::sdk_error("s3:ListObjectsV2", e))?;
        for o in page.contents() {
            objects.push(Snapshot {
                key: o.key().unwrap_or_default().to_string(),
                size: o.size().unwrap_or(0),
                time: o
                    .last_modified()
                    .and_then(|t| t.fmt(aws_smithy_types::date_time::Format::DateTime).ok())
                    .unwrap_or_default(),
            });
        }
        match page.next_continuation_token() {
            Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_string()),
            _ => break,
        }
    }
    let last_run = get_object(clients, &location.bucket, &location.key(BACKUP_STATUS))
        .await?
        .and_then(|b| serde_json::from_slice(&b).ok());
    Ok(Backups {
        location: format!("s3://{}/{prefix}", location.bucket),
        snapshots: snapshots_of(&prefix, objects),
        last_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(key: &str, size: i64, time: &str) -> Snapshot {
        Snapshot {
            key: key.into(),
            size,
            time: time.into(),
        }
    }

    #[test]
    fn snapshots_are_the_db_objects_newest_first() {
        let p = "c/demo/etcd/";
        let got = snapshots_of(
            p,
            vec![
                snap("c/demo/etcd/20261201T000000Z-a.db", 10, "2026-12-01T00:00:01Z"),
                snap("c/demo/etcd/20261201T010000Z-a.db", 4_000_000, "2026-12-01T01:00:01Z"),
                snap("c/demo/etcd/notes.txt", 1, "2026-12-01T02:00:00Z"),
                snap("c/demo/etcd/old/x.db", 1, "2026-12-01T02:00:00Z"),
            ],
        );
        let keys: Vec<&str> = got.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(
            keys,
            ["c/demo/etcd/20261201T010000Z-a.db", "c/demo/etcd/20261201T000000Z-a.db"]
        );
        let b = Backups {
            location: format!("s3://b/{p}"),
            snapshots: got,
            last_run: Some(serde_json::json!({"phase": "failed", "message": "SlowDown"})),
        };
        let t = table(&b);
        assert!(t.contains("3.8 MiB"), "{t}");
        assert!(t.contains("10 B"), "{t}");
        assert!(t.ends_with("last backup run: failed: SlowDown\n"), "{t}");
        let empty = Backups {
            location: "s3://b/x/".into(),
            snapshots: vec![],
            last_run: None,
        };
        assert!(table(&empty).starts_with("no etcd snapshots in s3://b/x/"));
    }
}
