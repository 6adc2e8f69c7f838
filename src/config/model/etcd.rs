//! cluster.yaml's `etcd`: snapshots to S3, their interval and retention.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// etcd on the controllers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Etcd {
    /// Snapshots of etcd to `s3URI/<clusterName>/etcd/`, written by the etcd
    /// leader, SSE-KMS with kmsKeyARN.
    #[serde(default)]
    pub backup: EtcdBackup,
    /// etcd's `--quota-backend-bytes`: past it etcd raises NOSPACE and takes
    /// only reads and deletes (default 8 GiB, etcd's suggested maximum;
    /// 256 MiB to 64 GiB). Set at `kubeadm init` (restore included): members
    /// of a running cluster keep the quota they started with.
    #[serde(default = "default_quota_backend_bytes")]
    pub quota_backend_bytes: u64,
}

fn default_quota_backend_bytes() -> u64 {
    8 * 1024 * 1024 * 1024
}

impl Default for Etcd {
    fn default() -> Self {
        Etcd {
            backup: EtcdBackup::default(),
            quota_backend_bytes: default_quota_backend_bytes(),
        }
    }
}

/// How often etcd is snapshotted, and how many snapshots are kept.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdBackup {
    /// Time between snapshots, e.g. `1h` (default), `30m`, `6h`: 5m to 24h.
    /// Also the most data a restore can lose.
    #[serde(default = "default_backup_interval")]
    pub interval: String,
    /// How long snapshots are kept, by S3 lifecycle rules on the bucket
    /// (`up` and `update` set them; no node can delete a snapshot).
    #[serde(default)]
    pub retention: EtcdRetention,
}

impl Default for EtcdBackup {
    fn default() -> Self {
        EtcdBackup {
            interval: default_backup_interval(),
            retention: EtcdRetention::default(),
        }
    }
}

/// The two tiers of snapshots: every snapshot under `etcd/hourly/`, one a
/// day also under `etcd/daily/`; each prefix expires by its own lifecycle rule.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdRetention {
    /// Days an hourly (every `interval`) snapshot is kept (1 to 365, default 7).
    #[serde(default = "default_hourly_days")]
    pub hourly_days: u32,
    /// Days a daily snapshot is kept (1 to 3650, default 90).
    #[serde(default = "default_daily_days")]
    pub daily_days: u32,
}

impl Default for EtcdRetention {
    fn default() -> Self {
        EtcdRetention {
            hourly_days: default_hourly_days(),
            daily_days: default_daily_days(),
        }
    }
}

fn default_backup_interval() -> String {
    "1h".into()
}
fn default_hourly_days() -> u32 {
    7
}
fn default_daily_days() -> u32 {
    90
}
