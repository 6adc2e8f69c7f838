//! etcd's part of `kube-aws status`: the stack's CloudWatch alarms on etcd
//! (DescribeAlarms by the name prefix src/render/cfn/etcd.rs gives them: the
//! database at 70 % of the quota, the backup age) and the last maintenance
//! pass's status object (`status/etcd/maintenance.json`, written on the
//! etcd leader's node by src/node/kube_aws_node/defrag.py: each member's
//! size, etcd's own alarms such as NOSPACE, what was defragmented).
//!
//! `lines` and `warnings` are pure; `read` is the only part that calls AWS.
//! A refused or failing DescribeAlarms is reported in the status, not an
//! error: the rest of `status` still answers.

use serde::{Deserialize, Serialize};

use crate::aws::services::s3::{get_object, Location};
use crate::aws::{AwsError, Clients};
use crate::config::ClusterConfig;
use crate::render::layout::MAINTENANCE_STATUS;

/// One CloudWatch alarm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alarm {
    pub name: String,
    /// OK, ALARM or INSUFFICIENT_DATA.
    pub state: String,
    pub reason: String,
    /// When the state last changed, RFC 3339 (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// One member in the maintenance status object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    #[serde(default)]
    pub endpoint: String,
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub leader: bool,
    #[serde(default)]
    pub db_size: u64,
    #[serde(default)]
    pub db_size_in_use: u64,
}

/// One of etcd's own alarms (`/v3/maintenance/alarm`): NOSPACE, CORRUPT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberAlarm {
    #[serde(default, rename = "memberID")]
    pub member_id: String,
    #[serde(default)]
    pub alarm: String,
}

/// The last maintenance pass, as the node wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    #[serde(default)]
    pub quota_backend_bytes: u64,
    #[serde(default)]
    pub members: Vec<Member>,
    #[serde(default)]
    pub alarms: Vec<MemberAlarm>,
    #[serde(default)]
    pub defragmented: Vec<String>,
    #[serde(default)]
    pub problems: Vec<String>,
    #[serde(default)]
    pub updated_at: i64,
}

/// etcd in `status`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct EtcdStatus {
    /// The stack's etcd alarms, by name.
    pub alarms: Vec<Alarm>,
    /// Why the alarms could not be read, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alarms_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
}

