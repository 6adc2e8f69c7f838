//! `kubeconfig`: mints a short-lived client certificate with the caller's
//! kms:Decrypt (src/aws/lifecycle/kubeconfig.rs) and merges a context for the cluster
//! into a kubeconfig (src/kubeconfig.rs), or returns it to be printed.
//!
//! Invariant: every local check comes first. A bad TTL, or a file that
//! would not merge, costs no AWS call and writes nothing; the file is
//! written whole or not at all (`write_merged`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::OpsError;
use crate::aws::lifecycle::kubeconfig::{mint, MintRequest};
use crate::aws::{connect, AwsOptions};
use crate::config::load_cluster;
use crate::kubeconfig::{merge, read_existing, target_path, write_merged, Entry};
use crate::pki;

/// What `kubeconfig` is asked to do.
#[derive(Debug, Clone)]
pub struct KubeconfigOptions {
    pub dir: PathBuf,
    pub aws: AwsOptions,
    /// How long the certificate is valid, as given (at most 7d).
    pub ttl: String,
    pub user: String,
    /// The certificate's O; empty for none.
    pub group: String,
    /// The kubeconfig to merge into; `-` returns it to be printed.
    pub file: Option<PathBuf>,
    pub context: Option<String>,
    /// The caller's KUBECONFIG and home directory (where the default file is).
    pub kubeconfig_env: Option<OsString>,
    pub home: Option<PathBuf>,
}

/// What `kubeconfig` made.
#[derive(Debug, Clone)]
pub enum KubeconfigOutcome {
    /// `--file -`: the kubeconfig to print.
    Printed {
        text: String,
        server: String,
        expires: SystemTime,
    },
    /// The context merged into `path`.
    Written {
        context: String,
        path: PathBuf,
        server: String,
        expires: SystemTime,
    },
}

/// Runs `kubeconfig`.
pub async fn run(opts: &KubeconfigOptions) -> Result<KubeconfigOutcome, OpsError> {
    let ttl = pki::parse_ttl(&opts.ttl)?;
    let to_stdout = opts.file.as_deref() == Some(Path::new("-"));
    let target = if to_stdout {
        None
    } else {
        let path = target_path(
            opts.file.as_deref(),
            opts.kubeconfig_env.as_deref(),
            opts.home.as_deref(),
        )?;
        // Refuse a file that would not merge before anything else.
        if let Some(text) = read_existing(&path)? {
            let probe = Entry {
                context: "probe".into(),
                cluster: "probe".into(),
                user: "probe".into(),
                server: String::new(),
                ca_pem: String::new(),
                cert_pem: String::new(),
                key_pem: String::new(),
            };
            merge(&path.display().to_string(), Some(&text), &probe)?;
        }
        Some(path)
    };
    let cluster = load_cluster(&opts.dir)?;
    let cfg = &cluster.config;
    let req = MintRequest {
        user: opts.user.clone(),
        group: Some(opts.group.clone()).filter(|g| !g.is_empty()),
        ttl,
        context: opts.context.clone(),
    };
    let clients = connect(&opts.aws, &cfg.region).await?;
    let minted = mint(&clients, cfg, &req).await?;
    let expires = SystemTime::from(minted.not_after);
    let server = minted.entry.server.clone();
    Ok(match target {
        None => KubeconfigOutcome::Printed {
            text: merge("-", None, &minted.entry)?,
            server,
            expires,
        },
        Some(path) => {
            write_merged(&path, &minted.entry).map_err(|source| OpsError::KubeconfigNotChanged { source })?;
            KubeconfigOutcome::Written {
                context: minted.entry.context,
                path,
                server,
                expires,
            }
        }
    })
}
