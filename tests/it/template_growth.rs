//! A plugin template cannot exhaust memory through a value built in one
//! expression (issue 40): every filter and operator that can grow a value
//! refuses before it builds past the 4 MiB bound on one value, and a loop
//! that writes into a macro's or a `filter` section's buffer stops at the
//! bound on what one render writes.
//!
//! Each test runs `kube-aws validate` on a work tree whose plugin template
//! builds a 4 MiB string `e` in six `set` lines and then grows it with one
//! filter or operator. The binary runs under a 1 GiB address-space limit
//! (`RLIMIT_AS`), so a regression aborts instead of eating the machine, and
//! each test checks: exit code 1 (not a signal), the refusal at the file,
//! line and column of the filter, operator or tag, naming it and the bound,
//! and the process's peak memory (`ru_maxrss` from `wait4`, taken by
//! tests/support/limited_run.py) under 100 MB.
//!
//! Not covered here: how each filter's result is sized (unit tests in
//! src/plugin/grow.rs compare each prediction with tera's result), and
//! values kept by `set` or passed to a macro (tests/it/hostile_inputs.rs).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_aws::plugin::guard::{MAX_ARGS_BYTES, MAX_VALUE_BYTES, MAX_WRITTEN};

use crate::hostile_parsers::{plugin_tree, render_template};

/// The address space the binary may use: a regression aborts here.
const AS_LIMIT: u64 = 1 << 30;
/// The peak memory a refused template may reach.
const PEAK_LIMIT_KB: i64 = 100 * 1024;

/// `e`: 4 MiB of `a` (`MAX_VALUE_BYTES`), built in six `set` lines, each
/// value within the bound; also `m`, 1 MiB, and `d`, 64 KiB.
fn prelude() -> String {
    let mut out = String::from("{% set a = \"aaaaaaaaaaaaaaaa\" %}\n");
    for (name, of) in [("b", "a"), ("c", "b"), ("d", "c"), ("m", "d")] {
        out.push_str(&format!("{{% set {name} = {} %}}\n", vec![of; 16].join(" ~ ")));
    }
    out.push_str("{% set e = m ~ m ~ m ~ m %}\n");
    out
}

struct Run {
    code: Option<i32>,
    signal: Option<i32>,
    stderr: String,
    peak_kb: i64,
    took: Duration,
}

/// Runs `kube-aws <command>` in `dir` under [`AS_LIMIT`], with its peak
/// memory, through tests/support/limited_run.py: forked from the test
/// binary, the command's `ru_maxrss` would count the test binary's memory
/// up to its exec (the wrapper's docstring says why).
fn run_limited(dir: &Path, command: &str) -> Run {
    let err_path = dir.join(".stderr");
    let wrapper = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/limited_run.py");
    let start = Instant::now();
    let out = Command::new(crate::common::tool("python3"))
        .arg(wrapper)
        .arg(AS_LIMIT.to_string())
        .arg(&err_path)
        .arg(assert_cmd::cargo::cargo_bin("kube-aws"))
        .arg(command)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", dir.join(".cache"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "limited_run.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Run {
        code: r["code"].as_i64().map(|c| c as i32),
        signal: r["signal"].as_i64().map(|c| c as i32),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
        peak_kb: r["peakKb"].as_i64().unwrap(),
        took,
    }
}

/// 1-based line and column of the first `needle` in `text`.
fn position(text: &str, needle: &str) -> (usize, usize) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in the template"));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap().chars().count() + 1;
    (line, col)
}

/// Validates a tree whose template is the prelude and `case`, which must be
/// refused where `needle` first occurs (`skip` characters into it), saying
/// `what` and `bound`, within the memory limits.
fn refused_at(case: &str, needle: &str, skip: usize, what: &str, bound: usize) -> Run {
    let template = format!("{}{case}\n", prelude());
    let dir = plugin_tree(&template);
    let run = run_limited(dir.path(), "validate");
    let err = &run.stderr;
    assert_eq!((run.code, run.signal), (Some(1), None), "{case}: not a refusal: {err}");
    let (line, col) = position(&template, needle);
    let col = col + skip;
    assert!(
        err.contains(&format!("plugins/demo/t.tera:{line}:{col}:")),
        "{case}: expected at {line}:{col}: {err}"
    );
    assert!(err.contains(what), "{case}: expected {what:?}: {err}");
    assert!(err.contains(&bound.to_string()), "{case}: expected the bound: {err}");
    assert!(
        run.peak_kb < PEAK_LIMIT_KB,
        "{case}: peak memory {} KB, over {PEAK_LIMIT_KB} KB",
        run.peak_kb
    );
    assert!(run.took < Duration::from_secs(60), "{case}: took {:?}", run.took);
    eprintln!("{case}: refused in {:?}, peak {} KB", run.took, run.peak_kb);
    run
}

