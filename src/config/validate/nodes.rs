//! The rules for the nodes: the controllers and pools (counts, instance
//! types and architectures, spot mixes, taints, lifetimes), etcd's settings
//! and the AMIs.

use super::*;

impl Validator<'_> {
    pub(super) fn nodes(&mut self, cfg: &ClusterConfig) {
        if let Some(message) = controller_count_error(cfg.controller.count) {
            self.err("controller.count", message);
        }
        if cfg.controller.root_volume_size < 8 {
            self.err(
                "controller.rootVolumeSize",
                format!("{} GiB is too small (use at least 8)", cfg.controller.root_volume_size),
            );
        }
        if cfg.controller.max_pods == Some(0) {
            self.err("controller.maxPods", "0 pods leaves the node useless (use 1 or more)");
        }
        if let Some(why) = instance_type_problem(&cfg.controller.instance_type) {
            self.err("controller.instanceType", why);
        }
        let pools = cfg.worker.node_pools.len();
        if pools > MAX_NODE_POOLS {
            self.err(
                "worker.nodePools",
                format!(
                    "{pools} node pools, over the {MAX_NODE_POOLS} a cluster holds (its root stack takes a \
                     CloudFormation parameter for each, and a template holds at most 200): split the pools across \
                     clusters, or merge pools that differ only in instance type (instancesDistribution takes \
                     several)"
                ),
            );
            return;
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, pool) in cfg.worker.node_pools.iter().enumerate() {
            let base = format!("worker.nodePools[{i}]");
            self.name(&format!("{base}.name"), &pool.name, 40);
            let instance_type_set = self.map.key(&format!("{base}.instanceType")).is_some();
            for (path, message) in super::super::check_instances_distribution(pool, &base, instance_type_set) {
                self.err(&path, message);
            }
            if let Some((path, message)) = super::super::check_zonal(cfg, pool, &base) {
                self.err(&path, message);
            }
            if let Some(first) = seen.insert(pool.name.as_str(), i) {
                self.err(
                    &format!("{base}.name"),
                    format!(
                        "{:?} is already the name of worker.nodePools[{first}] (pool names must be unique)",
                        pool.name
                    ),
                );
            }
            match (pool.count, pool.min_size, pool.max_size) {
                (Some(_), Some(_), _) | (Some(_), _, Some(_)) => self.err(
                    &format!("{base}.count"),
                    "set either count or minSize/maxSize, not both",
                ),
                (None, Some(min), Some(max)) if min > max => self.err(
                    &format!("{base}.minSize"),
                    format!("minSize {min} is larger than maxSize {max}"),
                ),
                (None, Some(_), None) => self.err(&format!("{base}.minSize"), "minSize needs maxSize"),
                (None, None, Some(_)) => self.err(&format!("{base}.maxSize"), "maxSize needs minSize"),
                _ => {}
            }
            if let Some(why) = instance_type_problem(&pool.instance_type) {
                self.err(&format!("{base}.instanceType"), why);
            }
            if pool.root_volume_size < 8 {
                self.err(
                    &format!("{base}.rootVolumeSize"),
                    format!("{} GiB is too small (use at least 8)", pool.root_volume_size),
                );
            }
            if let Some(secs) = pool.drain_timeout_seconds {
                use crate::render::cfn::{DRAIN_HEARTBEAT_MAX_SECONDS as MAX, DRAIN_HEARTBEAT_SECONDS as MIN};
                if !(MIN..=MAX).contains(&secs) {
                    self.err(
                        &format!("{base}.drainTimeoutSeconds"),
                        format!(
                            "{secs} is outside {MIN}..={MAX}: a lifecycle hook waits at most {MAX} seconds, and \
                             aws-node-termination-handler's drain (up to 270 s) must fit in it; use a value in that range"
                        ),
                    );
                }
            }
            if let Some(days) = pool.max_instance_lifetime_days {
                if let Err(why) = crate::config::max_instance_lifetime_seconds(days) {
                    self.err(&format!("{base}.maxInstanceLifetimeDays"), why);
                }
            }
            for (key, value) in &pool.labels {
                let path = crate::located::join_key(&format!("{base}.labels"), key);
                if let Err(why) = check_qualified_name(key) {
                    self.err(&path, format!("{key:?} is not a valid label key: {why}"));
                } else if let Err(why) = check_label_value(value) {
                    self.err(&path, format!("{value:?} is not a valid value of label {key:?}: {why}"));
                }
            }
            for (j, t) in pool.taints.iter().enumerate() {
                if let Err(why) = check_qualified_name(&t.key) {
                    self.err(
                        &format!("{base}.taints[{j}].key"),
                        format!("{:?} is not a valid taint key: {why}", t.key),
                    );
                }
                if let Err(why) = check_label_value(&t.value) {
                    self.err(
                        &format!("{base}.taints[{j}].value"),
                        format!("{:?} is not a valid taint value: {why}", t.value),
                    );
                }
            }
            if pool.max_pods == Some(0) {
                self.err(
                    &format!("{base}.maxPods"),
                    "0 pods leaves the node useless (use 1 or more)",
                );
            }
        }
    }

    pub(super) fn etcd_and_ami(&mut self, cfg: &ClusterConfig) {
        let b = &cfg.etcd.backup;
        match humantime::parse_duration(b.interval.trim()) {
            Err(e) => self.err(
                "etcd.backup.interval",
                format!("{:?} is not a duration ({e}); use for example \"1h\" or \"30m\"", b.interval),
            ),
            Ok(d) if !(BACKUP_INTERVAL_MIN..=BACKUP_INTERVAL_MAX).contains(&d) => self.err(
                "etcd.backup.interval",
                format!("{:?} is outside 5m to 24h (a snapshot every few minutes loads etcd; a day is the longest data-loss window kube-aws lets you choose)", b.interval),
            ),
            Ok(_) => {}
        }
        let quota = cfg.etcd.quota_backend_bytes;
        if !(256 * 1024 * 1024..=64 * 1024 * 1024 * 1024).contains(&quota) {
            self.err(
                "etcd.quotaBackendBytes",
                format!(
                    "{quota} bytes is outside 256 MiB (268435456) to 64 GiB (68719476736); etcd suggests at most 8 GiB"
                ),
            );
        }
        if !(1..=365).contains(&b.retention.hourly_days) {
            self.err(
                "etcd.backup.retention.hourlyDays",
                format!(
                    "{} days: keep hourly snapshots between 1 and 365 days",
                    b.retention.hourly_days
                ),
            );
        }
        if !(1..=3650).contains(&b.retention.daily_days) {
            self.err(
                "etcd.backup.retention.dailyDays",
                format!(
                    "{} days: keep daily snapshots between 1 and 3650 days",
                    b.retention.daily_days
                ),
            );
        }
        let check = |v: &mut Self, path: &str, id: &str| {
            if !is_ami_id(id) {
                v.err(
                    path,
                    format!("{id:?} is not an AMI ID (ami- and 8 or 17 hex digits, e.g. \"ami-0123456789abcdef0\")"),
                );
            }
        };
        match &cfg.ami {
            None => {}
            Some(AmiSetting::Id(id)) => {
                check(self, "ami", id);
                let arm = cfg.instance_types().filter(|t| is_arm64(t)).count();
                if arm > 0 && arm < cfg.instance_types().count() {
                    self.err(
                        "ami",
                        format!("{id:?} is one image, but the nodes mix x86_64 and arm64 instance types; give one per architecture: ami: {{x86_64: ami-…, arm64: ami-…}}"),
                    );
                }
            }
            Some(AmiSetting::PerArchitecture(p)) => {
                for (key, id) in [("x86_64", &p.x86_64), ("arm64", &p.arm64)] {
                    if let Some(id) = id {
                        check(self, &format!("ami.{key}"), id);
                    }
                }
            }
        }
    }
}
