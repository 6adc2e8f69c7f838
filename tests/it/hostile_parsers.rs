//! Hostile input to the parsers and templates (issue 12), one test per class:
//! - plugin templates that recurse (a self-calling macro, a self-include,
//!   deep nesting) are refused with file and line, and a deep but finite
//!   recursion within the limits renders;
//! - `get_env` (the one tera function that reads outside kube-aws) is refused;
//! - a values.schema.json that refers to itself is refused, a tree-shaped one
//!   (recursion that moves into the value) still checks values;
//! - PAX and GNU long-name headers and gzip bombs are refused quickly, before
//!   the tar crate reads them into memory;
//! - a lock entry without a digest, or with a garbled one, is a located error;
//!   `charts lock` re-reads a local chart archive whose bytes changed.
//!
//! Not covered here: peak memory is asserted only indirectly (a refusal that
//! comes before any large read); scripts/fuzz.sh runs every parser under
//! libFuzzer's -rss_limit_mb. YAML size/depth guards, special files and
//! symlinks belong to tests of the YAML readers.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flate2::write::GzEncoder;
use kube_aws::chart::archive::{ChartFiles, ChartMetadata};
use kube_aws::chart::values::{check_release_values, ValuesLayer};
use kube_aws::plugin::guard::{MAX_MACRO_DEPTH, MAX_NESTING};

const BASE: &str = "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/kube-aws\n";

const PLUGIN: &str = "apiVersion: kube-aws/v1
kind: Plugin
metadata: {name: demo, version: 0.1.0}
spec:
  nodes:
    controller:
      files:
        - path: /etc/demo
          template: t.tera
";

/// A work tree whose plugin `demo` renders `template` as t.tera.
pub(crate) fn plugin_tree(template: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    write("cluster.yaml", &format!("{BASE}plugins:\n  demo:\n    enabled: true\n"));
    write("plugins/demo/plugin.yaml", PLUGIN);
    write("plugins/demo/t.tera", template);
    dir
}

/// Resolves the plugins of a tree: Ok(the rendered /etc/demo) or the error text.
pub(crate) fn render_template(template: &str) -> Result<String, String> {
    let dir = plugin_tree(template);
    let shown = |e: String| e.replace(&dir.path().display().to_string(), "<dir>");
    let cluster = kube_aws::config::load_cluster(dir.path()).map_err(|e| shown(e.to_string()))?;
    let resolved = kube_aws::plugin::resolve_plugins(&cluster).map_err(|e| shown(e.to_string()))?;
    let dump = format!("{resolved:?}");
    Ok(dump)
}

pub(crate) fn refused(template: &str) -> String {
    let start = Instant::now();
    let err = render_template(template).expect_err("the template must be refused");
    assert!(start.elapsed() < Duration::from_secs(20), "took {:?}", start.elapsed());
    err
}

#[test]
fn a_macro_that_calls_itself_without_end_is_refused_at_its_line() {
    let err = refused("first line\n{% macro f(n) %}{{ self::f(n=n) }}{% endmacro %}\n{{ self::f(n=1) }}\n");
    assert!(err.contains("plugins/demo/t.tera:2:1:"), "{err}");
    insta::assert_snapshot!("recursive_macro", err);
}

#[test]
fn mutually_recursive_macros_are_refused() {
    let err = refused(
        "{% macro a(n) %}{{ self::b(n=n) }}{% endmacro %}\n{% macro b(n) %}{{ self::a(n=n) }}{% endmacro %}\n{{ self::a(n=0) }}",
    );
    assert!(err.contains("t.tera:1:1:") || err.contains("t.tera:2:1:"), "{err}");
    assert!(err.contains(&format!("more than {MAX_MACRO_DEPTH} levels")), "{err}");
}

