//! Hostile and broken input and output paths (issue 12), one test per class:
//! output-dir refusal, a write interrupted at each step, special files, symlinks
//! out of the tree, non-UTF-8 and UTF-16 input, YAML nesting bombs, and an
//! oversized rendered file.
//!
//! Covers the CLI end to end where the user sees the text (errors are
//! snapshotted) and the library where a step must be interrupted. Does not
//! cover chart archives (tar limits), template recursion, values schemas or
//! the lock's integrity: tests/it/chart_archive.rs and the parsers' tests do.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common;

use assert_cmd::Command;
use kube_aws::render::{self, write_rendered, write_rendered_steps, WriteStep, WriteSteps, RENDER_MARKER};

pub(crate) const BASE: &str = "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/kube-aws\n";

/// A minimal work tree `root/tree` (with `extra` files) that renders offline.
pub(crate) fn work_tree(root: &Path, cluster: &str, extra: &[(&str, &[u8])]) -> PathBuf {
    let tree = root.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("cluster.yaml"), cluster).unwrap();
    for (name, body) in extra {
        let p = tree.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    tree
}

/// Runs kube-aws in `cwd` with a deadline: a hang fails the test instead of
/// hanging it. Returns (exit code, stderr, elapsed).
pub(crate) fn run(cwd: &Path, args: &[&str]) -> (i32, String, Duration) {
    let start = Instant::now();
    let out = Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", cwd.join(".cache"))
        .args(args)
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert!(elapsed < Duration::from_secs(20), "{args:?} hung: {stderr}");
    (out.status.code().unwrap_or(-1), stderr, elapsed)
}

/// Every file under `dir`, relative, with its bytes.
pub(crate) fn snapshot_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    common::files_under(dir)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let bytes = std::fs::read(&p).unwrap_or_default();
            (rel, bytes)
        })
        .collect()
}

/// The error text with the temporary directory replaced, for snapshots.
pub(crate) fn redact(stderr: &str, root: &Path) -> String {
    let real = root.canonicalize().unwrap();
    stderr
        .replace(&real.display().to_string(), "[TMP]")
        .replace(&root.display().to_string(), "[TMP]")
}

#[test]
fn output_dir_that_holds_user_files_is_refused_and_nothing_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = work_tree(tmp.path(), BASE, &[("values/x.yaml", b"a: 1\n")]);
    std::fs::write(tmp.path().join("sibling.txt"), "keep me").unwrap();
    let other = tmp.path().join("notes");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("todo.txt"), "keep me too").unwrap();
    let before = snapshot_tree(tmp.path());

    let cases = [
        ("work_tree", "tree"),
        ("work_tree_parent", "."),
        ("non_render_dir", "notes"),
    ];
    for (name, out) in cases {
        let (code, stderr, _) = run(tmp.path(), &["--dir", "tree", "render", "--output-dir", out]);
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(
            stderr.contains("refusing to write the render output"),
            "{name}: {stderr}"
        );
        insta::assert_snapshot!(format!("output_dir_{name}"), redact(&stderr, tmp.path()));
        assert_eq!(snapshot_tree(tmp.path()), before, "{name}: files changed");
    }

    // A directory carrying the marker (an earlier render) is replaced; a new one is created.
    let (code, stderr, _) = run(tmp.path(), &["--dir", "tree", "render", "--output-dir", "out"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(tmp.path().join("out").join(RENDER_MARKER).is_file());
    std::fs::write(tmp.path().join("out/stale.txt"), "old").unwrap();
    let (code, stderr, _) = run(tmp.path(), &["--dir", "tree", "render", "--output-dir", "out"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!tmp.path().join("out/stale.txt").exists());
    assert!(tree.join("cluster.yaml").is_file());

    // A directory holding only directories named like the layout's (addons/,
    // manifests/, stacks/, userdata/) but no marker is the user's: refused,
    // nothing deleted (issue 30 item 3; it was replaced as "legacy output").
    std::fs::create_dir_all(tmp.path().join("legacy/stacks")).unwrap();
    std::fs::create_dir_all(tmp.path().join("legacy/addons")).unwrap();
    std::fs::write(tmp.path().join("legacy/stacks/old.json"), "{}").unwrap();
    let (code, stderr, _) = run(tmp.path(), &["--dir", "tree", "render", "--output-dir", "legacy"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("holds no"), "{stderr}");
    assert!(tmp.path().join("legacy/stacks/old.json").is_file());
    insta::assert_snapshot!("output_dir_unmarked_layout_dirs", redact(&stderr, tmp.path()));
}

fn rendered_input(text: &str) -> render::Rendered {
    let mut r = render::Rendered::default();
    r.files.insert("stacks/root.json".into(), text.as_bytes().to_vec());
    r.files
        .insert("addons/install-addons.sh".into(), b"#!/bin/sh\n".to_vec());
    r
}

/// Names in `dir` other than `keep`.
fn siblings(dir: &Path, keep: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != keep)
        .collect();
    v.sort();
    v
}

/// The kill is injected in-process: `write_rendered_steps` returns right after
/// the named step and leaves its directories as a killed process would (no
/// cleanup runs). After each stop, `rendered/` must hold the old or the new
/// complete output (except the two-rename fallback's middle step, the reason
/// the exchange exists), and the next write must remove every leftover.
#[test]
fn write_killed_after_each_step_leaves_a_complete_output_and_is_cleaned_up() {
    let old = rendered_input("old\n");
    let new = rendered_input("new\n");
    let steps = [
        (false, WriteStep::Staged),
        (false, WriteStep::Swapped),
        (true, WriteStep::Staged),
        (true, WriteStep::OldMovedAside),
        (true, WriteStep::Swapped),
    ];
    for (two_renames, step) in steps {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("rendered");
        write_rendered(tmp.path(), &out, &old).unwrap();
        let how = WriteSteps {
            stop_after: Some(step),
            two_renames,
        };
        write_rendered_steps(tmp.path(), &out, &new, &how).unwrap();
        let label = format!("two_renames={two_renames} step={step:?}");
        let left = siblings(tmp.path(), "rendered");
        assert!(!left.is_empty(), "{label}: the stop left nothing to clean");
        match std::fs::read_to_string(out.join("stacks/root.json")) {
            Ok(text) => assert!(text == "old\n" || text == "new\n", "{label}: {text:?}"),
            Err(_) => assert_eq!(
                (two_renames, step),
                (true, WriteStep::OldMovedAside),
                "{label}: no output"
            ),
        }
        if out.exists() {
            assert!(out.join(RENDER_MARKER).is_file(), "{label}");
            assert!(out.join("addons/install-addons.sh").is_file(), "{label}: incomplete");
        }
        // The next run recovers and cleans up.
        let newer = rendered_input("newer\n");
        write_rendered(tmp.path(), &out, &newer).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("stacks/root.json")).unwrap(),
            "newer\n",
            "{label}"
        );
        assert_eq!(
            siblings(tmp.path(), "rendered"),
            Vec::<String>::new(),
            "{label}: leftovers"
        );
    }
}

