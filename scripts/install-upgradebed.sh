#!/usr/bin/env bash
# Builds what the real-node upgrade tests need besides the default beds
# (`make upgradebed`; docs/testing.md "The upgrade bed"), each by
# scripts/install-testbed.sh and scripts/install-nodebed.sh with
# KUBE_AWS_TESTBED_K8S set:
#   - the control-plane commands and a node image of the default minor's
#     oldest patch in src/config/versions.rs (1.35.4 while the default is
#     1.35.8), linked as .testbed/node/upgrade-from: the patch upgrade test
#     brings a cluster up on it and upgrades it to the default patch, whose
#     node image is the default bed's;
#   - the same of the next minor's default patch (1.36.5), linked as
#     .testbed/node/upgrade-to-minor: the minor upgrade test brings a
#     cluster up on the default bed and upgrades it to that.
#
# `make test` builds the second (UPGRADEBED=minor): the minor upgrade test
# runs there. The first is `make upgradebed`'s alone: each Kubernetes build
# costs about 11-13 minutes of a cold run on two cores (docs/testing.md),
# and a third would take CI's cold `make test` past its 60-minute budget.
# Prints the images' directories; a second run builds nothing.
# UPGRADEBED=patch or UPGRADEBED=minor builds one of the two.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "install-upgradebed: $*" >&2
  exit 1
}
minor=$(sed -n 's/^pub const DEFAULT_MINOR: &str = "\([0-9.]*\)";/\1/p' src/config/versions.rs)
default_patch() { grep -A1 "minor: \"$1\"," src/config/versions.rs | sed -n 's/.*default_patch: "\([0-9.]*\)",/\1/p'; }
from=$(grep -A4 "minor: \"$minor\"," src/config/versions.rs | sed -n 's/.*patches: &\["\([0-9.]*\)".*/\1/p')
to=$(default_patch "$minor")
# The next minor: the row after the default's in the table.
next=$(sed -n 's/^[[:space:]]*minor: "\([0-9.]*\)",$/\1/p' src/config/versions.rs | grep -A1 -xF "$minor" | sed -n 2p)
{ [ -n "$from" ] && [ -n "$to" ]; } || die "cannot read $minor's patches from src/config/versions.rs"
[ -n "$next" ] || die "src/config/versions.rs has no minor after the default $minor: there is no minor to upgrade to"
next_to=$(default_patch "$next")
[ -n "$next_to" ] || die "cannot read $next's default patch from src/config/versions.rs"

if [ "${KUBE_AWS_TESTBED:-}" = skip ] || [ "${KUBE_AWS_NODEBED:-}" = skip ]; then
  echo "install-upgradebed: KUBE_AWS_TESTBED or KUBE_AWS_NODEBED=skip: not building; the upgrade tests will skip and say so"
  exit 0
fi
which=${UPGRADEBED:-all}
case $which in all | patch | minor) ;; *) die "UPGRADEBED=$which: use patch, minor or leave it unset (both)" ;; esac

build() {
  KUBE_AWS_TESTBED_K8S=$1 bash scripts/install-testbed.sh
  KUBE_AWS_TESTBED_K8S=$1 bash scripts/install-nodebed.sh
  ln -sfn "k8s-v$1" ".testbed/node/$2"
  echo "install-upgradebed: the node image of $1: .testbed/node/$2 -> $(readlink -f ".testbed/node/$2")"
}
if [ "$which" != minor ]; then
  [ "$from" != "$to" ] || die "the $minor row lists one patch ($to): there is no older patch to upgrade from"
  echo "install-upgradebed: Kubernetes $from (to be upgraded to $to, the default beds' patch)"
  build "$from" upgrade-from
fi
if [ "$which" != patch ]; then
  echo "install-upgradebed: Kubernetes $next_to (the default beds' $to is upgraded to it)"
  build "$next_to" upgrade-to-minor
fi
