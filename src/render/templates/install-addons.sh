#!/bin/bash
# kube-aws addon installer, run by kube-aws-addons.service on the first
# controller to come up with a given plan and secrets version. Static: everything it knows comes from the addon plan
# (plan.json), the values files beside it and /etc/kube-aws/runtime.json, read
# with python3 (part of Amazon Linux 2023). No value is ever spliced into code.
#
# Steps: wait for /readyz; Helm v2 mode: install Tiller and wait for it; install
# the pinned helm client (sha256 checked); then per release, in plan order
# (bootstrap addons first, then dependency order): fetch the chart from S3 and
# check its sha256, `helm upgrade --install --wait`, wait for its CRDs to be
# Established; write a status object to S3 and signal the release's wait
# condition. A failed release's dependants are skipped, with the reason.
set -uo pipefail

ADDONS=${KUBE_AWS_ADDON_DIR:-/etc/kube-aws/addons}
ETC=${KUBE_AWS_ETC:-/etc/kube-aws}
WORK=${KUBE_AWS_WORK_DIR:-/var/lib/kube-aws/addons}
BIN=${KUBE_AWS_BIN_DIR:-/usr/local/bin}
SECRETS=${KUBE_AWS_SECRETS_DIR:-/run/kube-aws/secrets}
# Blanks secrets out of messages (the rule the bootstrap's failure report uses too).
NODE_SECRETS=${KUBE_AWS_NODE_SECRETS:-/opt/kube-aws/bin/kube-aws-node-secrets}
PLAN=$ADDONS/plan.json
RUNTIME=$ETC/runtime.json
export KUBECONFIG=${KUBECONFIG:-/etc/kubernetes/admin.conf}
mkdir -p "$WORK"

