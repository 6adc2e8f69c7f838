#!/usr/bin/env bash
# Builds what the real-node upgrade tests need besides the default beds
# (`make upgradebed`; docs/testing.md "The upgrade bed"): the control-plane
# commands and a node image of the default minor's oldest patch in
# src/config/versions.rs (1.35.4 while the default is 1.35.8), by
# scripts/install-testbed.sh and scripts/install-nodebed.sh with
# KUBE_AWS_TESTBED_K8S set. A cluster is brought up on it and upgraded to the
# default patch, whose node image is the default bed's.
#
# Not part of `make test`: a second Kubernetes build costs about 13 minutes
# of a cold run on two cores (docs/testing.md), over the 60-minute budget of
# CI's cold `make test`. Prints the image's directory; a second run builds
# nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "install-upgradebed: $*" >&2
  exit 1
}
minor=$(sed -n 's/^pub const DEFAULT_MINOR: &str = "\([0-9.]*\)";/\1/p' src/config/versions.rs)
from=$(grep -A4 "minor: \"$minor\"," src/config/versions.rs | sed -n 's/.*patches: &\["\([0-9.]*\)".*/\1/p')
to=$(grep -A1 "minor: \"$minor\"," src/config/versions.rs | sed -n 's/.*default_patch: "\([0-9.]*\)",/\1/p')
{ [ -n "$from" ] && [ -n "$to" ]; } || die "cannot read $minor's patches from src/config/versions.rs"
[ "$from" != "$to" ] || die "the $minor row lists one patch ($to): there is no older patch to upgrade from"
echo "install-upgradebed: Kubernetes $from (to be upgraded to $to, the default beds' patch)"
KUBE_AWS_TESTBED_K8S=$from bash scripts/install-testbed.sh
KUBE_AWS_TESTBED_K8S=$from bash scripts/install-nodebed.sh
ln -sfn "k8s-v$from" .testbed/node/upgrade-from
echo "install-upgradebed: the node image of $from: .testbed/node/upgrade-from -> $(readlink -f .testbed/node/upgrade-from)"
