//! The control plane's part of `kube-aws status` (issue 26): the two status
//! objects the controllers write to the cluster's bucket.
//!
//! - `status/control-plane/upgrade.json` ([`UPGRADE_STATUS`]), written by
//!   src/node/kube_aws_node/upgrade.py (`Upgrader.report`, `after_init`):
//!   the phase (`running` after the first `kubeadm init`, `upgrading`,
//!   `upgraded`, `failed`, `refused`), `version` (what the control plane last
//!   reached), `from`, `to`, `step`, `message`, `node`, `updatedAt`
//!   (seconds since the epoch). A controller's failed join writes it too
//!   (phase `failed`, step `kubeadm-join`, no `from`/`to`).
//! - `status/control-plane/reconfigure.json` ([`RECONFIGURE_STATUS`]),
//!   written by src/node/kube_aws_node/reconfigure.py (`Controller.status`):
//!   the phase (`applying`, `applied`, `failed`), `sha256` (the digest of the
//!   configuration), `step`, `message`, `node`, `instanceId`, `updatedAt`.
//!
//! `parse_*`, `summarize` (which also says the warnings) and `lines` are
//! pure; `read` and `read_upgrade` (for the wait, src/aws/wait/watch.rs) are the
//! only parts that call AWS, through the one S3 reader (`services::s3::get_object`).
//! An object that does not exist yet (a cluster that never upgraded) is no
//! error; one that cannot be read or is not the record is said in the
//! section, naming its key, and the rest of `status` still answers.

use serde::{Deserialize, Serialize};

use crate::aws::services::s3::{get_object, Location};
use crate::aws::Clients;
use crate::render::layout::{RECONFIGURE_STATUS, UPGRADE_STATUS};

/// The upgrade status object, as upgrade.py writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeRecord {
    /// running, upgrading, upgraded, failed or refused.
    pub phase: String,
    /// The version the control plane last reached.
    #[serde(default)]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default)]
    pub step: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub node: String,
    /// Seconds since the epoch.
    #[serde(default)]
    pub updated_at: i64,
}

impl UpgradeRecord {
    /// A failed or refused upgrade (or join): what the operator must look at.
    pub fn is_failure(&self) -> bool {
        matches!(self.phase.as_str(), "failed" | "refused")
    }

    /// `1.35.4 → 1.36.3`, `→ 1.34.2` (a refusal names only the joining
    /// node's version), or "" (no move: a first init, a failed join).
    fn movement(&self) -> String {
        match (self.from.as_deref(), self.to.as_deref()) {
            (Some(f), Some(t)) => format!("{f} → {t}"),
            (None, Some(t)) => format!("→ {t}"),
            _ => String::new(),
        }
    }

    /// `failed at step kubeadm-upgrade-apply: <message>`: the line `update
    /// --wait` adds to a controller's failure.
    pub fn failure_line(&self) -> String {
        let mut s = format!("{} at step {}", self.phase, self.step);
        if !self.message.is_empty() {
            s.push_str(&format!(": {}", self.message));
        }
        s
    }
}

/// The reconfiguration status object, as reconfigure.py writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconfigureRecord {
    /// applying, applied or failed.
    pub phase: String,
    /// The digest of the ClusterConfiguration and KubeletConfiguration applied (or tried).
    #[serde(default)]
    pub sha256: String,
    #[serde(default)]
    pub step: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub instance_id: String,
    /// Seconds since the epoch.
    #[serde(default)]
    pub updated_at: i64,
}

/// A record with its age at the time `status` looked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Aged<T> {
    #[serde(flatten)]
    pub record: T,
    /// Seconds since `updatedAt` (None when the record has no time).
    pub age_seconds: Option<i64>,
}

/// What the read of one object gave: the record, nothing (not written yet),
/// or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read<T> {
    Missing,
    Found(T),
    Unreadable(String),
}

