//! The control-plane test bed: real etcd, kube-apiserver, kube-controller-manager
//! and kube-scheduler, plus kwok simulating the nodes of a controller and two
//! pools, all built by scripts/install-testbed.sh at pinned versions.
//!
//! - Certificates and kubeconfigs are made by the built kubeadm
//!   (`kubeadm init phase certs all`, `init phase kubeconfig ...`), as on a
//!   controller; the admin kubeconfig is kubeadm's admin.conf, bound to
//!   cluster-admin as `kubeadm init` binds it. [`ControlPlane::start_api_with_pki`]
//!   first places a test's own CAs and service-account key (kube-aws's
//!   src/pki.rs) where kubeadm finds them, as `kube-aws-node secrets` does on a
//!   controller, so kubeadm signs every leaf certificate from them.
//! - Every process listens on a free 127.0.0.1 port and lives in a temporary
//!   directory; each is killed by its PID when its handle drops.
//! - One control plane per test binary ([`shared`]), reused by its tests;
//!   each test makes its own namespaces. The shared one is dropped (its
//!   processes killed) when the test binary exits.
//! - Without the binaries a test fails, naming the script; with
//!   `KUBE_AWS_TESTBED=skip` it skips and says so.
//!
//! The simulated nodes (the rendered cluster's, kwok's stages) are
//! testbed/nodes.rs; each component's flags, command and health,
//! testbed/components.rs.
#![allow(dead_code)]

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::free_port;

mod components;
mod nodes;

pub use nodes::{rendered_nodes, SimNode, NODES_CLUSTER_YAML};
// Used by tests/it, not by benches/installer.rs, which includes common/ as
// well (what this file's allow(dead_code) is for).
#[allow(unused_imports)]
pub use nodes::{extra_args, kubeadm_json};

/// The binaries the test bed provides (scripts/install-testbed.sh).
pub const BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubeadm",
    "kubectl",
    "kwok",
    "helm",
    "kwok-stages.yaml",
];

/// The address kubeadm is told the apiserver advertises: kubeadm refuses a
/// loopback one on a machine without a default route ("unable to select an IP
/// from lo network interface"), so the certificates name this documentation
/// address (RFC 5737) besides 127.0.0.1, and the kubeconfigs are pointed back
/// at 127.0.0.1, where everything listens.
const ADVERTISE: &str = "192.0.2.1";

/// How long a component may take to become ready on a loaded 2-core machine.
const READY_LIMIT: Duration = Duration::from_secs(180);

/// Writes past the test harness's output capture, so a skip is always visible.
fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The test bed's bin directory, or None (after saying so) when the tests
/// that need it are skipped with `KUBE_AWS_TESTBED=skip`. Panics when it is
/// missing: CI must never skip these tests silently.
pub fn bin_dir(test: &str) -> Option<PathBuf> {
    if std::env::var("KUBE_AWS_TESTBED").as_deref() == Ok("skip") {
        say(&format!(
            "{test}: SKIPPED: KUBE_AWS_TESTBED=skip (needs the control-plane test bed of scripts/install-testbed.sh)"
        ));
        return None;
    }
    let dir = std::env::var_os("KUBE_AWS_TESTBED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".testbed/bin"));
    for b in BINARIES {
        assert!(
            dir.join(b).exists(),
            "the control-plane test bed is missing {}: run `make testbed` (scripts/install-testbed.sh, needs Go), \
             point KUBE_AWS_TESTBED_BIN at its bin directory, or set KUBE_AWS_TESTBED=skip to skip these tests",
            dir.join(b).display()
        );
    }
    Some(dir)
}

/// A process of the test bed, killed by its PID on drop; its output goes to a log file.
pub struct Proc {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let out = File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().unwrap();
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Proc {
            name: name.into(),
            child,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last lines of its log, for messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Polls `ready` until it holds; Err with the log tail if the process
    /// exits first or `limit` passes.
    pub fn wait_until(&mut self, limit: Duration, mut ready: impl FnMut() -> bool) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "{} exited ({status}) before it was ready; the end of {}:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail(30)
                ));
            }
            if ready() {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "{} not ready after {limit:?}; the end of {}:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running control plane.
pub struct ControlPlane {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    /// kubeadm's certificate directory.
    pub pki: PathBuf,
    /// The admin kubeconfig (kubeadm's admin.conf).
    pub kubeconfig: PathBuf,
    pub api_port: u16,
    pub etcd_url: String,
    /// `v1.35.8`: what the built kubeadm says.
    pub version: String,
    pub nodes: Vec<SimNode>,
    /// In start order; dropped (killed) in reverse.
    procs: Mutex<Vec<Proc>>,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let procs = self.procs.get_mut().unwrap_or_else(|e| e.into_inner());
        while let Some(p) = procs.pop() {
            drop(p);
        }
    }
}

