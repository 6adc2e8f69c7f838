//! `kube-aws backups`: the etcd snapshots the controllers' leader writes to
//! `s3URI/<cluster>/etcd/hourly/` and, one a day, `etcd/daily/` (SSE-KMS;
//! each tier expired by its lifecycle rule, src/aws/services/retention.rs), both
//! tiers newest first, and the last backup run's
//! status object (`status/etcd/backup.json`, written by the node's
//! `kube-aws-node etcd-backup`). The table is a pure function; `list_backups`
//! is the only part that calls AWS.

use serde::Serialize;

use crate::aws::services::s3::{get_object, Location};
use crate::aws::{AwsError, Clients};
use crate::config::ClusterConfig;
use crate::render::layout::{BACKUP_STATUS, ETCD_BACKUP_DIR, TEST_RESTORE_STATUS};

/// One snapshot object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub key: String,
    /// `hourly`, `daily`, or `flat` (directly under `etcd/`: an older layout
    /// no lifecycle rule expires).
    #[serde(default)]
    pub tier: String,
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
    /// The last weekly test restore's status object (`phase` ok or failed,
    /// `key`, `revision`, `totalKey`, `message`, `testedAt`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_test_restore: Option<serde_json::Value>,
}

/// The tier of a key under `prefix`: `hourly`, `daily` or `flat`; None
/// for what is not a snapshot.
fn tier_of(prefix: &str, key: &str) -> Option<&'static str> {
    let rest = key.strip_prefix(prefix)?;
    if !rest.ends_with(".db") {
        return None;
    }
    for (dir, tier) in [("hourly/", "hourly"), ("daily/", "daily")] {
        if let Some(name) = rest.strip_prefix(dir) {
            return (!name.contains('/')).then_some(tier);
        }
    }
    (!rest.contains('/')).then_some("flat")
}

/// Snapshots under `prefix` (keys ending `.db` in `hourly/`, `daily/` or
/// directly in it), with their tier, newest first.
pub fn snapshots_of(prefix: &str, objects: Vec<Snapshot>) -> Vec<Snapshot> {
    let mut out: Vec<Snapshot> = objects
        .into_iter()
        .filter_map(|mut o| {
            o.tier = tier_of(prefix, &o.key)?.to_string();
            Some(o)
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
        out.push_str(&format!("  {:6}  {:width$}  {:>10}  TIME\n", "TIER", "KEY", "SIZE"));
        for s in &b.snapshots {
            out.push_str(&format!(
                "  {:6}  {:width$}  {:>10}  {}\n",
                s.tier,
                s.key,
                size(s.size),
                s.time
            ));
        }
    }
    if let Some(run) = &b.last_run {
        let phase = run["phase"].as_str().unwrap_or("unknown");
        let what = run["message"].as_str().or_else(|| run["key"].as_str()).unwrap_or("");
        out.push_str(&format!("last backup run: {phase}: {what}\n"));
    }
    if let Some(t) = &b.last_test_restore {
        let phase = t["phase"].as_str().unwrap_or("unknown");
        let key = t["key"].as_str().unwrap_or("");
        let what = match (t["message"].as_str(), t["revision"].as_i64(), t["totalKey"].as_i64()) {
            (Some(m), _, _) => format!(" ({m})"),
            (None, Some(r), Some(k)) => format!(" (revision {r}, {k} keys, restored into a scratch dir)"),
            _ => String::new(),
        };
        let when = t["testedAt"]
            .as_u64()
            .map(|s| {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
                format!(" at {}", humantime::format_rfc3339_seconds(at))
            })
            .unwrap_or_default();
        out.push_str(&format!("last test restore: {phase}: {key}{what}{when}\n"));
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
            .map_err(|e| crate::aws::sdk_error("s3:ListObjectsV2", e))?;
        for o in page.contents() {
            objects.push(Snapshot {
                key: o.key().unwrap_or_default().to_string(),
                tier: String::new(),
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
    let last_test_restore = get_object(clients, &location.bucket, &location.key(TEST_RESTORE_STATUS))
        .await?
        .and_then(|b| serde_json::from_slice(&b).ok());
    Ok(Backups {
        location: format!("s3://{}/{prefix}", location.bucket),
        snapshots: snapshots_of(&prefix, objects),
        last_run,
        last_test_restore,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(key: &str, size: i64, time: &str) -> Snapshot {
        Snapshot {
            key: key.into(),
            tier: String::new(),
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
                snap("c/demo/etcd/hourly/20261201T000000Z-a.db", 10, "2026-12-01T00:00:01Z"),
                snap("c/demo/etcd/daily/20261201T000000Z-a.db", 10, "2026-12-01T00:00:02Z"),
                snap(
                    "c/demo/etcd/hourly/20261201T010000Z-a.db",
                    4_000_000,
                    "2026-12-01T01:00:01Z",
                ),
                snap("c/demo/etcd/20261130T000000Z-a.db", 9, "2026-11-30T00:00:01Z"),
                snap("c/demo/etcd/notes.txt", 1, "2026-12-01T02:00:00Z"),
                snap("c/demo/etcd/old/x.db", 1, "2026-12-01T02:00:00Z"),
                snap("c/demo/etcd/hourly/deeper/x.db", 1, "2026-12-01T02:00:00Z"),
            ],
        );
        let keys: Vec<(&str, &str)> = got.iter().map(|s| (s.tier.as_str(), s.key.as_str())).collect();
        assert_eq!(
            keys,
            [
                ("hourly", "c/demo/etcd/hourly/20261201T010000Z-a.db"),
                ("daily", "c/demo/etcd/daily/20261201T000000Z-a.db"),
                ("hourly", "c/demo/etcd/hourly/20261201T000000Z-a.db"),
                ("flat", "c/demo/etcd/20261130T000000Z-a.db"),
            ]
        );
        let b = Backups {
            location: format!("s3://b/{p}"),
            snapshots: got,
            last_run: Some(serde_json::json!({"phase": "failed", "message": "SlowDown"})),
            last_test_restore: Some(serde_json::json!({"phase": "ok", "key": "c/demo/etcd/hourly/x.db",
                "revision": 42, "totalKey": 7, "testedAt": 1764558000})),
        };
        let t = table(&b);
        assert!(t.contains("3.8 MiB"), "{t}");
        assert!(t.contains("10 B"), "{t}");
        assert!(t.contains("last backup run: failed: SlowDown\n"), "{t}");
        assert!(
            t.ends_with(
                "last test restore: ok: c/demo/etcd/hourly/x.db (revision 42, 7 keys, restored into a scratch dir) \
                 at 2025-12-01T03:00:00Z\n"
            ),
            "{t}"
        );
        let empty = Backups {
            location: "s3://b/x/".into(),
            snapshots: vec![],
            last_run: None,
            last_test_restore: None,
        };
        assert!(table(&empty).starts_with("no etcd snapshots in s3://b/x/"));
    }
}
