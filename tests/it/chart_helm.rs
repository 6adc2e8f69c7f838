//! Charts against real Helm (helm-python-sdk): Helm creates, packages and
//! indexes fixture charts; a 127.0.0.1 HTTP server serves them; kube-aws locks
//! and fetches them. Checks: our digests are Helm's, Helm's index round-trips
//! through our parser, our values coalescing equals Helm's, and bad input
//! fails clearly with exit 1 and an empty cache.
//! Not covered: HTTPS repositories, authentication.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::Command as Bin;
use serde_json::{json, Value};

fn helm(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/helm_fixture.py");
    let out = Command::new(common::tool("python"))
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn kube_aws(dir: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    Bin::cargo_bin("kube-aws")
        .unwrap()
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", cache)
        .env_remove("KUBE_AWS_CHART_CACHE")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

fn cluster(dir: &Path, charts: &str) {
    std::fs::create_dir_all(dir.join("values")).unwrap();
    // The default-on plugins (the CNI, the cloud controller manager) are turned off:
    // their charts live on the internet, out of reach here.
    let text = format!(
        "clusterName: demo\nregion: us-west-2\ns3URI: s3://my-bucket/p\nplugins: {{aws-vpc-cni: {{enabled: false}}, aws-cloud-controller-manager: {{enabled: false}}}}\ncharts:\n{charts}"
    );
    std::fs::write(dir.join("cluster.yaml"), text).unwrap();
}

fn cached_files(cache: &Path) -> Vec<PathBuf> {
    let d = cache.join("kube-aws/charts/sha256");
    match std::fs::read_dir(d) {
        Ok(list) => list.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn lock_and_fetch_from_a_helm_built_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let digests = helm(&["make-repo", repo.to_str().unwrap()]);
    let server = common::start_http(&repo);
    let url = format!("http://127.0.0.1:{}", server.port);
    let wt = tmp.path().join("wt");
    let cache = tmp.path().join("cache");
    cluster(
        &wt,
        &format!(
            "  - {{name: web, chart: app, repo: '{url}', version: '~0.1'}}\n  - {{name: next, chart: app, repo: '{url}/', version: '>=0.2.0-0'}}\n  - {{name: db, repo: '{url}'}}\n"
        ),
    );
    let out = kube_aws(&wt, &cache, &["-o", "json", "charts", "lock"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Three releases, one repository (spelled with and without a trailing slash): one request.
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["requests"], 1, "{report}");

    let lock = kube_aws::chart::load_lock(&wt).unwrap();
    let cl = kube_aws::config::load_cluster(&wt).unwrap();
    let locked = kube_aws::chart::check_lock(&lock, &cl.releases).unwrap();
    let by_release = |r: &str| locked.iter().find(|c| c.release == r).unwrap().clone();
    assert_eq!(by_release("web").version, "0.1.5");
    assert_eq!(by_release("next").version, "1.0.0-rc.1");
    assert_eq!(by_release("db").version, "2.0.0");
    for c in &locked {
        let helm_digest = digests[format!("{}-{}.tgz", c.chart, c.version)].as_str().unwrap();
        assert_eq!(
            format!("sha256:{}", c.digest.as_deref().unwrap()),
            helm_digest,
            "{}",
            c.release
        );
        assert_eq!(c.urls, vec![format!("{url}/{}-{}.tgz", c.chart, c.version)]);
    }
    // The lock is a Helm index: Helm itself reads it.
    let lock_dir = wt.join("charts-index");
    let lock_server = common::start_http(&lock_dir);
    let helm_view = helm(&["index", &format!("http://127.0.0.1:{}", lock_server.port)]);
    assert_eq!(helm_view["entries"]["app"].as_array().unwrap().len(), 2);
    assert_eq!(
        helm_view["entries"]["db"][0]["annotations"]["kube-aws.io/source"],
        json!(format!("repo:{url}"))
    );

    // validate reads the lock and the cache: before fetch it passes, but names the
    // releases whose values it could not check and the command that fetches them.
    let out = kube_aws(&wt, &cache, &["validate"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("not checked (chart not fetched yet; run `kube-aws charts fetch`)"),
        "{text}"
    );

    let out = kube_aws(&wt, &cache, &["-o", "json", "charts", "fetch"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["downloaded"].as_array().unwrap().len(), 3, "{report}");
    let out = kube_aws(&wt, &cache, &["validate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // db's values.schema.json wants replicaCount >= 1.
    std::fs::write(wt.join("values/db.yaml"), "image:\n  tag: x\nreplicaCount: 0\n").unwrap();
    let out = kube_aws(&wt, &cache, &["validate"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("values/db.yaml:3:") && err.contains("release \"db\"") && err.contains("replicaCount"),
        "{err}"
    );
    std::fs::write(
        wt.join("values/db.yaml"),
        "image:\n  tag: x\nreplicaCount: 2\nservice: null\n",
    )
    .unwrap();
    let out = kube_aws(&wt, &cache, &["charts", "values", "db"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_yaml::from_str(&shown).unwrap();
    assert_eq!(
        doc,
        json!({"image": {"tag": "x"}, "replicaCount": 2, "service": null}),
        "{shown}"
    );
    std::fs::remove_file(wt.join("values/db.yaml")).unwrap();
    assert_eq!(cached_files(&cache).len(), 3);
    // A warm run makes no request at all.
    let out = kube_aws(&wt, &cache, &["-o", "json", "charts", "fetch"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["requests"], 0, "{report}");
    assert_eq!(report["cached"].as_array().unwrap().len(), 3);

    // A second lock keeps entries that still match, without fetching indexes.
    let out = kube_aws(&wt, &cache, &["-o", "json", "charts", "lock"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["requests"], 0, "{report}");

    // A constraint the lock no longer satisfies is an error naming the command.
    cluster(
        &wt,
        &format!("  - {{name: web, chart: app, repo: '{url}', version: '~0.2'}}\n"),
    );
    let cl = kube_aws::config::load_cluster(&wt).unwrap();
    let err = kube_aws::chart::check_lock(&lock, &cl.releases)
        .unwrap_err()
        .to_string();
    assert!(err.contains("kube-aws charts lock") && err.contains("0.1.5"), "{err}");
}

#[test]
fn helm_written_index_round_trips_through_our_parser() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    helm(&["make-repo", repo.to_str().unwrap()]);
    let server = common::start_http(&repo);
    let url = format!("http://127.0.0.1:{}", server.port);
    let theirs = helm(&["index", &url]);
    let text = std::fs::read_to_string(repo.join("index.yaml")).unwrap();
    let ours = kube_aws::chart::parse_index(&text, &url, "index.yaml").unwrap();
    let their_entries = theirs["entries"].as_object().unwrap();
    assert_eq!(ours.entries.len(), their_entries.len());
    for (name, list) in their_entries {
        let mine = &ours.entries[name];
        assert_eq!(mine.len(), list.as_array().unwrap().len());
        for (a, b) in mine.iter().zip(list.as_array().unwrap()) {
            assert_eq!(a.version, b["version"].as_str().unwrap());
            assert_eq!(a.digest.as_deref(), b["digest"].as_str());
            assert_eq!(a.api_version, b["apiVersion"].as_str().unwrap());
            assert_eq!(a.app_version.as_deref(), b["appVersion"].as_str());
            assert_eq!(a.created.is_some(), b["created"].is_string());
            assert_eq!(a.urls, vec![format!("{url}/{}", b["urls"][0].as_str().unwrap())]);
        }
    }
}

#[test]
fn values_coalesce_like_helm() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    helm(&["make-repo", repo.to_str().unwrap()]);
    let tgz = repo.join("app-0.1.0.tgz");
    let chart = kube_aws::chart::read_chart_archive(&std::fs::read(&tgz).unwrap(), "app", Some("app")).unwrap();
    let layer =
        |label: &str, text: &str| kube_aws::chart::ValuesLayer::from_yaml("web", Path::new(label), text).unwrap();
    let layers = vec![
        layer(
            "plugin",
            "nested:\n  a:\n    c: [9]\n    d: {f: y}\nimage:\n  tag: v1\nextra: {x: 1}\n",
        ),
        layer(
            "values/web.yaml",
            "nested:\n  a:\n    b: null\n  keep: null\nservice: null\nlistOfMaps: [{name: only}]\n",
        ),
        layer(
            "values/more.yaml",
            "image:\n  pullPolicy: Always\n  tag: null\nresources: {limits: {cpu: 1}}\nextra: {y: null}\n",
        ),
    ];
    let user = kube_aws::chart::merge_layers(&layers);
    let ours = kube_aws::chart::coalesce(&user, &serde_yaml::from_str(chart.values.as_deref().unwrap()).unwrap());
    let user_file = tmp.path().join("user.json");
    std::fs::write(&user_file, serde_json::to_vec(&user).unwrap()).unwrap();
    let theirs = helm(&["merge", tgz.to_str().unwrap(), user_file.to_str().unwrap()]);
    assert_eq!(ours, theirs, "\nours:   {ours}\ntheirs: {theirs}");
    // The cases the layering must get right, spelled out.
    assert!(ours["nested"]["a"].get("b").is_none());
    assert_eq!(ours["nested"]["a"]["c"], json!([9]));
    assert!(ours["nested"].get("keep").is_none());
    assert!(ours.get("service").is_none());
    assert_eq!(ours["listOfMaps"], json!([{"name": "only"}]));
}

#[test]
fn bad_input_fails_clearly_and_caches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    helm(&["make-repo", repo.to_str().unwrap()]);
    // A copy of the repository whose index lies about a digest and lists a missing archive.
    let bad = tmp.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::copy(repo.join("db-2.0.0.tgz"), bad.join("db-2.0.0.tgz")).unwrap();
    let index = std::fs::read_to_string(repo.join("index.yaml")).unwrap();
    let wrong = "0".repeat(64);
    let real = kube_aws::chart::cache::sha256_hex(&std::fs::read(repo.join("db-2.0.0.tgz")).unwrap());
    std::fs::write(bad.join("index.yaml"), index.replace(&real, &wrong)).unwrap();
    // A third one with a broken index.
    let broken = tmp.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("index.yaml"),
        "apiVersion: v1\nentries:\n  app:\n  - name: [unclosed\n",
    )
    .unwrap();

    let good = common::start_http(&repo);
    let bad_server = common::start_http(&bad);
    let broken_server = common::start_http(&broken);
    let good_url = format!("http://127.0.0.1:{}", good.port);
    let bad_url = format!("http://127.0.0.1:{}", bad_server.port);
    let broken_url = format!("http://127.0.0.1:{}", broken_server.port);
    let dead_url = format!("http://127.0.0.1:{}", common::free_port());

    // The exit code: 4 when the repository cannot be reached or refuses the
    // request (the remote side, as for AWS), 1 for everything the work tree
    // or the repository's content gets wrong.
    let cases: Vec<(&str, String, &[&str], Vec<String>)> = vec![
        (
            "unreachable",
            format!("{{name: a, chart: app, repo: '{dead_url}'}}"),
            &["lock"],
            vec![format!("cannot reach {dead_url}/index.yaml")],
        ),
        (
            "malformed index",
            format!("{{name: a, chart: app, repo: '{broken_url}'}}"),
            &["lock"],
            vec!["malformed index".into(), "line".into()],
        ),
        (
            "unknown chart",
            format!("{{name: a, chart: ap, repo: '{good_url}'}}"),
            &["lock"],
            vec!["\"ap\" is not in".into(), "did you mean \"app\"".into()],
        ),
        (
            "no version",
            format!("{{name: a, chart: app, repo: '{good_url}', version: '~5'}}"),
            &["lock"],
            vec!["no version".into(), "1.0.0-rc.1, 0.2.0, 0.1.5".into()],
        ),
        (
            "digest mismatch",
            format!("{{name: db, repo: '{bad_url}'}}"),
            &["fetch"],
            vec![
                "digest mismatch".into(),
                format!("expected sha256:{wrong}"),
                format!("got sha256:{real}"),
                format!("{bad_url}/db-2.0.0.tgz"),
                "\"db\"".into(),
            ],
        ),
        (
            "404",
            format!("{{name: web, chart: app, repo: '{bad_url}', version: 0.1.0}}"),
            &["fetch"],
            vec!["HTTP 404".into(), format!("{bad_url}/app-0.1.0.tgz")],
        ),
    ];
    for (label, chart, cmd, expected) in cases {
        let code = if matches!(label, "unreachable" | "404") { 4 } else { 1 };
        let wt = tmp.path().join(format!("wt-{}", label.replace(' ', "-")));
        let cache = tmp.path().join(format!("cache-{}", label.replace(' ', "-")));
        cluster(&wt, &format!("  - {chart}\n"));
        if cmd == ["fetch"] {
            let out = kube_aws(&wt, &cache, &["charts", "lock"]);
            assert!(out.status.success(), "{label}: lock: {}", stderr(&out));
        }
        let mut args = vec!["charts"];
        args.extend_from_slice(cmd);
        let out = kube_aws(&wt, &cache, &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{label}: {err}");
        for e in &expected {
            assert!(err.contains(e.as_str()), "{label}: expected {e:?} in: {err}");
        }
        assert!(cached_files(&cache).is_empty(), "{label}: {:?}", cached_files(&cache));
    }
    // fetch without a lock names the command to run.
    let wt = tmp.path().join("wt-nolock");
    cluster(&wt, &format!("  - {{name: a, chart: app, repo: '{good_url}'}}\n"));
    let out = kube_aws(&wt, &tmp.path().join("c"), &["charts", "fetch"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("run `kube-aws charts lock`"), "{}", stderr(&out));
}
