//! Hostile directories (issue 30, item 1): a directory kube-aws reads from
//! (a plugin directory, `plugins/` itself, a local chart directory, `values/`)
//! that is a symlink leading out of the work tree is refused, located, with
//! the fix; a symlinked directory that stays inside the tree still works.
//!
//! Covers the CLI end to end (`render`, `charts lock`). Does not cover files
//! symlinked out of the tree (tests/it/hostile_io.rs) or archives.

use std::path::Path;

use crate::hostile_io::{redact, run, work_tree, BASE, CHART};

const PLUGIN: &str = "apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {name: p, version: 0.1.0}\n";

/// `outside/<name>` holding `files`, and the path to it.
fn outside(root: &Path, name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let d = root.join("outside").join(name);
    for (f, body) in files {
        let p = d.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    d
}

fn link(target: &Path, at: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, at).unwrap();
}

#[test]
fn symlinked_directories_out_of_the_tree_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // plugins/p -> outside/p
    let plugin_dir = work_tree(&tmp.path().join("plugin_dir"), BASE, &[]);
    link(
        &outside(tmp.path(), "p", &[("plugin.yaml", PLUGIN)]),
        &plugin_dir.join("plugins/p"),
    );
    // plugins -> outside/plugins (holding p/plugin.yaml)
    let plugins = work_tree(&tmp.path().join("plugins"), BASE, &[]);
    link(
        &outside(tmp.path(), "plugins", &[("p/plugin.yaml", PLUGIN)]),
        &plugins.join("plugins"),
    );
    // values -> outside/values (holding x.yaml), with a locked local chart x.
    let cluster = format!("{BASE}charts:\n  - name: x\n    path: charts/x\n");
    let values = work_tree(
        &tmp.path().join("values"),
        &cluster,
        &[("charts/x/Chart.yaml", CHART.as_bytes())],
    );
    let (code, stderr, _) = run(&values, &["charts", "lock"]);
    assert_eq!(code, 0, "{stderr}");
    link(
        &outside(tmp.path(), "values", &[("x.yaml", "stolen: true\n")]),
        &values.join("values"),
    );
    // charts/x -> outside/x, locked while it was a real directory.
    let chart = work_tree(
        &tmp.path().join("chart"),
        &cluster,
        &[("charts/x/Chart.yaml", CHART.as_bytes())],
    );
    let (code, stderr, _) = run(&chart, &["charts", "lock"]);
    assert_eq!(code, 0, "{stderr}");
    std::fs::remove_dir_all(chart.join("charts/x")).unwrap();
    link(
        &outside(tmp.path(), "x", &[("Chart.yaml", CHART)]),
        &chart.join("charts/x"),
    );

    for (name, dir) in [
        ("plugin_dir", &plugin_dir),
        ("plugins", &plugins),
        ("values", &values),
        ("chart", &chart),
    ] {
        let (code, stderr, _) = run(dir, &["render"]);
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(stderr.contains("outside"), "{name}: {stderr}");
        assert!(!dir.join("rendered").exists(), "{name}: rendered anyway");
        insta::assert_snapshot!(format!("dir_out_{name}_render"), redact(&stderr, tmp.path()));
    }
    // Locking reads the chart directory too.
    let (code, stderr, _) = run(&chart, &["charts", "lock"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("outside"), "{stderr}");
    insta::assert_snapshot!("dir_out_chart_lock", redact(&stderr, tmp.path()));
}

#[test]
fn symlinked_directories_inside_the_tree_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = format!("{BASE}charts:\n  - name: x\n    path: charts/x\n");
    let tree = work_tree(
        tmp.path(),
        &cluster,
        &[
            ("vendor/p/plugin.yaml", PLUGIN.as_bytes()),
            ("vendor/x/Chart.yaml", CHART.as_bytes()),
        ],
    );
    link(Path::new("../vendor/p"), &tree.join("plugins/p"));
    link(Path::new("../vendor/x"), &tree.join("charts/x"));
    let (code, stderr, _) = run(&tree, &["charts", "lock"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr, _) = run(&tree, &["render"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(tree.join("rendered").is_dir());
}