#[test]
fn deep_finite_recursion_within_the_limit_renders_and_beyond_is_refused() {
    let countdown = |n: usize| {
        format!(
            "{{% macro down(n) %}}{{% if n > 0 %}}.{{{{ self::down(n=n - 1) }}}}{{% endif %}}{{% endmacro %}}\n{{{{ self::down(n={n}) }}}}"
        )
    };
    // The outermost call is one level: n = MAX-1 opens MAX levels.
    let ok = render_template(&countdown(MAX_MACRO_DEPTH - 1)).unwrap();
    assert!(ok.contains(&".".repeat(MAX_MACRO_DEPTH - 1)), "{ok}");
    let err = refused(&countdown(MAX_MACRO_DEPTH + 5));
    assert!(err.contains("t.tera:1:1:") && err.contains("`down`"), "{err}");
    // Expressions nested to the limit, inside blocks nested to the limit.
    let expr = format!("{}1{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
    let blocks = "{% if true %}".repeat(MAX_NESTING - 1);
    let ends = "{% endif %}".repeat(MAX_NESTING - 1);
    let ok = render_template(&format!("{blocks}{{{{ {expr} }}}}{ends}")).unwrap();
    assert!(ok.contains("content: \"1\""), "{ok}");
}

#[test]
fn a_template_including_itself_is_refused() {
    let err = refused("a\nb\n  {% include \"t.tera\" %}\n");
    assert!(err.contains("plugins/demo/t.tera:3:3:"), "{err}");
    insta::assert_snapshot!("self_include", err);
}

#[test]
fn deeply_nested_expressions_and_blocks_are_refused_not_overflowed() {
    let err = refused(&format!("x\n{{{{ {}1{} }}}}", "(".repeat(100_000), ")".repeat(100_000)));
    assert!(err.contains(&format!("t.tera:2:{}:", 4 + MAX_NESTING)), "{err}");
    insta::assert_snapshot!("deep_expression", err);
    let err = refused(&"{% if true %}".repeat(50_000));
    assert!(err.contains(&format!("t.tera:1:{}:", 1 + 13 * MAX_NESTING)), "{err}");
    let err = refused(&format!("{{{{ 1{} }}}}", " + 1".repeat(100_000)));
    assert!(err.contains("operators"), "{err}");
}

#[test]
fn get_env_is_refused_at_its_line_in_files_and_plugin_yaml() {
    std::env::set_var("KUBE_AWS_HOSTILE_SECRET", "s3cr3t");
    let err = refused("a: 1\nb: {{ get_env(name=\"KUBE_AWS_HOSTILE_SECRET\") }}\n");
    assert!(
        err.contains("plugins/demo/t.tera:2:7:") && !err.contains("s3cr3t"),
        "{err}"
    );
    insta::assert_snapshot!("get_env", err);
    // In a set, with a default, hidden behind a filter argument.
    for t in [
        "{% set x = get_env(name=\"HOME\", default=\"\") %}",
        "{{ \"a\" | replace(from=\"a\", to=get_env(name=\"HOME\")) }}",
    ] {
        assert!(refused(t).contains("get_env"), "{t}");
    }
    // In a plugin.yaml string.
    let dir = plugin_tree("x");
    std::fs::write(
        dir.path().join("plugins/demo/plugin.yaml"),
        PLUGIN.replace("path: /etc/demo", "path: \"/etc/{{ get_env(name='HOME') }}\""),
    )
    .unwrap();
    let cluster = kube_aws::config::load_cluster(dir.path()).unwrap();
    let err = kube_aws::plugin::resolve_plugins(&cluster).unwrap_err().to_string();
    assert!(
        err.contains("plugins/demo/plugin.yaml:8:") && err.contains("get_env"),
        "{err}"
    );
}

#[test]
fn the_cli_refuses_a_recursive_template_without_crashing() {
    let dir = plugin_tree("{% macro f() %}{{ self::f() }}{% endmacro %}{{ self::f() }}");
    let out = assert_cmd::Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .arg("validate")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("t.tera:1:1:"), "{stderr}");
}

fn chart_with_schema(schema: serde_json::Value) -> ChartFiles {
    ChartFiles {
        metadata: ChartMetadata {
            api_version: Some("v2".into()),
            name: "c".into(),
            version: "1.0.0".into(),
            app_version: None,
            kube_version: None,
            description: None,
            chart_type: None,
        },
        values: Some("replicas: 1\n".into()),
        schema: Some(schema),
        crds: vec![],
    }
}

