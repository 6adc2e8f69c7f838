//! Waiting on a stack against moto (the helpers and work tree of
//! tests/it/deploy_moto.rs): Ctrl-C leaves the stack alone and `status
//! --wait` resumes; the endpoint lost mid-wait is retried; the progress
//! drawn on a real pseudo-terminal, one line per stack and addon; `update`
//! and `destroy` asking on a terminal.
//!
//! moto finishes every stack operation synchronously, except a custom
//! resource waiting for its response: these tests keep a stack in progress
//! with one (`create_waiter_function`). Not covered: CloudFormation's own
//! timing and events (src/aws/wait/tests.rs replays recorded ones).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::MotoEnv as Env;
use crate::deploy_moto::{stack_status, text, work_tree, BUCKET, CLUSTER};

/// A Lambda function in moto to stand behind a custom resource. moto cannot
/// run it (no Docker here), so a stack with a custom resource backed by it
/// stays CREATE_IN_PROGRESS, waiting for the resource's response exactly as
/// CloudFormation waits for a custom resource, until the test answers it
/// with [`answer_waiter`]. That is the one real way found to keep a moto
/// stack in progress: moto finishes everything else synchronously.
fn create_waiter_function(env: &Env) -> String {
    let role = env.aws(&[
        "iam",
        "create-role",
        "--role-name",
        "waiter",
        "--assume-role-policy-document",
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
        "--query",
        "Role.Arn",
        "--output",
        "text",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("fn.zip");
    let made = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w') as z:\n    z.writestr('index.py', 'def handler(event, context):\\n    return {}\\n')",
        ])
        .arg(&zip)
        .status()
        .unwrap();
    assert!(made.success());
    env.aws(&[
        "lambda",
        "create-function",
        "--function-name",
        "waiter",
        "--runtime",
        "python3.11",
        "--role",
        role.trim(),
        "--handler",
        "index.handler",
        "--zip-file",
        &format!("fileb://{}", zip.display()),
        "--query",
        "FunctionArn",
        "--output",
        "text",
    ])
    .trim()
    .to_string()
}

/// The hand-written work tree, its root template with one more resource: a
/// custom resource that keeps the stack in progress until it is answered.
/// moto with a bucket, a key, the waiter function, and a work tree whose
/// stack stays in progress until the test answers (see [`waiter_tree`]).
fn waiting_stack_env() -> (Env, tempfile::TempDir) {
    let env = Env::new();
    let tree = env.work_tree(&[BUCKET]);
    let kms = tree.kms.clone();
    let function = create_waiter_function(&env);
    waiter_tree(&env, tree.path(), &kms, &function);
    (env, tree.tree)
}

fn waiter_tree(env: &Env, dir: &Path, kms: &str, function_arn: &str) {
    work_tree(env, dir, kms, BUCKET, "1");
    let path = dir.join("rendered/stacks/root.json");
    let mut root: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    root["Resources"]["Waiter"] = serde_json::json!({
        "Type": "Custom::Waiter",
        "Properties": {"ServiceToken": function_arn}
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&root).unwrap()).unwrap();
}

/// Answers the custom resource as its function would: SUCCESS, PUT to the
/// response URL moto handed it. (moto picks the region from the request's
/// credential scope, so the header names us-west-2; nothing checks the signature.)
fn answer_waiter(env: &Env) {
    use std::io::{Read, Write};
    let stack_id = env
        .aws(&[
            "cloudformation",
            "describe-stacks",
            "--stack-name",
            CLUSTER,
            "--query",
            "Stacks[0].StackId",
            "--output",
            "text",
        ])
        .trim()
        .to_string();
    let body = serde_json::json!({
        "Status": "SUCCESS", "StackId": stack_id, "RequestId": "test", "LogicalResourceId": "Waiter",
        "PhysicalResourceId": "waiter", "Data": {}
    })
    .to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", env.moto.port)).unwrap();
    write!(
        s,
        "PUT /cloudformation_us-west-2/cfnresponse?stack={stack_id} HTTP/1.0\r\nHost: localhost:{}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-west-2/cloudformation/aws4_request, SignedHeaders=host, Signature=0\r\n\r\n{body}",
        env.moto.port,
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"),
        "{answer}"
    );
}

