//! `init`: lay out a new work tree with a commented, valid cluster.yaml.

use std::path::{Path, PathBuf};

use super::{cidr, has_host_bits, is_dns_label, is_region, parse_cluster, parse_s3_uri, CLUSTER_FILE};
use crate::fsutil::write_atomic;

const TEMPLATE: &str = include_str!("cluster.yaml.tmpl");

/// The example cluster (`init --example`): every built-in plugin enabled.
const EXAMPLE_CLUSTER: &str = include_str!("example/cluster.yaml");
/// Values files the example ships, by work-tree path.
const EXAMPLE_VALUES: [(&str, &str); 2] = [
    (
        "values/metrics-server.yaml",
        include_str!("example/values/metrics-server.yaml"),
    ),
    (
        "values/external-dns.yaml",
        include_str!("example/values/external-dns.yaml"),
    ),
];

/// The directories every work tree has.
pub const WORK_TREE_DIRS: [&str; 3] = ["values", "plugins", "charts-index"];

#[derive(Debug, Clone)]
pub struct InitOptions {
    pub dir: PathBuf,
    pub cluster_name: Option<String>,
    pub region: String,
    pub s3_uri: Option<String>,
    pub force: bool,
    /// Write the example cluster instead of the minimal one.
    pub example: bool,
    /// apiEndpoint.allowedCIDRs; empty: 0.0.0.0/0, open to the internet.
    pub api_allowed_cidrs: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{} already exists (pass --force to overwrite it)", .0.display())]
    Exists(PathBuf),
    #[error("--{flag}: {value:?} {why}")]
    BadOption {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error("internal error: the cluster.yaml template does not load: {0}")]
    Template(String),
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

/// What `init` created.
#[derive(Debug)]
pub struct InitReport {
    pub cluster_file: PathBuf,
    pub cluster_name: String,
    /// The CIDRs the API is open to, as written.
    pub api_allowed_cidrs: Vec<String>,
    /// Whether it turned network.privateSubnets on (for a narrowed API).
    pub private_subnets: bool,
}

/// Creates `dir/cluster.yaml` and the work-tree directories.
pub fn init_work_tree(opts: &InitOptions) -> Result<InitReport, InitError> {
    let cluster_file = opts.dir.join(CLUSTER_FILE);
    if cluster_file.exists() && !opts.force {
        return Err(InitError::Exists(cluster_file));
    }
    if opts.example {
        return init_example(opts, cluster_file);
    }
    let name = match &opts.cluster_name {
        Some(n) => n.clone(),
        None => default_name(&opts.dir),
    };
    if !is_dns_label(&name, 63) {
        return Err(InitError::BadOption {
            flag: "cluster-name",
            value: name,
            why: "is not a valid name (use lowercase letters, digits and '-')".into(),
        });
    }
    let s3_uri = opts
        .s3_uri
        .clone()
        .unwrap_or_else(|| format!("s3://{name}-kube-aws/clusters"));
    if let Err(why) = parse_s3_uri(&s3_uri) {
        return Err(InitError::BadOption {
            flag: "s3-uri",
            value: s3_uri,
            why: format!("is not valid: {why}"),
        });
    }
    if !is_region(&opts.region) {
        return Err(InitError::BadOption {
            flag: "region",
            value: opts.region.clone(),
            why: "is not a valid AWS region (for example \"us-west-2\")".into(),
        });
    }
    for c in &opts.api_allowed_cidrs {
        let canonical = cidr(c).filter(|n| !has_host_bits(n));
        if canonical.is_none() {
            return Err(InitError::BadOption {
                flag: "api-allowed-cidr",
                value: c.clone(),
                why: "is not an IPv4 network CIDR (for example \"203.0.113.0/24\", or \"198.51.100.7/32\")".into(),
            });
        }
    }
    let cidrs = if opts.api_allowed_cidrs.is_empty() {
        vec![super::ANYWHERE.to_string()]
    } else {
        opts.api_allowed_cidrs.clone()
    };
    let private_subnets = !cidrs.iter().any(|c| c == super::ANYWHERE);
    let text = TEMPLATE
        .replace("@API_CIDRS@", &format!("[{}]", cidrs.join(", ")))
        // A narrowed API needs the nodes behind NAT gateways (whose addresses
        // the API's security group admits): see apiEndpoint.allowedCIDRs.
        .replace("@PRIVATE_SUBNETS@", if private_subnets { "" } else { "# " })
        .replace("@CLUSTER_NAME@", &yaml_string(&name))
        .replace("@S3_URI@", &yaml_string(&s3_uri))
        .replace("@REGION@", &opts.region);
    // What init writes must load; a failure here is a bug in the template.
    if let Err(e) = parse_cluster(&opts.dir, Path::new(CLUSTER_FILE), &text) {
        return Err(InitError::Template(e.to_string()));
    }
    create_dirs(&opts.dir)?;
    write_atomic(&cluster_file, text.as_bytes()).map_err(|source| InitError::Write {
        path: cluster_file.clone(),
        source,
    })?;
    Ok(InitReport {
        cluster_file,
        cluster_name: name,
        api_allowed_cidrs: cidrs,
        private_subnets,
    })
}

fn init_example(opts: &InitOptions, cluster_file: PathBuf) -> Result<InitReport, InitError> {
    for (path, _) in EXAMPLE_VALUES {
        let p = opts.dir.join(path);
        if p.exists() && !opts.force {
            return Err(InitError::Exists(p));
        }
    }
    create_dirs(&opts.dir)?;
    for (path, text) in EXAMPLE_VALUES {
        let p = opts.dir.join(path);
        write_atomic(&p, text.as_bytes()).map_err(|source| InitError::Write { path: p, source })?;
    }
    write_atomic(&cluster_file, EXAMPLE_CLUSTER.as_bytes()).map_err(|source| InitError::Write {
        path: cluster_file.clone(),
        source,
    })?;
    let example: super::ClusterConfig =
        serde_yaml::from_str(EXAMPLE_CLUSTER).map_err(|e| InitError::Template(e.to_string()))?;
    Ok(InitReport {
        cluster_file,
        cluster_name: "example".into(),
        api_allowed_cidrs: example.api_endpoint.allowed_cidrs,
        private_subnets: example.network.private_subnets,
    })
}

fn create_dirs(dir: &Path) -> Result<(), InitError> {
    for d in WORK_TREE_DIRS {
        let p = dir.join(d);
        std::fs::create_dir_all(&p).map_err(|source| InitError::Write { path: p, source })?;
    }
    Ok(())
}

/// The directory's own name when it is a valid cluster name, else "demo".
fn default_name(dir: &Path) -> String {
    let base = std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|s| s.to_string_lossy().to_lowercase()))
        .or_else(|| dir.file_name().map(|s| s.to_string_lossy().to_lowercase()))
        .unwrap_or_default();
    if is_dns_label(&base, 63) {
        base
    } else {
        "demo".into()
    }
}

/// A plain scalar when it is safe, else a JSON (= YAML) double-quoted string.
fn yaml_string(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-./:_".contains(c));
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}
