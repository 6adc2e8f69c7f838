//! The `kube-aws` binary: parse the command line, run it, and decide the exit
//! code. Exit codes:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | a bad work tree, missing rendered files, a refused confirmation, a stack that exists (use `update`) or is missing (use `up`) |
//! | 2 | bad usage (clap; an unknown command with no plugin command or `kube-aws-NAME` on PATH) |
//! | 3 | the stack or an addon failed (the message names the first failed resource or the addon and its reason) |
//! | 4 | AWS: no credentials, endpoint unreachable or lost mid-wait, a missing bucket, a refused API call |
//! | 5 | the wait's `--timeout` passed (the stack is left as it is; `kube-aws status --wait` resumes) |
//! | N | an external command (`kube-aws NAME`: a plugin's command or `kube-aws-NAME` on PATH) exited with N |
//! | 130 | interrupted by Ctrl-C while waiting (the stack is left as it is) |

use std::process::ExitCode;

use kube_aws::aws::{AwsError, ErrorKind};
use kube_aws::cli::{parse, run};
use kube_aws::plugin::exec::{ExecError, ExternalExit};

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`kube-aws schema cluster | head`) like other Unix tools,
    // instead of panicking inside println!.
    // SAFETY: called first thing in main, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // An external command's own status, passed on silently (as git and cargo do).
        Err(err) if err.downcast_ref::<ExternalExit>().is_some() => {
            ExitCode::from(err.downcast_ref::<ExternalExit>().map_or(1, |e| e.0))
        }
        Err(err) => {
            let prefix = console::style("error:").red().bold().for_stderr();
            // One line per error: a Diagnostics list renders one located error a line.
            for line in format_chain(&err).lines() {
                eprintln!("{prefix} {line}");
            }
            ExitCode::from(exit_code(&err))
        }
    }
}

fn exit_code(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<ExecError>().is_some_and(ExecError::is_usage) {
        return 2;
    }
    let kind = err
        .chain()
        .find_map(|c| c.downcast_ref::<AwsError>())
        .map(AwsError::kind);
    match kind {
        None | Some(ErrorKind::WorkTree) => 1,
        Some(ErrorKind::DeployFailed) => 3,
        Some(ErrorKind::Aws) => 4,
        Some(ErrorKind::Timeout) => 5,
        Some(ErrorKind::Interrupted) => 130,
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
