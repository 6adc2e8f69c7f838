//! The rules a cluster.yaml must follow beyond its types. Every rule reports a
//! located error that quotes the bad value and says how to fix it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use super::model::{is_arm64, AmiSetting, ChartSpec, ClusterConfig};
use crate::located::{Located, SourceMap};

static DNS_LABEL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$").unwrap());
static REGION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}$").unwrap());
static BUCKET: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$").unwrap());
static KMS_ARN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(key/[A-Za-z0-9-]+|alias/[A-Za-z0-9/_-]+)$").unwrap()
});
static CIDR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})/([0-9]{1,2})$").unwrap());
static VPC_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^vpc-[0-9a-f]{8,17}$").unwrap());
static SUBNET_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^subnet-[0-9a-f]{8,17}$").unwrap());
// Kubernetes' own patterns (k8s.io/apimachinery/pkg/util/validation):
// qualifiedNameFmt, labelValueFmt and dns1123SubdomainFmt.
static QUALIFIED_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").unwrap());
static LABEL_VALUE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").unwrap());
static DNS_SUBDOMAIN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap());

/// The most CIDRs one list may hold: the security group also needs room for
/// its other rules within EC2's default 60 inbound rules per group.
const MAX_RULE_CIDRS: usize = 50;
/// Zones a new VPC with private subnets can have: two /20s per zone in a /16's 16.
const MAX_PRIVATE_ZONES: usize = 8;

const NAME_HINT: &str = "use lowercase letters, digits and '-', starting and ending with a letter or digit";

/// Is `s` a DNS-1123 label of at most `max` characters?
pub fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && DNS_LABEL.is_match(s)
}

/// Is `s` a DNS-1123 subdomain of at most `max` characters (a service account's name)?
pub fn is_dns_subdomain(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && DNS_SUBDOMAIN.is_match(s)
}

/// An OIDC issuer IAM accepts: `https://` with a host, no query, fragment,
/// user or port, and nothing a flag value may not hold.
fn check_issuer_url(s: &str) -> Result<(), String> {
    let u = url::Url::parse(s).map_err(|e| e.to_string())?;
    if u.scheme() != "https" {
        return Err("it must start with https://".into());
    }
    if u.host_str().is_none_or(str::is_empty) || u.port().is_some() || !u.username().is_empty() {
        return Err("it needs a host, and no port or user".into());
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err("it may not have a query or fragment".into());
    }
    check_flag_value(s)
}

/// Is `s` a well-formed AWS region name?
pub fn is_region(s: &str) -> bool {
    REGION.is_match(s)
}

/// A label or taint key exactly as Kubernetes checks it (`IsQualifiedName`):
/// an optional DNS-1123 subdomain prefix of at most 253 characters and `/`,
/// then a name of at most 63 letters, digits, '-', '_' and '.', starting and
/// ending with a letter or digit. The error says why, without a location.
pub fn check_qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || !DNS_SUBDOMAIN.is_match(p) {
            return Err(format!(
                "its prefix {p:?} must be a DNS subdomain of at most 253 characters \
                 (lowercase letters, digits, '-' and '.', e.g. \"example.com\")"
            ));
        }
    }
    if name.is_empty() || name.len() > 63 || !QUALIFIED_NAME.is_match(name) {
        return Err(format!(
            "its name {name:?} must be 1 to 63 letters, digits, '-', '_' or '.', \
             starting and ending with a letter or digit (and at most one '/')"
        ));
    }
    Ok(())
}