pub(crate) const CHART: &str = "apiVersion: v2\nname: x\nversion: 1.0.0\n";

/// A work tree with one local chart release `x`, locked, so that `render`
/// reads values/x.yaml.
fn chart_tree(root: &Path) -> PathBuf {
    let cluster = format!("{BASE}charts:\n  - name: x\n    path: charts/x\n");
    let tree = work_tree(root, &cluster, &[("charts/x/Chart.yaml", CHART.as_bytes())]);
    let (code, stderr, _) = run(&tree, &["charts", "lock"]);
    assert_eq!(code, 0, "{stderr}");
    tree
}

fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// Each case must fail within the run deadline (a blocking read would hang).
#[test]
fn special_files_are_refused_without_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    // cluster.yaml as a FIFO, and as a symlink to /dev/zero.
    let fifo_tree = tmp.path().join("fifo");
    mkfifo(&fifo_tree.join("cluster.yaml"));
    let zero_tree = tmp.path().join("zero");
    std::fs::create_dir_all(&zero_tree).unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero_tree.join("cluster.yaml")).unwrap();
    // values/x.yaml as a FIFO, and a plugin.yaml as a FIFO.
    let values_tree = chart_tree(&tmp.path().join("values"));
    mkfifo(&values_tree.join("values/x.yaml"));
    let plugin_tree = work_tree(&tmp.path().join("plugin"), BASE, &[]);
    mkfifo(&plugin_tree.join("plugins/p/plugin.yaml"));

    for (name, dir) in [
        ("cluster_fifo", &fifo_tree),
        ("cluster_dev_zero", &zero_tree),
        ("values_fifo", &values_tree),
        ("plugin_fifo", &plugin_tree),
    ] {
        let (code, stderr, elapsed) = run(dir, &["render"]);
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(elapsed < Duration::from_secs(10), "{name}: took {elapsed:?}");
        assert!(stderr.contains("not a regular file"), "{name}: {stderr}");
        insta::assert_snapshot!(format!("special_{name}"), redact(&stderr, tmp.path()));
    }
}

#[test]
fn symlinks_out_of_the_tree_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("secret.yaml"), "stolen: true\n").unwrap();
    let values_tree = chart_tree(&tmp.path().join("v"));
    std::fs::create_dir_all(values_tree.join("values")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("secret.yaml"), values_tree.join("values/x.yaml")).unwrap();
    let plugin_tree = work_tree(&tmp.path().join("p"), BASE, &[]);
    std::fs::create_dir_all(plugin_tree.join("plugins/p")).unwrap();
    std::os::unix::fs::symlink(
        tmp.path().join("secret.yaml"),
        plugin_tree.join("plugins/p/plugin.yaml"),
    )
    .unwrap();
    for (name, dir) in [("values", &values_tree), ("plugin", &plugin_tree)] {
        let (code, stderr, _) = run(dir, &["render"]);
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(stderr.contains("outside"), "{name}: {stderr}");
        assert!(!dir.join("rendered").exists(), "{name}: rendered anyway");
        insta::assert_snapshot!(format!("symlink_out_{name}"), redact(&stderr, tmp.path()));
    }
}