/// The control plane in `status` (`-o json`: `controlPlane`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneStatus {
    /// The version the control plane last reached (the upgrade record's), None before any record.
    pub version: Option<String>,
    /// The last upgrade record; null when none was written.
    pub upgrade: Option<Aged<UpgradeRecord>>,
    /// Why the upgrade record could not be read, naming its key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade_error: Option<String>,
    /// The last reconfiguration record; null when none was written.
    pub reconfiguration: Option<Aged<ReconfigureRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconfiguration_error: Option<String>,
    /// A failed or refused upgrade, a failed reconfiguration.
    pub warnings: Vec<String>,
}

/// Parses one status object's body; `key` names it in the error.
fn parse<T: serde::de::DeserializeOwned>(bytes: Option<&[u8]>, key: &str, what: &str) -> Read<T> {
    match bytes {
        None => Read::Missing,
        Some(b) => match serde_json::from_slice(b) {
            Ok(r) => Read::Found(r),
            Err(e) => Read::Unreadable(format!("{key} is not the {what} record the controllers write: {e}")),
        },
    }
}

/// The upgrade record from its object's body (None: no object).
pub fn parse_upgrade(bytes: Option<&[u8]>, key: &str) -> Read<UpgradeRecord> {
    parse(bytes, key, "upgrade")
}

/// The reconfiguration record from its object's body (None: no object).
pub fn parse_reconfigure(bytes: Option<&[u8]>, key: &str) -> Read<ReconfigureRecord> {
    parse(bytes, key, "reconfiguration")
}

fn aged<T>(record: T, updated_at: i64, now: i64) -> Aged<T> {
    Aged {
        record,
        age_seconds: (updated_at > 0).then(|| now - updated_at),
    }
}

/// What `status` shows of the two records at `now` (seconds since the epoch).
pub fn summarize(upgrade: Read<UpgradeRecord>, reconfigure: Read<ReconfigureRecord>, now: i64) -> ControlPlaneStatus {
    let mut out = ControlPlaneStatus::default();
    match upgrade {
        Read::Missing => {}
        Read::Unreadable(e) => out.upgrade_error = Some(e),
        Read::Found(u) => {
            out.version = Some(u.version.clone()).filter(|v| !v.is_empty());
            if u.is_failure() {
                let what = if u.phase == "refused" { "refused" } else { "failed" };
                let movement = u.movement();
                // A record without a version move is a controller's join at
                // the cluster's version (upgrade.py writes its failure too).
                let subject = if movement.is_empty() {
                    "a controller's join".to_string()
                } else {
                    format!("the control-plane upgrade ({movement})")
                };
                out.warnings.push(format!(
                    "{subject} {what} at step {} on {}: {} (docs/deploy.md, \"Upgrading Kubernetes\"; \
                     `kube-aws nodes` and `kube-aws logs` show the controller)",
                    u.step,
                    node_or_unknown(&u.node),
                    u.message
                ));
            }
            let at = u.updated_at;
            out.upgrade = Some(aged(u, at, now));
        }
    }
    match reconfigure {
        Read::Missing => {}
        Read::Unreadable(e) => out.reconfiguration_error = Some(e),
        Read::Found(r) => {
            if r.phase == "failed" {
                out.warnings.push(format!(
                    "the control-plane reconfiguration failed at step {} on {}: {} (the other controllers \
                     keep their configuration; the next `kube-aws update` with another one tries again)",
                    r.step,
                    node_or_unknown(&r.node),
                    r.message
                ));
            }
            let at = r.updated_at;
            out.reconfiguration = Some(aged(r, at, now));
        }
    }
    out
}

fn node_or_unknown(node: &str) -> &str {
    if node.is_empty() {
        "an unnamed controller"
    } else {
        node
    }
}

/// `on ip-10-0-1-5.ec2.internal, 2h3m ago`
fn where_when(node: &str, age: Option<i64>) -> String {
    let mut s = String::new();
    if !node.is_empty() {
        s.push_str(&format!(" on {node}"));
    }
    if let Some(a) = age {
        s.push_str(&format!(", {} ago", super::age_text(a)));
    }
    s
}