fn check(schema: serde_json::Value, values: &str) -> Result<(), String> {
    let chart = chart_with_schema(schema);
    let layer = ValuesLayer::from_yaml("r", Path::new("values/r.yaml"), values).unwrap();
    check_release_values("r", &chart, &[layer], "1.31")
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn a_schema_that_refers_to_itself_is_refused() {
    let err = check(serde_json::json!({"$ref": "#"}), "a: 1\n").unwrap_err();
    insta::assert_snapshot!("schema_self_ref", err);
    let err = check(
        serde_json::json!({"definitions": {"a": {"allOf": [{"$ref": "#/definitions/b"}]}, "b": {"not": {"$ref": "#/definitions/a"}}},
                           "properties": {"x": {"$ref": "#/definitions/a"}}}),
        "x: 1\n",
    )
    .unwrap_err();
    assert!(err.contains("#/definitions/a") && err.contains("never end"), "{err}");
    // A long chain without a cycle.
    let mut defs = serde_json::Map::new();
    for i in 0..10_000 {
        defs.insert(
            format!("d{i}"),
            serde_json::json!({"$ref": format!("#/definitions/d{}", i + 1)}),
        );
    }
    defs.insert("d10000".into(), serde_json::json!({"type": "object"}));
    let err = check(
        serde_json::json!({"definitions": defs, "$ref": "#/definitions/d0"}),
        "a: 1\n",
    )
    .unwrap_err();
    assert!(err.contains("chain of more than"), "{err}");
}

#[test]
fn a_tree_shaped_schema_still_checks_values() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}
    });
    check(
        schema.clone(),
        "name: a\nchildren:\n  - name: b\n    children:\n      - name: c\n",
    )
    .unwrap();
    let err = check(
        schema,
        "name: a\nchildren:\n  - name: b\n    children:\n      - name: 3\n",
    )
    .unwrap_err();
    assert!(
        err.contains("values/r.yaml:5:") && err.contains("children[0].children[0].name"),
        "{err}"
    );
}

/// One raw 512-byte tar header of `kind` declaring `size` bytes.
fn raw_header(name: &str, kind: u8, size: u64) -> [u8; 512] {
    let mut h = tar::Header::new_ustar();
    h.set_path(name).unwrap();
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_size(size);
    h.set_cksum();
    *h.as_bytes()
}

fn gzip(raw: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(raw).unwrap();
    gz.finish().unwrap()
}

/// A gzipped tar whose one extension header of `kind` declares `size` bytes
/// and carries `data` bytes of zeros.
fn extension_bomb(kind: u8, size: u64, data: usize) -> Vec<u8> {
    use std::io::Write;
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&raw_header("c/x", kind, size)).unwrap();
    let zeros = vec![0u8; 1 << 20];
    let mut left = data;
    while left > 0 {
        let n = left.min(zeros.len());
        gz.write_all(&zeros[..n]).unwrap();
        left -= n;
    }
    gz.finish().unwrap()
}

fn read_archive(bytes: &[u8]) -> String {
    let start = Instant::now();
    let err = kube_aws::chart::read_chart_archive(bytes, "bomb.tgz", None)
        .unwrap_err()
        .to_string();
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    err
}

#[test]
fn pax_and_gnu_long_name_bombs_are_refused_before_they_are_read() {
    // Declared 1.2 GB with 1.2 MB of data behind it, as the issue's archive.
    let err = read_archive(&extension_bomb(b'L', 1_200_000_000, 1_200_000));
    assert!(err.contains("GNU long name") && err.contains("64 KiB"), "{err}");
    insta::assert_snapshot!("gnu_long_name_bomb", err);
    for kind in [b'x', b'g', b'K'] {
        let err = read_archive(&extension_bomb(kind, 1_250_000_000, 4 << 20));
        assert!(err.contains("extension header") && err.contains("64 KiB"), "{err}");
    }
    // Many small PAX headers in a row describe one entry twice.
    let mut raw = Vec::new();
    for _ in 0..3 {
        raw.extend_from_slice(&raw_header("c/x", b'x', 512));
        raw.extend_from_slice(&[b'\n'; 512]);
    }
    let err = read_archive(&gzip(&raw));
    assert!(err.contains("two PAX headers"), "{err}");
}

#[test]
fn a_gzip_bomb_stops_at_the_total_limit() {
    // A directory entry declaring 1 GiB of data: nothing kube-aws keeps, but
    // the tar crate reads through it.
    let err = read_archive(&extension_bomb(b'5', 1 << 30, 200 << 20));
    assert!(err.contains("more than 100 MiB"), "{err}");
}

#[test]
fn a_pax_size_that_disagrees_with_the_header_is_refused() {
    let record = "16 size=1000000\n";
    let mut raw = Vec::new();
    raw.extend_from_slice(&raw_header("c/x", b'x', record.len() as u64));
    let mut block = [0u8; 512];
    block[..record.len()].copy_from_slice(record.as_bytes());
    raw.extend_from_slice(&block);
    raw.extend_from_slice(&raw_header("c/Chart.yaml", b'0', 0));
    let err = read_archive(&gzip(&raw));
    assert!(err.contains("PAX size differs"), "{err}");
}