/// A size in MiB, or GiB from 1 GiB.
fn human(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

/// The text lines `status` prints under `etcd:` (empty when there is nothing
/// to say: a cluster before its first maintenance pass, no alarm found).
pub fn lines(s: &EtcdStatus) -> Vec<String> {
    let mut out = Vec::new();
    for a in &s.alarms {
        let since = a.since.as_deref().map(|t| format!(" since {t}")).unwrap_or_default();
        if a.state == "OK" || a.reason.is_empty() {
            out.push(format!("alarm {}: {}{since}", a.name, a.state));
        } else {
            out.push(format!("alarm {}: {}{since} ({})", a.name, a.state, a.reason));
        }
    }
    if let Some(e) = &s.alarms_error {
        out.push(format!("alarms not read: {e}"));
    }
    if let Some(m) = &s.maintenance {
        for a in &m.alarms {
            let member = m
                .members
                .iter()
                .find(|x| x.id == a.member_id)
                .map(|x| x.endpoint.as_str())
                .unwrap_or(a.member_id.as_str());
            out.push(format!("etcd alarm {} raised on member {member}", a.alarm));
        }
        for x in &m.members {
            let share = if m.quota_backend_bytes > 0 {
                format!(
                    " ({:.0} % of the {} quota)",
                    x.db_size as f64 * 100.0 / m.quota_backend_bytes as f64,
                    human(m.quota_backend_bytes)
                )
            } else {
                String::new()
            };
            out.push(format!(
                "member {}{}: database {}{share}, {} in use",
                x.endpoint,
                if x.leader { " (leader)" } else { "" },
                human(x.db_size),
                human(x.db_size_in_use)
            ));
        }
        for p in &m.problems {
            out.push(format!("maintenance: {p}"));
        }
    }
    out
}

/// What calls for the operator: an alarm in ALARM, an etcd alarm raised.
pub fn warnings(s: &EtcdStatus) -> Vec<String> {
    let mut out: Vec<String> = s
        .alarms
        .iter()
        .filter(|a| a.state == "ALARM")
        .map(|a| format!("CloudWatch alarm {} is in ALARM", a.name))
        .collect();
    if let Some(m) = &s.maintenance {
        if m.alarms.iter().any(|a| a.alarm == "NOSPACE") {
            out.push(
                "etcd raised NOSPACE: the cluster takes no writes until the database is compacted, \
                 defragmented and the alarm disarmed (docs/deploy.md, \"etcd's quota and defragmentation\")"
                    .into(),
            );
        }
    }
    out
}

/// Reads the alarms and the maintenance status object.
pub async fn read(clients: &Clients, cluster: &ClusterConfig) -> Result<EtcdStatus, AwsError> {
    let location = Location::new(cluster)?;
    let maintenance = get_object(clients, &location.bucket, &location.key(MAINTENANCE_STATUS))
        .await?
        .and_then(|b| serde_json::from_slice(&b).ok());
    let (alarms, alarms_error) = match describe_alarms(clients, &cluster.cluster_name).await {
        Ok(a) => (a, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    Ok(EtcdStatus {
        alarms,
        alarms_error,
        maintenance,
    })
}

async fn describe_alarms(clients: &Clients, cluster: &str) -> Result<Vec<Alarm>, AwsError> {
    let prefix = crate::render::cfn::etcd_alarm_prefix(cluster);
    Ok(clients
        .cloudwatch
        .describe_alarms(&prefix)
        .await?
        .into_iter()
        .map(|a| Alarm {
            name: a.name,
            state: a.state,
            reason: a.reason,
            since: a.since,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maintenance(json: &str) -> Maintenance {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn nospace_and_alarms_are_shown_and_warned() {
        // The shape src/node/kube_aws_node/defrag.py `report` writes.
        let m = maintenance(
            r#"{"quotaBackendBytes": 16777216,
                "members": [{"endpoint": "https://10.0.1.5:2379", "id": "42", "leader": true,
                             "dbSize": 16777216, "dbSizeInUse": 8388608}],
                "alarms": [{"memberID": "42", "alarm": "NOSPACE"}],
                "defragmented": [], "problems": [], "updatedAt": 1764558000}"#,
        );
        let s = EtcdStatus {
            alarms: vec![
                Alarm {
                    name: "kube-aws-demo-etcd-backup-age".into(),
                    state: "OK".into(),
                    reason: "fine".into(),
                    since: None,
                },
                Alarm {
                    name: "kube-aws-demo-etcd-db-size".into(),
                    state: "ALARM".into(),
                    reason: "Threshold Crossed".into(),
                    since: Some("2026-12-01T00:00:00Z".into()),
                },
            ],
            alarms_error: None,
            maintenance: Some(m),
        };
        assert_eq!(
            lines(&s),
            [
                "alarm kube-aws-demo-etcd-backup-age: OK",
                "alarm kube-aws-demo-etcd-db-size: ALARM since 2026-12-01T00:00:00Z (Threshold Crossed)",
                "etcd alarm NOSPACE raised on member https://10.0.1.5:2379",
                "member https://10.0.1.5:2379 (leader): database 16.0 MiB (100 % of the 16.0 MiB quota), 8.0 MiB in use",
            ]
        );
        let w = warnings(&s);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("kube-aws-demo-etcd-db-size"), "{w:?}");
        assert!(w[1].contains("NOSPACE"), "{w:?}");
    }

    #[test]
    fn nothing_to_say_before_the_first_pass() {
        let s = EtcdStatus::default();
        assert!(lines(&s).is_empty());
        assert!(warnings(&s).is_empty());
        // A status object with fields it does not know still reads.
        let m = maintenance(r#"{"members": [], "future": 1}"#);
        assert_eq!(m.quota_backend_bytes, 0);
    }
}
