#!/bin/bash
# kube-aws addon reconciler, run by kube-aws-addons.service from its timer on
# every controller (each minute and at boot). It reads the control-plane
# stack's plan pointer (the SSM parameter named in reconciler.json: the addon
# bundle's S3 URI and sha256) and, once per plan and secrets version, under
# an S3 lock so that one controller does it, installs that plan. Static:
# everything it knows comes from the bundle (plan.json, the values files,
# manifests), reconciler.json and /etc/kube-aws/runtime.json, read with
# python3 (part of Amazon Linux 2023). No value is ever spliced into code.
#
# Steps: fetch the bundle, check its sha256, unpack it and fill in the secrets
# it references; wait for /readyz; Helm v2 mode: install Tiller and wait for
# it; install the pinned helm client (sha256 checked); then per release, in
# plan order (bootstrap addons first, then dependency order): a release whose
# wait condition is the one installed last time (same chart, digest, values,
# namespace: the ID is their hash) is left alone and not signalled; the others
# fetch the chart from S3 and check its sha256, `helm upgrade --install
# --wait`, wait for its CRDs to be Established, write a status object to S3 and
# signal the release's wait condition. A failed release's dependants are
# skipped, with the reason. Releases of the last installed plan that this plan
# no longer lists are uninstalled. What was installed is recorded in S3
# (installedURI) for the next plan, whichever controller installs it.
set -uo pipefail

ETC=${KUBE_AWS_ETC:-/etc/kube-aws}
WORK=${KUBE_AWS_WORK_DIR:-/var/lib/kube-aws/addons}
BIN=${KUBE_AWS_BIN_DIR:-/usr/local/bin}
SECRETS=${KUBE_AWS_SECRETS_DIR:-/run/kube-aws/secrets}
# Blanks secrets out of messages (the rule the bootstrap's failure report uses too).
NODE_SECRETS=${KUBE_AWS_NODE_SECRETS:-/opt/kube-aws/bin/kube-aws-node-secrets}
RECONCILER=${KUBE_AWS_RECONCILER:-$ETC/addons/reconciler.json}
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

region=$(q "$RUNTIME" region)
stack=$(q "$RUNTIME" stackName)
bucket=$(q "$RUNTIME" bucket)
prefix=$(q "$RUNTIME" keyPrefix)
secrets_version=$(q "$RUNTIME" secretsVersion)
plan_parameter=$(q "$RECONCILER" planParameter)
installed_uri=$(q "$RECONCILER" installedURI)

# pointer FIELD: the plan pointer's uri or sha256, as the stack has it now.
pointer() {
  local v
  v=$(aws --region "$region" ssm get-parameter --name "$plan_parameter" --query Parameter.Value --output text) || return 1
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$v" "$1"
}

# take_lock NAME: 0 when this node created bootstrap/NAME, 1 when another node
# did, 2 when S3 gave another answer (the timer tries again).
take_lock() {
  local err
  if err=$(aws --region "$region" s3api put-object --bucket "$bucket" --key "$prefix/bootstrap/$1" \
    --if-none-match '*' 2>&1 >/dev/null); then
    return 0
  fi
  case "$err" in *PreconditionFailed* | *ConditionalRequestConflict*) return 1 ;; esac
  log "cannot take the lock s3://$bucket/$prefix/bootstrap/$1: $err"
  return 2
}

plan_sha=$(pointer sha256) || { log "cannot read the plan pointer $plan_parameter"; exit 1; }
plan_uri=$(pointer uri) || exit 1
run_id=$plan_sha${secrets_version:+-$secrets_version}
# A plan this controller installed, or saw another controller take, is done.
[ -e "$WORK/done-$run_id" ] && exit 0

