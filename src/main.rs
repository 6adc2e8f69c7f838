//! The `kube-aws` binary: parse the command line, run it, print the error and
//! exit with the code [`kube_aws::cli::exit::classify`] decides from it (the
//! codes are listed there and in docs/deploy.md).

use std::process::ExitCode;

use kube_aws::cli::exit::classify;
use kube_aws::cli::{parse, run};

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`kube-aws schema cluster | head`) like other Unix tools,
    // instead of panicking inside println!.
    // SAFETY: called first thing in main, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = parse();
    // Every command on one thread with a known, large stack: the template
    // and values checks, which need one, then run in place instead of
    // starting a thread each (src/deep.rs).
    let result = kube_aws::deep::on_big_stack(|| run(cli))
        .unwrap_or_else(|e| Err(anyhow::anyhow!("cannot start the command's thread: {e}")));
    let Err(err) = result else {
        return ExitCode::SUCCESS;
    };
    let exit = classify(&err);
    if !exit.is_silent() {
        let prefix = console::style("error:").red().bold().for_stderr();
        // One line per error: a Diagnostics list renders one located error a line.
        for line in format_chain(&err).lines() {
            eprintln!("{prefix} {line}");
        }
    }
    ExitCode::from(exit.code())
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
