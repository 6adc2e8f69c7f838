//! Hostile inputs of the last open classes (issue 30):
//! - the kubeconfig that `kubeconfig` merges into (item 5) gets the guard of
//!   every other YAML reader (regular files only, never a blocking read,
//!   size cap, nesting depth), located;
//! - a value a plugin template builds (a string or collection doubled in a
//!   loop or through a recursive macro's argument, a list nested in itself)
//!   is bounded in size and depth, refused at the template's file and line
//!   (item 4).
//!
//! Covers the CLI end to end up to the first AWS call for the kubeconfig
//! (every check on it runs before that call), and plugin resolution for
//! templates. Does not cover the merge itself (src/kubeconfig.rs unit tests),
//! the mint (tests/it/pki.rs), or peak memory (fuzz/ under -rss_limit_mb).

use std::path::Path;
use std::time::Duration;

use crate::hostile_io::{redact, run};
use crate::hostile_parsers::{refused, render_template};
use kube_aws::plugin::guard::{MAX_VALUE_BYTES, MAX_VALUE_DEPTH};

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

#[test]
fn values_a_template_builds_are_bounded_at_their_line() {
    // A string doubled in a loop: 2^26 bytes (64 MiB) would be built; the
    // `~` stops at the bound, before the value is kept (issue 40).
    let err = refused(
        "a\n{% set_global s = \"x\" %}\n{% for i in range(end=26) %}\n  {% set_global s = s ~ s %}\n{% endfor %}{{ s | length }}\n",
    );
    assert!(err.contains("plugins/demo/t.tera:4:23:"), "{err}");
    assert!(err.contains("`~`"), "{err}");
    assert!(err.contains(&MAX_VALUE_BYTES.to_string()), "{err}");
    insta::assert_snapshot!("template_string_doubling", err);
    // A list doubled with concat: 2^20 numbers; `concat` refuses first.
    let err = refused(
        "{% set_global a = [1] %}{% for i in range(end=20) %}\n{% set_global a = a | concat(with=a) %}{% endfor %}{{ a | length }}",
    );
    assert!(err.contains("plugins/demo/t.tera:2:23:"), "{err}");
    assert!(err.contains("filter `concat`"), "{err}");
    // A list nested in itself, 200 levels.
    let err = refused(
        "{% set_global a = [] %}{% for i in range(end=200) %}\n{% set_global a = [a] %}{% endfor %}{{ a | length }}",
    );
    assert!(err.contains("plugins/demo/t.tera:2:1:"), "{err}");
    assert!(err.contains(&format!("{MAX_VALUE_DEPTH} levels")), "{err}");
    insta::assert_snapshot!("template_list_nesting", err);
    // A recursive macro doubling its argument: refused at the `~` that
    // doubles it, inside the macro.
    let err = refused(
        "x\n{% macro d(s, n) %}{% if n > 0 %}{{ self::d(s=s ~ s, n=n - 1) }}{% else %}{{ s | length }}{% endif %}{% endmacro %}\n{{ self::d(s=\"x\", n=26) }}",
    );
    assert!(err.contains("plugins/demo/t.tera:2:49:"), "{err}");
    assert!(err.contains("`~`"), "{err}");
    insta::assert_snapshot!("template_macro_argument_doubling", err);
    // A macro's argument over the bound that no operator built (another
    // macro's result, 8 MiB): refused at the called macro's line.
    let err = refused(
        "{% macro two(v) %}{{ v }}{{ v }}{% endmacro %}\n{% macro d(s) %}{{ s | length }}{% endmacro %}\n\
         {% set_global x = \"x\" %}{% for i in range(end=22) %}{% set_global x = x ~ x %}{% endfor %}\
         {{ self::d(s=self::two(v=x)) }}",
    );
    assert!(err.contains("plugins/demo/t.tera:2:1:"), "{err}");
    assert!(err.contains("macro `d`: its argument `s`"), "{err}");
    // Within the limits, the same templates render (and `{%-` tags count).
    let ok = render_template(
        "{% set_global s = \"x\" %}{%- for i in range(end=10) %}{%- set_global s = s ~ s %}{% endfor %}{{ s | length }}",
    )
    .unwrap();
    assert!(ok.contains("1024"), "{ok}");
}
