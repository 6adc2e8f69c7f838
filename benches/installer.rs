//! `make bench-installer`: the addon reconciler (`kube-aws-node reconcile`)
//! on the control-plane test bed, with the real helm and the shared upstream
//! charts, installing with concurrency 1 (sequential) and with the plan's
//! default (parallel). kwok marks every pod Ready a fixed delay after it is
//! scheduled (its pod-ready stage with `delay`), standing in for image pulls
//! and readiness probes. Two plans:
//! - the built-in plan of the test bed's cluster (the pod identity webhook
//!   off: kwok runs no webhook server, tests/it/installer_testbed.rs says why);
//! - a synthetic graph of 30 releases in 10 layers of 3, each release
//!   depending on all 3 of the layer before: its critical path is 10 releases.
//!
//! Per run: wall time of the reconciler, the critical path measured from
//! the releases' own durations (their status objects' startedAt..updatedAt,
//! whole seconds) along the plan's dependencies (and bootstrap-first), and
//! the same durations scheduled at the run's concurrency (`scheduled`): the
//! wall of a reconciler that costs nothing itself. The built-in plan runs a
//! third time at concurrency 8, wider than the plan, where the two agree. Each
//! run has a control plane of its own, so nothing is already installed.
//! Prints figures; asserts nothing. Not a test: without `--bench` (which
//! `cargo bench` passes) it returns at once.

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::installer_bed::{Bed, BUILT_INS};
use common::testbed::{self, ControlPlane};
use serde_json::Value;

const READY_DELAY_MS: u64 = 5000;

/// 10 layers of 3 external-dns releases (one Deployment each); every release
/// depends on the whole layer before it.
fn synthetic() -> String {
    let mut y = String::from("charts:\n");
    for layer in 0..10 {
        for i in 0..3 {
            y.push_str(&format!(
                "  - name: l{layer}r{i}\n    chart: external-dns\n    repo: https://kubernetes-sigs.github.io/external-dns/\n    \
                 version: 1.21.1\n    namespace: bench\n"
            ));
            if layer > 0 {
                let deps: Vec<String> = (0..3).map(|j| format!("l{}r{j}", layer - 1)).collect();
                y.push_str(&format!("    dependsOn: [{}]\n", deps.join(", ")));
            }
        }
    }
    y.push_str("plugins:\n  aws-vpc-cni: {enabled: false}\n  aws-cloud-controller-manager: {enabled: false}\n  pod-identity-webhook: {enabled: false}\n");
    y
}

/// The pinned kwok stages with the pod-ready stage delayed.
fn delayed_stages(bin: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(bin.join("kwok-stages.yaml")).unwrap();
    let mut out = Vec::new();
    let mut in_pod_ready = false;
    for doc in text.split("\n---\n") {
        let mut d = doc.to_string();
        if d.contains("name: pod-ready\n") {
            in_pod_ready = true;
            d = d.replacen(
                "\nspec:\n",
                &format!("\nspec:\n  delay:\n    durationMilliseconds: {READY_DELAY_MS}\n"),
                1,
            );
        }
        out.push(d);
    }
    assert!(in_pod_ready, "no pod-ready stage in the pinned kwok stages");
    let path = dir.join("kwok-stages-delayed.yaml");
    std::fs::write(&path, out.join("\n---\n")).unwrap();
    path
}

fn secs(t: &str) -> i64 {
    // 2026-12-01T03:26:16Z
    let (date, time) = t.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let h: Vec<i64> = time.split(':').map(|x| x.parse().unwrap()).collect();
    // Days since an epoch good enough within one month.
    ((d[1] * 31 + d[2]) * 86400) + h[0] * 3600 + h[1] * 60 + h[2]
}

