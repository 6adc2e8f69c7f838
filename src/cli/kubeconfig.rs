//! `kube-aws kubeconfig` (the operation: src/ops/kubeconfig.rs): mint a
//! short-lived client certificate with the caller's kms:Decrypt and merge a
//! context for the cluster into a kubeconfig.

use std::path::PathBuf;

use super::deploy_args::{runtime, AwsArgs};
use super::GlobalOptions;
use crate::ops::kubeconfig::{self, KubeconfigOptions, KubeconfigOutcome};
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
    let opts = KubeconfigOptions {
        dir: global.dir.clone(),
        aws: args.aws.options(),
        ttl: args.ttl,
        user: args.user,
        group: args.group,
        file: args.file,
        context: args.context,
        kubeconfig_env: std::env::var_os("KUBECONFIG"),
        home: std::env::var_os("HOME").map(PathBuf::from),
    };
    let at = |t| humantime::format_rfc3339_seconds(t);
    match runtime()?.block_on(kubeconfig::run(&opts))? {
        KubeconfigOutcome::Printed { text, server, expires } => {
            print!("{text}");
            eprintln!("API endpoint: {server}");
            eprintln!("certificate expires: {}", at(expires));
        }
        KubeconfigOutcome::Written {
            context,
            path,
            server,
            expires,
        } => {
            println!("context {context:?} written to {}", path.display());
            println!("API endpoint: {server}");
            println!("certificate expires: {}", at(expires));
        }
    }
    Ok(())
}