/// What the API says about the stack: describe-stacks, its events, its resources.
fn stack_snapshot(env: &Env) -> (String, String, String) {
    (
        env.aws(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]),
        env.aws(&["cloudformation", "describe-stack-events", "--stack-name", CLUSTER]),
        env.aws(&["cloudformation", "list-stack-resources", "--stack-name", CLUSTER]),
    )
}

/// A running kube-aws whose stderr (or, under a terminal, whole output) is
/// read as it comes.
struct Running {
    child: std::process::Child,
    chunks: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

impl Running {
    fn spawn(mut cmd: Command, read_stdout: bool) -> Running {
        use std::io::Read;
        // stdin is a pipe that stays open: keys for tests/support/pty_run.py --keys.
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut pipe: Box<dyn Read + Send> = if read_stdout {
            Box::new(child.stdout.take().unwrap())
        } else {
            Box::new(child.stderr.take().unwrap())
        };
        let (tx, chunks) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            chunks,
            seen: Vec::new(),
        }
    }

    /// Waits until the output read so far contains `needle`.
    fn wait_for(&mut self, needle: &str, limit: std::time::Duration) {
        let start = std::time::Instant::now();
        while !String::from_utf8_lossy(&self.seen).contains(needle) {
            let left = limit
                .checked_sub(start.elapsed())
                .unwrap_or_else(|| panic!("no {needle:?} after {limit:?}: {}", String::from_utf8_lossy(&self.seen)));
            if let Ok(c) = self.chunks.recv_timeout(left) {
                self.seen.extend(c);
            }
        }
    }

    /// Returns the moment the process exited (std's `Child` keeps the status
    /// for `finish`), panicking after `limit`: apart from the time `finish`
    /// then takes to drain the pipes, which a loaded machine can stretch.
    fn exited(&mut self, limit: std::time::Duration) -> std::time::Instant {
        let start = std::time::Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < limit, "still running after {limit:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::time::Instant::now()
    }

    /// Waits for the exit (killing it after `limit`); returns the exit code,
    /// everything read, and the other stream.
    fn finish(mut self, limit: std::time::Duration) -> (Option<i32>, String, String) {
        use std::io::Read;
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!("still running after {limit:?}: {}", String::from_utf8_lossy(&self.seen));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        while let Ok(c) = self.chunks.recv_timeout(std::time::Duration::from_secs(5)) {
            self.seen.extend(c);
        }
        let mut other = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut other);
        } else if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut other);
        }
        (status.code(), String::from_utf8_lossy(&self.seen).to_string(), other)
    }

    fn interrupt(&self) {
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        assert_eq!(rc, 0, "kill(SIGINT) failed");
    }
}

