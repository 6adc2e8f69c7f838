//! `nodes` and `logs`: the cluster's instances (EC2 DescribeInstances by the
//! cluster tag the stacks put on every instance) joined with the bootstrap
//! reports nodes publish to S3 (`status/nodes/<instance-id>.json`, blanked of
//! secrets by the node). The join and the lookup of a node are pure functions;
//! `list_nodes` (feature "nodes", which brings the EC2 client) is the only
//! part that calls AWS.

use serde::{Deserialize, Serialize};

#[cfg(feature = "nodes")]
use crate::aws::services::s3::{read_changed, Location};
use crate::aws::AwsError;
use crate::aws::Clients;
#[cfg(feature = "nodes")]
use crate::config::ClusterConfig;
use crate::render::cfn::instance_name;
use std::collections::BTreeMap;

/// One node, as `kube-aws nodes` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeInfo {
    pub instance_id: String,
    /// `controller` or `worker`.
    pub role: String,
    /// The worker's node pool; None for a controller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    pub zone: String,
    /// The EC2 private DNS name, which is also the Kubernetes node name.
    pub private_dns_name: String,
    /// The EC2 state (`pending`, `running`, `terminated`, …), or `gone` for an
    /// instance EC2 no longer lists that left a bootstrap report.
    pub state: String,
    /// What its bootstrap reported: `failed at <step> …`, or that it reported no failure.
    pub bootstrap: String,
    /// The published report, when there is one.
    #[serde(skip)]
    pub report: Option<NodeReport>,
}

/// What `bootstrap` says of a node without a report: nodes publish one only
/// when a bootstrap step fails (src/node/kube_aws_node/bootstrap.py).
pub const NO_FAILURE: &str = "no failure reported";

/// One instance as EC2 describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Instance {
    pub instance_id: String,
    /// Its `Name` tag: `<cluster>-<role>`.
    pub name: String,
    pub zone: String,
    pub private_dns_name: String,
    pub state: String,
}

/// Splits a node role (`controller`, `worker-<pool>`) into role and pool.
fn role_and_pool(role: &str) -> (String, Option<String>) {
    match role.strip_prefix("worker-") {
        Some(pool) => ("worker".into(), Some(pool.into())),
        None => (role.into(), None),
    }
}

fn bootstrap_status(report: Option<&NodeReport>) -> String {
    match report {
        None => NO_FAILURE.into(),
        Some(r) => match r.how_it_ended() {
            Some(how) => format!("failed at {} ({how})", r.step),
            None => format!("failed at {}", r.step),
        },
    }
}

/// Joins the instances with the reports: one row per instance, sorted by
/// role, pool and id; then a `gone` row for each report whose instance EC2
/// no longer lists (a failed node the rollback terminated).
pub fn join(cluster: &str, instances: &[Instance], reports: &[NodeReport]) -> Vec<NodeInfo> {
    let prefix = instance_name(cluster, "");
    let mut rows: Vec<NodeInfo> = instances
        .iter()
        .map(|i| {
            let report = reports.iter().find(|r| r.instance_id == i.instance_id);
            let node_role = i
                .name
                .strip_prefix(&prefix)
                .map(str::to_string)
                .or_else(|| report.map(|r| r.role.clone()))
                .unwrap_or_default();
            let (role, pool) = role_and_pool(&node_role);
            NodeInfo {
                instance_id: i.instance_id.clone(),
                role,
                pool,
                zone: i.zone.clone(),
                private_dns_name: i.private_dns_name.clone(),
                state: i.state.clone(),
                bootstrap: bootstrap_status(report),
                report: report.cloned(),
            }
        })
        .collect();
    for r in reports {
        if instances.iter().any(|i| i.instance_id == r.instance_id) {
            continue;
        }
        let (role, pool) = role_and_pool(&r.role);
        rows.push(NodeInfo {
            instance_id: r.instance_id.clone(),
            role,
            pool,
            zone: String::new(),
            private_dns_name: r.node_name.clone(),
            state: "gone".into(),
            bootstrap: bootstrap_status(Some(r)),
            report: Some(r.clone()),
        });
    }
    rows.sort_by(|a, b| {
        (a.state == "gone", &a.role, &a.pool, &a.instance_id).cmp(&(
            b.state == "gone",
            &b.role,
            &b.pool,
            &b.instance_id,
        ))
    });
    rows
}