/// A label value (also a taint value) exactly as Kubernetes checks it
/// (`IsValidLabelValue`): empty, or at most 63 letters, digits, '-', '_' and
/// '.', starting and ending with a letter or digit. This also keeps ',' and
/// '=' out of the kubelet's `--node-labels`, which joins labels with them.
pub fn check_label_value(s: &str) -> Result<(), String> {
    if s.len() > 63 || !LABEL_VALUE.is_match(s) {
        return Err(
            "a label value must be empty or at most 63 letters, digits, '-', '_' or '.', \
                    starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A flag value that reaches a command line. kubeadm writes kubelet flags
/// into one double-quoted environment variable (`KUBELET_KUBEADM_ARGS` in
/// /var/lib/kubelet/kubeadm-flags.env) that systemd splits at whitespace, so
/// `110 --anonymous-auth=true` would add a flag; quotes and backslashes would
/// end or escape the quoting. Control-plane flags are refused the same
/// characters, so no flag value can ever carry another flag.
pub fn check_flag_value(s: &str) -> Result<(), String> {
    if let Some(c) = s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\'))
    {
        return Err(format!(
            "contains {c:?}: a flag value may not hold whitespace, control characters, quotes or \
             backslashes (the kubelet's command line is split at whitespace, so it would add flags)"
        ));
    }
    Ok(())
}

/// Checks every rule; returns all violations.
pub fn validate(file: &Path, dir: &Path, cfg: &ClusterConfig, map: &SourceMap) -> Vec<Located> {
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
    v.helm(cfg);
    v.charts(dir, &cfg.charts);
    v.errors
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
        if !is_dns_label(value, max) {
            let hint = if value.len() > max {
                format!("at most {max} characters")
            } else {
                NAME_HINT.to_string()
            };
            self.err(path, format!("{value:?} is not a valid name ({hint})"));
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
            if !is_cidr(cidr) {
                self.err(
                    "network.vpcCIDR",
                    format!("{cidr:?} is not an IPv4 CIDR (for example \"10.0.0.0/16\")"),
                );
            } else if let Some(bits) = cidr.rsplit('/').next().and_then(|b| b.parse::<u8>().ok()) {
                if !(16..=24).contains(&bits) {
                    self.err(
                        "network.vpcCIDR",
                        format!("{cidr:?} has a /{bits} prefix; a VPC needs /16 to /24"),
                    );
                }
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
            match parse_cidr(c) {
                None => self.err(
                    &path,
                    format!("{c:?} is not an IPv4 CIDR (for example \"203.0.113.0/24\", or \"198.51.100.7/32\" for one address)"),
                ),
                Some((addr, bits)) if cidr_network(addr, bits) != addr => {
                    let net = std::net::Ipv4Addr::from(cidr_network(addr, bits));
                    self.err(
                        &path,
                        format!("{c:?} has host bits set (use \"{net}/{bits}\", or /32 for the one address)"),
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
            None => parse_cidr(net.vpc_cidr.as_deref().unwrap_or(super::DEFAULT_VPC_CIDR)),
        };
        let beyond = api
            .allowed_cidrs
            .iter()
            .filter_map(|c| parse_cidr(c))
            .any(|c| match vpc {
                Some(v) => !cidr_within(c, v),
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

    fn nodes(&mut self, cfg: &ClusterConfig) {
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
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, pool) in cfg.worker.node_pools.iter().enumerate() {
            let base = format!("worker.nodePools[{i}]");
            self.name(&format!("{base}.name"), &pool.name, 40);
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
            if pool.root_volume_size < 8 {
                self.err(
                    &format!("{base}.rootVolumeSize"),
                    format!("{} GiB is too small (use at least 8)", pool.root_volume_size),
                );
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

    fn etcd_and_ami(&mut self, cfg: &ClusterConfig) {
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
        if !(1..=1000).contains(&b.retention) {
            self.err(
                "etcd.backup.retention",
                format!("{} snapshots: keep between 1 and 1000", b.retention),
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

    fn helm(&mut self, cfg: &ClusterConfig) {
        if cfg.helm.version != 2 && cfg.helm.version != 3 {
            self.err(
                "helm.version",
                format!("{} is not a supported Helm version (use 2 or 3)", cfg.helm.version),
            );
        }
        self.name("helm.tiller.namespace", &cfg.helm.tiller.namespace, 63);
    }

    fn charts(&mut self, dir: &Path, charts: &[ChartSpec]) {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, c) in charts.iter().enumerate() {
            let base = format!("charts[{i}]");
            self.name(&format!("{base}.name"), &c.name, 53);
            if let Some(first) = seen.insert(c.name.as_str(), i) {
                self.err(
                    &format!("{base}.name"),
                    format!(
                        "{:?} is already the name of charts[{first}] (release names must be unique)",
                        c.name
                    ),
                );
            }
            let sources = [c.repo.is_some(), c.oci.is_some(), c.path.is_some()];
            match sources.iter().filter(|s| **s).count() {
                0 => self.err(
                    &base,
                    format!(
                        "release {:?} has no chart source (set one of repo, oci or path)",
                        c.name
                    ),
                ),
                1 => {}
                _ => self.err(
                    &base,
                    format!(
                        "release {:?} sets more than one of repo, oci and path (keep one)",
                        c.name
                    ),
                ),
            }
            if let Some(repo) = &c.repo {
                match url::Url::parse(repo) {
                    Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
                    Ok(u) if u.scheme() == "oci" => self.err(
                        &format!("{base}.repo"),
                        format!("{repo:?} is an OCI reference (use oci: instead of repo:)"),
                    ),
                    _ => self.err(
                        &format!("{base}.repo"),
                        format!("{repo:?} is not an http(s) URL (for example \"https://charts.example.com\")"),
                    ),
                }
            }
            if let Some(why) = c.oci.as_deref().and_then(oci_reference_problem) {
                self.err(&format!("{base}.oci"), why);
            }
            if let Some(p) = &c.path {
                if Path::new(p).is_absolute() || p.split(['/', '\\']).any(|s| s == "..") {
                    self.err(
                        &format!("{base}.path"),
                        format!("{p:?} leaves the work tree (use a path relative to it, without '..')"),
                    );
                } else if !dir.join(p).exists() {
                    self.err(
                        &format!("{base}.path"),
                        format!("{p:?} does not exist in the work tree"),
                    );
                }
            }
            if let Some(v) = &c.version {
                if let Err(why) = check_version_constraint(v) {
                    self.err(
                        &format!("{base}.version"),
                        format!("{v:?} is not a version or constraint: {why}"),
                    );
                }
            }
            if let Some(ns) = &c.namespace {
                self.name(&format!("{base}.namespace"), ns, 63);
            }
            if let Some(t) = &c.timeout {
                match humantime::parse_duration(t) {
                    Ok(d) if d.as_secs() == 0 => self.err(
                        &format!("{base}.timeout"),
                        format!("{t:?} is zero (use for example \"5m\")"),
                    ),
                    Ok(_) => {}
                    Err(_) => self.err(
                        &format!("{base}.timeout"),
                        format!("{t:?} is not a duration (use for example \"90s\", \"5m\" or \"1h\")"),
                    ),
                }
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
        self.dependencies(charts);
    }

    fn dependencies(&mut self, charts: &[ChartSpec]) {
        let names: Vec<&str> = charts.iter().map(|c| c.name.as_str()).collect();
        let known: HashSet<&str> = names.iter().copied().collect();
        for (i, c) in charts.iter().enumerate() {
            for (j, d) in c.depends_on.iter().enumerate() {
                let path = format!("charts[{i}].dependsOn[{j}]");
                // Targets that are not cluster.yaml releases may be plugin releases: the plugin
                // stage, which knows every release, reports the unknown ones.
                if d == &c.name {
                    self.err(&path, format!("release {:?} depends on itself", c.name));
                }
            }
        }
        let graph: BTreeMap<&str, Vec<&str>> = charts
            .iter()
            .map(|c| {
                let deps = c
                    .depends_on
                    .iter()
                    .map(String::as_str)
                    .filter(|d| known.contains(d) && *d != c.name)
                    .collect();
                (c.name.as_str(), deps)
            })
            .collect();
        if let Some(cycle) = find_cycle(&graph) {
            let first = cycle[0];
            let i = charts.iter().position(|c| c.name == first).unwrap_or(0);
            let j = charts[i].depends_on.iter().position(|d| d == cycle[1]).unwrap_or(0);
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

/// Finds one dependency cycle, returned as `[a, b, …, a]`.
pub fn find_cycle<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Option<Vec<&'a str>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit<'a>(
        n: &'a str,
        graph: &BTreeMap<&'a str, Vec<&'a str>>,
        marks: &mut HashMap<&'a str, Mark>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        marks.insert(n, Mark::Active);
        stack.push(n);
        for &d in graph.get(n).map(Vec::as_slice).unwrap_or(&[]) {
            match marks.get(d).copied().unwrap_or(Mark::New) {
                Mark::Active => {
                    let start = stack.iter().position(|s| *s == d).unwrap_or(0);
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(d);
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(d, graph, marks, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(n, Mark::Done);
        None
    }
    let mut marks = HashMap::new();
    for &n in graph.keys() {
        if marks.get(n).copied().unwrap_or(Mark::New) == Mark::New {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, graph, &mut marks, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

/// Why an `oci:` chart reference is refused, or None. It is
/// `oci://host/path/name[:tag]`; a manifest digest (`@sha256:…`) is refused,
/// never dropped: the lock pins the chart archive's own sha256, which a
/// manifest digest is not. The chart stage (src/chart/oci.rs) applies the same rule.
pub fn oci_reference_problem(oci: &str) -> Option<String> {
    let ok = oci
        .strip_prefix("oci://")
        .map(|rest| rest.contains('/') && !rest.ends_with('/'))
        .unwrap_or(false);
    if !ok {
        return Some(format!(
            "{oci:?} is not an OCI chart reference (use oci://host/path/name)"
        ));
    }
    let (name, digest) = oci.split_once('@')?;
    Some(format!(
        "{oci:?} pins a manifest digest ({digest:?}), which kube-aws does not resolve: \
         use a tag ({name}:1.2.3) or set version; `kube-aws charts lock` then pins the chart's sha256"
    ))
}

/// Splits `s3://bucket/prefix` into bucket and prefix (without slashes at the ends).
pub fn parse_s3_uri(uri: &str) -> Result<(String, String), String> {
    let rest = uri.strip_prefix("s3://").ok_or("it must start with s3://")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err("the bucket name is missing".into());
    }
    if !BUCKET.is_match(bucket) || bucket.contains("..") {
        return Err(format!(
            "{bucket:?} is not a valid bucket name (3-63 lowercase letters, digits, '.' and '-')"
        ));
    }
    let prefix = prefix.trim_matches('/');
    // S3's "safe" key characters (letters, digits and `!-_.*'()/`), without
    // `*`, `(` and `)`: the prefix reaches IAM resource ARNs (where `*` is a
    // wildcard), CloudFormation `Fn::Sub` strings and node data files, so no
    // `$`, `{`, space or shell-looking `$(…)` may ride along.
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '!' | '-' | '_' | '.' | '\'' | '/')))
    {
        return Err(format!(
            "the prefix {prefix:?} contains {c:?} (use letters, digits and ! - _ . ' /)"
        ));
    }
    if prefix.split('/').any(|s| s == "." || s == "..") || prefix.contains("//") {
        return Err(format!("the prefix {prefix:?} has empty, '.' or '..' segments"));
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

fn is_cidr(s: &str) -> bool {
    parse_cidr(s).is_some()
}

/// An IPv4 CIDR as (address, prefix length): four decimal octets, `/0`..`/32`.
/// Host bits may be set; see [`cidr_network`].
pub fn parse_cidr(s: &str) -> Option<(u32, u32)> {
    let c = CIDR.captures(s)?;
    let mut addr = 0u32;
    for i in 1..=4 {
        let o: u32 = c[i].parse().ok().filter(|o| *o <= 255)?;
        addr = addr << 8 | o;
    }
    let bits: u32 = c[5].parse().ok().filter(|b| *b <= 32)?;
    Some((addr, bits))
}

/// The network address of a CIDR (its host bits cleared).
pub fn cidr_network(addr: u32, bits: u32) -> u32 {
    addr & u32::MAX.checked_shl(32 - bits).unwrap_or(0)
}

/// Is CIDR `inner` entirely inside CIDR `outer`?
fn cidr_within(inner: (u32, u32), outer: (u32, u32)) -> bool {
    inner.1 >= outer.1 && cidr_network(inner.0, outer.1) == cidr_network(outer.0, outer.1)
}

/// Accepts what Helm accepts: an exact version or a semver constraint.
/// Helm's `~1.2`, `^1.2`, `1.2.x` and space- or comma-separated ranges are
/// mapped onto the semver crate's syntax.
pub fn check_version_constraint(v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        return Err("it is empty".into());
    }
    for alternative in v.split("||") {
        let normalized = normalize_constraint(alternative);
        semver::VersionReq::parse(&normalized).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Rewrites a Helm (Masterminds) constraint into the semver crate's syntax:
/// space-separated comparators become comma-separated, a leading `v` goes.
pub fn normalize_constraint(c: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let tokens: Vec<&str> = c.split([' ', ',']).filter(|t| !t.is_empty()).collect();
    let mut i = 0;
    while i < tokens.len() {
        let mut t = tokens[i].to_string();
        // "> = 1.2" or ">= 1.2": join an operator with the version after it.
        if t.chars().all(|ch| "<>=~^!".contains(ch)) && i + 1 < tokens.len() {
            t.push_str(tokens[i + 1]);
            i += 1;
        }
        let op_len = t.find(|ch: char| !"<>=~^!".contains(ch)).unwrap_or(t.len());
        let (op, ver) = t.split_at(op_len);
        let ver = ver.strip_prefix('v').unwrap_or(ver);
        parts.push(format!("{op}{ver}"));
        i += 1;
    }
    parts.join(", ")
}

/// The shortest and longest etcd backup intervals (`etcd.backup.interval`).
pub const BACKUP_INTERVAL_MIN: std::time::Duration = std::time::Duration::from_secs(5 * 60);
pub const BACKUP_INTERVAL_MAX: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// An EC2 image ID: `ami-` and 8 (older) or 17 lowercase hex digits.
pub fn is_ami_id(s: &str) -> bool {
    s.strip_prefix("ami-").is_some_and(|h| {
        (h.len() == 8 || h.len() == 17) && h.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

/// The controller counts etcd keeps quorum with: an odd number, at most 5
/// (etcd's FAQ: an even member count adds no failure tolerance, and more than
/// five members slows every write; https://etcd.io/docs/v3.5/faq/).
pub const CONTROLLER_COUNTS: [u32; 3] = [1, 3, 5];

/// Why `count` controllers cannot be, naming the nearest counts that can.
pub fn controller_count_error(count: u32) -> Option<String> {
    if CONTROLLER_COUNTS.contains(&count) {
        return None;
    }
    let near: Vec<String> = CONTROLLER_COUNTS
        .iter()
        .filter(|c| c.abs_diff(count) <= 1 || (count > 5 && **c == 5))
        .map(|c| c.to_string())
        .collect();
    let near = if near.is_empty() {
        "1".to_string()
    } else {
        near.join(" or ")
    };
    Some(if count == 0 {
        "0 controllers cannot run a cluster; use 1, 3 or 5".to_string()
    } else if count.is_multiple_of(2) {
        format!(
            "{count} controllers: etcd needs an odd count to keep quorum ({count} members tolerate no more \
             failures than {}); use {near}",
            count - 1
        )
    } else {
        format!("{count} controllers: at most 5 (every etcd member slows down writes); use {near}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_nest() {
        assert_eq!(parse_cidr("10.1.2.3/16"), Some((0x0a01_0203, 16)));
        assert_eq!(parse_cidr("0.0.0.0/0"), Some((0, 0)));
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "256.0.0.0/8",
            "10.0.0/8",
            " 10.0.0.0/8",
            "10.0.0.0/-1",
        ] {
            assert_eq!(parse_cidr(bad), None, "{bad}");
        }
        assert_eq!(cidr_network(0x0a01_0203, 16), 0x0a01_0000);
        assert_eq!(cidr_network(0xffff_ffff, 0), 0);
        assert_eq!(cidr_network(0x0a01_0203, 32), 0x0a01_0203);
        let c = |s: &str| parse_cidr(s).unwrap();
        assert!(cidr_within(c("10.0.5.0/24"), c("10.0.0.0/16")));
        assert!(cidr_within(c("10.0.0.0/16"), c("10.0.0.0/16")));
        assert!(!cidr_within(c("10.0.0.0/8"), c("10.0.0.0/16")));
        assert!(!cidr_within(c("10.1.0.0/24"), c("10.0.0.0/16")));
        assert!(!cidr_within(c("0.0.0.0/0"), c("10.0.0.0/16")));
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("general-1", 63));
        assert!(!is_dns_label("Pool_1", 63));
        assert!(!is_dns_label("-a", 63));
        assert!(!is_dns_label("a-", 63));
        assert!(!is_dns_label("", 63));
        assert!(!is_dns_label(&"a".repeat(64), 63));
    }

    #[test]
    fn s3_uris() {
        assert_eq!(
            parse_s3_uri("s3://my-bucket/kube-aws").unwrap(),
            ("my-bucket".into(), "kube-aws".into())
        );
        assert_eq!(parse_s3_uri("s3://my-bucket").unwrap(), ("my-bucket".into(), "".into()));
        assert!(parse_s3_uri("https://my-bucket/x").is_err());
        assert!(parse_s3_uri("s3://My_Bucket/x").is_err());
        assert!(parse_s3_uri("s3:///x").is_err());
        assert!(parse_s3_uri("s3://b-1/a/../b").is_err());
        assert!(parse_s3_uri("s3://b-1/team_a/it's-1.0!").is_ok());
        for bad in ["a b", "a*", "$(id)", "${AWS::Region}", "a(1)", "x\ny", "ü"] {
            let e = parse_s3_uri(&format!("s3://b-1/{bad}")).unwrap_err();
            assert!(e.contains("contains"), "{bad}: {e}");
        }
    }

    #[test]
    fn kubernetes_names_and_values() {
        for ok in [
            "a",
            "kube-aws.io/pool",
            "node.kubernetes.io/lifecycle",
            "A_b.c-1",
            &"x".repeat(63),
        ] {
            assert!(check_qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a b",
            "a,b",
            "a=b",
            "/a",
            "a/",
            "a/b/c",
            "Upper.io/a",
            "a..b/c",
            &"x".repeat(64),
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad}");
        }
        assert!(check_qualified_name(&format!("{}/a", "p".repeat(254))).is_err());
        for ok in ["", "general", "v1.2_3-x", &"x".repeat(63)] {
            assert!(check_label_value(ok).is_ok(), "{ok}");
        }
        for bad in ["a,b=c", "a=b", "a b", "-a", "a.", "a\nb", &"x".repeat(64)] {
            assert!(check_label_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flag_values_cannot_carry_flags() {
        for ok in [
            "110",
            "https://dex.example.com",
            "A=true,B=false",
            "/etc/k/x.yaml",
            "--x",
        ] {
            assert!(check_flag_value(ok).is_ok(), "{ok}");
        }
        for bad in [
            "110 --anonymous-auth=true --authorization-mode=AlwaysAllow",
            "a\nb",
            "a\tb",
            "a\"b",
            "a'b",
            "a\\b",
            "a\u{0}",
        ] {
            assert!(check_flag_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cycles_are_named() {
        let mut g = BTreeMap::new();
        g.insert("a", vec!["b"]);
        g.insert("b", vec!["c"]);
        g.insert("c", vec!["a"]);
        g.insert("d", vec![]);
        assert_eq!(find_cycle(&g).unwrap(), vec!["a", "b", "c", "a"]);
        g.insert("c", vec![]);
        assert_eq!(find_cycle(&g), None);
    }

    #[test]
    fn helm_constraints() {
        for ok in [
            "3.12.1",
            "~3.12",
            "^1.2",
            ">=1.2 <2.0",
            ">= 1.2, < 2",
            "1.2.x",
            "*",
            "v1.2.3",
            "1.2 || 2.x",
        ] {
            assert!(check_version_constraint(ok).is_ok(), "{ok}");
        }
        for bad in ["", "banana", ">=>1"] {
            assert!(check_version_constraint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cidrs() {
        assert!(is_cidr("10.0.0.0/16"));
        assert!(!is_cidr("10.0.0.256/16"));
        assert!(!is_cidr("10.0.0.0/33"));
        assert!(!is_cidr("10.0.0/16"));
    }
}