const LOCK_HEAD: &str = "apiVersion: v1\nentries:\n  app:\n  - apiVersion: v2\n    name: app\n    version: 1.2.3\n    urls: [https://charts.example.com/app-1.2.3.tgz]\n";
const LOCK_TAIL: &str =
    "    annotations:\n      kube-aws.io/release: app\n      kube-aws.io/source: repo:https://charts.example.com\n";

fn lock_error(digest_line: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        format!("{BASE}charts:\n  - name: app\n    repo: https://charts.example.com\n"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("charts-index")).unwrap();
    std::fs::write(
        dir.path().join("charts-index/index.yaml"),
        format!("{LOCK_HEAD}{digest_line}{LOCK_TAIL}"),
    )
    .unwrap();
    // A directory named after the source string must never be read.
    std::fs::create_dir_all(dir.path().join("repo:https:/charts.example.com")).unwrap();
    let cluster = kube_aws::config::load_cluster(dir.path()).unwrap();
    let lock = kube_aws::chart::load_lock(dir.path()).unwrap();
    let err = kube_aws::chart::check_lock(&lock, &cluster.releases)
        .unwrap_err()
        .to_string();
    err.replace(&dir.path().display().to_string(), "<dir>")
}

#[test]
fn a_lock_entry_without_a_digest_is_a_located_error() {
    let err = lock_error("");
    assert!(
        err.contains("charts-index/index.yaml:4:5: entries.app[0]:") && err.contains("run `kube-aws charts lock`"),
        "{err}"
    );
    insta::assert_snapshot!("lock_no_digest", err);
}

#[test]
fn a_lock_entry_with_a_garbled_digest_is_a_located_error() {
    let err = lock_error("    digest: sha256:not-hex\n");
    assert!(
        err.contains("charts-index/index.yaml:8:13: entries.app[0].digest:") && err.contains("\"sha256:not-hex\""),
        "{err}"
    );
    insta::assert_snapshot!("lock_garbled_digest", err);
}

/// A chart archive `demo-VERSION.tgz` whose values.yaml says `note`.
fn chart_archive(version: &str, note: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (name, body) in [
        (
            "demo/Chart.yaml",
            format!("apiVersion: v2\nname: demo\nversion: {version}\n"),
        ),
        ("demo/values.yaml", format!("note: {note}\n")),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_path(name).unwrap();
        h.set_mode(0o644);
        h.set_size(body.len() as u64);
        h.set_cksum();
        b.append(&h, body.as_bytes()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn charts_lock(dir: &Path) -> String {
    let out = assert_cmd::Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("KUBE_AWS_CACHE_DIR", dir.join(".cache"))
        .args(["charts", "lock"])
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    all
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn charts_lock_recomputes_the_digest_of_a_changed_local_archive() {
    let dir = tempfile::tempdir().unwrap();
    let tgz: PathBuf = dir.path().join("charts/demo-1.0.0.tgz");
    std::fs::create_dir_all(tgz.parent().unwrap()).unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        format!("{BASE}charts:\n  - name: demo\n    path: charts/demo-1.0.0.tgz\n"),
    )
    .unwrap();
    let first = chart_archive("1.0.0", "one");
    std::fs::write(&tgz, &first).unwrap();
    charts_lock(dir.path());
    let lock = || std::fs::read_to_string(dir.path().join("charts-index/index.yaml")).unwrap();
    assert!(lock().contains(&sha256(&first)), "{}", lock());
    // Unchanged bytes: the entry is kept as it was.
    let before = lock();
    let demo = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("demo:"))
            .unwrap_or_default()
            .to_string()
    };
    let out = charts_lock(dir.path());
    assert!(demo(&out).ends_with("(unchanged)"), "{out}");
    assert_eq!(
        before.lines().filter(|l| l.contains("created")).collect::<Vec<_>>(),
        lock().lines().filter(|l| l.contains("created")).collect::<Vec<_>>()
    );
    // Same version, other bytes: a new digest.
    let second = chart_archive("1.0.0", "two");
    std::fs::write(&tgz, &second).unwrap();
    let out = charts_lock(dir.path());
    assert!(!demo(&out).is_empty() && !demo(&out).contains("(unchanged)"), "{out}");
    assert!(
        lock().contains(&sha256(&second)) && !lock().contains(&sha256(&first)),
        "{}",
        lock()
    );
}
