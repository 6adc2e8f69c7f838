//! The rules a cluster.yaml must follow beyond its types. Every rule reports a
//! located error that quotes the bad value and says how to fix it.

use std::collections::HashMap;
use std::path::Path;

use super::chart_spec::chart_release;
use super::cidr::{cidr, cidr_within, has_host_bits};
use super::graph::{GraphProblem, ReleaseGraph};
use super::model::{is_arm64, AmiSetting, ChartSpec, ClusterConfig};
use super::resolve::{Origin, Release};
use super::rules::{
    check_issuer_url, check_label_value, check_qualified_name, controller_count_error, instance_type_problem,
    is_ami_id, is_region, name_problem, parse_s3_uri, BACKUP_INTERVAL_MAX, BACKUP_INTERVAL_MIN, KMS_ARN, SUBNET_ID,
    VPC_ID,
};
use crate::located::{Located, SourceMap};

mod nodes;

/// The most CIDRs one list may hold: the security group also needs room for
/// its other rules within EC2's default 60 inbound rules per group.
const MAX_RULE_CIDRS: usize = 50;
/// Zones a new VPC with private subnets can have: two /20s per zone in a /16's 16.
const MAX_PRIVATE_ZONES: usize = 8;
/// The node pools one cluster holds. The root stack takes a nested stack
/// (a resource) and its secrets version (a parameter) for each pool, beside
/// up to eight parameters of its own, and CloudFormation holds at most 200
/// parameters in a template (render::TEMPLATE_QUOTAS, which checks every
/// rendered stack exactly). Refused here, before anything renders: a
/// 1,500-pool cluster.yaml took 85 s and 1.4 GB to be refused by the
/// template's size.
pub const MAX_NODE_POOLS: usize = 190;

/// Checks every rule; the releases of cluster.yaml, or every violation.
pub fn validate(file: &Path, dir: &Path, cfg: &ClusterConfig, map: &SourceMap) -> Result<Vec<Release>, Vec<Located>> {
    let mut v = Validator {
        file,
        map,
        errors: Vec::new(),
    };
    v.top_level(cfg);
    v.network(cfg);
    v.access(cfg);
    v.nodes(cfg);
    v.etcd_and_ami(cfg);
    for (path, message) in super::security::problems(&cfg.pod_security, &cfg.certificates)
        .into_iter()
        .chain(super::security::token_problems(&cfg.bootstrap_tokens))
    {
        v.err(&path, message);
    }
    v.helm(cfg);
    let releases = v.charts(dir, &cfg.charts);
    if v.errors.is_empty() {
        Ok(releases)
    } else {
        Err(v.errors)
    }
}

struct Validator<'a> {
    file: &'a Path,
    map: &'a SourceMap,
    errors: Vec<Located>,
}

