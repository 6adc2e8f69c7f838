#!/usr/bin/env bash
# Boot-time benchmark of the real-node bed (not a test: it prints figures).
# Boots a controller and a worker from their rendered user-data against moto,
# as tests/it/real_node.rs `a_worker_joins_with_the_bootstrap_token_and_becomes_ready`
# does (it is that test, run alone and RUNS times), and prints each node's
# timeline from its container's start: cloud-init's stages, each step of the
# node program (kubeadm-init / kubeadm-join is kubeadm's own time), Ready, and
# the slowest step. For comparison: an EKS-optimized AMI node on EC2 is Ready
# in about a minute from launch (docs/testing.md, "The real-node bed").
# Then the addon test (tests/it/real_node/addons.rs, every built-in addon that
# runs here on one controller, the same RUNS): the controller's timeline and
# each release's install, from its status object, with the first and the last
# addon Ready and the slowest release.
#
#   scripts/bench-node.sh [RUNS]     (make bench-node; needs root and the bed:
#                                     make testbed)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-1}
TEST=real_node::a_worker_joins_with_the_bootstrap_token_and_becomes_ready
# The addon tests: three sharing one cluster; the plan's prints the timeline.
ADDONS=real_node::addons::addons_
cargo test --quiet --test it --no-run
# bench WHAT TEST [EXACT]: runs TEST alone (the tests it names, unless
# EXACT is "no") and prints its timelines; `out` keeps its output for the caller.
bench() {
  echo "== $1 ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  exact=--exact
  [ "${3:-}" != no ] || exact=
  out=$(cargo test --quiet --test it "$2" -- $exact --nocapture 2>&1) || {
    printf '%s\n' "$out" | tail -n 60 >&2
    echo "bench-node: $2 failed (above)" >&2
    exit 1
  }
  printf '%s\n' "$out" | sed -n '/^--- boot timeline ---$/,/^--- end ---$/p' | sed '1d;$d'
}
for i in $(seq "$RUNS"); do
  bench "run $i of $RUNS" "$TEST"
  printf '%s\n' "$out" | grep -o "up [0-9.]*s; controller Ready.*" | sed 's/ (metadata[^)]*)//g'
  bench "addons, run $i of $RUNS" "$ADDONS" no
done
