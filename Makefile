# The test command CI runs (see README): installs the real tools, then lints and tests.
SHELL := /bin/bash
VENV := $(CURDIR)/.venv-tools
export PATH := $(VENV)/bin:$(PATH)
export KUBE_AWS_TOOLS := $(VENV)/bin
export KUBE_AWS_SHARED_DATA ?= $(abspath $(CURDIR)/../shared/data)

.PHONY: test tools testbed nodebed upgradebed test-upgrade lint fmt-check unit test-build test-run fuzz-short fuzz example bench bench-installer bench-node

# The control-plane test bed (scripts/install-testbed.sh; docs/testing.md).
export KUBE_AWS_TESTBED_BIN ?= $(CURDIR)/.testbed/bin

# The fuzz corpora are replayed by `unit` (tests/it/fuzz_corpus.rs); the
# libFuzzer build is `fuzz-short` and `fuzz`, outside `make test` (docs/limits.md).
#
# `make test` runs its phases (tools, then the beds beside lint and build,
# then tests), stops at the first that fails and exits with its status; at the end,
# also after a failure, it prints each phase's wall time, each test module's
# and the slowest tests, and writes them to $(KUBE_AWS_TEST_TIMES)/summary.txt
# (scripts/test-times.py; docs/testing.md, "The timing summary").
export KUBE_AWS_TEST_TIMES ?= $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/test-times
TIMES := python3 $(CURDIR)/scripts/test-times.py
# cargo runs each test binary through scripts/test-times.py: libtest's JSON
# events, printed as libtest prints them, each test's time kept.
TEST_RUNNER := --config "target.'cfg(all())'.runner = ['python3', '$(CURDIR)/scripts/test-times.py', 'run']"

# Three test threads on the 2-core machine: the long real-node tests spend
# most of their time waiting (the renewal test on its certificates' expiry,
# the fault tests on a two-minute outage, every boot on kubelet and systemd
# timers), not on the CPU. Measured on the same tree (docs/testing.md,
# "Figures of 2026-12-04"): 29m17.7s with two threads, 21m57.8s with three.
# Four since 2026-12-05 (docs/testing.md, "Figures of 2026-12-05"): on
# f86e97d, 27m18.1s with three (an earlier run), 25m41.1s with four.
export RUST_TEST_THREADS ?= 4

#
# The beds (Go builds, the node images) and the crate build (lint, build) do
# not depend on each other: on a machine without the bed cache they run side
# by side, and the tests start once both are done. An earlier fresh machine
# finished its beds inside a 38-minute cold crate build run beside them
# (docs/testing.md, "Figures of 2026-12-03, the next stop"); one after the
# other they took 38.6 and 23.9 minutes (docs/testing.md, "Figures of
# 2026-12-04, the evening stop"). With the cache the beds take a second.
test:
	@$(TIMES) reset
	@status=0; \
	$(TIMES) phase tools -- $(MAKE) --no-print-directory tools || status=$$?; \
	if [ $$status = 0 ]; then \
	  $(TIMES) phase beds -- $(MAKE) --no-print-directory testbed & beds=$$!; \
	  for p in lint:fmt-check build:test-build; do \
	    $(TIMES) phase $${p%%:*} -- $(MAKE) --no-print-directory $${p#*:} || { status=$$?; break; }; \
	  done; \
	  wait $$beds || { b=$$?; [ $$status != 0 ] || status=$$b; }; \
	fi; \
	[ $$status != 0 ] || $(TIMES) phase tests -- $(MAKE) --no-print-directory test-run || status=$$?; \
	$(TIMES) summary; \
	exit $$status

tools:
	@bash scripts/install-tools.sh

# The beds, the next minor's node image, which the minor upgrade test in
# `make test` upgrades to (scripts/install-upgradebed.sh), and the addons'
# images built from source (scripts/install-addon-images.sh; docs/testing.md).
testbed:
	@$(TIMES) phase beds/control-plane -- bash scripts/install-testbed.sh
	@$(TIMES) phase beds/real-node -- bash scripts/install-nodebed.sh
	@UPGRADEBED=minor $(TIMES) phase beds/next-minor -- bash scripts/install-upgradebed.sh
	@$(TIMES) phase beds/addon-images -- bash scripts/install-addon-images.sh

# The real-node bed alone (scripts/install-nodebed.sh; needs the test bed and root).
nodebed:
	@bash scripts/install-nodebed.sh

# The upgrade tests' other Kubernetes versions (scripts/install-upgradebed.sh):
# the default minor's oldest patch is outside `make test` (a third
# Kubernetes build would take its cold run past 60 minutes).
upgradebed: testbed
	@bash scripts/install-upgradebed.sh

# The real-node patch and HA upgrade tests (ignored by `make test`: they need
# upgradebed's older patch).
test-upgrade: tools upgradebed
	cargo test --test it -- --ignored --test-threads 1 real_node::upgrade::

lint: fmt-check
	cargo clippy --all-targets -- -D warnings

fmt-check:
	cargo fmt --check

# clippy as the workspace's compiler while the tests build (issue 37):
# `cargo clippy` is `cargo check` with clippy-driver as the workspace's
# compiler (RUSTC_WORKSPACE_WRAPPER) and its lint options in CLIPPY_ARGS
# (clippy's src/main.rs and src/driver.rs), so a separate `cargo clippy`
# compiled every dependency a second time, as check metadata the build
# cannot use (10 minutes of a cold `make test`: docs/testing.md). Here the
# build's own compile of the crate's targets runs clippy's lints, and the
# dependencies are compiled once. `make lint` is still the separate pass.
# test-run sets the same two variables: cargo's fingerprint of the
# workspace's units holds the wrapper, so without them it would rebuild.
# Without clippy-driver the build stops, rather than skip the lints.
CLIPPY_BUILD := w="$$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)" || { echo "make: no clippy-driver (rustup component add clippy)" >&2; exit 1; }; \
	RUSTC_WORKSPACE_WRAPPER="$$w" CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

unit: test-build test-run

test-build:
	$(CLIPPY_BUILD) cargo test --all-targets --no-run

test-run:
	$(CLIPPY_BUILD) cargo test $(TEST_RUNNER) --all-targets

# Every fuzz target for a few seconds on the committed corpus (scripts/fuzz.sh).
fuzz-short:
	bash scripts/fuzz.sh short

# Every fuzz target for minutes (FUZZ_SECONDS each, default 300).
fuzz:
	bash scripts/fuzz.sh long

example:
	cargo run --quiet -- init --example example --force && cargo run --quiet -- --dir example render

# The render first: bench.sh needs the tools and the shared indexes.
bench:
	bash scripts/bench-render.sh
	bash scripts/bench.sh

# The addon reconciler on the control-plane test bed: sequential against
# parallel, against the critical path (benches/installer.rs). The dev profile:
# the time is the reconciler's and helm's, not kube-aws's.
bench-installer: tools testbed
	cargo bench --profile dev --bench installer

# Boot time on the real-node bed: a controller and a worker from their
# rendered user-data, each step's time and the slowest (scripts/bench-node.sh).
bench-node: tools testbed
	bash scripts/bench-node.sh $(RUNS)