impl Drop for Running {
    /// A test that fails half-way leaves no kube-aws behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Ctrl-C while `up --wait` waits: exit 130, the stack untouched (the same
/// status, events and resources through the API), and the message says how to
/// resume. Then `status --wait` resumes and follows the stack to
/// CREATE_COMPLETE once the custom resource is answered.
///
/// The stack is kept in progress by a custom resource nobody answers (see
/// [`create_waiter_function`]); the wait sees it through the real API. Not
/// covered: Ctrl-C before the wait starts (the default SIGINT action ends the
/// process; nothing has been created yet but the publish may be half done,
/// which is harmless by design) and a stack in UPDATE or DELETE progress.
#[test]
fn ctrl_c_leaves_the_stack_alone_and_status_wait_resumes() {
    let (env, tree) = waiting_stack_env();
    let dir = tree.path();

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
    env.apply(&mut cmd);
    cmd.arg("--dir")
        .arg(dir)
        .args(["up", "--use-rendered", "--wait", "--timeout", "5m"]);
    let mut up = Running::spawn(cmd, false);
    // The first progress line: the wait has started.
    up.wait_for("stack root: CREATE_IN_PROGRESS\n", std::time::Duration::from_secs(60));
    let before = stack_snapshot(&env);
    assert!(before.0.contains("\"CREATE_IN_PROGRESS\""), "{}", before.0);
    let sent = std::time::Instant::now();
    up.interrupt();
    // The time to exit, not to exit and have the pipes drained (which a
    // loaded machine can stretch: seen once in a full run).
    let took = up.exited(std::time::Duration::from_secs(30)) - sent;
    let (code, stderr, stdout) = up.finish(std::time::Duration::from_secs(30));
    assert_eq!(code, Some(130), "{stdout}{stderr}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "took {took:?} to stop after SIGINT"
    );
    assert!(
        stderr.contains("error: stopped waiting; the stack was left as it is: run `kube-aws status --wait` to resume"),
        "{stderr}"
    );
    // Not a terminal: plain lines, no cursor movement or colour.
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    assert_eq!(stack_snapshot(&env), before, "the stack changed after Ctrl-C");

    // status --wait picks it up again and follows it to the end.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
    env.apply(&mut cmd);
    cmd.arg("--dir").arg(dir).args(["status", "--wait", "--timeout", "5m"]);
    let mut st = Running::spawn(cmd, false);
    st.wait_for("stack root: CREATE_IN_PROGRESS\n", std::time::Duration::from_secs(60));
    answer_waiter(&env);
    let (code, stderr, stdout) = st.finish(std::time::Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("stack root: CREATE_COMPLETE\n"), "{stderr}");
    assert!(stdout.starts_with("stack demo: CREATE_COMPLETE\n"), "{stdout}");
    assert_eq!(stack_status(&env).as_deref(), Some("CREATE_COMPLETE"));
}

/// What a terminal `width` columns wide shows after receiving `bytes`: enough
/// of a VT100 for indicatif (text with deferred autowrap, CR, LF, cursor up and
/// down, erase in line and in display; colours and modes are skipped). The
/// screen grows downward instead of scrolling, so nothing is lost.
fn terminal_screen(bytes: &[u8], width: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<Vec<char>> = vec![Vec::new()];
    let (mut row, mut col) = (0usize, 0usize);
    let mut chars = text.chars().peekable();
    let line = |lines: &mut Vec<Vec<char>>, row: usize| {
        while lines.len() <= row {
            lines.push(Vec::new());
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.peek() != Some(&'[') {
                    chars.next();
                    continue;
                }
                chars.next();
                let mut params = String::new();
                let mut fin = ' ';
                for p in chars.by_ref() {
                    if ('@'..='~').contains(&p) {
                        fin = p;
                        break;
                    }
                    params.push(p);
                }
                let n: usize = params.trim_start_matches('?').parse().unwrap_or(0);
                match fin {
                    'A' => row = row.saturating_sub(n.max(1)),
                    'B' => row += n.max(1),
                    'G' => col = n.max(1) - 1,
                    'K' => {
                        line(&mut lines, row);
                        let l = &mut lines[row];
                        let c = col.min(width);
                        match n {
                            0 => l.truncate(c),
                            1 => l.iter_mut().take(c + 1).for_each(|x| *x = ' '),
                            _ => l.clear(),
                        }
                    }
                    'J' if n == 0 => {
                        line(&mut lines, row);
                        lines.truncate(row + 1);
                        lines[row].truncate(col.min(width));
                    }
                    _ => {}
                }
                line(&mut lines, row);
            }
            '\r' => col = 0,
            '\n' => {
                row += 1;
                line(&mut lines, row);
            }
            c => {
                if col >= width {
                    row += 1;
                    col = 0;
                }
                line(&mut lines, row);
                let l = &mut lines[row];
                while l.len() <= col {
                    l.push(' ');
                }
                l[col] = c;
                col += 1;
            }
        }
    }
    lines
        .into_iter()
        .map(|l| l.into_iter().collect::<String>().trim_end().to_string())
        .collect()
}

#[test]
fn terminal_screen_follows_indicatif_redraws() {
    let raw = b"a\r\x1b[2Kab\r\n\x1b[1A\r\x1b[2Kxy\r\nzz";
    assert_eq!(terminal_screen(raw, 10), ["xy", "zz"]);
    // Deferred wrap: a full line, then CR, stays on its line.
    assert_eq!(terminal_screen(b"0123\rA\nB", 4), ["A123", " B"]);
    assert_eq!(terminal_screen(b"0123B", 4), ["0123", "B"]);
}

