//! Concurrent commands on one work tree (issue 30, item 2): `render`, `up`
//! and `update` take an advisory lock (`flock` on `<dir>/.kube-aws.lock`);
//! four renders at once leave `rendered/` complete and the same as one
//! render's; a waiting or giving-up process names the holder's pid and
//! command.
//!
//! Covers `render` end to end; `up` and `update` take the same lock through
//! the same call before they read the work tree (their AWS paths are covered
//! by the moto tests). Does not cover a lock on a file system without
//! `flock` (NFS without lockd): there the lock is not taken and a warning says so.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common;
use crate::hostile_io::{run, work_tree, BASE, CHART};

/// A work tree with two local charts and values: enough for a render to
/// take a while and write many files.
fn tree(root: &Path) -> std::path::PathBuf {
    let cluster = format!(
        "{BASE}worker:\n  nodePools:\n    - name: a\n      count: 1\n    - name: b\n      count: 1\n\
         charts:\n  - name: x\n    path: charts/x\n  - name: y\n    path: charts/y\n"
    );
    let tree = work_tree(
        root,
        &cluster,
        &[
            ("charts/x/Chart.yaml", CHART.as_bytes()),
            ("charts/y/Chart.yaml", CHART.replace("name: x", "name: y").as_bytes()),
            ("values/x.yaml", b"a: 1\n"),
        ],
    );
    let (code, stderr, _) = run(&tree, &["charts", "lock"]);
    assert_eq!(code, 0, "{stderr}");
    tree
}

/// Every file under `dir` (relative path and bytes), sorted.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = common::files_under(dir)
        .into_iter()
        .map(|p| {
            (
                p.strip_prefix(dir).unwrap().display().to_string(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn kube_aws(dir: &Path, args: &[&str]) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("kube-aws"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", dir.join(".cache"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn four_renders_at_once_leave_one_complete_render() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = tree(&tmp.path().join("ref"));
    let (code, stderr, _) = run(&reference, &["render"]);
    assert_eq!(code, 0, "{stderr}");
    let want = files(&reference.join("rendered"));
    assert!(want.len() > 5, "{want:?}");

    let dir = tree(&tmp.path().join("t"));
    // Rounds of four, with an existing render to replace after the first.
    for round in 0..5 {
        let children: Vec<_> = (0..4).map(|_| kube_aws(&dir, &["render"])).collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "round {round}: {stderr}");
        }
        assert_eq!(files(&dir.join("rendered")), want, "round {round}: rendered/ differs");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".rendered."))
            .collect();
        assert!(leftovers.is_empty(), "round {round}: {leftovers:?}");
        assert!(
            !dir.join(".kube-aws.lock").exists(),
            "round {round}: the lock file stayed"
        );
    }
}

/// Holds the work tree's lock from this process, as a running kube-aws would.
fn hold_lock(dir: &Path) -> std::fs::File {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(dir.join(".kube-aws.lock"))
        .unwrap();
    // SAFETY: a valid open descriptor.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    f.set_len(0).unwrap();
    writeln!(
        f,
        "pid {} (kube-aws up), since 2026-12-01T20:00:00Z",
        std::process::id()
    )
    .unwrap();
    f
}

#[test]
fn a_held_lock_makes_render_wait_then_give_up_naming_the_holder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tree(tmp.path());
    let held = hold_lock(&dir);
    let pid = std::process::id().to_string();

    // Gives up after --lock-timeout, naming the holder; writes nothing.
    let start = Instant::now();
    let (code, stderr, _) = run(&dir, &["render", "--lock-timeout", "1s"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(start.elapsed() >= Duration::from_secs(1), "{stderr}");
    assert!(stderr.contains(&format!("pid {pid} (kube-aws up)")), "{stderr}");
    assert!(!dir.join("rendered").exists(), "{stderr}");
    insta::assert_snapshot!(
        "lock_gave_up",
        stderr
            .replace(&pid, "[PID]")
            .replace(&dir.display().to_string(), "[DIR]")
    );

    // Waits while it is held, says for whom, and renders once it is released.
    let child = kube_aws(&dir, &["render", "--lock-timeout", "30s"]);
    std::thread::sleep(Duration::from_millis(1500));
    drop(held);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("waiting for"), "{stderr}");
    assert!(stderr.contains(&format!("pid {pid} (kube-aws up)")), "{stderr}");
    assert!(dir.join("rendered/.kube-aws-rendered").is_file());
    assert!(!dir.join(".kube-aws.lock").exists(), "the lock file stayed");
}
