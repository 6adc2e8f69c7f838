#!/usr/bin/env bash
# Runs the fuzz targets under fuzz/ (cargo fuzz, libFuzzer) on the corpus
# committed in fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh short [TARGET...]   a few seconds each (part of `make test`)
#   scripts/fuzz.sh long  [TARGET...]   FUZZ_SECONDS each, default 300 (`make fuzz`)
#
# Every target must end without a finding: a panic, an input slower than
# FUZZ_TIMEOUT seconds, or more than FUZZ_RSS_MB of memory. A finding is saved
# under fuzz/artifacts/<target>/; fix it, then keep it as a regression case:
# copy it into fuzz/corpus/<target>/ as regression-<what>.
# New inputs found along the way go to a scratch directory, not the corpus.
#
# The toolchain is nightly when rustup has it; otherwise stable with
# RUSTC_BOOTSTRAP=1 (cargo fuzz passes -Z flags). The targets' bodies are
# fuzz/bodies.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-short}"
shift || true
case "$mode" in
  short) seconds="${FUZZ_SECONDS:-5}" ;;
  long) seconds="${FUZZ_SECONDS:-300}" ;;
  *) echo "usage: $0 short|long [TARGET...]" >&2; exit 2 ;;
esac
timeout_s="${FUZZ_TIMEOUT:-10}"
rss_mb="${FUZZ_RSS_MB:-2048}"

# cargo-fuzz, pinned (only the fuzz targets need it; `make test` replays the
# corpora in the ordinary test build, tests/it/fuzz_corpus.rs).
CARGO_FUZZ_VERSION=0.13.2
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  echo "fuzz: cargo install cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --quiet
fi
toolchain=()
if rustup run nightly rustc --version >/dev/null 2>&1; then
  toolchain=(+nightly)
else
  echo "fuzz: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1"
  export RUSTC_BOOTSTRAP=1
fi

# The fuzz crate has its own workspace and target dir (fuzz/target).
unset CARGO_TARGET_DIR
fuzz_flags=(--fuzz-dir fuzz -s none --codegen-units 16 --target-dir fuzz/target)

mapfile -t all < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^kube-aws-fuzz$')
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=("${all[@]}")
fi

start=$(date +%s)
cargo "${toolchain[@]}" fuzz build "${fuzz_flags[@]}"
echo "fuzz: built in $(($(date +%s) - start))s"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=()
summary=()
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "fuzz/artifacts/$t"
  log="$scratch/$t.log"
  if cargo "${toolchain[@]}" fuzz run "${fuzz_flags[@]}" "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
      -max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb="$rss_mb" \
      -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    summary+=("$t: ${runs:-?} executions in ${seconds}s, no finding")
  else
    tail -40 "$log" >&2
    summary+=("$t: FINDING (see fuzz/artifacts/$t/)")
    failed+=("$t")
  fi
done
printf 'fuzz: %s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