/// On a terminal, `up --wait` draws an indicatif multi-progress: one line per
/// stack (the root and each nested stack) and per addon, redrawn in place with
/// a spinner while the stack is in progress, and left on screen at the end.
/// Without a terminal the same command prints plain `stack X: STATUS` lines
/// (asserted in the other tests). The terminal is a real pseudo-terminal
/// (tests/support/pty_run.py); what it shows is worked out from the bytes by
/// [`terminal_screen`]. Not covered: terminal resizing, colours (NO_COLOR is
/// set), and an addon line changing phase (no addon reports on moto).
#[test]
fn tty_draws_one_progress_line_per_stack_and_addon() {
    let (env, tree) = waiting_stack_env();
    let dir = tree.path();

    const WIDTH: usize = 100;
    let mut cmd = Command::new("python3");
    env.apply(&mut cmd);
    cmd.env("TERM", "xterm-256color")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pty_run.py"))
        .args([&WIDTH.to_string(), "40", "--", env!("CARGO_BIN_EXE_kube-aws"), "--dir"])
        .arg(dir)
        .args(["up", "--use-rendered", "--wait", "--timeout", "5m"]);
    let mut up = Running::spawn(cmd, true);
    up.wait_for("CREATE_IN_PROGRESS", std::time::Duration::from_secs(60));
    // Let the spinner turn a few times while the stack is in progress.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    answer_waiter(&env);
    let (code, raw, stderr) = up.finish(std::time::Duration::from_secs(60));
    assert_eq!(code, Some(0), "{raw}{stderr}");

    // Drawn in place: cursor movement and line erasing, never a plain line.
    assert!(raw.contains("\x1b[1A") && raw.contains("\x1b[2K"), "{raw:?}");
    assert!(!raw.contains("stack root: "), "{raw:?}");
    // The spinner turned while waiting (indicatif's default frames).
    let frames: std::collections::BTreeSet<char> = raw.chars().filter(|c| "⠁⠂⠄⡀⢀⠠⠐⠈".contains(*c)).collect();
    assert!(frames.len() >= 3, "spinner frames seen: {frames:?}\n{raw:?}");

    let screen = terminal_screen(raw.as_bytes(), WIDTH);
    let shown = screen.join("\n");
    // The progress lines as indicatif lays them out: a spinner column, a space,
    // then `{prefix:<28} {msg}`. Exactly one per stack and per addon, together,
    // in order, each with its last status.
    let bars: Vec<(usize, String, String)> = screen
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let cs: Vec<char> = l.chars().collect();
            if cs.len() < 32 || cs[1] != ' ' {
                return None;
            }
            let prefix: String = cs[2..30].iter().collect();
            let kind = prefix.split(' ').next()?;
            matches!(kind, "stack" | "addon").then(|| (i, prefix.trim_end().to_string(), cs[31..].iter().collect()))
        })
        .collect();
    let drawn: Vec<(&str, &str)> = bars.iter().map(|(_, p, m)| (p.as_str(), m.as_str())).collect();
    assert_eq!(
        drawn,
        [
            ("stack root", "CREATE_COMPLETE"),
            ("stack Network", "CREATE_COMPLETE"),
            ("stack ControlPlane", "CREATE_COMPLETE"),
            ("addon metrics-server", "pending"),
        ],
        "{shown}"
    );
    assert!(bars.windows(2).all(|w| w[1].0 == w[0].0 + 1), "{shown}");
    // The closing message is on a line of its own, after them.
    assert!(
        screen
            .iter()
            .any(|l| l.starts_with("stack \"demo\" is CREATE_COMPLETE; 0 of 1 addon(s) report ready")),
        "{shown}"
    );
    assert_eq!(stack_status(&env).as_deref(), Some("CREATE_COMPLETE"));
}

/// A TCP proxy in front of moto that the test can take down (every open
/// connection cut; each new one closed at once, unanswered, and counted) and
/// bring back: the AWS endpoint dying and coming back, as kube-aws sees it.
struct FlakyProxy {
    port: u16,
    state: std::sync::Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    up: std::sync::atomic::AtomicBool,
    stop: std::sync::atomic::AtomicBool,
    /// Connections proxied, and connections dropped while down.
    proxied: std::sync::atomic::AtomicUsize,
    dropped: std::sync::atomic::AtomicUsize,
    conns: std::sync::Mutex<Vec<std::net::TcpStream>>,
}