/// `case` must be refused at the name of its last filter `filter`.
fn filter_refused(case: &str, filter: &str) {
    let needle = format!("| {filter}");
    let from = case
        .rfind(&needle)
        .unwrap_or_else(|| panic!("{needle:?} not in {case:?}"));
    let template_needle = &case[from..];
    refused_at(
        case,
        template_needle,
        2,
        &format!("filter `{filter}` would make a value of"),
        MAX_VALUE_BYTES,
    );
}

#[test]
fn the_issue_case_replace_is_refused_and_nothing_is_rendered() {
    let case = "x: \"{{ e | replace(from=\"a\", to=e) | length }}\"";
    let run = refused_at(
        case,
        "replace(",
        0,
        "filter `replace` would make a value of 17592186044416 bytes",
        MAX_VALUE_BYTES,
    );
    assert!(run.stderr.contains("nothing was built"), "{}", run.stderr);
    let dir = plugin_tree(&format!("{}{case}\n", prelude()));
    let render = run_limited(dir.path(), "render");
    assert_eq!(render.code, Some(1), "{}", render.stderr);
    assert!(render.stderr.contains("filter `replace`"), "{}", render.stderr);
    assert!(!dir.path().join("rendered").exists(), "render wrote its output");
}

#[test]
fn join_with_a_large_separator_is_refused() {
    filter_refused("{% set l = [\"a\", \"b\", \"c\"] %}{{ l | join(sep=e) }}", "join");
}

#[test]
fn concat_past_the_bound_is_refused() {
    filter_refused("{% set l = [m, m, m] %}{{ l | concat(with=l) | length }}", "concat");
}

#[test]
fn tilde_past_the_bound_is_refused_at_the_operator() {
    refused_at(
        "{{ e ~ e | length }}",
        "~ e |",
        0,
        "the `~` operator would make a value larger than",
        MAX_VALUE_BYTES,
    );
}

#[test]
fn a_loop_growing_a_value_with_tilde_is_refused_at_the_operator() {
    refused_at(
        "{% set_global s = \"\" %}{% for i in range(end=100) %}{% set_global s = s ~ m %}{% endfor %}{{ s | length }}",
        "s ~ m",
        2,
        "the `~` operator",
        MAX_VALUE_BYTES,
    );
}

#[test]
fn a_loop_writing_into_a_macro_result_is_refused() {
    refused_at(
        "{% macro w(v) %}{% for i in range(end=100000) %}{{ v }}{% endfor %}{% endmacro %}{{ self::w(v=e) | length }}",
        "{{ v }}",
        0,
        "writes more than",
        MAX_WRITTEN,
    );
}

#[test]
fn a_loop_writing_into_a_filter_section_is_refused() {
    refused_at(
        "{% filter upper %}{% for i in range(end=100000) %}{{ e }}{% endfor %}{% endfilter %}",
        "{{ e }}",
        0,
        "writes more than",
        MAX_WRITTEN,
    );
}

#[test]
fn a_list_literal_past_the_bound_is_refused() {
    refused_at(
        "{% set l = [e, e] %}{{ l | length }}",
        "[e, e]",
        0,
        "this list literal would make a value larger than",
        MAX_VALUE_BYTES,
    );
}

#[test]
fn the_arguments_of_one_call_past_the_bound_are_refused() {
    refused_at(
        "{{ \"x\" | length(a=e, b=e, c=e) }}",
        "length(",
        0,
        "the arguments of filter `length` would make a value larger than",
        MAX_ARGS_BYTES,
    );
}

#[test]
fn json_encode_of_a_nested_value_is_refused() {
    filter_refused(
        "{% set q = m | replace(from=\"a\", to='\"') %}{% set l = [q, q] %}{% set n = [l, q] %}{{ n | json_encode(pretty=true) }}",
        "json_encode",
    );
}

#[test]
fn split_into_many_items_is_refused() {
    filter_refused("{{ m | split(pat=\"\") | length }}", "split");
}

