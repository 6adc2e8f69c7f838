//! The real-node bed (docs/testing.md, "The real-node bed"): a node is a
//! privileged runc container with systemd as PID 1, booted from the Debian
//! root filesystem scripts/install-nodebed.sh builds (containerd, runc, the
//! CNI plugins, kubelet, kubeadm, the control-plane images imported), in a
//! network namespace of its own on the host bridge `kanb0` (10.250.0.0/16).
//! `scripts/nodebed/node.sh` does the starting and stopping; this is the
//! handle tests hold.
//!
//! - A node is stopped by its container id when its handle drops, also when
//!   the test fails: the container is killed and deleted, its cgroups and its
//!   network namespace removed, its root filesystem (an overlay on the
//!   image) unmounted and its files deleted (kept, with their path printed,
//!   when the test panicked, for the logs).
//! - When the bed cannot start (not root, no runc, no cgroups, no image) a
//!   test fails with the missing piece named; `KUBE_AWS_TESTBED=skip` or
//!   `KUBE_AWS_NODEBED=skip` makes it skip and say so.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn node_sh() -> PathBuf {
    repo().join("scripts/nodebed/node.sh")
}

/// The node image's directory (`.testbed/node/current`, or
/// `KUBE_AWS_NODEBED_DIR`), or None (after saying so) when skipped. Panics
/// with the missing piece when the bed cannot start.
pub fn image_dir(test: &str) -> Option<PathBuf> {
    for var in ["KUBE_AWS_TESTBED", "KUBE_AWS_NODEBED"] {
        if std::env::var(var).as_deref() == Ok("skip") {
            say(&format!(
                "{test}: SKIPPED: {var}=skip (needs the real-node bed of scripts/install-nodebed.sh)"
            ));
            return None;
        }
    }
    let dir = std::env::var_os("KUBE_AWS_NODEBED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".testbed/node/current"));
    let out = Command::new("bash")
        .arg(node_sh())
        .arg("check")
        .arg(dir.join("rootfs"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node_sh().display()));
    assert!(
        out.status.success(),
        "{test}: {} (`make nodebed` builds the image; KUBE_AWS_NODEBED=skip skips these tests)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Some(dir)
}

/// An addon's image archive built from source by
/// scripts/install-addon-images.sh (`.testbed/addon-images/<name>.tar`, or
/// under `KUBE_AWS_ADDON_IMAGES_DIR`); panics with the way to build it.
pub fn addon_image(test: &str, name: &str) -> PathBuf {
    let dir = std::env::var_os("KUBE_AWS_ADDON_IMAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".testbed/addon-images"));
    let p = dir.join(format!("{name}.tar"));
    assert!(
        p.is_file(),
        "{test}: the {name} image is missing at {} (`make testbed` builds it: scripts/install-addon-images.sh)",
        p.display()
    );
    p
}

/// A node image of the upgrade bed and the version it holds:
/// `.testbed/node/upgrade-from` (the default minor's oldest patch) or
/// `.testbed/node/upgrade-to-minor` (the next minor's default patch), or the
/// directory `KUBE_AWS_NODEBED_UPGRADE_FROM_DIR` /
/// `KUBE_AWS_NODEBED_UPGRADE_TO_MINOR_DIR` names. Panics when it is missing:
/// `make test`'s beds build the second, `make upgradebed` both.
pub fn upgrade_image_dir(test: &str, link: &str) -> (PathBuf, String) {
    let var = format!("KUBE_AWS_NODEBED_{}_DIR", link.to_uppercase().replace('-', "_"));
    let dir = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".testbed/node").join(link));
    let version = std::fs::read_to_string(dir.join("kubernetes-version")).unwrap_or_else(|e| {
        panic!(
            "{test}: no node image at {} ({e}; {var} overrides it): `make upgradebed` builds it \
             (scripts/install-upgradebed.sh); `make test-upgrade` builds it and runs these tests",
            dir.display()
        )
    });
    (dir, version.trim().to_string())
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A running node; stopped by its container id on drop.
pub struct Node {
    pub name: String,
    pub ip: String,
    pub work: PathBuf,
    /// The container's init (systemd) as the host sees it.
    pub pid: u32,
    pub started: Instant,
}

/// The host's address on the bed's bridge, which nodes reach (moto, the IMDS
/// emulators listen there).
pub const HOST_IP: &str = "10.250.0.1";

/// The host bridge, made so that servers can bind to `HOST_IP` before a node
/// starts, and held (`node.sh bridge TOKEN`) while the handle lives: another
/// test's last node stopping does not take it from under this test's servers
/// (seen when the booting tests ran in parallel). On drop the hold goes, and
/// the bridge with it if no node is on it and no other live test holds it, so
/// a test that fails before its nodes start leaves none.
pub struct Bridge {
    token: String,
}

/// Makes (and holds) the bridge.
pub fn bridge() -> Bridge {
    let token = format!("{}.{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst));
    let out = Command::new("bash")
        .arg(node_sh())
        .args(["bridge", &token])
        .stdin(Stdio::null())
        .output()
        .expect("run node.sh bridge");
    assert!(out.status.success(), "node.sh bridge: {}", super::output_text(&out));
    Bridge { token }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(node_sh())
            .args(["unbridge", &self.token])
            .stdin(Stdio::null())
            .output();
    }
}

/// A node's name and address, chosen before it starts (its IMDS answers them).
pub struct Planned {
    pub name: String,
    pub ip: String,
}

/// How a node boots: its cloud-init user-data and the bed's settings
/// (`NODEBED_*`, scripts/nodebed/node.sh start).
#[derive(Default)]
pub struct Boot<'a> {
    pub userdata: Option<&'a Path>,
    pub env: Vec<(&'static str, String)>,
}

impl Node {
    /// A name and address for a node of `role`.
    pub fn plan(role: &str) -> Planned {
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        // 10.250.<1..250>.<2..250>: distinct per node of this process, and
        // unlikely to meet another test process's.
        Planned {
            name: format!("kanb-{role}-{pid}-{seq}"),
            ip: format!("10.250.{}.{}", 1 + pid % 250, 2 + seq % 248),
        }
    }

    /// Boots a node from the image in `image` (its `rootfs`).
    pub fn start(image: &Path, role: &str) -> Node {
        Node::boot(image, Node::plan(role), &Boot::default())
    }

    /// Boots the planned node from `image`, as `how` says.
    pub fn boot(image: &Path, plan: Planned, how: &Boot) -> Node {
        let Planned { name, ip } = plan;
        let work = repo().join(".testbed/node/run").join(&name);
        let started = Instant::now();
        let mut cmd = Command::new("bash");
        cmd.arg(node_sh())
            .args(["start", &name, &ip])
            .arg(&work)
            .arg(image.join("rootfs"));
        if let Some(u) = how.userdata {
            cmd.arg(u);
        }
        for (k, v) in &how.env {
            cmd.env(k, v);
        }
        let out = cmd.stdin(Stdio::null()).output().expect("run node.sh start");
        let mut node = Node {
            name,
            ip,
            work,
            pid: 0,
            started,
        };
        assert!(
            out.status.success(),
            "starting node {} failed: {}",
            node.name,
            super::output_text(&out)
        );
        node.pid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
        node
    }

    /// The node's root filesystem as the host sees it.
    pub fn rootfs(&self) -> PathBuf {
        self.work.join("rootfs")
    }

    /// Runs a command in the node (`runc exec`), returning its output.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("runc")
            .arg("exec")
            .arg(&self.name)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("runc exec")
    }

    /// Runs a shell command in the node; its stdout, or a panic with its output.
    pub fn sh(&self, script: &str) -> String {
        let out = self.exec(&["sh", "-c", script]);
        assert!(
            out.status.success(),
            "in node {}: `{script}` failed ({}):\n{}",
            self.name,
            out.status,
            super::output_text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `check` (a shell command in the node) until it succeeds.
    pub fn wait_for(&self, what: &str, script: &str, limit: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let out = self.exec(&["sh", "-c", script]);
            if out.status.success() {
                return Ok(start.elapsed());
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "node {}: {what} not after {limit:?}; `{script}` said:\n{}\n{}",
                    self.name,
                    super::output_text(&out),
                    self.diagnostics()
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// What the node's systemd, containerd and kubelet said, for failure messages.
    pub fn diagnostics(&self) -> String {
        let out = self.exec(&[
            "sh",
            "-c",
            "systemctl --failed --no-pager; journalctl --no-pager -n 40 -u containerd -u kubelet; \
             crictl ps -a 2>&1 | head -20",
        ]);
        format!(
            "--- node {} ({}) ---\n{}\n--- console ---\n{}",
            self.name,
            self.work.display(),
            super::output_text(&out),
            std::fs::read_to_string(self.work.join("console.log"))
                .unwrap_or_default()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let keep = std::thread::panicking();
        let mut cmd = Command::new("bash");
        cmd.arg(node_sh()).args(["stop", &self.name]).arg(&self.work);
        if keep {
            cmd.arg("keep");
        }
        let out = cmd.stdin(Stdio::null()).output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => say(&format!("stopping node {}: {}", self.name, super::output_text(&o))),
            Err(e) => say(&format!("stopping node {}: {e}", self.name)),
        }
        if keep {
            say(&format!(
                "node {} stopped; its files (console.log, and what it wrote, under upper/: var/log/journal, var/log/pods) are kept in {}",
                self.name,
                self.work.display()
            ));
        } else {
            let _ = std::fs::remove_dir_all(&self.work);
        }
    }
}