#[test]
fn non_utf8_and_utf16_are_located_by_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    // Latin-1 é (0xE9) on line 4, after "# caf": column 6.
    let mut latin1 = format!("{BASE}# caf").into_bytes();
    latin1.extend([0xE9, b'\n']);
    let bad_byte = work_tree(&tmp.path().join("latin1"), "", &[]);
    std::fs::write(bad_byte.join("cluster.yaml"), latin1).unwrap();
    let utf16 = work_tree(&tmp.path().join("utf16"), BASE, &[]);
    let mut bytes = vec![0xFF, 0xFE];
    bytes.extend(BASE.encode_utf16().flat_map(u16::to_le_bytes));
    std::fs::write(utf16.join("cluster.yaml"), bytes).unwrap();
    let values = chart_tree(&tmp.path().join("values"));
    std::fs::create_dir_all(values.join("values")).unwrap();
    std::fs::write(values.join("values/x.yaml"), b"a: 1\nb: \xff\n").unwrap();
    let values_yaml = chart_tree(&tmp.path().join("values-yaml"));
    std::fs::create_dir_all(values_yaml.join("values")).unwrap();
    std::fs::write(values_yaml.join("values/x.yaml"), "a: 1\nb: [1, 2\nc: 3\n").unwrap();

    let cases = [
        ("cluster_latin1", &bad_byte, "cluster.yaml:4:6: byte 0xE9"),
        (
            "cluster_utf16",
            &utf16,
            "cluster.yaml:1:1: the file starts with a UTF-16 little-endian",
        ),
        ("values_bad_byte", &values, "values/x.yaml:2:4: byte 0xFF"),
        ("values_malformed", &values_yaml, "values/x.yaml:"),
    ];
    for (name, dir, expect) in cases {
        let (code, stderr, _) = run(dir, &["render"]);
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(stderr.contains(expect), "{name}: {stderr}");
        assert!(!stderr.contains("kube-aws init"), "{name}: misleading hint: {stderr}");
        assert!(!stderr.contains(" at line "), "{name}: unlocated: {stderr}");
        insta::assert_snapshot!(format!("encoding_{name}"), redact(&stderr, tmp.path()));
    }
}

/// Unclosed `[` used to take time quadratic in the length (about 1 s for
/// 100 KB and 9 s for 1 MB in a debug build) in serde_yaml. The bound is
/// generous; the real figures are printed (`--nocapture`).
#[test]
fn yaml_nesting_bombs_are_refused_quickly() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = chart_tree(tmp.path());
    std::fs::create_dir_all(tree.join("values")).unwrap();
    for (name, size) in [("100k", 100_000), ("1m", 1_000_000)] {
        std::fs::write(tree.join("values/x.yaml"), "[".repeat(size)).unwrap();
        let (code, stderr, elapsed) = run(&tree, &["render"]);
        eprintln!("values/x.yaml of {size} '[': refused in {elapsed:?}");
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains("nest deeper than 64"), "{stderr}");
        assert!(elapsed < Duration::from_secs(2), "{name}: {elapsed:?}");
        insta::assert_snapshot!(format!("yaml_bomb_{name}"), stderr);
    }
    // The same guard reads cluster.yaml.
    std::fs::write(tree.join("cluster.yaml"), "a: ".to_string() + &"{".repeat(1_000_000)).unwrap();
    let (code, stderr, elapsed) = run(&tree, &["render"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with("error: cluster.yaml:1:"), "{stderr}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[test]
fn oversized_rendered_file_is_refused_naming_the_plugin() {
    let tmp = tempfile::tempdir().unwrap();
    let plugin = "apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {name: big, version: 0.1.0}\nspec:\n  nodes:\n    controller:\n      files:\n        - path: /etc/big\n          template: files/big.tera\n";
    let line = "x".repeat(1000);
    let template = format!("{{% for i in range(end=9000) %}}{line}{{% endfor %}}");
    let cluster = format!("{BASE}plugins:\n  big:\n    enabled: true\n");
    let tree = work_tree(
        tmp.path(),
        &cluster,
        &[
            ("plugins/big/plugin.yaml", plugin.as_bytes()),
            ("plugins/big/files/big.tera", template.as_bytes()),
        ],
    );
    let (code, stderr, _) = run(&tree, &["render"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("plugin \"big\""), "{stderr}");
    assert!(stderr.contains("limit"), "{stderr}");
    assert!(!tree.join("rendered").exists());
    insta::assert_snapshot!(stderr);
}
