//! Certificate expiry for `kube-aws status` (issue 27): the controllers'
//! renewal (src/node/kube_aws_node/certs.py) writes, daily, one object per
//! controller at `status/certs/<instance-id>.json` with the earliest kubeadm
//! leaf and CA expiry and the run's result. `summarize` (pure) picks the
//! earliest of the controllers that reported lately and warns inside
//! [`WARN_DAYS`], on a failed renewal, and when every report is stale.
//! `snapshot_status` (pure) gives the newest etcd snapshot's age, stale
//! after two backup intervals.

use serde::{Deserialize, Serialize};

use crate::aws::services::s3::Location;
use crate::aws::{AwsError, Clients};
use crate::render::layout::CERTS_STATUS_DIR;

/// Warn when a certificate expires within this many days.
pub const WARN_DAYS: i64 = 30;
/// A report older than this is taken to be a gone controller's (the timer runs daily).
pub const FRESH_SECONDS: i64 = 3 * 86400;

/// One certificate's expiry, as certs.py writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Expiry {
    pub name: String,
    /// RFC 3339.
    pub expires: String,
    pub expires_epoch: i64,
}

/// One controller's certificate status object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateReport {
    #[serde(default)]
    pub instance_id: String,
    #[serde(default)]
    pub node_name: String,
    /// RFC 3339, when the controller last checked.
    pub checked_at: String,
    #[serde(default)]
    pub earliest_leaf: Option<Expiry>,
    #[serde(default, rename = "earliestCA")]
    pub earliest_ca: Option<Expiry>,
    #[serde(default)]
    pub renewed: Vec<String>,
    #[serde(default)]
    pub ok: bool,
    #[serde(default)]
    pub error: String,
}

/// The earliest expiry of one kind, with where and how long is left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Earliest {
    pub certificate: String,
    pub node: String,
    pub expires: String,
    pub days_left: i64,
}

/// What `status` shows of the certificates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateStatus {
    pub earliest_leaf: Option<Earliest>,
    #[serde(rename = "earliestCA")]
    pub earliest_ca: Option<Earliest>,
    pub warnings: Vec<String>,
    /// The controllers' reports that count (checked within [`FRESH_SECONDS`]).
    pub controllers: Vec<CertificateReport>,
}

fn epoch_of(rfc3339: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339(rfc3339).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok())
}

fn earliest<'a>(
    reports: &'a [CertificateReport],
    pick: impl Fn(&'a CertificateReport) -> Option<&'a Expiry>,
    now: i64,
) -> Option<Earliest> {
    reports
        .iter()
        .filter_map(|r| pick(r).map(|e| (r, e)))
        .min_by_key(|(_, e)| e.expires_epoch)
        .map(|(r, e)| Earliest {
            certificate: e.name.clone(),
            node: if r.node_name.is_empty() {
                r.instance_id.clone()
            } else {
                r.node_name.clone()
            },
            expires: e.expires.clone(),
            days_left: (e.expires_epoch - now).div_euclid(86400),
        })
}

/// The certificate status from the controllers' reports at `now` (seconds since the epoch).
pub fn summarize(reports: &[CertificateReport], now: i64) -> CertificateStatus {
    let fresh: Vec<CertificateReport> = reports
        .iter()
        .filter(|r| epoch_of(&r.checked_at).is_some_and(|t| now - t <= FRESH_SECONDS))
        .cloned()
        .collect();
    let mut warnings = Vec::new();
    // No report at all: a new cluster (the first check runs 30 minutes after boot).
    if fresh.is_empty() && !reports.is_empty() {
        warnings.push(format!(
            "no controller reported its certificates in the last {} days (kube-aws-certs.timer; \
             `kube-aws logs` shows the controllers' journals)",
            FRESH_SECONDS / 86400
        ));
    }
    for r in fresh.iter().filter(|r| !r.ok) {
        warnings.push(format!(
            "certificate renewal failed on {} at {}: {}",
            if r.node_name.is_empty() {
                &r.instance_id
            } else {
                &r.node_name
            },
            r.checked_at,
            r.error
        ));
    }
    let leaf = earliest(&fresh, |r| r.earliest_leaf.as_ref(), now);
    let ca = earliest(&fresh, |r| r.earliest_ca.as_ref(), now);
    for (what, e) in [("certificate", &leaf), ("certificate authority", &ca)] {
        if let Some(e) = e.as_ref().filter(|e| e.days_left < WARN_DAYS) {
            warnings.push(format!(
                "the {what} {:?} on {} expires {} ({} days)",
                e.certificate, e.node, e.expires, e.days_left
            ));
        }
    }
    CertificateStatus {
        earliest_leaf: leaf,
        earliest_ca: ca,
        warnings,
        controllers: fresh,
    }
}