#[test]
fn indent_with_a_large_prefix_is_refused() {
    filter_refused("{{ e | indent(prefix=e, first=true) }}", "indent");
}

#[test]
fn truncate_with_a_large_end_is_refused() {
    filter_refused("{{ e | truncate(length=4194303, end=e) }}", "truncate");
}

#[test]
fn escape_is_refused() {
    filter_refused(
        "{% set amp = m | replace(from=\"a\", to=\"&\") %}{{ amp | escape }}",
        "escape",
    );
}

#[test]
fn escape_xml_is_refused() {
    filter_refused(
        "{% set amp = m | replace(from=\"a\", to=\"&\") %}{{ amp | escape_xml }}",
        "escape_xml",
    );
}

#[test]
fn addslashes_is_refused() {
    filter_refused(
        "{% set q = e | replace(from=\"a\", to=\"'\") %}{{ q | addslashes }}",
        "addslashes",
    );
}

#[test]
fn linebreaksbr_is_refused() {
    filter_refused(
        "{% set nl = e | replace(from=\"aa\", to=\"\n\") %}{{ nl | linebreaksbr }}",
        "linebreaksbr",
    );
}

#[test]
fn upper_is_refused() {
    filter_refused(
        "{% set i = m | replace(from=\"a\", to=\"ΐ\") %}{{ i | upper }}",
        "upper",
    );
}

/// `Ⱥ` (2 bytes) is `ⱥ` (3 bytes) in lower case.
const WIDE_LOWER: &str = "{% set k = e | replace(from=\"aa\", to=\"Ⱥ\") %}";

#[test]
fn lower_is_refused() {
    filter_refused(&format!("{WIDE_LOWER}{{{{ k | lower }}}}"), "lower");
}

#[test]
fn capitalize_is_refused() {
    filter_refused(&format!("{WIDE_LOWER}{{{{ k | capitalize }}}}"), "capitalize");
}

#[test]
fn title_is_refused() {
    filter_refused(&format!("{WIDE_LOWER}{{{{ k | title }}}}"), "title");
}

#[test]
fn group_by_is_refused() {
    filter_refused(
        "{% set x = [m ~ \"x\"] %}{% set y = [m ~ \"y\"] %}{% set z = [m ~ \"z\"] %}\
         {% set g = [x, y, z] %}{{ g | group_by(attribute=\"0\") | length }}",
        "group_by",
    );
}

/// The same filters and operators within the bound render as before.
#[test]
fn within_the_bound_the_same_templates_render() {
    let cases = [
        ("{{ m | replace(from=\"a\", to=\"bbb\") | length }}", "3145728"),
        ("{% set l = [\"a\", \"b\"] %}{{ l | join(sep=d) | length }}", "65538"),
        ("{% set l = [m] %}{{ l | concat(with=[m, m]) | length }}", "3"),
        ("{{ m ~ m ~ \"!\" | length }}", "2097153"),
        ("{{ d | split(pat=\"a\") | length }}", "65537"),
        ("{{ d | indent(prefix=d, first=true) | length }}", "131072"),
        ("{{ e | truncate(length=3) }}", "aaa…"),
        ("{{ \"<a & 'b'>\" | escape }}", "&lt;a &amp; &#x27;b&#x27;&gt;"),
        (
            "{% set i = [d, 1] %}{% set l = [i] %}{{ l | json_encode | length }}",
            "65544",
        ),
        (
            "{% macro w(v) %}{% for i in range(end=4) %}{{ v }}{% endfor %}{% endmacro %}{{ self::w(v=m) | length }}",
            "4194304",
        ),
        ("{{ e | replace(from=\"b\", to=e) | length }}", "4194304"),
    ];
    for (case, want) in cases {
        let out = render_template(&format!("{}{case}", prelude())).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert!(
            out.contains(want),
            "{case}: expected {want}: {}",
            &out[..out.len().min(300)]
        );
    }
}

/// The prelude itself validates, well within the memory limit: the peak of
/// the refusals above is not the cost of building `e`.
#[test]
fn the_prelude_alone_validates_within_the_limits() {
    let dir = plugin_tree(&format!("{}{{{{ e | length }}}}\n", prelude()));
    let run = run_limited(dir.path(), "validate");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.peak_kb < PEAK_LIMIT_KB, "peak {} KB", run.peak_kb);
    eprintln!("prelude: validated in {:?}, peak {} KB", run.took, run.peak_kb);
}
