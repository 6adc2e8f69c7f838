//! `kube-aws kubeconfig`: mint a short-lived client certificate with the
//! caller's kms:Decrypt and merge a context for the cluster into a kubeconfig.

use std::path::PathBuf;

use anyhow::Context;

use super::deploy_args::{runtime, AwsArgs};
use super::GlobalOptions;
use crate::aws::connect;
use crate::aws::kubeconfig::{mint, MintRequest};
use crate::config::load_cluster;
use crate::kubeconfig::{merge, read_existing, target_path, write_merged};
use crate::pki;

/// Arguments of `kube-aws kubeconfig`.
#[derive(Debug, clap::Args)]
pub struct KubeconfigArgs {
    /// How long the client certificate is valid (at most 7d)
    #[arg(long, default_value = "12h", value_name = "DURATION")]
    pub ttl: String,
    /// The user name (certificate CN)
    #[arg(long, default_value = pki::DEFAULT_USER, value_name = "NAME")]
    pub user: String,
    /// The group (certificate O); kubeadm binds kubeadm:cluster-admins to cluster-admin
    #[arg(long, default_value = pki::DEFAULT_GROUP, value_name = "GROUP")]
    pub group: String,
    /// The kubeconfig to merge into (default: the first KUBECONFIG path, else ~/.kube/config); - prints it
    #[arg(long, value_name = "PATH|-")]
    pub file: Option<PathBuf>,
    /// The context name (default: the cluster's name)
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    #[command(flatten)]
    pub aws: AwsArgs,
}

pub fn run(global: &GlobalOptions, args: KubeconfigArgs) -> anyhow::Result<()> {
    // Every local check first: a bad TTL or file costs no AWS call and writes nothing.
    let ttl = pki::parse_ttl(&args.ttl)?;
    let to_stdout = args.file.as_deref() == Some(std::path::Path::new("-"));
    let target = if to_stdout {
        None
    } else {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let path = target_path(
            args.file.as_deref(),
            std::env::var_os("KUBECONFIG").as_deref(),
            home.as_deref(),
        )?;
        // Refuse a file that would not merge before anything else.
        let existing = read_existing(&path)?;
        if let Some(text) = &existing {
            let probe = crate::kubeconfig::Entry {
                context: "probe".into(),
                cluster: "probe".into(),
                user: "probe".into(),
                server: String::new(),
                ca_pem: String::new(),
                cert_pem: String::new(),
                key_pem: String::new(),
            };
            merge(&path.display().to_string(), Some(text), &probe)?;
        }
        Some(path)
    };
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let req = MintRequest {
        user: args.user,
        group: Some(args.group).filter(|g| !g.is_empty()),
        ttl,
        context: args.context,
    };
    let minted = runtime()?.block_on(async {
        let clients = connect(&args.aws.options(), &cfg.region).await?;
        mint(&clients, cfg, &req).await
    })?;
    let expiry = humantime::format_rfc3339_seconds(std::time::SystemTime::from(minted.not_after));
    match target {
        None => {
            print!("{}", merge("-", None, &minted.entry)?);
            eprintln!("API endpoint: {}", minted.entry.server);
            eprintln!("certificate expires: {expiry}");
        }
        Some(path) => {
            write_merged(&path, &minted.entry).with_context(|| "the kubeconfig was not changed".to_string())?;
            println!("context {:?} written to {}", minted.entry.context, path.display());
            println!("API endpoint: {}", minted.entry.server);
            println!("certificate expires: {expiry}");
        }
    }
    Ok(())
}
