//! The cluster-state readers that `status` composes: each reads what the
//! controllers or the stack record (backups, etcd alarms, the control plane's
//! records, certificate expiry, KMS keys, instances, join tokens, the stack's
//! recorded names and zones).

pub mod backups;
pub mod control_plane_status;
pub mod etcd_status;
pub mod expiry;
pub mod join_token;
pub mod kms_keys;
pub mod nodes;
pub mod role_names;
pub mod zones;

/// `3h12m`, `2d4h`, `45s`: an age for people.
pub fn age_text(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86399 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}
