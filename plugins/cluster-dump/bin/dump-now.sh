#!/bin/sh
# `kube-aws dump-now [KUBECTL FLAGS…]`: run cluster-dump's CronJob once, now,
# as a Job created from it (`kubectl create job --from=cronjob/…`), through the
# operator's kubeconfig (KUBECONFIG, or ~/.kube/config from `kube-aws kubeconfig`).
# Extra arguments go to kubectl, e.g. `--context my-cluster`.
set -eu
if ! command -v kubectl >/dev/null 2>&1; then
  echo "dump-now: kubectl is not on PATH; install it to trigger the dump" >&2
  exit 1
fi
if [ -z "${KUBECONFIG:-}" ] && [ ! -f "${HOME:-/nonexistent}/.kube/config" ]; then
  echo "dump-now: no kubeconfig: set KUBECONFIG, or run \`kube-aws kubeconfig\` to write ~/.kube/config" >&2
  exit 1
fi
job="cluster-dump-now-$(date -u +%Y%m%d%H%M%S)"
exec kubectl --namespace kube-system create job "$job" --from=cronjob/cluster-dump "$@"
