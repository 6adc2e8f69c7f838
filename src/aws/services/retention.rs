//! How long etcd snapshots are kept: two S3 lifecycle rules on the cluster's
//! bucket, one per tier (`<prefix>/etcd/hourly/` for
//! `etcd.backup.retention.hourlyDays`, `<prefix>/etcd/daily/` for
//! `dailyDays`), as kops's etcd-manager keeps hourly snapshots for a week and
//! daily ones for 90 days (etcd-manager pkg/backupcontroller). S3 expires
//! them; no node deletes a snapshot (the controllers' role has no
//! s3:DeleteObject there, src/render/cfn/etcd.rs).
//!
//! A bucket has one lifecycle configuration and PutBucketLifecycleConfiguration
//! replaces it whole, so the rules are merged into what is there: the rules
//! with this cluster's IDs are replaced, every other rule is kept as it is
//! ([`merge`], pure). `up` and `update` apply them when they publish;
//! `destroy --purge` takes them out again.

use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleFilter,
};

use crate::aws::services::s3::Location;
use crate::aws::{error_code, sdk_error, AwsError, Clients};
use crate::config::ClusterConfig;
use crate::render::layout::ETCD_BACKUP_DIR;

/// One of the cluster's rules: its ID, the key prefix it expires, after how many days.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierRule {
    pub id: String,
    pub prefix: String,
    pub days: i32,
}

/// The tiers' key prefixes under `<prefix>/etcd/` (the node program writes
/// there: src/node/kube_aws_node/etcd.py `HOURLY`, `DAILY`).
pub const TIERS: [&str; 2] = ["hourly/", "daily/"];

/// The cluster's two rules.
pub fn tier_rules(cfg: &ClusterConfig, location: &Location) -> Vec<TierRule> {
    let r = &cfg.etcd.backup.retention;
    let dir = format!("{}/{ETCD_BACKUP_DIR}/", location.prefix);
    vec![
        TierRule {
            id: rule_id(&cfg.cluster_name, "hourly"),
            prefix: format!("{dir}{}", TIERS[0]),
            days: r.hourly_days as i32,
        },
        TierRule {
            id: rule_id(&cfg.cluster_name, "daily"),
            prefix: format!("{dir}{}", TIERS[1]),
            days: r.daily_days as i32,
        },
    ]
}

/// `kube-aws-<cluster>-etcd-<tier>`: how the cluster's rules are told from
/// the bucket's other rules.
pub fn rule_id(cluster: &str, tier: &str) -> String {
    format!("kube-aws-{cluster}-etcd-{tier}")
}

fn to_rule(t: &TierRule) -> LifecycleRule {
    LifecycleRule::builder()
        .id(&t.id)
        .filter(LifecycleRuleFilter::builder().prefix(&t.prefix).build())
        .status(ExpirationStatus::Enabled)
        .expiration(LifecycleExpiration::builder().days(t.days).build())
        .build()
        .expect("status is set")
}

/// The bucket's rules with the cluster's replaced by `ours` (none: taken out).
/// Other rules keep their order and come first.
pub fn merge(existing: Vec<LifecycleRule>, cluster: &str, ours: &[TierRule]) -> Vec<LifecycleRule> {
    let mine = [rule_id(cluster, "hourly"), rule_id(cluster, "daily")];
    let mut out: Vec<LifecycleRule> = existing
        .into_iter()
        .filter(|r| !r.id().is_some_and(|id| mine.iter().any(|m| m == id)))
        .collect();
    out.extend(ours.iter().map(to_rule));
    out
}

async fn current_rules(clients: &Clients, bucket: &str) -> Result<Vec<LifecycleRule>, AwsError> {
    match clients
        .s3
        .get_bucket_lifecycle_configuration()
        .bucket(bucket)
        .send()
        .await
    {
        Ok(c) => Ok(c.rules().to_vec()),
        Err(e) if error_code(&e) == Some("NoSuchLifecycleConfiguration") => Ok(Vec::new()),
        Err(e) => Err(sdk_error("s3:GetLifecycleConfiguration", e)),
    }
}

