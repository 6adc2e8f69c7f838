//! The aws CLI for the tests, loaded once per test process
//! (tests/support/aws_cli_server.py, which forks a loaded awscli per call)
//! instead of a new `aws` process per call: the tests' own calls
//! ([`output`]) and, through a drop-in `aws` client ([`shim`]), the node
//! program's when a test runs it on the host. Invariant: a call's arguments
//! and environment are exactly the caller's (for [`output`], the
//! `Command`'s: what it sets is its whole environment, and every caller
//! starts from `MotoEnv::apply`, which clears the rest), and its exit
//! status, stdout and stderr come back as from a process.
//!
//! Why: a new `aws` process imports awscli and botocore and loads its
//! service's model each time, 0.3 to 0.7 s of CPU per call; a warm `make
//! test` made about 3,500 calls, 1,200 s of CPU in a run bound by its 2
//! cores (docs/testing.md, "Where make test's CPU goes"). The server ends
//! with the test process (its stdin closes) and removes its directory.
//!
//! Not covered by this path: a call that reads stdin (the client runs the
//! real `aws` for an argument `-`), and the nodes' own calls on the
//! real-node bed, which run the real `aws` (or botocore) on the node.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use base64::Engine;

struct Server {
    dir: PathBuf,
    /// Held for the process's life: the server ends when its stdin closes,
    /// with this process.
    _child: Mutex<(Child, ChildStdin)>,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/aws_cli_server.py");
        let dir = std::env::temp_dir().join(format!("kube-aws-aws-cli-{}", std::process::id()));
        let mut child = Command::new(super::tool("python3"))
            .arg(&script)
            .arg(&dir)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", script.display()));
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(
            ready.trim(),
            "ready",
            "{} did not start (its stderr is above)",
            script.display()
        );
        let stdin = child.stdin.take().unwrap();
        Server {
            dir,
            _child: Mutex::new((child, stdin)),
        }
    })
}

/// A drop-in `aws` (a small client of the loaded one): for a harness's
/// `REAL_AWS`, or first on a child's PATH as [`shim_dir`].
pub fn shim() -> PathBuf {
    server().dir.join("bin/aws")
}

/// The directory holding [`shim`], to put first on a PATH.
pub fn shim_dir() -> PathBuf {
    server().dir.join("bin")
}

/// Runs `cmd` (the aws CLI with its arguments and environment) through the
/// loaded awscli; panics when the server itself fails (a call that fails
/// is an `Output` with its status, as from a process).
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
    let socket = server().dir.join("socket");
    let mut conn =
        UnixStream::connect(&socket).unwrap_or_else(|e| panic!("the aws CLI server at {}: {e}", socket.display()));
    writeln!(conn, "{request}").unwrap();
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line).unwrap();
    let answer: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("the aws CLI server said {line:?} to `aws {args:?}`: {e} (its stderr is above)"));
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
