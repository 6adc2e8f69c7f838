//! `kube-aws completions bash|zsh|fish`: a shell completion script on stdout
//! (clap_complete's generators), with the plugin commands of the work tree
//! (`--dir`) and the `kube-aws-*` programs on PATH as they are when it runs.

use clap::CommandFactory;

use super::{builtin_names, plugins, Cli, GlobalOptions};

/// Arguments of `kube-aws completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

pub fn run(global: &GlobalOptions, args: CompletionsArgs) -> anyhow::Result<()> {
    let mut out = Vec::new();
    generate(global, args.shell, &mut out);
    use std::io::Write;
    std::io::stdout().write_all(&out)?;
    Ok(())
}

/// The script for `shell`. Plugin commands are not clap subcommands (they
/// reach kube-aws as an external subcommand, run by name), so each is added
/// here as one that takes any arguments, described as in `--help`.
pub fn generate(global: &GlobalOptions, shell: Shell, out: &mut Vec<u8>) {
    let mut cmd = Cli::command();
    for (name, what) in plugins::external_commands(&global.dir, &builtin_names()) {
        cmd = cmd.subcommand(
            clap::Command::new(name).about(what).arg(
                clap::Arg::new("args")
                    .num_args(0..)
                    .trailing_var_arg(true)
                    .allow_hyphen_values(true),
            ),
        );
    }
    let name = cmd.get_name().to_string();
    match shell {
        Shell::Bash => clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, name, out),
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, name, out),
        Shell::Fish => clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, name, out),
    }
}
