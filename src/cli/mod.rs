//! The command line: global options, one small file per command. Commands
//! parse flags into an options struct, call the library, and print.

mod backups;
mod charts;
mod completions;
mod deploy_args;
mod destroy;
pub mod exit;
mod init;
mod kubeconfig;
#[cfg(feature = "nodes")]
mod nodes;
mod plugins;
pub mod render;
#[cfg(feature = "nodes")]
mod restore;
mod rotate;
mod schema;
mod status;
mod terminal;
mod up;
mod update;
mod validate;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

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
    /// Run no plugin hooks (render, up, update, destroy)
    #[arg(long, global = true)]
    pub no_hooks: bool,
    /// How long render, up and update wait for another of them to release
    /// the work tree (<dir>/.kube-aws.lock) before giving up
    #[arg(long, global = true, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    pub lock_timeout: std::time::Duration,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration (for example \"30s\" or \"10m\"): {e}"))
}

impl GlobalOptions {
    /// The work tree these options name, as an operation takes it.
    pub fn work_tree(&self) -> crate::ops::WorkTree {
        crate::ops::WorkTree {
            dir: self.dir.clone(),
            lock_timeout: self.lock_timeout,
            hooks: !self.no_hooks,
            verbose: self.verbose,
        }
    }
}

/// Takes the work tree's lock for `command` (`render`) for as long as the
/// returned guard lives; says on stderr whom it waits for.
pub(crate) fn lock_work_tree(
    global: &GlobalOptions,
    command: &str,
) -> anyhow::Result<Option<crate::fsutil::WorkTreeLock>> {
    Ok(global.work_tree().lock(command, &mut |l| eprintln!("{l}"))?)
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
    /// Rotate a cluster credential now: `rotate bootstrap-token`
    Rotate(rotate::RotateArgs),
    /// Print a shell completion script (bash, zsh or fish), plugin commands included
    Completions(completions::CompletionsArgs),
    #[cfg(feature = "nodes")]
    /// Restore an etcd snapshot: every controller is replaced, the first restores it
    Restore(restore::RestoreArgs),
    /// Any other name: a plugin's command, or `kube-aws-NAME` on PATH
    #[command(external_subcommand)]
    External(Vec<OsString>),
}

/// Parses the process's command line. When help is asked for, the plugin
/// commands and the `kube-aws-*` programs on PATH get a section of their own.
pub fn parse() -> Cli {
    let args: Vec<OsString> = std::env::args_os().collect();
    let mut cmd = Cli::command();
    let wants_help =
        args.iter().skip(1).any(|a| a == "-h" || a == "--help") || args.get(1).is_some_and(|a| a == "help");
    if wants_help {
        if let Some(section) = plugins::commands_help(&dir_arg(&args), &builtin_names()) {
            cmd = cmd.after_help(section);
        }
    }
    let matches = cmd.get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `--dir` as given on the command line, before clap has parsed it (for `--help`).
fn dir_arg(args: &[OsString]) -> PathBuf {
    let mut dir = PathBuf::from(".");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--dir" {
            if let Some(v) = it.next() {
                dir = PathBuf::from(v);
            }
        } else if let Some(v) = a.to_str().and_then(|a| a.strip_prefix("--dir=")) {
            dir = PathBuf::from(v);
        }
    }
    dir
}

/// The built-in command names (a plugin cannot take one).
pub fn builtin_names() -> Vec<String> {
    let mut names: Vec<String> = Cli::command()
        .get_subcommands()
        .flat_map(|c| std::iter::once(c.get_name().to_string()).chain(c.get_all_aliases().map(str::to_string)))
        .collect();
    names.push("help".into());
    names
}

/// Runs an unknown subcommand: a plugin's command or `kube-aws-NAME` on PATH,
/// arguments passed byte for byte. A non-zero exit becomes [`ExternalExit`]
/// for main to pass on.
///
/// [`ExternalExit`]: crate::plugin::exec::ExternalExit
fn external(global: &GlobalOptions, argv: Vec<OsString>) -> anyhow::Result<()> {
    use crate::plugin::exec;
    let Some((name, args)) = argv.split_first() else {
        anyhow::bail!("no command given (see `kube-aws --help`)");
    };
    let target = exec::find_command(&global.dir, name, &builtin_names())?;
    match exec::run_command(&target, &global.dir, args)? {
        0 => Ok(()),
        code => Err(exec::ExternalExit(code).into()),
    }
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
        Command::Rotate(args) => rotate::run(&cli.global, args),
        Command::Completions(args) => completions::run(&cli.global, args),
        #[cfg(feature = "nodes")]
        Command::Restore(args) => restore::run(&cli.global, args),
        Command::External(argv) => external(&cli.global, argv),
    }
}

/// Runs one step's plugin hooks (src/plugin/exec.rs) unless `--no-hooks`;
/// `-v` prints each before it runs.
pub(crate) fn hooks(
    global: &GlobalOptions,
    cluster: &crate::config::Cluster,
    step: crate::plugin::exec::Step,
    when: crate::plugin::exec::When,
    rendered: &std::path::Path,
    outputs: Option<&serde_json::Value>,
) -> anyhow::Result<()> {
    global.work_tree().hooks(cluster, step, when, rendered, outputs)?;
    Ok(())
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