/// The node a user named: by instance id or private DNS name, exactly.
pub fn find<'a>(cluster: &str, nodes: &'a [NodeInfo], query: &str) -> Result<&'a NodeInfo, AwsError> {
    let q = query.trim();
    nodes
        .iter()
        .find(|n| n.instance_id == q || (!n.private_dns_name.is_empty() && n.private_dns_name == q))
        .ok_or_else(|| AwsError::UnknownNode {
            node: query.to_string(),
            cluster: cluster.to_string(),
            known: nodes
                .iter()
                .map(|n| {
                    if n.private_dns_name.is_empty() {
                        n.instance_id.clone()
                    } else {
                        format!("{} ({})", n.instance_id, n.private_dns_name)
                    }
                })
                .collect(),
        })
}

/// Every instance carrying the cluster tag, in any state EC2 still lists.
/// The `kube-aws nodes` table: a header, one row per node, columns padded
/// to their widest cell, `-` for an empty one.
pub fn table(nodes: &[NodeInfo]) -> String {
    let header = [
        "INSTANCE",
        "ROLE",
        "POOL",
        "ZONE",
        "PRIVATE DNS NAME",
        "STATE",
        "BOOTSTRAP",
    ];
    let rows: Vec<[String; 7]> = nodes
        .iter()
        .map(|n| {
            let dash = |s: &str| if s.is_empty() { "-".to_string() } else { s.to_string() };
            [
                n.instance_id.clone(),
                dash(&n.role),
                dash(n.pool.as_deref().unwrap_or("")),
                dash(&n.zone),
                dash(&n.private_dns_name),
                dash(&n.state),
                n.bootstrap.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        out.push_str(&s);
        out.push('\n');
    };
    line(header.to_vec());
    for r in &rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

/// Every instance EC2 lists for `filters` (DescribeInstances, all pages).
#[cfg(feature = "nodes")]
pub(crate) async fn instances_matching(
    clients: &Clients,
    filters: Vec<aws_sdk_ec2::types::Filter>,
) -> Result<Vec<aws_sdk_ec2::types::Instance>, AwsError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = clients
            .ec2
            .describe_instances()
            .set_filters(Some(filters.clone()))
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| crate::aws::sdk_error("ec2:DescribeInstances", e))?;
        out.extend(page.reservations().iter().flat_map(|r| r.instances()).cloned());
        match page.next_token() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => return Ok(out),
        }
    }
}

/// The value of an instance's tag `key` ("" when it has none).
#[cfg(feature = "nodes")]
pub(crate) fn tag_of(i: &aws_sdk_ec2::types::Instance, key: &str) -> String {
    i.tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
        .unwrap_or_default()
        .to_string()
}

#[cfg(feature = "nodes")]
async fn describe_instances(clients: &Clients, cluster: &str) -> Result<Vec<Instance>, AwsError> {
    let tag = crate::render::cfn::cluster_tag_key(cluster);
    let filter = aws_sdk_ec2::types::Filter::builder()
        .name(format!("tag:{tag}"))
        .values("owned")
        .build();
    Ok(instances_matching(clients, vec![filter])
        .await?
        .iter()
        .map(|i| Instance {
            instance_id: i.instance_id().unwrap_or_default().to_string(),
            name: tag_of(i, "Name"),
            zone: i
                .placement()
                .and_then(|p| p.availability_zone())
                .unwrap_or_default()
                .to_string(),
            private_dns_name: i.private_dns_name().unwrap_or_default().to_string(),
            state: i
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_default(),
        })
        .collect())
}

