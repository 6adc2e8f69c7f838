//! Render benchmark: time per render and peak RSS for the every-hook fixture
//! and generated clusters (charts x pools), to show linear growth.
//! Run: `cargo run --release --example render-bench` (or `make bench`).
//! Each case runs in its own process (`render-bench CASE`) so peak RSS is its own.

#[path = "../tests/it/render_fixtures/mod.rs"]
mod render_fixtures;

use std::time::Instant;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn case(name: &str) -> kube_aws::render::RenderInput {
    match name {
        "full" => render_fixtures::full(),
        "minimal" => render_fixtures::minimal(),
        other => {
            let (c, p) = other.split_once('x').expect("CASE is full, minimal or CHARTSxPOOLS");
            render_fixtures::generated(c.parse().expect("charts"), p.parse().expect("pools"))
        }
    }
}

fn run_one(name: &str) {
    let input = case(name);
    let before = peak_rss_kib();
    // Warm-up (templates are parsed once per process), then the median of several.
    let first = Instant::now();
    let r = kube_aws::render::render(&input).expect("render");
    let cold = first.elapsed();
    let mut times = Vec::new();
    for _ in 0..9 {
        let t = Instant::now();
        let again = kube_aws::render::render(&input).expect("render");
        times.push(t.elapsed());
        assert_eq!(again, r, "render is deterministic");
    }
    times.sort();
    let bytes: usize = r.files.values().map(Vec::len).sum();
    println!(
        "{name:>10}: {files:>4} files {kib:>7} KiB  cold {cold:>7.2} ms  median {med:>7.2} ms  peak RSS {rss:>6} KiB (input built at {before} KiB)",
        files = r.files.len(),
        kib = bytes / 1024,
        cold = cold.as_secs_f64() * 1e3,
        med = times[times.len() / 2].as_secs_f64() * 1e3,
        rss = peak_rss_kib(),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(name) = args.first() {
        run_one(name);
        return;
    }
    let me = std::env::current_exe().expect("current exe");
    // The largest case the render accepts: at 400x75 the root template is
    // over CloudFormation's 1 MB and at 400x100 over its 500 resources, which
    // the render refuses (render::TEMPLATE_QUOTAS).
    for name in ["minimal", "full", "50x12", "100x25", "200x50", "400x70"] {
        let st = std::process::Command::new(&me).arg(name).status().expect("run case");
        assert!(st.success(), "case {name} failed");
    }
}
