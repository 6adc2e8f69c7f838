//! The aws CLI for the tests' own calls (the admin's, a test's checks),
//! run by a loaded awscli (tests/support/aws_cli_server.py) instead of a
//! new `aws` process per call. Invariant: a call's arguments and its
//! environment are exactly the `Command`'s (its environment is what it sets:
//! every caller starts from `MotoEnv::apply`, which clears the rest), and
//! its exit status, stdout and stderr come back as an `Output`.
//!
//! Why: a new `aws` process imports awscli and botocore and loads its
//! service's model each time, 0.6 s of CPU per call from the test binary;
//! `make test` made about 1,060 such calls, 665 s of CPU in a run that is
//! bound by its 2 cores (docs/testing.md, "Where make test's CPU goes").
//! The servers form a pool: a call takes an idle one or starts one (so at
//! most one per test thread), and gives it back. They end with the test
//! process (their stdin closes).
//!
//! Not covered by this path: a call that reads stdin (none of the callers
//! gives one), and the `aws` launcher itself (the nodes' calls, and the
//! tests that run node scripts, still start real `aws` processes).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;

use base64::Engine;

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

static IDLE: Mutex<Vec<Server>> = Mutex::new(Vec::new());

fn start() -> Server {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/aws_cli_server.py");
    let mut child = Command::new(super::tool("python3"))
        .arg(&script)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", script.display()));
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    Server { child, stdin, stdout }
}

/// Runs `cmd` (the aws CLI with its arguments and environment) through a
/// loaded awscli; panics when the server itself fails (a call that fails is
/// an `Output` with its status, as from a process).
pub fn output(cmd: &Command) -> Output {
    let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let env: serde_json::Map<String, serde_json::Value> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            Some((
                k.to_string_lossy().into_owned(),
                v?.to_string_lossy().into_owned().into(),
            ))
        })
        .collect();
    let request = serde_json::json!({"args": args, "env": env}).to_string();
    let mut server = IDLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .unwrap_or_else(start);
    let mut line = String::new();
    let sent = writeln!(server.stdin, "{request}").and_then(|_| server.stdin.flush());
    let read = sent.and_then(|_| server.stdout.read_line(&mut line));
    if !matches!(read, Ok(n) if n > 0) {
        let status = server.child.wait().ok();
        panic!("the aws CLI server ended during `aws {args:?}` ({read:?}, {status:?}); its stderr is above");
    }
    let answer: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("the aws CLI server said {line:?}: {e}"));
    IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(server);
    let bytes = |k: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(answer[k].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("the aws CLI server's {k}: {e}"))
    };
    let rc = answer["rc"].as_i64().unwrap_or(255) as i32;
    Output {
        status: ExitStatus::from_raw((rc & 0xff) << 8),
        stdout: bytes("stdout"),
        stderr: bytes("stderr"),
    }
}
