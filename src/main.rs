//! The `kube-aws` binary: parse the command line, run it, and decide the exit
//! code. Exit codes: 0 success, 1 a bad work tree or a failed operation,
//! 2 bad usage (clap).

use std::process::ExitCode;

use clap::Parser;
use kube_aws::cli::{run, Cli};

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`kube-aws schema cluster | head`) like other Unix tools,
    // instead of panicking inside println!.
    // SAFETY: called first thing in main, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let prefix = console::style("error:").red().bold().for_stderr();
            // One line per error: a Diagnostics list renders one located error a line.
            for line in format_chain(&err).lines() {
                eprintln!("{prefix} {line}");
            }
            ExitCode::from(1)
        }
    }
}

fn format_chain(err: &anyhow::Error) -> String {
    let mut out = err.to_string();
    for cause in err.chain().skip(1) {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}
