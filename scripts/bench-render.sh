#!/usr/bin/env bash
# Render benchmark (not a test: it prints figures, asserts nothing).
#  1. The fixtures, in process (examples/render-bench.rs): time and peak RSS
#     per case, each case in its own process.
#  2. The README's example as a user runs it: `kube-aws --dir example render`
#     on an `init --example` work tree, RUNS processes (default 50) of the
#     release binary; the median wall and CPU time and the peak RSS, and the
#     ratio of each to the last recorded figure (docs/testing.md, "The
#     render's speed, measured").
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet --release --example render-bench
cargo build --quiet --release --bin kube-aws
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target/release/kube-aws init --example "$work/example" --force >/dev/null
python3 - target/release/kube-aws "$work/example" "${RUNS:-50}" <<'PY'
import os, statistics, subprocess, sys, time

# The last recorded figures (docs/testing.md, "Once per process"): median
# wall and CPU in ms, peak RSS in KiB.
RECORDED = {"wall": 26.0, "cpu": 24.9, "rss": 23930}
binary, tree, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
wall, cpu, rss = [], [], []
for _ in range(runs):
    t = time.perf_counter()
    p = subprocess.Popen([binary, "--dir", tree, "render"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit("bench-render: kube-aws render failed (status %d)" % status)
    wall.append((time.perf_counter() - t) * 1e3)
    cpu.append((usage.ru_utime + usage.ru_stime) * 1e3)
    rss.append(usage.ru_maxrss)
now = {"wall": statistics.median(wall), "cpu": statistics.median(cpu), "rss": statistics.median(rss)}
print("example render, %d processes, load average %s:" % (runs, " ".join(open("/proc/loadavg").read().split()[:3])))
for key, unit, what in (("wall", "ms", "median wall"), ("cpu", "ms", "median CPU"), ("rss", "KiB", "peak RSS")):
    print("  %-12s %9.1f %-3s  recorded %9.1f %-3s  ratio %.2f" % (what, now[key], unit, RECORDED[key], unit,
                                                                     now[key] / RECORDED[key]))
PY