/// Runs a test-bed command; Err with its output unless it succeeds.
pub fn run(mut cmd: Command) -> Result<String, String> {
    let out: Output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
    /// kwok with `nodes`, and waits until the nodes are Ready.
    pub fn start(bin: &Path, nodes: Vec<SimNode>) -> ControlPlane {
        ControlPlane::start_with_stages(bin, nodes, &bin.join("kwok-stages.yaml"))
    }

    /// [`ControlPlane::start`] with kwok running the stages of `stages` (for
    /// example pods Ready after a fixed delay, benches/installer.rs).
    pub fn start_with_stages(bin: &Path, nodes: Vec<SimNode>, stages: &Path) -> ControlPlane {
        let cp = ControlPlane::start_api(bin, nodes, None);
        let api_port = cp.api_port;
        let kcm = cp.controller_manager_proc("kube-controller-manager", api_port, &[]);
        cp.push(kcm.unwrap_or_else(|e| panic!("{e}")));
        let sched = cp.scheduler_proc("kube-scheduler", api_port, &[]);
        cp.push(sched.unwrap_or_else(|e| panic!("{e}")));
        cp.start_kwok(stages);
        cp
    }

    /// etcd and kube-apiserver only, with `pki` (entry name `pki/X` → PEM, as
    /// in the secret bundle) placed in kubeadm's certificate directory before
    /// kubeadm makes the rest, and kubeadm's `kubeadm:cluster-admins` binding.
    pub fn start_api_with_pki(bin: &Path, pki: &[(String, String)]) -> ControlPlane {
        ControlPlane::start_api(bin, Vec::new(), Some(pki))
    }

    fn start_api(bin: &Path, nodes: Vec<SimNode>, given: Option<&[(String, String)]>) -> ControlPlane {
        let dir = tempfile::Builder::new().prefix("kube-aws-testbed").tempdir().unwrap();
        let version = run({
            let mut c = Command::new(bin.join("kubeadm"));
            c.args(["version", "-o", "short"]);
            c
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_string();
        let pki = dir.path().join("pki");
        let api_port = free_port();
        let mut cp = ControlPlane {
            kubeconfig: dir.path().join("admin.conf"),
            pki,
            bin: bin.to_path_buf(),
            api_port,
            etcd_url: String::new(),
            version,
            nodes,
            procs: Mutex::new(Vec::new()),
            dir,
        };
        if let Some(files) = given {
            for (name, pem) in files {
                let rel = name.strip_prefix("pki/").expect("PKI entries are named pki/...");
                let path = cp.pki.join(rel);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, pem).unwrap();
            }
        }
        cp.make_pki();
        cp.start_etcd();
        let api = cp.apiserver_proc("kube-apiserver", api_port, &[], "/registry");
        cp.push(api.unwrap_or_else(|e| panic!("{e}")));
        // kubeadm init binds admin.conf's group to cluster-admin.
        cp.kubectl_as(
            "super-admin.conf",
            &[
                "create",
                "clusterrolebinding",
                "kubeadm:cluster-admins",
                "--clusterrole=cluster-admin",
                "--group=kubeadm:cluster-admins",
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        cp
    }

    fn push(&self, p: Proc) {
        self.procs.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn kubeadm(&self, args: &[&str]) {
        let mut c = Command::new(self.bin.join("kubeadm"));
        c.args(args).arg("--config").arg(self.path("kubeadm.yaml"));
        run(c).unwrap_or_else(|e| panic!("making the test bed's PKI: {e}"));
    }

    /// kubeadm makes the CA, serving and client certificates, the service
    /// account key and the kubeconfigs, for 127.0.0.1.
    fn make_pki(&self) {
        let cfg = format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n\
             localAPIEndpoint: {{advertiseAddress: {ADVERTISE}, bindPort: {port}}}\n\
             nodeRegistration: {{name: testbed, criSocket: \"unix:///run/containerd/containerd.sock\"}}\n---\n\
             apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
             kubernetesVersion: {version}\nclusterName: testbed\n\
             controlPlaneEndpoint: 127.0.0.1:{port}\ncertificatesDir: {pki}\n\
             apiServer: {{certSANs: [127.0.0.1, localhost]}}\n",
            port = self.api_port,
            version = self.version,
            pki = self.pki.display()
        );
        std::fs::write(self.path("kubeadm.yaml"), cfg).unwrap();
        self.kubeadm(&["init", "phase", "certs", "all"]);
        let dir = self.dir.path().to_str().unwrap();
        for kc in ["admin", "super-admin", "controller-manager", "scheduler"] {
            self.kubeadm(&["init", "phase", "kubeconfig", kc, "--kubeconfig-dir", dir]);
            let path = self.path(&format!("{kc}.conf"));
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, text.replace(&format!("{ADVERTISE}:"), "127.0.0.1:")).unwrap();
        }
    }

    fn start_etcd(&mut self) {
        let (client, peer) = (free_port(), free_port());
        let pki = &self.pki;
        let p = |f: &str| pki.join("etcd").join(f).display().to_string();
        let mut c = Command::new(self.bin.join("etcd"));
        c.args([
            "--name=testbed",
            &format!("--data-dir={}", self.path("etcd").display()),
            &format!("--listen-client-urls=https://127.0.0.1:{client}"),
            &format!("--advertise-client-urls=https://127.0.0.1:{client}"),
            &format!("--listen-peer-urls=https://127.0.0.1:{peer}"),
            &format!("--initial-advertise-peer-urls=https://127.0.0.1:{peer}"),
            &format!("--initial-cluster=testbed=https://127.0.0.1:{peer}"),
            &format!("--cert-file={}", p("server.crt")),
            &format!("--key-file={}", p("server.key")),
            &format!("--trusted-ca-file={}", p("ca.crt")),
            "--client-cert-auth=true",
            &format!("--peer-cert-file={}", p("peer.crt")),
            &format!("--peer-key-file={}", p("peer.key")),
            &format!("--peer-trusted-ca-file={}", p("ca.crt")),
            "--peer-client-cert-auth=true",
            // A test bed: durability is not wanted, speed is.
            "--unsafe-no-fsync=true",
        ]);
        let mut proc = Proc::spawn("etcd", c, self.path("etcd.log"));
        proc.wait_until(READY_LIMIT, || {
            std::net::TcpStream::connect(("127.0.0.1", client)).is_ok()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        self.etcd_url = format!("https://127.0.0.1:{client}");
        self.push(proc);
    }

    fn pki_file(&self, f: &str) -> String {
        self.pki.join(f).display().to_string()
    }

    /// The raw value etcd holds at `key`, as the API server stored it, read
    /// through etcd's own JSON gateway (`POST /v3/kv/range`, what `etcdctl
    /// get` asks over gRPC) with the API server's etcd client certificate.
    pub fn etcd_value(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let p = |f: &str| self.pki_file(f);
        let mut c = Command::new("curl");
        c.args(["-sS", "--fail", "--cacert", &p("etcd/ca.crt"), "--cert"])
            .arg(p("apiserver-etcd-client.crt"))
            .arg("--key")
            .arg(p("apiserver-etcd-client.key"))
            .arg("-X")
            .arg("POST")
            .arg(format!("{}/v3/kv/range", self.etcd_url))
            .arg("-d")
            .arg(serde_json::json!({"key": b64.encode(key)}).to_string());
        let out = run(c)?;
        let doc: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("etcd's answer: {e}: {out}"))?;
        match doc["kvs"].get(0) {
            None => Ok(None),
            Some(kv) => b64
                .decode(kv["value"].as_str().unwrap_or_default())
                .map(Some)
                .map_err(|e| format!("etcd's value: {e}")),
        }
    }

    /// `kubectl --kubeconfig admin.conf ARGS`: its stdout, or Err with its output.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.kubectl_as("admin.conf", args)
    }

    fn kubectl_as(&self, kubeconfig: &str, args: &[&str]) -> Result<String, String> {
        let mut c = Command::new(self.bin.join("kubectl"));
        c.arg("--kubeconfig").arg(self.path(kubeconfig)).args(args);
        run(c)
    }

    /// kubectl with `input` on its standard input.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Result<String, String> {
        self.kubectl_stdin_with(&self.kubeconfig, args, input)
    }

    /// kubectl with `kubeconfig` and `input` on its standard input.
    pub fn kubectl_stdin_with(&self, kubeconfig: &Path, args: &[&str], input: &str) -> Result<String, String> {
        let mut child = Command::new(self.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("kubectl: {e}"))?;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// A new namespace with a unique name starting with `prefix`.
    pub fn namespace(&self, prefix: &str) -> String {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        self.kubectl(&["create", "namespace", &name])
            .unwrap_or_else(|e| panic!("{e}"));
        name
    }
}

/// The shared control plane of this test binary, or Err with why it failed to start.
static SHARED: Mutex<Option<Result<Arc<ControlPlane>, String>>> = Mutex::new(None);

extern "C" fn drop_shared() {
    if let Ok(mut g) = SHARED.lock() {
        g.take();
    }
}

/// The test binary's control plane, started by the first test that asks
/// (with [`rendered_nodes`]) and killed when the binary exits; None when
/// skipped (see [`bin_dir`]).
pub fn shared(test: &str) -> Option<Arc<ControlPlane>> {
    let bin = bin_dir(test)?;
    let mut g = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        let started = std::panic::catch_unwind(|| ControlPlane::start(&bin, rendered_nodes()));
        *g = Some(match started {
            Ok(cp) => {
                // Statics are never dropped: kill the processes at exit.
                unsafe { libc::atexit(drop_shared) };
                Ok(Arc::new(cp))
            }
            Err(e) => Err(e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the control plane did not start".into())),
        });
    }
    match g.as_ref().unwrap() {
        Ok(cp) => Some(cp.clone()),
        Err(e) => panic!("the shared test-bed control plane failed to start: {e}"),
    }
}
