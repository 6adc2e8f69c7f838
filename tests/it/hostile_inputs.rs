//! Hostile inputs of the last open classes (issue 30): the kubeconfig that
//! `kubeconfig` merges into (item 5) gets the guard of every other YAML
//! reader (regular files only, never a blocking read, size cap, nesting
//! depth), located.
//!
//! Covers the CLI end to end up to the first AWS call (every check on the
//! kubeconfig runs before it). Does not cover the merge itself
//! (src/kubeconfig.rs unit tests) or the mint (tests/it/pki.rs).

use std::path::Path;
use std::time::Duration;

use crate::hostile_io::{redact, run};

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn a_hostile_kubeconfig_is_refused_quickly_and_left_as_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    mkfifo(&fifo);
    let zero = tmp.path().join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let big = tmp.path().join("big");
    std::fs::write(
        &big,
        format!("apiVersion: v1\nkind: Config\nx: \"{}\"\n", "a".repeat(20 << 20)),
    )
    .unwrap();
    let deep = tmp.path().join("deep");
    std::fs::write(
        &deep,
        format!(
            "apiVersion: v1\nkind: Config\nx: {}1{}\n",
            "[".repeat(100),
            "]".repeat(100)
        ),
    )
    .unwrap();
    let deep_block = tmp.path().join("deep_block");
    let mut text = String::from("apiVersion: v1\n");
    for i in 0..80 {
        text.push_str(&format!("{}k{i}:\n", "  ".repeat(i)));
    }
    text.push_str(&format!("{}v: 1\n", "  ".repeat(80)));
    std::fs::write(&deep_block, text).unwrap();
    let list = tmp.path().join("list");
    std::fs::write(&list, "- a\n- b\n").unwrap();

    for (name, file, expect) in [
        ("fifo", &fifo, "not a regular file"),
        ("dev_zero", &zero, "not a regular file"),
        ("big", &big, "over the"),
        ("deep_flow", &deep, "nest deeper"),
        ("deep_block", &deep_block, "nest deeper"),
        ("list", &list, "top level is"),
    ] {
        let before = std::fs::symlink_metadata(file).unwrap().len();
        let (code, stderr, elapsed) = run(tmp.path(), &["kubeconfig", "--file", file.to_str().unwrap()]);
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(elapsed < Duration::from_secs(10), "{name}: took {elapsed:?}");
        assert!(stderr.contains(expect), "{name}: {stderr}");
        assert!(stderr.contains("left as it is"), "{name}: {stderr}");
        assert_eq!(
            std::fs::symlink_metadata(file).unwrap().len(),
            before,
            "{name}: changed"
        );
        insta::assert_snapshot!(format!("kubeconfig_{name}"), redact(&stderr, tmp.path()));
    }
}