async fn put_rules(clients: &Clients, bucket: &str, rules: Vec<LifecycleRule>) -> Result<(), AwsError> {
    if rules.is_empty() {
        return clients
            .s3
            .delete_bucket_lifecycle()
            .bucket(bucket)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| sdk_error("s3:PutLifecycleConfiguration", e));
    }
    let config = BucketLifecycleConfiguration::builder()
        .set_rules(Some(rules))
        .build()
        .expect("rules are set");
    clients
        .s3
        .put_bucket_lifecycle_configuration()
        .bucket(bucket)
        .lifecycle_configuration(config)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| sdk_error("s3:PutLifecycleConfiguration", e))
}

/// Sets the cluster's two rules on its bucket, keeping every other rule.
pub async fn apply(clients: &Clients, cfg: &ClusterConfig, location: &Location) -> Result<(), AwsError> {
    let existing = current_rules(clients, &location.bucket).await?;
    let ours = tier_rules(cfg, location);
    let merged = merge(existing.clone(), &cfg.cluster_name, &ours);
    if merged == existing {
        return Ok(());
    }
    put_rules(clients, &location.bucket, merged).await
}

/// Takes the cluster's rules out of its bucket (`destroy --purge`).
pub async fn withdraw(clients: &Clients, cfg: &ClusterConfig, location: &Location) -> Result<(), AwsError> {
    let existing = current_rules(clients, &location.bucket).await?;
    let merged = merge(existing.clone(), &cfg.cluster_name, &[]);
    if merged.len() == existing.len() {
        return Ok(());
    }
    put_rules(clients, &location.bucket, merged).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> ClusterConfig {
        serde_yaml::from_str(&format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://bkt/p\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn two_tiers_by_default_a_week_and_ninety_days() {
        let c = cfg("");
        let rules = tier_rules(&c, &Location::new(&c).unwrap());
        assert_eq!(
            rules,
            [
                TierRule {
                    id: "kube-aws-demo-etcd-hourly".into(),
                    prefix: "p/demo/etcd/hourly/".into(),
                    days: 7
                },
                TierRule {
                    id: "kube-aws-demo-etcd-daily".into(),
                    prefix: "p/demo/etcd/daily/".into(),
                    days: 90
                },
            ]
        );
        let c = cfg("etcd:\n  backup:\n    retention: {hourlyDays: 2, dailyDays: 30}\n");
        let days: Vec<i32> = tier_rules(&c, &Location::new(&c).unwrap())
            .iter()
            .map(|r| r.days)
            .collect();
        assert_eq!(days, [2, 30]);
    }

    #[test]
    fn merging_keeps_other_rules_and_replaces_the_clusters() {
        let other = LifecycleRule::builder()
            .id("logs")
            .status(ExpirationStatus::Enabled)
            .build()
            .unwrap();
        let other_cluster = to_rule(&TierRule {
            id: rule_id("other", "hourly"),
            prefix: "p/other/etcd/hourly/".into(),
            days: 3,
        });
        let c = cfg("");
        let ours = tier_rules(&c, &Location::new(&c).unwrap());
        let stale = to_rule(&TierRule {
            days: 1,
            ..ours[0].clone()
        });
        let merged = merge(vec![other.clone(), stale, other_cluster.clone()], "demo", &ours);
        let ids: Vec<&str> = merged.iter().map(|r| r.id().unwrap()).collect();
        assert_eq!(
            ids,
            [
                "logs",
                "kube-aws-other-etcd-hourly",
                "kube-aws-demo-etcd-hourly",
                "kube-aws-demo-etcd-daily"
            ]
        );
        assert_eq!(merged[2].expiration().unwrap().days(), Some(7));
        // Withdrawn: only the others stay.
        assert_eq!(merge(merged, "demo", &[]), [other, other_cluster]);
    }
}