/// The cluster's nodes with their bootstrap reports.
#[cfg(feature = "nodes")]
pub async fn list_nodes(clients: &Clients, cluster: &ClusterConfig) -> Result<Vec<NodeInfo>, AwsError> {
    let location = Location::new(cluster)?;
    let instances = describe_instances(clients, &cluster.cluster_name).await?;
    let reports = read_node_reports(clients, &location).await?;
    Ok(join(&cluster.cluster_name, &instances, &reports))
}

/// Reads every node failure report once (for `status` without --wait).
pub async fn read_node_reports(clients: &Clients, location: &Location) -> Result<Vec<NodeReport>, AwsError> {
    let mut cache = BTreeMap::new();
    read_changed(
        clients,
        &location.bucket,
        &location.key(crate::render::layout::NODE_REPORTS_DIR),
        &mut cache,
    )
    .await?;
    Ok(cache.into_values().map(|(_, r)| r).collect())
}

/// The failure report a node publishes at `s3URI/<cluster>/status/nodes/<instance-id>.json`
/// when a step of its bootstrap fails (src/node/kube_aws_node/bootstrap.py).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub instance_id: String,
    /// The node's name: its EC2 private DNS name.
    #[serde(default)]
    pub node_name: String,
    /// `controller` or `worker-<pool>`.
    #[serde(default)]
    pub role: String,
    /// The stack holding its group (the nested stack's generated name) and the group's logical id.
    #[serde(default)]
    pub stack: String,
    #[serde(default)]
    pub asg_logical_id: String,
    pub step: String,
    #[serde(default)]
    pub exit_code: i64,
    /// The failing command, blanked of secrets.
    #[serde(default)]
    pub command: String,
    /// The last lines of the bootstrap's log, blanked of secrets.
    #[serde(default)]
    pub log: String,
    /// Seconds since the epoch.
    #[serde(default)]
    pub timestamp: i64,
}

impl NodeReport {
    /// Whether the node is holding on purpose rather than failed: a step named
    /// `…-hold` (a controller whose leaving would cost etcd its quorum:
    /// etcd_lifecycle.py remove_when_safe).
    pub fn holds(&self) -> bool {
        self.step.ends_with("-hold")
    }

    /// `node ip-10-0-1-23.… (i-0123, worker-general) failed at step kubeadm-join (exit 1): kubeadm join …`,
    /// or `… is holding at step etcd-quorum-hold: …` for a hold.
    pub fn headline(&self) -> String {
        let name = if self.node_name.is_empty() {
            &self.instance_id
        } else {
            &self.node_name
        };
        let verb = if self.holds() {
            "is holding at step"
        } else {
            "failed at step"
        };
        let mut s = format!("node {name} ({}, {}) {verb} {}", self.instance_id, self.role, self.step);
        if let Some(how) = self.how_it_ended() {
            s.push_str(&format!(" ({how})"));
        }
        if !self.command.is_empty() {
            s.push_str(&format!(": {}", self.command));
        }
        s
    }

