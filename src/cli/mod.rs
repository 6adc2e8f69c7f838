//! The command line: global options, one small file per command. Commands
//! parse flags into an options struct, call the library, and print.

mod backups;
mod charts;
mod deploy_args;
mod destroy;
mod init;
mod kubeconfig;
#[cfg(feature = "nodes")]
mod nodes;
mod plugins;
pub mod render;
mod schema;
mod status;
mod up;
mod update;
mod validate;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Bring up a Kubernetes cluster on AWS with its addons deployed and ready.
#[derive(Debug, Parser)]
#[command(name = "kube-aws", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOptions,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalOptions {
    /// The work tree (the directory holding cluster.yaml)
    #[arg(long, global = true, default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,
    /// Output format for commands whose output is data
    #[arg(short, long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Print more detail
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Disable colors (also honoured: the NO_COLOR environment variable)
    #[arg(long, global = true)]
    pub no_color: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a work tree: cluster.yaml, values/, plugins/, charts-index/
    Init(init::InitArgs),
    /// Load and check the work tree offline
    Validate(validate::ValidateArgs),
    /// Print a JSON Schema, for editors
    Schema(schema::SchemaArgs),
    /// Pin, fetch and verify Helm charts (charts-index/index.yaml)
    Charts(charts::ChartsArgs),
    /// List plugins, or show one
    Plugins(plugins::PluginsArgs),
    /// Render stacks, user-data and the addon plan into <dir>/rendered (offline)
    Render(render::RenderArgs),
    /// Publish to S3 and create the stacks; --wait follows them until addons are ready
    Up(up::UpArgs),
    /// Show the stacks, outputs and addon states; --wait follows an operation
    Status(status::StatusArgs),
    /// Publish, preview the changes as a change set, and apply them
    Update(update::UpdateArgs),
    /// Delete the cluster's stacks (published objects stay unless --purge)
    Destroy(destroy::DestroyArgs),
    #[cfg(feature = "nodes")]
    /// List the cluster's instances: role, pool, zone, DNS name, state, bootstrap status
    Nodes(nodes::NodesArgs),
    #[cfg(feature = "nodes")]
    /// Print a node's published bootstrap report (secrets blanked), without a shell on it
    Logs(nodes::LogsArgs),
    /// Merge a short-lived admin context into your kubeconfig (needs kms:Decrypt)
    Kubeconfig(kubeconfig::KubeconfigArgs),
    /// List the etcd snapshots in S3 (key, size, time) and the last backup run
    Backups(backups::BackupsArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let colors = !cli.global.no_color && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // Only ever turn colors off: console already leaves them off when not on a TTY.
    if !colors {
        console::set_colors_enabled(false);
        console::set_colors_enabled_stderr(false);
    }
    match cli.command {
        Command::Init(args) => init::run(&cli.global, args),
        Command::Validate(args) => validate::run(&cli.global, args),
        Command::Schema(args) => schema::run(&cli.global, args),
        Command::Charts(args) => charts::run(&cli.global, args),
        Command::Plugins(args) => plugins::run(&cli.global, args),
        Command::Render(args) => render::run(&cli.global, args),
        Command::Up(args) => up::run(&cli.global, args),
        Command::Status(args) => status::run(&cli.global, args),
        Command::Update(args) => update::run(&cli.global, args),
        Command::Destroy(args) => destroy::run(&cli.global, args),
        #[cfg(feature = "nodes")]
        Command::Nodes(args) => nodes::run_nodes(&cli.global, args),
        #[cfg(feature = "nodes")]
        Command::Logs(args) => nodes::run_logs(&cli.global, args),
        Command::Kubeconfig(args) => kubeconfig::run(&cli.global, args),
        Command::Backups(args) => backups::run(&cli.global, args),
    }
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