impl FlakyProxy {
    fn start(target: u16) -> FlakyProxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state: std::sync::Arc<ProxyState> = Default::default();
        state.up.store(true, Ordering::SeqCst);
        let shared = state.clone();
        std::thread::spawn(move || {
            let state = shared;
            while !state.stop.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                };
                if !state.up.load(Ordering::SeqCst) {
                    state.dropped.fetch_add(1, Ordering::SeqCst);
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                client.set_nonblocking(false).unwrap();
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                state.proxied.fetch_add(1, Ordering::SeqCst);
                let mut conns = state.conns.lock().unwrap();
                conns.push(client.try_clone().unwrap());
                conns.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        FlakyProxy { port, state }
    }

    fn url(&self) -> String {
        format!("http://localhost:{}", self.port)
    }

    fn count(&self, c: &std::sync::atomic::AtomicUsize) -> usize {
        c.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn take_down(&self) {
        self.state.up.store(false, std::sync::atomic::Ordering::SeqCst);
        for c in self.state.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    fn bring_up(&self) {
        self.state.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for FlakyProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.take_down();
    }
}

/// The endpoint dies while `up --wait` waits: the loop retries with backoff,
/// quietly, and when the endpoint comes back it carries on and sees the stack
/// finish (it finished meanwhile). Not covered here: the endpoint staying
/// away until the loop gives up (about three minutes of backoff; the unit
/// test `endpoint_dying_mid_wait_gives_up_after_backoff` in src/aws/wait/watch.rs
/// covers it) and throttling (moto does not throttle).
#[test]
fn endpoint_lost_mid_wait_is_retried_and_the_wait_carries_on() {
    let (env, tree) = waiting_stack_env();
    let dir = tree.path();
    let proxy = FlakyProxy::start(env.moto.port);

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
    env.apply(&mut cmd);
    cmd.env("AWS_ENDPOINT_URL", proxy.url()).arg("--dir").arg(dir).args([
        "up",
        "--use-rendered",
        "--wait",
        "--timeout",
        "5m",
    ]);
    let mut up = Running::spawn(cmd, false);
    up.wait_for("stack root: CREATE_IN_PROGRESS\n", std::time::Duration::from_secs(60));
    proxy.take_down();
    // Until a few of its calls have died unanswered, then the stack finishes
    // while kube-aws cannot see it.
    let start = std::time::Instant::now();
    while proxy.count(&proxy.state.dropped) < 3 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no call while down"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    answer_waiter(&env);
    assert!(up.child.try_wait().unwrap().is_none(), "gave up too early");
    let proxied = proxy.count(&proxy.state.proxied);
    proxy.bring_up();
    let (code, stderr, stdout) = up.finish(std::time::Duration::from_secs(90));
    assert!(
        proxy.count(&proxy.state.proxied) > proxied,
        "kube-aws never came back through the proxy"
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("stack root: CREATE_COMPLETE\n"), "{stderr}");
    assert!(stdout.contains("is CREATE_COMPLETE"), "{stdout}");
    assert!(!stderr.contains("error"), "{stderr}");
}

/// Runs kube-aws on a pseudo-terminal, typing `typed`; returns the exit code
/// and what the terminal shows.
fn kube_aws_on_tty(env: &Env, dir: &Path, args: &[&str], typed: &str) -> (Option<i32>, String) {
    let mut cmd = Command::new("python3");
    env.apply(&mut cmd);
    cmd.env("TERM", "xterm-256color")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pty_run.py"))
        .args([
            "100",
            "40",
            "--type",
            typed,
            "--",
            env!("CARGO_BIN_EXE_kube-aws"),
            "--dir",
        ])
        .arg(dir)
        .args(args)
        .stdin(Stdio::null());
    let out = cmd.output().unwrap();
    let screen = terminal_screen(&out.stdout, 100).join("\n");
    (out.status.code(), screen)
}

/// On a terminal, `update` and `destroy` ask before they act: "n" leaves the
/// stack as it was (and `update` deletes its change set), "y" goes ahead.
/// Not covered: an answer typed slowly or never (the prompt blocks; that is
/// the point of asking).
#[test]
fn update_and_destroy_ask_on_a_terminal() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    work_tree(&env, dir, &kms, BUCKET, "1");
    let up = env.kube_aws(dir, &["up", "--use-rendered"]);
    assert!(up.status.success(), "{}", text(&up));
    work_tree(&env, dir, &kms, BUCKET, "2");
    let change_sets = || env.aws_json(&["cloudformation", "list-change-sets", "--stack-name", CLUSTER]);

    let (code, screen) = kube_aws_on_tty(&env, dir, &["update", "--use-rendered"], "n\n");
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("  ~ Network (AWS::CloudFormation::Stack)"), "{screen}");
    assert!(screen.contains("apply these changes? [y/N]"), "{screen}");
    assert!(screen.contains("not applied; the stack is unchanged"), "{screen}");
    assert_eq!(stack_status(&env).as_deref(), Some("CREATE_COMPLETE"));
    assert_eq!(
        change_sets()["Summaries"],
        serde_json::json!([]),
        "the change set was left behind"
    );

    let (code, screen) = kube_aws_on_tty(&env, dir, &["update", "--use-rendered", "--wait"], "y\n");
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("stack \"demo\" is UPDATE_COMPLETE"), "{screen}");
    assert_eq!(stack_status(&env).as_deref(), Some("UPDATE_COMPLETE"));