log() { printf '%s kube-aws-addons: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

# q FILE KEY... prints one value of a JSON file. A key applied to a list picks
# the item with that "name". Lists print one item a line, booleans true/false.
q() {
  python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = next(x for x in v if x.get("name") == k) if isinstance(v, list) else v[k]
if isinstance(v, list):
    v = "\n".join(str(x) for x in v)
elif isinstance(v, bool):
    v = "true" if v else "false"
if v is not None and v != "":
    print(v)' "$@"
}

# load_release NAME fills R with the release's plan entry (lists one item a line).
declare -A R
load_release() {
  local kv=() i
  R=()
  mapfile -d '' -t kv < <(python3 -c 'import json, sys
r = next(x for x in json.load(open(sys.argv[1]))["releases"] if x["name"] == sys.argv[2])
for k, v in r.items():
    if isinstance(v, list):
        v = "\n".join(str(x) for x in v)
    elif isinstance(v, bool):
        v = "true" if v else "false"
    elif v is None:
        v = ""
    sys.stdout.write(k + "\0" + str(v).replace("\0", "") + "\0")' "$PLAN" "$1")
  for ((i = 0; i + 1 < ${#kv[@]}; i += 2)); do
    R[${kv[i]}]=${kv[i + 1]}
  done
}

release_names() {
  python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["releases"]: print(r["name"])' "$PLAN"
}

cluster=$(q "$PLAN" cluster)
region=$(q "$PLAN" region)
status_uri=$(q "$PLAN" statusURI)
stack=$(q "$RUNTIME" stackName)
attempts=$(q "$PLAN" retries attempts)
delay=${KUBE_AWS_RETRY_DELAY:-$(q "$PLAN" retries delaySeconds)}
poll=${KUBE_AWS_POLL_INTERVAL:-5}
helm_major=$(q "$PLAN" helm version)
tiller_ns=$(q "$PLAN" helm tiller namespace)
HELM=$BIN/helm

# retry CMD...: runs CMD up to $attempts times, waiting longer each time.
retry() {
  local i
  for ((i = 1; i <= attempts; i++)); do
    "$@" && return 0
    [ "$i" -lt "$attempts" ] && sleep "$((delay * i))"
  done
  return 1
}

# status NAME PHASE [MESSAGE_FILE]: writes the release's status object to S3.
# The message is helm's or kubectl's own output, which may quote a rendered
# manifest: every secret this node decrypted is blanked out of it first.
status() {
  local blanked=
  if [ -n "${3:-}" ] && [ -f "$3" ]; then
    blanked="$WORK/status-$1.message"
    "$NODE_SECRETS" blank "$SECRETS" <"$3" >"$blanked" || echo "(the message could not be blanked of secrets)" >"$blanked"
  fi
  python3 - "$WORK/status-$1.json" "$cluster" "$1" "$2" "$blanked" <<'PY'
import datetime, json, os, sys
out, cluster, name, phase, msg_file = sys.argv[1:6]
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
old = json.load(open(out)) if os.path.exists(out) else {}
message = ""
if msg_file and os.path.exists(msg_file):
    message = open(msg_file, errors="replace").read()[-8000:]
json.dump({"cluster": cluster, "release": name, "phase": phase, "message": message,
           "startedAt": old.get("startedAt", now), "updatedAt": now}, open(out, "w"), indent=2)
PY
  retry aws --region "$region" s3 cp --only-show-errors --content-type application/json \
    "$WORK/status-$1.json" "${status_uri}$1.json" || log "cannot write the status of $1"
}

# signal NAME SUCCESS|FAILURE: signals the release's wait condition, in the
# background: CloudFormation creates wait conditions only once the controller
# group is complete, which can be after a fast release is done, so the signal
# is retried until the wait condition exists (30 minutes by default).
signal_attempts=${KUBE_AWS_SIGNAL_ATTEMPTS:-120}
signal_delay=${KUBE_AWS_SIGNAL_DELAY:-15}
signal() {
  local wc
  [ "${R[name]:-}" = "$1" ] || load_release "$1"
  wc=${R[waitCondition]}
  (
    for ((i = 1; i <= signal_attempts; i++)); do
      aws --region "$region" cloudformation signal-resource --stack-name "$stack" \
        --logical-resource-id "$wc" --unique-id "$1" --status "$2" && exit 0
      sleep "$signal_delay"
    done
    log "cannot signal $wc for $1"
  ) &
}

declare -A state
ok_count=0
bad_count=0

finish() { # NAME PHASE [MESSAGE_FILE]
  state[$1]=$2
  status "$1" "$2" "${3:-}"
  if [ "$2" = ready ]; then
    ok_count=$((ok_count + 1))
    signal "$1" SUCCESS
  else
    bad_count=$((bad_count + 1))
    signal "$1" FAILURE
  fi
  log "$1: $2"
}

# fail_all MESSAGE: nothing can be installed; report every release.
fail_all() {
  log "$1"
  printf '%s\n' "$1" >"$WORK/fatal.txt"
  local name names
  mapfile -t names < <(release_names)
  for name in "${names[@]}"; do
    finish "$name" failed "$WORK/fatal.txt"
  done
  wait
  exit 1
}

wait_readyz() {
  local limit end
  limit=$(q "$PLAN" readyzTimeoutSeconds)
  end=$((SECONDS + limit))
  until [ "$(kubectl get --raw=/readyz 2>/dev/null)" = ok ]; do
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep "$poll"
  done
}

node_ready_done=false
wait_node_ready() {
  [ "$node_ready_done" = true ] && return 0
  local limit end
  limit=$(q "$PLAN" nodeReadyTimeoutSeconds)
  end=$((SECONDS + limit))
  until kubectl get nodes -o 'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
    2>/dev/null | grep -qx True; do
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep "$poll"
  done
  node_ready_done=true
}

manifests_done=false
apply_manifests() {
  [ "$manifests_done" = true ] && return 0
  manifests_done=true
  local m list
  mapfile -t list < <(q "$PLAN" manifests)
  for m in "${list[@]}"; do
    retry kubectl apply --server-side -f "$ADDONS/$m" || log "manifest $m could not be applied"
  done
}

install_tiller() {
  local manifest
  manifest=$(q "$PLAN" helm tiller manifest)
  retry kubectl apply -f "$ADDONS/$manifest" || return 1
  retry kubectl -n "$tiller_ns" rollout status deployment/tiller-deploy --timeout=300s || return 1
}

install_helm() {
  local url sum
  url=$(q "$PLAN" helm binary url)
  sum=$(q "$PLAN" helm binary sha256)
  retry curl -fsSL -o "$WORK/helm.tgz" "$url" || return 1
  echo "$sum  $WORK/helm.tgz" | sha256sum -c --quiet - || { log "helm tarball sha256 differs from the plan"; return 1; }
  tar -xzf "$WORK/helm.tgz" -C "$WORK" linux-amd64/helm || return 1
  mkdir -p "$BIN" || return 1
  install -m 0755 "$WORK/linux-amd64/helm" "$HELM" || return 1
  if [ "$helm_major" = 2 ]; then
    "$HELM" init --client-only --skip-refresh >/dev/null || return 1
  fi
}

# describe_failure NAME NS LOG > message: helm's error tail and the namespace's trouble.
describe_failure() {
  echo "helm failed for $1:"
  tail -n 40 "$3"
  echo "--- pods not running in namespace $2 ---"
  kubectl -n "$2" get pods --field-selector=status.phase!=Running,status.phase!=Succeeded 2>&1 | tail -n 20
  echo "--- warning events in namespace $2 ---"
  kubectl -n "$2" get events --field-selector=type=Warning --sort-by=.lastTimestamp 2>&1 | tail -n 20
}

wait_crds() { # NAME TGZ TIMEOUT
  local dir f found list
  dir=$WORK/crds-$1
  rm -rf "$dir" && mkdir -p "$dir"
  tar -xzf "$2" -C "$dir" --wildcards '*/crds/*' 2>/dev/null
  mapfile -t list <<<"${R[crds]}"
  for f in "${list[@]}"; do
    found=$(find "$dir" -path "*/crds/$f" -type f | head -n 1)
    if [ -z "$found" ]; then
      echo "CRD file crds/$f is not in the chart archive"
      return 1
    fi
    kubectl wait --for=condition=Established --timeout="$3s" -f "$found" || {
      echo "CRDs of crds/$f are not Established after $3s"
      return 1
    }
  done
}

install_release() { # NAME
  local name=$1 ns obj sum timeout values tgz msg i
  ns=${R[namespace]}
  obj=${R[chartObject]}
  timeout=${R[timeoutSeconds]}
  values=$ADDONS/${R[valuesFile]}
  tgz=$WORK/$name.tgz
  msg=$WORK/message-$name.txt
  : >"$msg"
  status "$name" installing
  if [ "${R[locked]}" != true ]; then
    echo "chart is not locked (no sha256): run \`kube-aws charts lock\` and publish again" >"$msg"
    return 1
  fi
  sum=${R[sha256]}
  if ! retry aws --region "$region" s3 cp --only-show-errors "$obj" "$tgz" 2>>"$msg"; then
    echo "cannot fetch the chart from $obj" >>"$msg"
    return 1
  fi
  if ! echo "$sum  $tgz" | sha256sum -c --quiet - >/dev/null 2>&1; then
    echo "chart archive $obj does not match its sha256 $sum" >"$msg"
    return 1
  fi
  local args=(upgrade --install "$name" "$tgz" --namespace "$ns" --wait -f "$values")
  if [ "$helm_major" = 2 ]; then
    args+=(--timeout "$timeout" --tiller-namespace "$tiller_ns")
  else
    args+=(--timeout "${timeout}s")
    [ "${R[createNamespace]}" = true ] && args+=(--create-namespace)
  fi
  for ((i = 1; i <= attempts; i++)); do
    if "$HELM" "${args[@]}" >"$WORK/helm-$name.log" 2>&1; then
      if [ -n "${R[crds]}" ]; then
        wait_crds "$name" "$tgz" "$timeout" >"$msg" 2>&1 || return 1
      fi
      return 0
    fi
    log "$name: helm attempt $i of $attempts failed"
    [ "$i" -lt "$attempts" ] && sleep "$((delay * i))"
  done
  describe_failure "$name" "$ns" "$WORK/helm-$name.log" >"$msg" 2>&1
  return 1
}

log "waiting for the apiserver's /readyz"
wait_readyz || fail_all "the apiserver did not answer /readyz within $(q "$PLAN" readyzTimeoutSeconds)s"
if [ "$(q "$PLAN" helm tiller install)" = true ]; then
  log "installing Tiller in namespace $tiller_ns"
  install_tiller || fail_all "Tiller did not roll out in namespace $tiller_ns"
fi
if [ -n "$(release_names)" ]; then
  install_helm || fail_all "cannot install the helm client from $(q "$PLAN" helm binary url)"
fi

# Commands in the loop may read stdin, so the list is read up front.
mapfile -t names < <(release_names)
for name in "${names[@]}"; do
  load_release "$name"
  blocked=""
  deps=()
  [ -n "${R[dependsOn]}" ] && mapfile -t deps <<<"${R[dependsOn]}"
  for dep in "${deps[@]}"; do
    if [ "${state[$dep]:-}" != ready ]; then
      blocked=$dep
      break
    fi
  done
  if [ -n "$blocked" ]; then
    printf 'skipped: it depends on %s, which is %s\n' "$blocked" "${state[$blocked]:-not installed}" >"$WORK/message-$name.txt"
    finish "$name" skipped "$WORK/message-$name.txt"
    continue
  fi
  if [ "${R[bootstrap]}" != true ]; then
    apply_manifests
    if ! wait_node_ready; then
      printf 'no node became Ready within %ss (is a CNI addon marked bootstrap: true?)\n' \
        "$(q "$PLAN" nodeReadyTimeoutSeconds)" >"$WORK/message-$name.txt"
      finish "$name" failed "$WORK/message-$name.txt"
      continue
    fi
  fi
  log "$name: installing"
  if install_release "$name"; then
    finish "$name" ready
  else
    finish "$name" failed "$WORK/message-$name.txt"
  fi
done
apply_manifests

log "done: $ok_count ready, $bad_count failed or skipped; waiting for the signals"
wait
[ "$bad_count" -eq 0 ]