/// What `status` shows of etcd's snapshots: the newest one's age.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotStatus {
    pub newest: Option<String>,
    /// RFC 3339, when S3 stored it.
    pub time: Option<String>,
    pub age_seconds: Option<i64>,
    pub warnings: Vec<String>,
}

/// The newest snapshot's age at `now`; stale (a warning) once it is older
/// than two backup intervals and an hour (the leader writes one per
/// interval). No snapshot is no warning: a new cluster has none for its first
/// interval (`kube-aws backups` lists them all).
pub fn snapshot_status(newest: Option<(&str, &str)>, interval_seconds: i64, now: i64) -> SnapshotStatus {
    let Some((key, time)) = newest else {
        return SnapshotStatus::default();
    };
    let age = epoch_of(time).map(|t| now - t);
    let mut warnings = Vec::new();
    if let Some(a) = age.filter(|a| *a > 2 * interval_seconds + 3600) {
        warnings.push(format!(
            "the newest etcd snapshot is {} hours old ({key}): backups are failing (`kube-aws backups` shows the last run)",
            a / 3600
        ));
    }
    SnapshotStatus {
        newest: Some(key.to_string()),
        time: Some(time.to_string()),
        age_seconds: age,
        warnings,
    }
}

/// The controllers' certificate status objects (unreadable ones are skipped).
pub async fn read_certificate_reports(
    clients: &Clients,
    location: &Location,
) -> Result<Vec<CertificateReport>, AwsError> {
    let mut cache = std::collections::BTreeMap::new();
    crate::aws::services::s3::read_changed(clients, &location.bucket, &location.key(CERTS_STATUS_DIR), &mut cache)
        .await?;
    Ok(cache.into_values().map(|(_, r)| r).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_156_046; // 2026-12-01T20:14:06Z
    const DAY: i64 = 86400;

    fn report(node: &str, checked: i64, leaf_days: i64, ok: bool) -> CertificateReport {
        let at = |t: i64| {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t as u64))
                .to_string()
        };
        // The shape certs.py writes (src/node/kube_aws_node/certs.py `report`).
        serde_json::from_value(serde_json::json!({
            "instanceId": format!("i-{node}"), "nodeName": node, "checkedAt": at(checked),
            "earliestLeaf": {"name": "apiserver", "expires": at(NOW + leaf_days * DAY), "expiresEpoch": NOW + leaf_days * DAY},
            "earliestCA": {"name": "ca", "expires": at(NOW + 3000 * DAY), "expiresEpoch": NOW + 3000 * DAY},
            "renewed": [], "ok": ok, "error": if ok { "" } else { "restart: kube-apiserver has not started again after 300s" },
        }))
        .unwrap()
    }

    #[test]
    fn the_earliest_fresh_leaf_is_shown_without_warning_far_from_expiry() {
        let s = summarize(
            &[report("a", NOW - DAY, 300, true), report("b", NOW - DAY, 200, true)],
            NOW,
        );
        let leaf = s.earliest_leaf.unwrap();
        assert_eq!((leaf.node.as_str(), leaf.days_left), ("b", 200));
        assert_eq!(s.earliest_ca.unwrap().certificate, "ca");
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }

    #[test]
    fn a_snapshot_older_than_two_intervals_is_stale() {
        let at = |t: i64| {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t as u64))
                .to_string()
        };
        let fresh = at(NOW - 1800);
        let s = snapshot_status(Some(("c/demo/etcd/a.db", &fresh)), 3600, NOW);
        assert_eq!((s.age_seconds, s.warnings.len()), (Some(1800), 0), "{s:?}");
        let old = at(NOW - 4 * 3600);
        let s = snapshot_status(Some(("c/demo/etcd/b.db", &old)), 3600, NOW);
        assert!(s.warnings[0].contains("4 hours old (c/demo/etcd/b.db)"), "{s:?}");
        assert_eq!(snapshot_status(None, 3600, NOW), SnapshotStatus::default());
    }

    #[test]
    fn inside_thirty_days_a_failed_renewal_and_silence_warn() {
        let s = summarize(&[report("a", NOW - DAY, 29, false)], NOW);
        assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("renewal failed on a"), "{:?}", s.warnings);
        assert!(s.warnings[1].contains("\"apiserver\" on a expires"), "{:?}", s.warnings);
        let gone = summarize(&[report("old", NOW - 10 * DAY, 5, true)], NOW);
        assert!(
            gone.earliest_leaf.is_none(),
            "a gone controller's report does not count"
        );
        assert!(
            gone.warnings[0].starts_with("no controller reported"),
            "{:?}",
            gone.warnings
        );
        assert_eq!(
            summarize(&[], NOW),
            CertificateStatus::default(),
            "a new cluster: nothing to say"
        );
    }
}