    let (code, screen) = kube_aws_on_tty(&env, dir, &["destroy"], "n\n");
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("delete stack \"demo\" (UPDATE_COMPLETE) and every resource in it? [y/N]"),
        "{screen}"
    );
    assert!(screen.contains("not deleted"), "{screen}");
    assert_eq!(stack_status(&env).as_deref(), Some("UPDATE_COMPLETE"));

    let (code, screen) = kube_aws_on_tty(&env, dir, &["destroy", "--wait"], "y\n");
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("stack \"demo\" is deleted"), "{screen}");
    assert_eq!(stack_status(&env), None);
}

/// Ctrl-C typed on a terminal while `up --wait` draws its progress: the
/// terminal sends SIGINT, kube-aws stops waiting with exit 130, the progress
/// lines stay on screen as they were, the message saying how to resume is on
/// a line of its own, and the stack is untouched.
#[test]
fn ctrl_c_typed_on_a_terminal_stops_the_wait() {
    use std::io::Write;
    let (env, tree) = waiting_stack_env();
    let dir = tree.path();

    const WIDTH: usize = 160;
    let mut cmd = Command::new("python3");
    env.apply(&mut cmd);
    cmd.env("TERM", "xterm-256color")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pty_run.py"))
        .args([
            &WIDTH.to_string(),
            "40",
            "--keys",
            "--",
            env!("CARGO_BIN_EXE_kube-aws"),
            "--dir",
        ])
        .arg(dir)
        .args(["up", "--use-rendered", "--wait", "--timeout", "5m"]);
    let mut up = Running::spawn(cmd, true);
    up.wait_for("CREATE_IN_PROGRESS", std::time::Duration::from_secs(60));
    let before = stack_snapshot(&env);
    let mut keys = up.child.stdin.take().unwrap();
    keys.write_all(b"\x03").unwrap();
    keys.flush().unwrap();
    let (code, raw, stderr) = up.finish(std::time::Duration::from_secs(30));
    drop(keys);
    assert_eq!(code, Some(130), "{raw}{stderr}");
    let screen = terminal_screen(raw.as_bytes(), WIDTH);
    let shown = screen.join("\n");
    assert!(
        screen.iter().any(|l| l.trim_start_matches("^C")
            == "error: stopped waiting; the stack was left as it is: run `kube-aws status --wait` to resume"),
        "{shown}"
    );
    assert!(
        screen.iter().any(|l| l
            .get(2..)
            .is_some_and(|r| r.starts_with("stack root ") && r.ends_with(" CREATE_IN_PROGRESS"))),
        "{shown}"
    );
    assert_eq!(stack_snapshot(&env), before, "the stack changed after Ctrl-C");
}