/// The text lines `status` prints under `control plane:`.
pub fn lines(s: &ControlPlaneStatus) -> Vec<String> {
    let mut out = Vec::new();
    match (&s.version, &s.upgrade_error) {
        (Some(v), _) => out.push(format!("version: {v}")),
        (None, None) => out.push("version: not recorded".into()),
        (None, Some(_)) => {}
    }
    match (&s.upgrade, &s.upgrade_error) {
        (_, Some(e)) => out.push(format!("upgrade: cannot read: {e}")),
        (None, None) => out.push("upgrade: no upgrade recorded".into()),
        (Some(a), None) => {
            let u = &a.record;
            let at = where_when(&u.node, a.age_seconds);
            if u.phase == "running" {
                // The first `kubeadm init` (or a single controller's init over its snapshot).
                out.push(format!("upgrade: no upgrade recorded (kubeadm init{at})"));
            } else {
                let movement = u.movement();
                let mut line = format!("upgrade: {}", u.phase);
                if !movement.is_empty() {
                    line.push_str(&format!(" {movement}"));
                }
                if !u.step.is_empty() && u.step != "done" {
                    line.push_str(&format!(", step {}", u.step));
                }
                line.push_str(&at);
                if u.is_failure() && !u.message.is_empty() {
                    line.push_str(&format!(": {}", u.message));
                }
                out.push(line);
            }
        }
    }
    match (&s.reconfiguration, &s.reconfiguration_error) {
        (_, Some(e)) => out.push(format!("reconfiguration: cannot read: {e}")),
        (None, None) => out.push("reconfiguration: no reconfiguration recorded".into()),
        (Some(a), None) => {
            let r = &a.record;
            let mut line = format!("reconfiguration: {}", r.phase);
            if !r.step.is_empty() && r.step != "done" {
                line.push_str(&format!(", step {}", r.step));
            }
            line.push_str(&where_when(&r.node, a.age_seconds));
            if !r.sha256.is_empty() {
                line.push_str(&format!(" (configuration {})", r.sha256.get(..12).unwrap_or(&r.sha256)));
            }
            if r.phase == "failed" && !r.message.is_empty() {
                line.push_str(&format!(": {}", r.message));
            }
            out.push(line);
        }
    }
    out
}

/// Reads both objects. Never an error: a refused or failing read is said in
/// the section (naming the key), as etcd's alarms are (src/aws/state/etcd_status.rs).
pub async fn read(clients: &Clients, location: &Location, now: i64) -> ControlPlaneStatus {
    let url = |key: &str| format!("s3://{}/{key}", location.bucket);
    let (upgrade_key, reconfigure_key) = (location.key(UPGRADE_STATUS), location.key(RECONFIGURE_STATUS));
    let upgrade = match get_object(clients, &location.bucket, &upgrade_key).await {
        Ok(b) => parse_upgrade(b.as_deref(), &url(&upgrade_key)),
        Err(e) => Read::Unreadable(format!("{}: {e}", url(&upgrade_key))),
    };
    let reconfigure = match get_object(clients, &location.bucket, &reconfigure_key).await {
        Ok(b) => parse_reconfigure(b.as_deref(), &url(&reconfigure_key)),
        Err(e) => Read::Unreadable(format!("{}: {e}", url(&reconfigure_key))),
    };
    summarize(upgrade, reconfigure, now)
}

