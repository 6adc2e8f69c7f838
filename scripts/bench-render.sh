#!/usr/bin/env bash
# Render benchmark: time and peak RSS per case, each case in its own process.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet --release --example render-bench