# Unpacks the bundle into its own directory and fills in its secret references
# with the values kube-aws-node-secrets decrypted at boot, by that program's
# own fill rule (the module is loaded, not copied).
ADDONS=$WORK/plans/$plan_sha
unpack_bundle() {
  rm -rf "$ADDONS" && mkdir -p "$ADDONS" || return 1
  aws --region "$region" s3 cp --only-show-errors "$plan_uri" "$ADDONS/.bundle.json" || return 1
  echo "$plan_sha  $ADDONS/.bundle.json" | sha256sum -c --quiet - || { log "$plan_uri does not match its sha256"; return 1; }
  python3 - "$ADDONS" "$NODE_SECRETS" "$SECRETS" <<'PY'
import importlib.machinery, importlib.util, json, os, re, sys
out, tool, store = sys.argv[1:4]
bundle = json.load(open(os.path.join(out, ".bundle.json")))
for rel, text in bundle["files"].items():
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        sys.exit("kube-aws-addons: bundle path %r is not a plain relative path" % rel)
    path = os.path.join(out, *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
files = bundle.get("secretFiles", [])
if files:
    loader = importlib.machinery.SourceFileLoader("kube_aws_node_secrets", tool)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    m = importlib.util.module_from_spec(spec)
    loader.exec_module(m)
    plain = {}
    for name in os.listdir(store):
        if name.startswith(m.PREFIX):
            plain[name] = open(os.path.join(store, name), encoding="utf-8").read()
    if plain:
        refs = sorted(plain, key=lambda r: (-len(r), r))
        pattern = re.compile("(?:%s)(?![A-Za-z0-9_-])" % "|".join(re.escape(r) for r in refs))
        for f in files:
            m.fill(os.path.join(out, *f["path"].split("/")), f["format"], pattern, plain)
PY
}
if ! unpack_bundle; then
  log "cannot unpack the addon bundle $plan_uri"
  exit 1
fi
take_lock "installer-$run_id"
case $? in
  0) ;;
  1) log "plan $plan_sha is another controller's to install"; touch "$WORK/done-$run_id"; exit 0 ;;
  *) exit 1 ;;
esac
PLAN=$ADDONS/plan.json
cluster=$(q "$PLAN" cluster)
status_uri=$(q "$PLAN" statusURI)
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

# wc_state WC: the wait condition's status in the stack (CREATE_IN_PROGRESS
# while it waits), "missing" when the stack has no such resource, "error"
# when CloudFormation did not answer.
wc_state() {
  local out
  if out=$(aws --region "$region" cloudformation describe-stack-resource --stack-name "$stack" \
    --logical-resource-id "$1" --query StackResourceDetail.ResourceStatus --output text 2>&1); then
    echo "$out"
    return
  fi
  case "$out" in *"does not exist"*) echo missing ;; *) echo error ;; esac
}

# signal NAME SUCCESS|FAILURE: signals the release's wait condition, in the
# background, while it waits. CloudFormation creates a wait condition only
# once the controller group is complete (at create) or the plan pointer is
# updated (after an update), which can be after a fast release is done: a
# missing wait condition is waited for (30 minutes by default) unless the
# pointer has moved on to a newer plan, whose template no longer has it. A
# wait condition that no longer waits (complete, failed, deleted) is never
# signalled: DescribeStackResource says so first.
signal_attempts=${KUBE_AWS_SIGNAL_ATTEMPTS:-120}
signal_delay=${KUBE_AWS_SIGNAL_DELAY:-15}
signal() {
  local wc st
  [ "${R[name]:-}" = "$1" ] || load_release "$1"
  wc=${R[waitCondition]}
  (
    for ((i = 1; i <= signal_attempts; i++)); do
      st=$(wc_state "$wc")
      case "$st" in
        CREATE_IN_PROGRESS)
          aws --region "$region" cloudformation signal-resource --stack-name "$stack" \
            --logical-resource-id "$wc" --unique-id "$1" --status "$2" && exit 0
          ;;
        missing)
          if [ "$(pointer sha256)" != "$plan_sha" ]; then
            log "$wc ($1) is not in the stack and a newer plan is live: not signalled"
            exit 0
          fi
          ;;
        error) ;;
        *)
          log "$wc ($1) is $st: nothing waits for its signal"
          exit 0
          ;;
      esac
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