    /// How the failed step's command ended, for people: `exit 1`, or
    /// `killed by signal 9 (SIGKILL)` for the negative code Python's
    /// `subprocess` gives a command a signal ended (bootstrap.py reports
    /// `returncode` as it is); None for a hold (code 0).
    pub fn how_it_ended(&self) -> Option<String> {
        match self.exit_code {
            0 => None,
            c if c < 0 => {
                let name = match -c {
                    1 => " (SIGHUP)",
                    2 => " (SIGINT)",
                    6 => " (SIGABRT)",
                    9 => " (SIGKILL)",
                    11 => " (SIGSEGV)",
                    15 => " (SIGTERM)",
                    _ => "",
                };
                Some(format!("killed by signal {}{name}", -c))
            }
            c => Some(format!("exit {c}")),
        }
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> Vec<&str> {
        let lines: Vec<&str> = self.log.lines().collect();
        lines[lines.len().saturating_sub(n)..].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(id: &str, name: &str, state: &str) -> Instance {
        Instance {
            instance_id: id.into(),
            name: name.into(),
            zone: "us-west-2a".into(),
            private_dns_name: format!("ip-{id}.us-west-2.compute.internal"),
            state: state.into(),
        }
    }

    fn report(id: &str, role: &str, step: &str, exit_code: i64) -> NodeReport {
        NodeReport {
            instance_id: id.into(),
            node_name: format!("ip-{id}.us-west-2.compute.internal"),
            role: role.into(),
            stack: String::new(),
            asg_logical_id: String::new(),
            step: step.into(),
            exit_code,
            command: "kubeadm join".into(),
            log: "line 1\nline 2".into(),
            timestamp: 1,
        }
    }

    #[test]
    fn a_hold_is_said_as_a_hold_and_a_failure_as_a_failure() {
        let hold = report("i-1", "controller", "etcd-quorum-hold", 0).headline();
        assert!(
            hold.contains("(i-1, controller) is holding at step etcd-quorum-hold"),
            "{hold}"
        );
        let failed = report("i-2", "worker-general", "kubeadm-join", 1).headline();
        assert!(failed.contains("failed at step kubeadm-join (exit 1)"), "{failed}");
    }

    #[test]
    fn instances_and_reports_join_into_rows() {
        let instances = [
            instance("i-3", "demo-worker-general", "running"),
            instance("i-1", "demo-controller", "running"),
            instance("i-2", "demo-worker-batch-arm", "pending"),
        ];
        let reports = [
            report("i-2", "worker-batch-arm", "kubeadm-join", 1),
            report("i-9", "worker-general", "fetch-config", 0),
        ];
        let rows = join("demo", &instances, &reports);
        let got: Vec<(&str, &str, Option<&str>, &str, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r.instance_id.as_str(),
                    r.role.as_str(),
                    r.pool.as_deref(),
                    r.state.as_str(),
                    r.bootstrap.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("i-1", "controller", None, "running", NO_FAILURE),
                (
                    "i-2",
                    "worker",
                    Some("batch-arm"),
                    "pending",
                    "failed at kubeadm-join (exit 1)"
                ),
                ("i-3", "worker", Some("general"), "running", NO_FAILURE),
                ("i-9", "worker", Some("general"), "gone", "failed at fetch-config"),
            ]
        );
        assert_eq!(rows[3].private_dns_name, "ip-i-9.us-west-2.compute.internal");
        assert!(rows[1].report.is_some() && rows[0].report.is_none());
    }

    #[test]
    fn the_table_pads_every_column_but_the_last_and_dashes_empty_cells() {
        let rows = join("demo", &[instance("i-1", "demo-controller", "running")], &[]);
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(lines[0].starts_with("INSTANCE  ROLE        POOL  "), "{t}");
        assert!(lines[0].ends_with("STATE    BOOTSTRAP"), "{t}");
        // The controller has no pool: a dash, padded like the header's POOL.
        assert!(lines[1].starts_with("i-1       controller  -     "), "{t}");
        assert!(lines[1].ends_with(NO_FAILURE), "{t}");
        let cols = |l: &str| l.find("STATE").or_else(|| l.find("running"));
        assert_eq!(cols(lines[0]), cols(lines[1]), "columns line up:\n{t}");
    }

    #[test]
    fn a_node_is_found_by_id_or_dns_name_and_an_unknown_one_lists_the_rest() {
        let rows = join(
            "demo",
            &[
                instance("i-1", "demo-controller", "running"),
                instance("i-2", "demo-worker-a", "running"),
            ],
            &[],
        );
        assert_eq!(find("demo", &rows, "i-2").unwrap().instance_id, "i-2");
        assert_eq!(
            find("demo", &rows, "ip-i-1.us-west-2.compute.internal")
                .unwrap()
                .instance_id,
            "i-1"
        );
        let err = find("demo", &rows, "i-7").unwrap_err().to_string();
        assert!(
            err.contains("\"i-7\"")
                && err.contains("i-1 (ip-i-1.us-west-2.compute.internal)")
                && err.contains("i-2 (ip-i-2"),
            "{err}"
        );
        let none = find("demo", &[], "i-7").unwrap_err().to_string();
        assert!(none.contains("has no nodes"), "{none}");
    }
}