/// What a release waits for: its dependencies, and the bootstrap releases
/// unless it is one.
fn needs<'a>(r: &'a Value, bootstrap: &[&'a str]) -> Vec<&'a str> {
    let mut before: Vec<&str> = r["dependsOn"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| d.as_str().unwrap())
        .collect();
    if r["bootstrap"] != true {
        before.extend(bootstrap.iter().copied());
    }
    before
}

/// The longest chain of release durations along the plan's dependencies
/// (bootstrap releases come before every other).
fn critical_path(plan: &Value, status: &BTreeMap<String, Value>) -> i64 {
    let releases = plan["releases"].as_array().unwrap();
    let dur = |n: &str| secs(status[n]["updatedAt"].as_str().unwrap()) - secs(status[n]["startedAt"].as_str().unwrap());
    let mut finish: BTreeMap<String, i64> = BTreeMap::new();
    // Plan order is a topological order (render sorts it).
    let bootstrap: Vec<&str> = releases
        .iter()
        .filter(|r| r["bootstrap"] == true)
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for r in releases {
        let name = r["name"].as_str().unwrap();
        let start = needs(r, &bootstrap).iter().map(|d| finish[*d]).max().unwrap_or(0);
        finish.insert(name.to_string(), start + dur(name));
    }
    finish.values().copied().max().unwrap_or(0)
}

/// The wall a reconciler with no cost of its own would take at
/// `concurrency`: the releases' own durations placed as the reconciler's
/// schedule (src/node/kube_aws_node/schedule.py `decide`) places them:
/// the bootstrap releases before every other, a release once its
/// dependencies are done, in plan order, at most `concurrency` at a time.
/// Against this, `wall` shows the reconciler's own cost; against the
/// critical path it also shows the concurrency's bound (the built-in plan's
/// six releases after the bootstrap ones take two waves at 4).
fn scheduled(plan: &Value, status: &BTreeMap<String, Value>, concurrency: usize) -> i64 {
    let releases = plan["releases"].as_array().unwrap();
    let dur = |n: &str| secs(status[n]["updatedAt"].as_str().unwrap()) - secs(status[n]["startedAt"].as_str().unwrap());
    let bootstrap: Vec<&str> = releases
        .iter()
        .filter(|r| r["bootstrap"] == true)
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    let mut now = 0;
    let mut done: BTreeMap<&str, i64> = BTreeMap::new();
    let mut running: Vec<(i64, &str)> = Vec::new();
    let mut started = std::collections::BTreeSet::new();
    loop {
        for r in releases {
            let name = r["name"].as_str().unwrap();
            if running.len() < concurrency.max(1)
                && !started.contains(name)
                && needs(r, &bootstrap).iter().all(|d| done.contains_key(d))
            {
                started.insert(name);
                running.push((now + dur(name), name));
            }
        }
        let Some(&(end, _)) = running.iter().min() else {
            return now;
        };
        now = end;
        for (_, name) in running.iter().filter(|(e, _)| *e == end) {
            done.insert(name, end);
        }
        running.retain(|(e, _)| *e != end);
    }
}

struct Row {
    plan: &'static str,
    /// How the reconciler made the calls sdkcall.py answers: "in process"
    /// (botocore, as on a node that has it) or "aws CLI" (one process each).
    calls: &'static str,
    releases: usize,
    concurrency: u32,
    wall: f64,
    critical: i64,
    scheduled: i64,
}

fn run(
    bin: &std::path::Path,
    stages: &std::path::Path,
    name: &'static str,
    plugins: &str,
    concurrency: u32,
    in_process: bool,
) -> Row {
    let cp = std::sync::Arc::new(ControlPlane::start_with_stages(bin, testbed::rendered_nodes(), stages));
    let mut bed = Bed::with_calls(cp, in_process);
    bed.publish_with(plugins, Some(concurrency));
    let t = Instant::now();
    let r = bed.reconcile();
    let wall = t.elapsed().as_secs_f64();
    if r.code != 0 {
        eprintln!(
            "{name} (concurrency {concurrency}): the reconciler failed:\n{}",
            r.stderr
        );
    }
    if in_process {
        // Every wait condition signalled, through moto (not the wrapper).
        let st = bed.stack_status();
        if st != "CREATE_COMPLETE" {
            eprintln!("{name} (concurrency {concurrency}): the wait conditions' stack is {st}, not CREATE_COMPLETE");
        }
    }
    let status: BTreeMap<String, Value> = bed
        .releases
        .iter()
        .map(|(n, _, _)| (n.clone(), bed.status(n)))
        .collect();
    Row {
        plan: name,
        calls: if in_process { "in process" } else { "aws CLI" },
        releases: bed.releases.len(),
        concurrency,
        wall,
        critical: critical_path(&bed.plan, &status),
        scheduled: scheduled(&bed.plan, &status, concurrency as usize),
    }
}

fn main() {
    // `cargo test --all-targets` runs bench targets too, without `--bench`
    // (which `cargo bench` passes): this is a benchmark, not a test.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("benches/installer: runs under `make bench-installer` (cargo bench) only");
        return;
    }
    let bin = testbed::bin_dir("bench-installer").expect("the test bed is needed (make testbed)");
    let dir = tempfile::tempdir().unwrap();
    let stages = delayed_stages(&bin, dir.path());
    let default = kube_aws::render::plan::CONCURRENCY;
    let synth = synthetic();
    let mut rows = Vec::new();
    // The built-in plan at the default concurrency once more with every
    // call on the aws CLI: the figure before sdkcall.py (issue 37).
    let runs = [
        ("built-in", BUILT_INS, 1, true),
        ("built-in", BUILT_INS, default, true),
        ("built-in", BUILT_INS, default, false),
        // Wider than the plan's six releases after the bootstrap ones: what
        // is left beyond the critical path is the reconciler's own cost.
        ("built-in", BUILT_INS, 8, true),
        ("synthetic-30", synth.as_str(), 1, true),
        ("synthetic-30", synth.as_str(), default, true),
    ];
    for (name, plugins, c, in_process) in runs {
        let row = run(&bin, &stages, name, plugins, c, in_process);
        eprintln!(
            "{name}: concurrency {c}, calls {}: {:.1} s wall, critical path {} s, scheduled {} s",
            row.calls, row.wall, row.critical, row.scheduled
        );
        rows.push(row);
    }
    println!(
        "\naddon reconciler on the test bed (pods Ready {} s after scheduling; times in s)\n",
        READY_DELAY_MS / 1000
    );
    println!(
        "| plan | AWS calls | releases | concurrency | wall | critical path | wall / critical path | scheduled | wall / scheduled |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.1} | {} | {:.2} | {} | {:.2} |",
            r.plan,
            r.calls,
            r.releases,
            r.concurrency,
            r.wall,
            r.critical,
            r.wall / r.critical.max(1) as f64,
            r.scheduled,
            r.wall / r.scheduled.max(1) as f64
        );
    }
    for name in ["built-in", "synthetic-30"] {
        let ours = |r: &&Row| r.plan == name && r.calls == "in process";
        let seq = rows.iter().filter(ours).find(|r| r.concurrency == 1).unwrap();
        let par = rows.iter().filter(ours).find(|r| r.concurrency == default).unwrap();
        println!("{name}: parallel is {:.2}x faster than sequential", seq.wall / par.wall);
    }
    let cli = rows.iter().find(|r| r.calls == "aws CLI").unwrap();
    let sdk = rows
        .iter()
        .find(|r| r.plan == cli.plan && r.concurrency == cli.concurrency && r.calls == "in process")
        .unwrap();
    println!(
        "built-in, concurrency {}: wall / critical path {:.2} with the aws CLI, {:.2} in process",
        cli.concurrency,
        cli.wall / cli.critical.max(1) as f64,
        sdk.wall / sdk.critical.max(1) as f64
    );
}
