//! `destroy`'s sweep, the decisions: which resources the cluster owns, in
//! what order they are deleted, which failures are worth another pass, and
//! which Route53 records the cluster's external-dns owns. Everything here is
//! pure; the listing and deleting calls are in `sweep/calls.rs` (feature
//! "nodes", which brings the EC2, ELB and Route53 clients).
//!
//! Invariant: nothing is deleted unless its own tags say the cluster owns it
//! (`kubernetes.io/cluster/<name>` = `owned`, as the stacks, the cloud
//! controller manager and the EBS CSI driver tag what they create; for ENIs
//! also the VPC CNI's `cluster.k8s.amazonaws.com/name` = `<name>`), or, for a
//! DNS record, unless the external-dns TXT registry record beside it names
//! the cluster as its owner. A `shared` value is never ownership.
//!
//! The order follows kops's `delete cluster` (pkg/resources/aws/aws.go
//! @v1.31: load balancers before their target groups, ENIs and volumes,
//! security groups last, since a load balancer or an ENI still holds them),
//! and failures that another resource's deletion can clear
//! (`DependencyViolation`, `ResourceInUse`, …) are retried on the next pass,
//! as kops retries until nothing is left or no pass makes progress.

use std::collections::BTreeMap;

#[cfg(feature = "nodes")]
pub mod calls;

/// Without the feature "nodes" (the fuzz crate's build) there are no EC2,
/// ELB or Route53 clients, and the sweep finds nothing.
#[cfg(not(feature = "nodes"))]
pub mod calls {
    use crate::aws::Report;
    use crate::aws::{AwsError, Clients};

    #[derive(Debug, Clone, Copy)]
    pub struct SweepOptions {
        pub deadline: std::time::Duration,
        pub pause: std::time::Duration,
        pub keep_volumes: bool,
    }

    pub async fn sweep(_: &Clients, _: &str, _: Option<&str>, _: SweepOptions) -> Result<Report, AwsError> {
        Ok(Report::default())
    }
}

/// What kind of resource a swept one is, in deletion order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// An ELBv2 (application or network) load balancer.
    LoadBalancer,
    /// A classic ELB, as the cloud controller makes for `type: LoadBalancer`.
    ClassicLoadBalancer,
    /// An ELBv2 target group (after its load balancer: in use until then).
    TargetGroup,
    /// A Route53 record the cluster's external-dns owns, or its TXT registry record.
    DnsRecord,
    /// A detached ENI (the VPC CNI leaves them when a node dies).
    NetworkInterface,
    /// An EBS volume (a PersistentVolume's).
    Volume,
    /// A security group (last: load balancers and ENIs hold them).
    SecurityGroup,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::LoadBalancer => "load balancer",
            Kind::ClassicLoadBalancer => "classic load balancer",
            Kind::TargetGroup => "target group",
            Kind::DnsRecord => "DNS record",
            Kind::NetworkInterface => "network interface",
            Kind::Volume => "volume",
            Kind::SecurityGroup => "security group",
        }
    }
}

/// One resource found by a listing call, with its tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    /// What the delete call takes: an ARN, an ID, a name, or for a DNS
    /// record `<zone>|<name>|<type>|<set identifier>`.
    pub id: String,
    /// What the report shows beside the id (a Name tag, a DNS name).
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

impl Found {
    /// `<kind> <id> (<name>)`, as the report prints it.
    pub fn describe(&self) -> String {
        if self.name.is_empty() || self.name == self.id {
            format!("{} {}", self.kind.label(), self.id)
        } else {
            format!("{} {} ({})", self.kind.label(), self.id, self.name)
        }
    }
}

/// The tag the stacks, the cloud controller and the EBS CSI driver put on
/// what the cluster owns (src/render/cfn: `cluster_tag_key`).
pub fn cluster_tag(cluster: &str) -> String {
    crate::render::cfn::cluster_tag_key(cluster)
}

/// The VPC CNI's tag on the ENIs it creates (amazon-vpc-cni-k8s
/// pkg/awsutils/awsutils.go: `clusterNameEnvVar` → `cluster.k8s.amazonaws.com/name`).
pub const CNI_CLUSTER_TAG: &str = "cluster.k8s.amazonaws.com/name";

/// Whether `tags` say cluster `cluster` owns the resource.
pub fn owned(cluster: &str, kind: Kind, tags: &BTreeMap<String, String>) -> bool {
    if tags.get(&cluster_tag(cluster)).map(String::as_str) == Some("owned") {
        return true;
    }
    kind == Kind::NetworkInterface && tags.get(CNI_CLUSTER_TAG).map(String::as_str) == Some(cluster)
}