/// The upgrade record for a wait (`update --wait`): None when there is none,
/// it cannot be read or is malformed (the wait's own outcome does not depend on it).
pub async fn read_upgrade(clients: &Clients, location: &Location) -> Option<UpgradeRecord> {
    let key = location.key(UPGRADE_STATUS);
    let bytes = get_object(clients, &location.bucket, &key).await.ok()??;
    match parse_upgrade(Some(&bytes), &key) {
        Read::Found(r) => Some(r),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_156_046; // 2026-12-01T20:14:06Z
    const KEY: &str = "clusters/demo/status/control-plane/upgrade.json";
    const RKEY: &str = "clusters/demo/status/control-plane/reconfigure.json";

    fn upgrade(json: serde_json::Value) -> Read<UpgradeRecord> {
        parse_upgrade(Some(json.to_string().as_bytes()), KEY)
    }

    fn reconfigure(json: serde_json::Value) -> Read<ReconfigureRecord> {
        parse_reconfigure(Some(json.to_string().as_bytes()), RKEY)
    }

    #[test]
    fn an_upgraded_control_plane_shows_its_version_and_the_last_upgrade_without_warning() {
        // The shape upgrade.py's `Upgrader.report` leaves after a whole upgrade:
        // the fields of every step, the last ones winning.
        let u = upgrade(serde_json::json!({
            "phase": "upgraded", "version": "1.36.3", "from": "1.35.4", "to": "1.36.3", "step": "done",
            "message": "", "node": "ip-10-0-1-5.ec2.internal", "updatedAt": NOW - 7380,
        }));
        let r = reconfigure(serde_json::json!({
            "phase": "applied", "sha256": "0123456789abcdef0123", "step": "done", "message": "",
            "node": "ip-10-0-2-7.ec2.internal", "instanceId": "i-0abc", "updatedAt": NOW - 300,
        }));
        let s = summarize(u, r, NOW);
        assert_eq!(s.version.as_deref(), Some("1.36.3"));
        assert_eq!(
            lines(&s),
            [
                "version: 1.36.3",
                "upgrade: upgraded 1.35.4 → 1.36.3 on ip-10-0-1-5.ec2.internal, 2h3m ago",
                "reconfiguration: applied on ip-10-0-2-7.ec2.internal, 5m ago (configuration 0123456789ab)",
            ]
        );
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["upgrade"]["from"], "1.35.4", "{j}");
        assert_eq!(j["upgrade"]["ageSeconds"], 7380, "{j}");
        assert_eq!(j["reconfiguration"]["sha256"], "0123456789abcdef0123", "{j}");
        assert!(j.get("upgradeError").is_none(), "{j}");
    }

    #[test]
    fn a_failed_upgrade_and_a_failed_reconfiguration_warn_with_step_and_message() {
        let msg = "kubeadm upgrade apply v1.36.3 exited 1 (see the boot log); kubeadm-config and \
                   kubelet-config are back as they were (1.35.4)";
        let u = upgrade(serde_json::json!({
            "phase": "failed", "version": "1.35.4", "from": "1.35.4", "to": "1.36.3",
            "step": "kubeadm-upgrade-apply", "message": msg, "node": "ip-10-0-1-9.ec2.internal",
            "updatedAt": NOW - 90,
        }));
        let r = reconfigure(serde_json::json!({
            "phase": "failed", "sha256": "feedbeef", "step": "kube-apiserver",
            "message": "kube-apiserver is not healthy; the manifests … are back as they were",
            "node": "ip-10-0-1-5.ec2.internal", "instanceId": "i-1", "updatedAt": NOW - 60,
        }));
        let s = summarize(u, r, NOW);
        let l = lines(&s);
        assert_eq!(l[0], "version: 1.35.4", "the version the control plane is at: {l:?}");
        assert_eq!(
            l[1],
            format!(
                "upgrade: failed 1.35.4 → 1.36.3, step kubeadm-upgrade-apply on ip-10-0-1-9.ec2.internal, 1m ago: {msg}"
            )
        );
        assert_eq!(
            l[2],
            "reconfiguration: failed, step kube-apiserver on ip-10-0-1-5.ec2.internal, 1m ago (configuration feedbeef): \
             kube-apiserver is not healthy; the manifests … are back as they were"
        );
        assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
        assert!(
            s.warnings[0].starts_with(
                "the control-plane upgrade (1.35.4 → 1.36.3) failed at step kubeadm-upgrade-apply on ip-10-0-1-9"
            ),
            "{:?}",
            s.warnings
        );
        assert!(s.warnings[0].contains(msg), "{:?}", s.warnings);
        assert!(
            s.warnings[1].starts_with("the control-plane reconfiguration failed at step kube-apiserver"),
            "{:?}",
            s.warnings
        );
        assert_eq!(
            s.upgrade.as_ref().unwrap().record.failure_line(),
            format!("failed at step kubeadm-upgrade-apply: {msg}")
        );
    }

    #[test]
    fn a_failed_join_at_the_clusters_version_is_said_as_a_join() {
        // `_join` at the same version: no `from`/`to`, step kubeadm-join.
        let u = upgrade(serde_json::json!({
            "phase": "failed", "version": "1.35.4", "step": "kubeadm-join",
            "message": "kubeadm join exited 1; kubeadm-config and kubelet-config are back as they were (1.35.4)",
            "node": "ip-c", "updatedAt": NOW - 30,
        }));
        let s = summarize(u, Read::Missing, NOW);
        assert_eq!(
            lines(&s)[1],
            "upgrade: failed, step kubeadm-join on ip-c, 30s ago: kubeadm join exited 1; kubeadm-config and \
             kubelet-config are back as they were (1.35.4)"
        );
        assert!(
            s.warnings[0].starts_with("a controller's join failed at step kubeadm-join on ip-c: kubeadm join exited 1"),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn a_refusal_names_the_joining_version_and_warns() {
        // `_join`'s refusal writes no `from`.
        let u = upgrade(serde_json::json!({
            "phase": "refused", "version": "1.36.3", "to": "1.35.4", "step": "version-check",
            "message": "this node (1.35.4) is older than the cluster (1.36.3)", "node": "ip-a", "updatedAt": NOW,
        }));
        let s = summarize(u, Read::Missing, NOW);
        assert_eq!(
            lines(&s)[1],
            "upgrade: refused → 1.35.4, step version-check on ip-a, 0s ago: this node (1.35.4) is older than the cluster (1.36.3)"
        );
        assert!(
            s.warnings[0].contains("(→ 1.35.4) refused at step version-check on ip-a"),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn nothing_recorded_yet_is_said_plainly_and_a_first_init_is_no_upgrade() {
        let s = summarize(Read::Missing, Read::Missing, NOW);
        assert_eq!(
            lines(&s),
            [
                "version: not recorded",
                "upgrade: no upgrade recorded",
                "reconfiguration: no reconfiguration recorded"
            ]
        );
        assert!(s.warnings.is_empty());
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["upgrade"], serde_json::Value::Null, "{j}");
        assert_eq!(j["reconfiguration"], serde_json::Value::Null, "{j}");
        // `after_init`'s record of the first kubeadm init.
        let init = upgrade(serde_json::json!({
            "phase": "running", "version": "1.35.4", "step": "kubeadm-init", "message": "",
            "node": "ip-b", "updatedAt": NOW - 2 * 86400 - 3600,
        }));
        let s = summarize(init, Read::Missing, NOW);
        assert_eq!(
            lines(&s)[..2],
            [
                "version: 1.35.4",
                "upgrade: no upgrade recorded (kubeadm init on ip-b, 2d1h ago)"
            ]
        );
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn a_malformed_object_is_named_not_a_panic() {
        for body in [&b"not json"[..], b"[1, 2]", b"{}", br#"{"phase": 3}"#] {
            let Read::Unreadable(e) = parse_upgrade(Some(body), KEY) else {
                panic!("{body:?} read")
            };
            assert!(e.starts_with(&format!("{KEY} is not the upgrade record")), "{e}");
        }
        // Fields it does not know still read.
        assert!(matches!(
            upgrade(serde_json::json!({"phase": "upgrading", "future": 1})),
            Read::Found(_)
        ));
        let s = summarize(
            parse_upgrade(Some(b"{"), KEY),
            parse_reconfigure(Some(b"[]"), RKEY),
            NOW,
        );
        let l = lines(&s);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(
            l[0].starts_with(&format!("upgrade: cannot read: {KEY} is not")),
            "{l:?}"
        );
        assert!(
            l[1].starts_with(&format!("reconfiguration: cannot read: {RKEY} is not")),
            "{l:?}"
        );
        let j = serde_json::to_value(&s).unwrap();
        assert!(j["upgradeError"].as_str().unwrap().contains(KEY), "{j}");
        assert!(s.warnings.is_empty());
    }
}
