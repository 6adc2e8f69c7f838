//! Shared test helpers: start real servers (moto, a static HTTP chart
//! repository) on a free 127.0.0.1 port, wait until each answers, and kill each
//! by its PID when the handle drops, also when a test fails.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A command's stdout then stderr, as text (for assertions and their messages).
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every file under `dir`, recursively, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The directory holding the pinned Python tools (`make tools` creates it).
pub fn tools_bin() -> PathBuf {
    std::env::var_os("KUBE_AWS_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-tools/bin"))
}

/// A tool from the venv, or a clear panic saying how to install it.
pub fn tool(name: &str) -> PathBuf {
    let p = tools_bin().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `make tools` (scripts/install-tools.sh)",
        p.display()
    );
    p
}

/// `../shared/data`, or None with a message saying how to point at it.
pub fn shared_data() -> Option<PathBuf> {
    let p = std::env::var_os("KUBE_AWS_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!(
            "shared data not found at {}: set KUBE_AWS_SHARED_DATA; skipping",
            p.display()
        );
        None
    }
}

/// A free TCP port on 127.0.0.1, never handed out before in this process:
/// the kernel may give a port back to `bind(0)` once its listener closed, and
/// two servers of one test binary then raced for it (CI, 2026-12-03: a moto
/// that lost the race exited unseen, its test used the winner's moto, and the
/// winner's test then found its bucket taken and its server gone).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The inodes of the sockets listening on TCP `port` (/proc/net/tcp and tcp6:
/// state 0A is LISTEN; the inode is the tenth column).
fn listening_inodes(port: u16) -> Vec<String> {
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| {
            t.lines()
                .skip(1)
                .filter_map(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    (cols.len() > 9 && cols[1].ends_with(&local) && cols[3] == "0A").then(|| cols[9].to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `pid` and its descendants (/proc/PID/task/TID/children).
fn process_tree(pid: u32) -> Vec<u32> {
    let (mut all, mut next) = (Vec::new(), vec![pid]);
    while let Some(p) = next.pop() {
        all.push(p);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            next.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    all
}

/// Does a process of `pid`'s tree hold a socket listening on `port`? A server
/// that answers on its port may be another one that took the port first.
fn listens_on(pid: u32, port: u16) -> bool {
    let inodes: Vec<String> = listening_inodes(port)
        .into_iter()
        .map(|i| format!("socket:[{i}]"))
        .collect();
    process_tree(pid).into_iter().any(|p| {
        std::fs::read_dir(format!("/proc/{p}/fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
            })
        })
    })
}

/// Does an HTTP server answer on `port`? (A bare TCP accept can come before
/// the application is ready.)
fn http_answers(host: &str, port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = TcpStream::connect((host, port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(s, "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 5];
    s.read_exact(&mut head).is_ok() && &head == b"HTTP/"
}

/// A server process killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
    /// The address it listens on (127.0.0.1 unless started with `start_on`).
    pub host: String,
}

impl Server {
    /// Starts `cmd` (which must listen on `port`) and waits until the port accepts.
    pub fn start(cmd: Command, port: u16) -> Server {
        Server::start_on(cmd, "127.0.0.1", port)
    }

    /// Starts `cmd` (which must listen on `host`:`port`) and waits until it answers.
    pub fn start_on(cmd: Command, host: &str, port: u16) -> Server {
        let mut server = Server::spawn(cmd, host, port);
        // moto's server imports every service before it listens: seconds
        // alone, but over 30 s once in a full run (deploy_moto, 2026-12-02)
        // with two real-node tests on the other thread of a 2-core machine.
        server
            .wait_ready(Duration::from_secs(90))
            .unwrap_or_else(|e| panic!("{e}"));
        server
    }

    fn spawn(mut cmd: Command, host: &str, port: u16) -> Server {
        // KUBE_AWS_TEST_SERVER_LOG=FILE keeps the servers' output, for debugging.
        let log = std::env::var_os("KUBE_AWS_TEST_SERVER_LOG")
            .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
        match log.and_then(|f| Some((f.try_clone().ok()?, f))) {
            Some((out, err)) => cmd.stdout(out).stderr(err),
            None => cmd.stdout(Stdio::null()).stderr(Stdio::null()),
        };
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Server {
            child,
            port,
            host: host.to_string(),
        }
    }

    /// Starts the server `cmd_for(port)` builds on a free port of `host`,
    /// and on another one when it exits before it answers: a port free when
    /// [`free_port`] probed it (on 127.0.0.1) can be taken on `host` before
    /// the server binds it. In a run on 2026-12-04, with two real-node tests
    /// and a release build beside them, a node's IMDS emulator exited with
    /// status 1 before it answered, and the test with it.
    pub fn start_on_free_port(host: &str, cmd_for: impl Fn(u16) -> Command) -> Server {
        let mut tried = Vec::new();
        for _ in 0..5 {
            let port = free_port();
            let mut server = Server::spawn(cmd_for(port), host, port);
            match server.wait_ready(Duration::from_secs(90)) {
                Ok(()) => return server,
                Err(e) => tried.push(e),
            }
        }
        panic!("no server started on five free ports: {}", tried.join("; "))
    }

    fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("server on port {} exited early: {status}", self.port));
            }
            if http_answers(&self.host, self.port) {
                // Only our own server counts; another one on the port is a
                // collision, which the wait turns into our server's exit.
                if listens_on(self.child.id(), self.port) {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server on port {} not ready after {limit:?}", self.port);
    }

    /// `http://localhost:PORT` (moto wants `localhost`, not an IP, in S3 URLs).
    /// On another address than 127.0.0.1, `http://HOST:PORT` (moto takes an IP
    /// host as path-style S3, as it does `localhost`).
    pub fn url(&self) -> String {
        if self.host == "127.0.0.1" {
            format!("http://localhost:{}", self.port)
        } else {
            format!("http://{}:{}", self.host, self.port)
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// moto server, all services, on a free port, started through
/// tests/support/moto_server.py: moto's own server with narrow patches for
/// the moto bugs our rendered templates hit (each one documented there).
pub fn start_moto() -> Server {
    start_moto_on("127.0.0.1")
}

/// moto server as `start_moto`, listening on `host` (the real-node bed's
/// bridge address, which its nodes reach).
pub fn start_moto_on(host: &str) -> Server {
    start_moto_with(host, false)
}

/// moto server as `start_moto_on`; with `signals`, its groups' CreationPolicy
/// waits for SignalResource (tests/support/moto_signals.py).
fn start_moto_with(host: &str, signals: bool) -> Server {
    Server::start_on_free_port(host, |port| {
        let mut cmd = Command::new(tool("python"));
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/moto_server.py"))
            .args(["-H", host, "-p", &port.to_string()]);
        if signals {
            cmd.env("KUBE_AWS_MOTO_SIGNALS", "1");
        }
        cmd
    })
}

/// A static HTTP server over `dir` (a chart repository), on a free port.
pub fn start_http(dir: &Path) -> Server {
    Server::start_on_free_port("127.0.0.1", |port| {
        let mut cmd = Command::new("python3");
        cmd.args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(dir);
        cmd
    })
}

/// The bytes a `write_files` entry writes, decoded as cloud-init decodes
/// the encodings kube-aws renders (`b64`, `gz+b64`:
/// cloudinit/config/cc_write_files.py `canonicalize_extraction`).
pub fn write_file_content(entry: &serde_yaml::Value) -> Vec<u8> {
    use base64::Engine;
    use std::io::Read;
    let content = entry["content"].as_str().unwrap_or_default();
    let b64 = || {
        base64::engine::general_purpose::STANDARD
            .decode(content.trim())
            .unwrap()
    };
    match entry["encoding"].as_str() {
        None => content.as_bytes().to_vec(),
        Some("b64") => b64(),
        Some("gz+b64") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&b64()[..]).read_to_end(&mut out).unwrap();
            out
        }
        Some(other) => panic!("write_files encoding {other:?} is not one kube-aws renders"),
    }
}

/// Writes every `write_files` entry of a cloud-config under `root`, with its
/// mode, as cloud-init would (encoded entries decoded).
pub fn write_cloud_config_files(cloud_config: &str, root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let doc: serde_yaml::Value = serde_yaml::from_str(cloud_config).unwrap();
    for f in doc["write_files"].as_sequence().unwrap() {
        let path = root.join(f["path"].as_str().unwrap().trim_start_matches('/'));
        let bytes = write_file_content(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let mode = u32::from_str_radix(f["permissions"].as_str().unwrap(), 8).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// A moto server and the environment every command of a test runs in: fake
/// credentials, the endpoint, a private HOME and cache, no colours, and the
/// tools venv first on PATH (node scripts call `aws`).
pub struct MotoEnv {
    pub moto: Server,
    pub home: tempfile::TempDir,
    /// The access key pair commands run with: moto's any-key `testing` until
    /// a test switches IAM enforcement on and acts as a user it made
    /// ([`MotoEnv::act_as`]).
    keys: std::sync::Mutex<(String, String)>,
}

impl MotoEnv {
    pub fn new() -> MotoEnv {
        MotoEnv::with(start_moto())
    }

    /// moto listening on `host` instead of 127.0.0.1.
    pub fn on(host: &str) -> MotoEnv {
        MotoEnv::with(start_moto_on(host))
    }

    /// moto whose groups' CreationPolicy waits for their signals
    /// (tests/support/moto_signals.py): stacks stay CREATE_IN_PROGRESS.
    pub fn with_signals() -> MotoEnv {
        MotoEnv::with(start_moto_with("127.0.0.1", true))
    }

    fn with(moto: Server) -> MotoEnv {
        MotoEnv {
            moto,
            home: tempfile::tempdir().unwrap(),
            keys: std::sync::Mutex::new(("testing".into(), "testing".into())),
        }
    }

    /// Every later command of this environment runs as the IAM user whose
    /// access key this is (once enforcement is on, `testing` is refused).
    pub fn act_as(&self, key: &str, secret: &str) {
        *self.keys.lock().unwrap() = (key.into(), secret.into());
    }

    pub fn apply(&self, cmd: &mut Command) {
        let keys = self.keys.lock().unwrap().clone();
        // The loaded aws CLI first ([`aws_cli::shim`]): a node script or a
        // driver run on the host calls `aws` by name.
        let path = format!(
            "{}:{}:{}",
            aws_cli::shim_dir().display(),
            tools_bin().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.env_clear()
            .env("PATH", path)
            .env("HOME", self.home.path())
            .env("XDG_CACHE_HOME", self.home.path().join("cache"))
            .env("AWS_ACCESS_KEY_ID", &keys.0)
            .env("AWS_SECRET_ACCESS_KEY", &keys.1)
            .env("AWS_DEFAULT_REGION", "us-west-2")
            .env("AWS_ENDPOINT_URL", self.moto.url())
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("NO_COLOR", "1");
    }

    /// The real aws CLI against moto (loaded once: [`aws_cli`]); panics
    /// with its stderr on failure.
    pub fn aws(&self, args: &[&str]) -> String {
        let mut cmd = Command::new(tool("aws"));
        self.apply(&mut cmd);
        cmd.args(args);
        let out = aws_cli::output(&cmd);
        assert!(
            out.status.success(),
            "aws {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A new moto KMS key's ARN.
    pub fn create_kms_key(&self) -> String {
        self.aws(&["kms", "create-key", "--query", "KeyMetadata.Arn", "--output", "text"])
            .trim()
            .to_string()
    }

    /// A new moto KMS key's ARN, in `region`.
    pub fn create_kms_key_in(&self, region: &str) -> String {
        self.aws(&[
            "kms",
            "create-key",
            "--region",
            region,
            "--query",
            "KeyMetadata.Arn",
            "--output",
            "text",
        ])
        .trim()
        .to_string()
    }

    /// `plaintext` encrypted as a secret bundle entry is: under `key` (in
    /// `region`), bound to {kube-aws:cluster, kube-aws:secret}; base64.
    pub fn encrypt_entry(&self, region: &str, key: &str, cluster: &str, name: &str, plaintext: &[u8]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, plaintext).unwrap();
        self.aws(&[
            "kms",
            "encrypt",
            "--region",
            region,
            "--key-id",
            key,
            "--plaintext",
            &format!("fileb://{}", plain.display()),
            "--encryption-context",
            &format!(r#"{{"kube-aws:cluster":"{cluster}","kube-aws:secret":"{name}"}}"#),
            "--query",
            "CiphertextBlob",
            "--output",
            "text",
        ])
        .trim()
        .to_string()
    }

    /// Setup calls in one process (tests/support/moto_setup.py: boto3, the
    /// library under the aws CLI, instead of one CLI start per call): the
    /// `request` that script reads; what it answers.
    pub fn setup(&self, request: serde_json::Value) -> serde_json::Value {
        use std::io::Write;
        let mut cmd = Command::new(tool("python"));
        self.apply(&mut cmd);
        let mut child = cmd
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/moto_setup.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(request.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "moto_setup.py {request}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// [`MotoEnv::encrypt_entry`] for many entries, in one process: the
    /// ciphertexts, in the order of `entries` (name, plaintext).
    pub fn encrypt_entries(&self, region: &str, key: &str, cluster: &str, entries: &[(&str, &[u8])]) -> Vec<String> {
        use base64::Engine;
        let entries_json: Vec<serde_json::Value> = entries
            .iter()
            .map(|(name, plain)| {
                serde_json::json!({
                    "name": name,
                    "plaintext": base64::engine::general_purpose::STANDARD.encode(plain),
                })
            })
            .collect();
        let out = self.setup(serde_json::json!({
            "region": region,
            "encrypt": {"keyId": key, "cluster": cluster, "entries": entries_json},
        }));
        let cts: Vec<String> = out["ciphertexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        assert_eq!(cts.len(), entries.len(), "one ciphertext per entry: {out}");
        cts
    }

    /// The buckets (`aws s3 mb` each, in the default region) and a new KMS
    /// key's ARN, made in one process.
    pub fn bucket_and_key(&self, buckets: &[&str]) -> String {
        let out = self.setup(serde_json::json!({"buckets": buckets, "createKey": true}));
        out["keyArn"].as_str().unwrap().to_string()
    }

    /// What `up` on moto starts from: the buckets (`aws s3 mb` each, in the
    /// default region), a new KMS key and an empty work tree, the calls
    /// made in one process.
    pub fn work_tree(&self, buckets: &[&str]) -> MotoTree {
        MotoTree {
            kms: self.bucket_and_key(buckets),
            tree: tempfile::tempdir().unwrap(),
        }
    }

    pub fn aws_json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["--output", "json"]);
        serde_json::from_str(&self.aws(&a)).unwrap()
    }

    /// `kube-aws --dir DIR ARGS...`, with no standard input.
    pub fn kube_aws(&self, dir: &Path, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
        self.apply(&mut cmd);
        cmd.arg("--dir").arg(dir).args(args).stdin(Stdio::null());
        cmd.output().unwrap()
    }
}

/// A work tree for `up` on moto ([`MotoEnv::work_tree`]): the bucket is
/// made and `kms` is a new key's ARN.
pub struct MotoTree {
    pub tree: tempfile::TempDir,
    pub kms: String,
}

impl MotoTree {
    pub fn path(&self) -> &Path {
        self.tree.path()
    }
}

/// `kube-aws validate` on a temporary work tree of `cluster.yaml` = `yaml`
/// plus `files` (relative paths): its exit code and stderr, which must not
/// hold a panic.
pub fn validate_work_tree(yaml: &str, files: &[(&str, &str)]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.yaml"), yaml).unwrap();
    for (name, body) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    let out = assert_cmd::Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .arg("validate")
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

pub mod aws_cli;
pub mod charts;
pub mod iam;
pub mod installer_bed;
pub mod nodebed;
pub mod testbed;

/// Two servers on one port: the second does not take the first's answers
/// for its own (it panics when it exits on the taken port), and free_port
/// never hands a port out twice.
#[test]
fn a_server_that_lost_its_port_is_not_taken_for_ready() {
    let dir = tempfile::tempdir().unwrap();
    let first = start_http(dir.path());
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "http.server", "--bind", "127.0.0.1", &first.port.to_string()]);
    let second = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Server::start(cmd, first.port)));
    let why = second.err().and_then(|e| e.downcast_ref::<String>().cloned());
    assert!(
        why.as_deref().is_some_and(|w| w.contains("exited early")),
        "the second server was taken for ready: {why:?}"
    );
    assert!(http_answers("127.0.0.1", first.port), "the first server still answers");
    let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
    let mut unique = ports.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ports.len(), "a port handed out twice");
}

/// A server that exits before it answers (its port taken between the probe
/// and its bind) is started again on another free port.
#[test]
fn a_server_whose_port_was_taken_starts_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let first = start_http(dir.path());
    let calls = std::cell::Cell::new(0);
    let server = Server::start_on_free_port("127.0.0.1", |port| {
        calls.set(calls.get() + 1);
        // The first try binds the port the first server holds, as a port
        // taken after the probe would be.
        let bind = if calls.get() == 1 { first.port } else { port };
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "http.server", "--bind", "127.0.0.1", &bind.to_string()]);
        cmd
    });
    assert_eq!(calls.get(), 2, "one retry");
    assert_ne!(server.port, first.port);
    assert!(
        listens_on(server.child.id(), server.port),
        "the second try's server answers on its port"
    );
}