impl Validator<'_> {
    fn err(&mut self, path: &str, message: impl Into<String>) {
        let pos = self.map.locate(path);
        self.errors.push(Located::new(self.file, pos, path, message));
    }

    fn name(&mut self, path: &str, value: &str, max: usize) {
        if let Some(why) = name_problem(value, max) {
            self.err(path, why);
        }
    }

    fn top_level(&mut self, cfg: &ClusterConfig) {
        self.name("clusterName", &cfg.cluster_name, 63);
        if !is_region(&cfg.region) {
            self.err(
                "region",
                format!("{:?} is not a valid AWS region (for example \"us-west-2\")", cfg.region),
            );
        }
        if let Err(why) = parse_s3_uri(&cfg.s3_uri) {
            self.err(
                "s3URI",
                format!("{:?} is not a valid S3 URI: {why} (use s3://bucket/prefix)", cfg.s3_uri),
            );
        }
        if let Some(arn) = &cfg.kms_key_arn {
            if !KMS_ARN.is_match(arn) {
                self.err(
                    "kmsKeyARN",
                    format!("{arn:?} is not a KMS key ARN (use arn:aws:kms:REGION:ACCOUNT:key/ID or …:alias/NAME)"),
                );
            }
        }
        if let Some(u) = &cfg.issuer_url {
            if let Err(why) = check_issuer_url(u) {
                self.err(
                    "issuerURL",
                    format!(
                        "{u:?} is not a usable issuer URL: {why} (for example \"https://oidc.example.com/my-cluster\")"
                    ),
                );
            }
        }
        if let Err(why) = super::resolve_version(&cfg.kubernetes_version) {
            self.err("kubernetesVersion", why);
        }
    }

    fn network(&mut self, cfg: &ClusterConfig) {
        let n = &cfg.network;
        if let Some(cidr) = &n.vpc_cidr {
            match super::cidr::cidr(cidr) {
                None => self.err(
                    "network.vpcCIDR",
                    format!("{cidr:?} is not an IPv4 CIDR (for example \"10.0.0.0/16\")"),
                ),
                Some(net) if !(16..=24).contains(&net.prefix_len()) => {
                    let bits = net.prefix_len();
                    self.err(
                        "network.vpcCIDR",
                        format!("{cidr:?} has a /{bits} prefix; a VPC needs /16 to /24"),
                    );
                }
                Some(_) => {}
            }
        }
        match &n.vpc_id {
            Some(id) => {
                if n.vpc_cidr.is_some() {
                    self.err(
                        "network.vpcCIDR",
                        "vpcCIDR cannot be set with vpcId (an existing VPC keeps its CIDR)",
                    );
                }
                if !n.availability_zones.is_empty() {
                    self.err(
                        "network.availabilityZones",
                        "availabilityZones cannot be set with vpcId (the subnets decide the zones)",
                    );
                }
                if !VPC_ID.is_match(id) {
                    self.err(
                        "network.vpcId",
                        format!("{id:?} is not a VPC id (for example \"vpc-0abc12345def67890\")"),
                    );
                }
                if n.subnet_ids.is_empty() {
                    self.err(
                        "network.vpcId",
                        "an existing VPC needs subnetIds (list at least one subnet)",
                    );
                }
            }
            None => {
                if !n.subnet_ids.is_empty() {
                    self.err(
                        "network.subnetIds",
                        "subnetIds need vpcId (or remove them to create a new VPC)",
                    );
                }
            }
        }
        for (i, s) in n.subnet_ids.iter().enumerate() {
            if !SUBNET_ID.is_match(s) {
                self.err(
                    &format!("network.subnetIds[{i}]"),
                    format!("{s:?} is not a subnet id (for example \"subnet-0abc12345def67890\")"),
                );
            }
        }
        let zone_prefix = &cfg.region;
        for (i, az) in n.availability_zones.iter().enumerate() {
            let ok = az.len() == zone_prefix.len() + 1
                && az.starts_with(zone_prefix.as_str())
                && az.ends_with(|c: char| c.is_ascii_lowercase());
            if !ok {
                self.err(
                    &format!("network.availabilityZones[{i}]"),
                    format!("{az:?} is not a zone of region {zone_prefix:?} (for example \"{zone_prefix}a\")"),
                );
            }
        }
    }

    /// A list of IPv4 CIDRs for security group rules: each well-formed, with
    /// no host bits set (EC2 refuses such a rule) and no duplicates (one
    /// security group cannot hold the same rule twice).
    fn cidr_list(&mut self, key: &str, list: &[String]) {
        if list.len() > MAX_RULE_CIDRS {
            self.err(
                key,
                format!(
                    "{} CIDRs is more than the {MAX_RULE_CIDRS} a security group's rules can hold here; \
                     merge them into wider ones",
                    list.len()
                ),
            );
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, c) in list.iter().enumerate() {
            let path = format!("{key}[{i}]");
            match cidr(c) {
                None => self.err(
                    &path,
                    format!("{c:?} is not an IPv4 CIDR (for example \"203.0.113.0/24\", or \"198.51.100.7/32\" for one address)"),
                ),
                Some(n) if has_host_bits(&n) => {
                    let net = n.trunc();
                    self.err(
                        &path,
                        format!("{c:?} has host bits set (use \"{net}\", or /32 for the one address)"),
                    );
                }
                Some(_) => {
                    if let Some(first) = seen.insert(c.as_str(), i) {
                        self.err(&path, format!("{c:?} is already listed at {key}[{first}] (remove one)"));
                    }
                }
            }
        }
    }

    fn access(&mut self, cfg: &ClusterConfig) {
        let (api, access, net) = (&cfg.api_endpoint, &cfg.node_access, &cfg.network);
        self.cidr_list("apiEndpoint.allowedCIDRs", &api.allowed_cidrs);
        self.cidr_list("nodeAccess.sshAllowedCIDRs", &access.ssh_allowed_cidrs);
        if let Some(k) = &access.key_name {
            if k.is_empty() || k.len() > 255 || !k.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
                self.err(
                    "nodeAccess.keyName",
                    format!("{k:?} is not an EC2 key pair name (1 to 255 printable ASCII characters)"),
                );
            }
        } else if !access.ssh_allowed_cidrs.is_empty() {
            self.err(
                "nodeAccess.sshAllowedCIDRs",
                "SSH ingress needs nodeAccess.keyName (the EC2 key pair to log in with); set it or remove the CIDRs",
            );
        }
        if net.vpc_id.is_some() && net.private_subnets {
            self.err(
                "network.privateSubnets",
                "privateSubnets creates private subnets in a new VPC; with vpcId, list your private subnets \
                 (routed through your own NAT) in subnetIds instead",
            );
        }
        if net.nat_gateways.is_some() && !net.private_subnets {
            self.err(
                "network.natGateways",
                "natGateways needs privateSubnets: true (public subnets need no NAT)",
            );
        }
        if net.private_subnets && net.availability_zones.len() > MAX_PRIVATE_ZONES {
            self.err(
                "network.availabilityZones",
                format!(
                    "privateSubnets puts a public and a private subnet in each zone; at most {MAX_PRIVATE_ZONES} \
                     zones fit the VPC's 16 subnets"
                ),
            );
        }
        // Nodes in public subnets reach an internet-facing load balancer from
        // public addresses nobody knows in advance: a narrowed list would lock
        // the cluster out of its own API.
        let open = api.allowed_cidrs.iter().any(|c| c == super::ANYWHERE);
        if net.vpc_id.is_none() && !net.private_subnets && !api.internal && !open {
            self.err(
                "apiEndpoint.allowedCIDRs",
                format!(
                    "{:?} would shut the nodes out: in public subnets they reach the internet-facing API load \
                     balancer from their own public addresses; set network.privateSubnets: true (their NAT \
                     gateways' addresses are then allowed), apiEndpoint.internal: true, or allow 0.0.0.0/0",
                    api.allowed_cidrs
                ),
            );
        }
        if access.ssm {
            return;
        }
        // The API has no way in when no allowed CIDR reaches beyond the VPC and
        // no node can forward to it: SSM port forwarding
        // (AWS-StartPortForwardingSessionToRemoteHost) goes through a node,
        // which the load balancer's security group always admits.
        let vpc = match &net.vpc_id {
            Some(_) => None,
            None => cidr(net.vpc_cidr.as_deref().unwrap_or(super::DEFAULT_VPC_CIDR)),
        };
        let beyond = api.allowed_cidrs.iter().filter_map(|c| cidr(c)).any(|c| match vpc {
            Some(v) => !cidr_within(&c, &v),
            None => true,
        });
        if beyond {
            return;
        }
        let within = match (vpc, &net.vpc_cidr) {
            (Some(_), Some(c)) => format!("no further than the VPC {c:?}"),
            (Some(_), None) => format!("no further than the VPC (default {:?})", super::DEFAULT_VPC_CIDR),
            (None, _) => "nobody".to_string(),
        };
        let listed = format!("{:?}", api.allowed_cidrs);
        if api.internal {
            self.err(
                "apiEndpoint.internal",
                format!(
                    "internal: true has no way in: apiEndpoint.allowedCIDRs {listed} reaches {within} and \
                     nodeAccess.ssm is false, so no node can forward to it; allow your network (reached over a \
                     VPN or peering) in apiEndpoint.allowedCIDRs, turn nodeAccess.ssm on (then use SSM port \
                     forwarding), or set internal: false"
                ),
            );
        } else {
            self.err(
                "apiEndpoint.allowedCIDRs",
                format!(
                    "the API has no way in: apiEndpoint.allowedCIDRs {listed} reaches {within} and nodeAccess.ssm \
                     is false; allow your network (for example your office's public /32), or turn nodeAccess.ssm on"
                ),
            );
        }
    }

    fn helm(&mut self, cfg: &ClusterConfig) {
        if cfg.helm.version != 2 && cfg.helm.version != 3 {
            self.err(
                "helm.version",
                format!("{} is not a supported Helm version (use 2 or 3)", cfg.helm.version),
            );
        }
        self.name("helm.tiller.namespace", &cfg.helm.tiller.namespace, 63);
        if let Some(b) = &cfg.helm.binary {
            if !(b.url.starts_with("https://") || b.url.starts_with("http://")) || b.url.len() <= "https://".len() {
                self.err(
                    "helm.binary.url",
                    format!(
                        "{:?} is not an http(s) URL (use https://host/helm-vX.Y.Z-linux-amd64.tar.gz)",
                        b.url
                    ),
                );
            }
            if crate::digest::Sha256Digest::parse(&b.sha256).is_none_or(|d| d.hex() != b.sha256) {
                self.err(
                    "helm.binary.sha256",
                    format!(
                        "{:?} is not a sha256 (use the 64 lowercase hex digits of the tarball's `sha256sum`)",
                        b.sha256
                    ),
                );
            }
        }
    }

    /// Every chart entry through the one chart check (src/config/chart_spec.rs),
    /// plus what only cluster.yaml has: unique names and values files in the work tree.
    fn charts(&mut self, dir: &Path, charts: &[ChartSpec]) -> Vec<Release> {
        let graph = ReleaseGraph::new(charts);
        let first_of: HashMap<usize, usize> = graph
            .duplicates()
            .into_iter()
            .filter_map(|p| match p {
                GraphProblem::Duplicate { release, first } => Some((release, first)),
                _ => None,
            })
            .collect();
        let mut releases = Vec::new();
        for (i, c) in charts.iter().enumerate() {
            let base = format!("charts[{i}]");
            let values_files = match &c.values {
                Some(list) => list.clone(),
                None => {
                    let default = format!("values/{}.yaml", c.name);
                    // Present in any form: the input reader refuses what is not a regular file.
                    if std::fs::symlink_metadata(dir.join(&default)).is_ok() {
                        vec![default]
                    } else {
                        Vec::new()
                    }
                }
            };
            let problems = match chart_release(c, Origin::Cluster { index: i }, values_files, |p| {
                work_tree_chart(dir, p)
            }) {
                Ok(mut r) => {
                    r.declared = Some(super::resolve::Declared::at(self.file, self.map, &base));
                    releases.push(r);
                    Vec::new()
                }
                Err(problems) => problems,
            };
            // The name's own problem first, then its duplicate, as one reads them.
            let (name, rest): (Vec<_>, Vec<_>) = problems.into_iter().partition(|p| p.key == "name");
            for p in name {
                self.err(&p.path(&base), p.message);
            }
            if let Some(first) = first_of.get(&i) {
                self.err(
                    &format!("{base}.name"),
                    format!(
                        "{:?} is already the name of charts[{first}] (release names must be unique)",
                        c.name
                    ),
                );
            }
            for p in rest {
                self.err(&p.path(&base), p.message);
            }
            for (j, f) in c.values.iter().flatten().enumerate() {
                let path = format!("{base}.values[{j}]");
                if Path::new(f).is_absolute() || f.split(['/', '\\']).any(|s| s == "..") {
                    self.err(&path, format!("{f:?} leaves the work tree (use a path relative to it)"));
                } else if std::fs::symlink_metadata(dir.join(f)).is_err() {
                    self.err(&path, format!("values file {f:?} does not exist"));
                }
            }
        }
        self.dependencies(&graph, charts);
        releases
    }

    /// The release graph's rules that cluster.yaml alone can break: a chart
    /// depending on itself, and cycles among its charts. Targets that are not
    /// cluster.yaml releases may be plugin releases: the plugin stage, which
    /// knows every release, reports the unknown ones.
    fn dependencies(&mut self, graph: &ReleaseGraph<ChartSpec>, charts: &[ChartSpec]) {
        for p in graph.bad_targets() {
            if let GraphProblem::SelfDependency { release, dep } = p {
                self.err(
                    &format!("charts[{release}].dependsOn[{dep}]"),
                    format!("release {:?} depends on itself", charts[release].name),
                );
            }
        }
        if let Some(GraphProblem::Cycle { cycle }) = graph.cycle() {
            let i = charts.iter().position(|c| c.name == cycle[0]).unwrap_or(0);
            let j = charts[i].depends_on.iter().position(|d| *d == cycle[1]).unwrap_or(0);
            self.err(
                &format!("charts[{i}].dependsOn[{j}]"),
                format!(
                    "dependency cycle: {} (remove one of these dependsOn entries)",
                    cycle.join(" -> ")
                ),
            );
        }
    }
}

/// A cluster.yaml chart `path:`: inside the work tree, and there.
fn work_tree_chart(dir: &Path, p: &str) -> Result<String, String> {
    if Path::new(p).is_absolute() || p.split(['/', '\\']).any(|s| s == "..") {
        Err(format!(
            "{p:?} leaves the work tree (use a path relative to it, without '..')"
        ))
    } else if !dir.join(p).exists() {
        Err(format!("{p:?} does not exist in the work tree"))
    } else {
        Ok(p.to_string())
    }
}