/// What to delete: the owned resources, in deletion order (kind, then id,
/// so a run is repeatable). DNS records are decided by [`owned_records`]
/// and come in untagged; they pass as they are.
pub fn plan(cluster: &str, found: Vec<Found>) -> Vec<Found> {
    let mut out: Vec<Found> = found
        .into_iter()
        .filter(|f| f.kind == Kind::DnsRecord || owned(cluster, f.kind, &f.tags))
        .collect();
    out.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
    out.dedup_by(|a, b| a.kind == b.kind && a.id == b.id);
    out
}

/// Error codes that another deletion (or time) can clear: worth the next pass.
pub fn retryable(code: &str) -> bool {
    matches!(
        code,
        "DependencyViolation"
            | "ResourceInUse"
            | "ResourceInUseException"
            | "InvalidNetworkInterface.InUse"
            | "VolumeInUse"
            | "Throttling"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "PriorRequestNotComplete"
    )
}

/// A code that means the resource is already gone: counted as removed.
pub fn already_gone(code: &str) -> bool {
    code.ends_with(".NotFound")
        || code.ends_with("NotFound")
        || matches!(
            code,
            "LoadBalancerNotFound" | "TargetGroupNotFound" | "InvalidChangeBatch" | "NoSuchHostedZone"
        )
}

/// How one deletion went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Removed,
    /// Failed with this code and message.
    Failed {
        code: String,
        message: String,
    },
}

/// The sweep's result: what was removed, and what is left with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub removed: Vec<Found>,
    /// Owned, but kept on request (`--keep-volumes`).
    pub kept: Vec<Found>,
    pub left: Vec<(Found, String)>,
}

/// Whether to run another pass: something is left that a retry may clear,
/// the last pass made progress or the deadline has not passed.
pub fn another_pass(left: &[(Found, String)], last_codes: &[String], progressed: bool, before_deadline: bool) -> bool {
    !left.is_empty() && last_codes.iter().any(|c| retryable(c)) && (progressed || before_deadline)
}

/// One record set of a hosted zone, as far as ownership needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    pub rtype: String,
    pub set_identifier: Option<String>,
    /// The values (for TXT: with their quotes, as Route53 returns them).
    pub values: Vec<String>,
}

/// The owner a TXT value of external-dns's registry names, if it is one:
/// `"heritage=external-dns,external-dns/owner=<id>,…"` (external-dns
/// registry/txt.go and endpoint/labels.go).
pub fn txt_owner(value: &str) -> Option<&str> {
    let v = value.trim().trim_matches('"');
    let mut fields = v.split(',');
    if fields.next()? != "heritage=external-dns" {
        return None;
    }
    fields.find_map(|f| f.strip_prefix("external-dns/owner="))
}

/// The record types external-dns's newer TXT names carry as a prefix
/// (`a-app.example.com` registers `app.example.com`'s A record).
const TYPED_PREFIXES: [(&str, &str); 6] = [
    ("a-", "A"),
    ("aaaa-", "AAAA"),
    ("cname-", "CNAME"),
    ("ns-", "NS"),
    ("mx-", "MX"),
    ("srv-", "SRV"),
];

/// The records of one zone that external-dns owner `owner` owns: each TXT
/// registry record naming it, and the record(s) it registers (same name, or
/// the name without a type prefix and of that type). Indices into `records`.
pub fn owned_records(owner: &str, records: &[Record]) -> Vec<usize> {
    let mut registered: Vec<(String, Option<&str>)> = Vec::new();
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if r.rtype == "TXT" && r.values.iter().any(|v| txt_owner(v) == Some(owner)) {
            out.push(i);
            let name = r.name.to_ascii_lowercase();
            registered.push((name.clone(), None));
            for (prefix, t) in TYPED_PREFIXES {
                if let Some(rest) = name.strip_prefix(prefix) {
                    registered.push((rest.to_string(), Some(t)));
                }
            }
        }
    }
    for (i, r) in records.iter().enumerate() {
        if r.rtype == "TXT" || r.rtype == "SOA" || r.rtype == "NS" {
            continue;
        }
        let name = r.name.to_ascii_lowercase();
        if registered
            .iter()
            .any(|(n, t)| *n == name && t.is_none_or(|t| t == r.rtype))
        {
            out.push(i);
        }
    }
    out.sort_unstable();
    out
}

/// The hosted zone the cluster's external-dns may change: the
/// `external-dns` plugin's `hostedZoneId`, when the plugin is enabled in
/// cluster.yaml. None: no DNS records are swept.
pub fn external_dns_zone(cfg: &crate::config::ClusterConfig) -> Option<String> {
    let p = cfg.plugins.get("external-dns")?;
    if p.enabled == Some(false) {
        return None;
    }
    p.params.get("hostedZoneId")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests;