# The last installed plan's releases (name, namespace, wait condition):
# unchanged ones are left alone, dropped ones uninstalled.
declare -A installed_wc installed_ns
load_installed() {
  local name ns wc
  aws --region "$region" s3 cp --only-show-errors "$installed_uri" "$WORK/installed.json" 2>/dev/null ||
    echo '{"releases": []}' >"$WORK/installed.json"
  while IFS=$'\t' read -r name ns wc; do
    [ -n "$name" ] || continue
    installed_ns[$name]=$ns
    installed_wc[$name]=$wc
  done < <(python3 -c 'import json, sys
for r in json.load(open(sys.argv[1])).get("releases", []):
    print("\t".join(str(r.get(k, "")).replace("\t", " ") for k in ("name", "namespace", "waitCondition")))' "$WORK/installed.json")
}

# record: writes what is installed now for the next plan: the ready releases
# (a failed one is installed again by the next plan) and the dropped ones that
# could not be uninstalled (`kept`, tried again by the next plan).
kept=()
record() {
  local name args=("${kept[@]}")
  for name in "${!state[@]}"; do
    [ "${state[$name]}" = ready ] || continue
    load_release "$name"
    args+=("$name" "${R[namespace]}" "${R[waitCondition]}")
  done
  python3 - "$WORK/installed.json" "$plan_sha" "${args[@]}" <<'PY'
import json, sys
out, sha, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
rel = [{"name": rest[i], "namespace": rest[i + 1], "waitCondition": rest[i + 2]} for i in range(0, len(rest), 3)]
json.dump({"plan": sha, "releases": sorted(rel, key=lambda r: r["name"])}, open(out, "w"), indent=2)
PY
  retry aws --region "$region" s3 cp --only-show-errors --content-type application/json \
    "$WORK/installed.json" "$installed_uri" || log "cannot record the installed releases"
}

uninstall() { # NAME NAMESPACE
  if [ "$helm_major" = 2 ]; then
    retry "$HELM" delete --purge "$1" --tiller-namespace "$tiller_ns" >"$WORK/helm-$1.log" 2>&1
  else
    retry "$HELM" uninstall "$1" --namespace "$2" --wait >"$WORK/helm-$1.log" 2>&1
  fi
}

load_installed
mapfile -t names < <(release_names)
declare -A in_plan
for name in "${names[@]}"; do in_plan[$name]=1; done
dropped=()
for name in "${!installed_wc[@]}"; do
  [ -n "${in_plan[$name]:-}" ] || dropped+=("$name")
done

log "plan $plan_sha: waiting for the apiserver's /readyz"
wait_readyz || fail_all "the apiserver did not answer /readyz within $(q "$PLAN" readyzTimeoutSeconds)s"
if [ "$(q "$PLAN" helm tiller install)" = true ]; then
  log "installing Tiller in namespace $tiller_ns"
  install_tiller || fail_all "Tiller did not roll out in namespace $tiller_ns"
fi
if [ ${#names[@]} -gt 0 ] || [ ${#dropped[@]} -gt 0 ]; then
  install_helm || fail_all "cannot install the helm client from $(q "$PLAN" helm binary url)"
fi

# Commands in the loop may read stdin, so the list is read up front.
for name in "${names[@]}"; do
  load_release "$name"
  if [ "${installed_wc[$name]:-}" = "${R[waitCondition]}" ]; then
    # Installed by an earlier plan exactly as this one has it; its wait
    # condition is complete, so nothing waits for a signal.
    state[$name]=ready
    log "$name: unchanged"
    continue
  fi
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

# Releases the plan dropped, after the rest is in (a replacement may take over first).
for name in "${dropped[@]}"; do
  if uninstall "$name" "${installed_ns[$name]}"; then
    log "$name: uninstalled (dropped from the plan)"
  else
    log "$name: could not be uninstalled; see $WORK/helm-$name.log"
    kept+=("$name" "${installed_ns[$name]}" "${installed_wc[$name]}")
  fi
done
record
touch "$WORK/done-$run_id"

log "done: $ok_count ready, $bad_count failed or skipped, ${#dropped[@]} dropped; waiting for the signals"
wait
[ "$bad_count" -eq 0 ]
