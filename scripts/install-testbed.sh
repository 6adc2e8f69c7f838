#!/usr/bin/env bash
# Builds the control-plane test bed from the Go module proxy at pinned versions:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubeadm, kubectl
#     (k8s.io/kubernetes at the default minor's exact patch, src/config/versions.rs),
#   etcd (the version kubeadm's constants name for that minor),
#   kwok (simulated nodes),
#   helm (the v3 client nodes install, src/render/input.rs),
#   amazon-eks-pod-identity-webhook (the pod-identity-webhook plugin's image's
#     program, run on the host: tests/it/testbed.rs pod_identity_webhook_*),
#   aws-node-termination-handler (the aws-node-termination-handler plugin's
#     image's program, run on the host: tests/it/nth_testbed.rs).
# Binaries land outside the clone, in a cache every clone on the machine
# shares: $CACHE/<key>/bin, where CACHE is $KUBE_AWS_TESTBED_CACHE or
# ${XDG_CACHE_HOME:-$HOME/.cache}/kube-aws-testbed and <key> a hash of the
# pins and of this script's content (its recipe: any change to it builds
# again); .testbed/bin (gitignored) points at the current one. A second run,
# or a fresh clone on a machine that built them once, builds nothing ("up to
# date").
# Each component prints how long it took; a failure names the component and
# shows Go's reason, and the script exits non-zero.
# See docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

say() { echo "install-testbed: $*"; }
die() {
  echo "install-testbed: $*" >&2
  exit 1
}

if [ "${KUBE_AWS_TESTBED:-}" = skip ]; then
  say "KUBE_AWS_TESTBED=skip: not building; the tests on the real control plane will skip and say so"
  exit 0
fi

# --- pins -------------------------------------------------------------------
# The Kubernetes patch and the helm client come from the Rust sources, so the
# test bed runs what nodes run; etcd and kwok are pinned here.
minor=$(sed -n 's/^pub const DEFAULT_MINOR: &str = "\([0-9.]*\)";/\1/p' src/config/versions.rs)
patch=$(grep -A1 "minor: \"$minor\"," src/config/versions.rs | sed -n 's/.*default_patch: "\([0-9.]*\)",/\1/p')
helm=$(sed -n 's/.*version: "\(v3\.[0-9.]*\)"\.into(),/\1/p' src/render/input.rs | head -n1)
{ [ -n "$minor" ] && [ -n "$patch" ]; } || die "cannot read DEFAULT_MINOR and its default_patch from src/config/versions.rs"
[ -n "$helm" ] || die "cannot read the helm v3 client version from src/render/input.rs (HelmBinary::default_v3)"
# KUBE_AWS_TESTBED_K8S=1.35.4 builds another patch of the table instead (the
# Kubernetes commands and etcd only, linked as .testbed/bin-v1.35.4, not
# .testbed/bin): what `make upgradebed` builds for the upgrade tests
# (scripts/install-upgradebed.sh, docs/testing.md).
OTHER=${KUBE_AWS_TESTBED_K8S:-}
if [ -n "$OTHER" ]; then
  grep -q "patches: &\[.*\"$OTHER\"" src/config/versions.rs ||
    die "KUBE_AWS_TESTBED_K8S=$OTHER is not a patch of src/config/versions.rs's table"
  patch=$OTHER
  minor=${patch%.*}
fi
K8S=v$patch
# k8s.io/kubernetes v1.X.Y publishes its staging modules as k8s.io/* v0.X.Y.
STAGING=v0.${patch#*.}
# kubeadm v1.35.4's DefaultEtcdVersion is 3.6.6-0 (cmd/kubeadm/app/constants);
# the build checks that this pin still matches it. (The proxy serves v3.6.6
# although its version list omits it.)
ETCD=v3.6.6
if [ -n "$OTHER" ]; then
  # Another patch's etcd is the one its kubeadm names (1.36.5: 3.6.8), which
  # its `kubeadm upgrade apply` moves etcd to and its node image holds.
  command -v go >/dev/null 2>&1 || die "go not found on PATH: KUBE_AWS_TESTBED_K8S=$OTHER reads its etcd version from k8s.io/kubernetes@$K8S"
  kdir=$(cd / && GOFLAGS=-mod=mod GOWORK=off go mod download -json "k8s.io/kubernetes@$K8S" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') ||
    die "cannot download k8s.io/kubernetes@$K8S from the Go module proxy ($(go env GOPROXY))"
  ETCD=v$(sed -n 's/^[[:space:]]*DefaultEtcdVersion = "\([0-9.]*\)-[0-9]*"$/\1/p' "$kdir/cmd/kubeadm/app/constants/constants.go")
  [ "$ETCD" != v ] || die "cannot read DefaultEtcdVersion from k8s.io/kubernetes@$K8S's cmd/kubeadm/app/constants/constants.go"
fi
KWOK=v0.8.0
HELM=$helm
# The tag of the plugin's default image (plugins/pod-identity-webhook/plugin.yaml);
# the proxy lists no versions of this module (403), but serves this one.
WEBHOOK=$(sed -n 's#.*amazon-eks-pod-identity-webhook:\(v[0-9.]*\)$#\1#p' plugins/pod-identity-webhook/plugin.yaml | head -n1)
[ -n "$WEBHOOK" ] || die "cannot read the webhook's image tag from plugins/pod-identity-webhook/plugin.yaml"
# The app version of the aws-node-termination-handler chart the plugin pins
# (plugins/aws-node-termination-handler/plugin.yaml: chart 0.27.6, app
# v1.25.6; tests/it/nth_testbed.rs checks the two agree). It also names its
# own stamp file (a cold build measured 206 s on 2 loaded cores).
NTH=v1.25.6
RECIPE=1 # bump when the way binaries are built changes outside this script

# The key: the pins and this script's content (the recipe). The pins file
# carries both, so the node bed's key (scripts/install-nodebed.sh reads it)
# follows.
script=$(sha256sum scripts/install-testbed.sh | cut -c1-12)
pins="recipe=$RECIPE kubernetes=$K8S etcd=$ETCD kwok=$KWOK helm=$HELM pod-identity-webhook=$WEBHOOK script=$script"
key=$(printf '%s' "$pins" | sha256sum | cut -c1-12)
CACHE=${KUBE_AWS_TESTBED_CACHE:-${XDG_CACHE_HOME:-${HOME:-$ROOT/.testbed}/.cache}/kube-aws-testbed}
DIR=$CACHE/$key
BIN=$DIR/bin
mkdir -p "$BIN" "$DIR/src" "$DIR/log" "$ROOT/.testbed"
printf '%s\n' "$pins" >"$DIR/pins"
if [ -n "$OTHER" ]; then
  ln -sfn "$BIN" "$ROOT/.testbed/bin-$K8S"
else
  ln -sfn "$BIN" "$ROOT/.testbed/bin"
fi

# --- components ----------------------------------------------------------------
# name|binaries|how
COMPONENTS=(
  "kube-apiserver|kube-apiserver|k8s"
  "kube-controller-manager|kube-controller-manager|k8s"
  "kube-scheduler|kube-scheduler|k8s"
  "kubeadm|kubeadm|k8s"
  "kubectl|kubectl|k8s"
  "etcd|etcd etcdctl etcdutl|etcd"
  "kwok|kwok kwok-stages.yaml|kwok"
  "helm|helm|helm"
  "amazon-eks-pod-identity-webhook|amazon-eks-pod-identity-webhook|webhook"
  "aws-node-termination-handler|aws-node-termination-handler aws-node-termination-handler-$NTH.pin|nth"
)

built() {
  local b
  for b in $1; do [ -e "$BIN/$b" ] || return 1; done
}

if [ -n "$OTHER" ]; then
  # A node of another patch needs its Kubernetes commands; etcd is kubeadm's
  # for that patch (checked against the pin below).
  COMPONENTS=("${COMPONENTS[@]:0:6}")
fi

todo=()
for c in "${COMPONENTS[@]}"; do
  IFS='|' read -r name bins _ <<<"$c"
  built "$bins" || todo+=("$name")
done
if [ "${#todo[@]}" -eq 0 ]; then
  say "up to date ($pins) in $BIN"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  die "go not found on PATH: cannot build ${todo[*]}. The test bed is built from source with Go (>= 1.26, kwok $KWOK needs it); install Go from https://go.dev/dl/ and re-run, or set KUBE_AWS_TESTBED=skip to skip the tests that need it"
fi
# One build at a time per pin set (make test in two shells).
exec 9>"$DIR/.lock"
flock 9

say "$(go version); building ${todo[*]} ($pins)"

export CGO_ENABLED=0
export GOFLAGS="-trimpath -buildvcs=false"
export GOWORK=off

# run COMPONENT CMD...: runs a step of a component's build, logging to
# log/COMPONENT.log; on failure prints which component and Go's reason.
run() {
  local comp=$1
  shift
  if ! "$@" >>"$DIR/log/$comp.log" 2>&1; then
    echo "install-testbed: building $comp failed: \`$*\` exited non-zero; the last lines of $DIR/log/$comp.log:" >&2
    tail -n 25 "$DIR/log/$comp.log" | sed 's/^/  /' >&2
    exit 1
  fi
}

# The module's directory in the module cache, after downloading it.
module_dir() {
  local comp=$1 mod=$2 out
  out=$(cd "$DIR/src" && GOFLAGS=-mod=mod go mod download -json "$mod" 2>>"$DIR/log/$comp.log") || {
    echo "install-testbed: building $comp failed: cannot download $mod from the Go module proxy ($(go env GOPROXY)):" >&2
    tail -n 10 "$DIR/log/$comp.log" | sed 's/^/  /' >&2
    exit 1
  }
  printf '%s\n' "$out" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# Wrapper module for k8s.io/kubernetes: its go.mod `replace`s every staging
# module with ./staging/src/k8s.io/X, which only works inside its own
# repository; here each becomes the published k8s.io/X of the same release.
k8s_wrapper() {
  local w=$DIR/src/kubernetes dir
  [ -f "$w/go.mod" ] && return 0
  dir=$(module_dir kubernetes "k8s.io/kubernetes@$K8S")
  [ -f "$dir/go.mod" ] || die "building kubernetes failed: k8s.io/kubernetes@$K8S has no go.mod in the module cache"
  local kubeadm_etcd
  kubeadm_etcd=$(sed -n 's/^[[:space:]]*DefaultEtcdVersion = "\([0-9.]*\)-[0-9]*"$/\1/p' "$dir/cmd/kubeadm/app/constants/constants.go")
  [ "v$kubeadm_etcd" = "$ETCD" ] ||
    die "building etcd failed: the pin $ETCD is not kubeadm $K8S's DefaultEtcdVersion ($kubeadm_etcd, cmd/kubeadm/app/constants/constants.go); update ETCD in scripts/install-testbed.sh"
  mkdir -p "$w.tmp"
  {
    echo "// Generated by scripts/install-testbed.sh: builds k8s.io/kubernetes $K8S commands."
    echo "module kube-aws.testbed/kubernetes"
    echo
    sed -n 's/^go \(.*\)$/go \1/p; s/^godebug \(.*\)$/godebug \1/p' "$dir/go.mod"
    echo
    echo "require k8s.io/kubernetes $K8S"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/k8s\.io/[a-z0-9-]*$#\t\1 => \1 '"$STAGING"'#p' "$dir/go.mod"
    echo ")"
  } >"$w.tmp/go.mod"
  grep -q "k8s.io/api => k8s.io/api $STAGING" "$w.tmp/go.mod" ||
    die "building kubernetes failed: found no staging replace directives in $dir/go.mod"
  rm -rf "$w"
  mv "$w.tmp" "$w"
}

# Wrapper module for etcd: go.etcd.io/etcd/server/v3's own go.mod replaces its
# sibling modules with ../api etc., so `go install ...@version` refuses it.
# etcdctl and etcdutl too: registry.k8s.io/etcd holds all three, and the
# node program runs `etcdctl snapshot save` and `etcdutl snapshot restore`
# in that image (src/node/kube_aws_node/etcd.py, testrestore.py).
etcd_wrapper() {
  local w=$DIR/src/etcd want
  want=$(printf '%s\n' "// Generated by scripts/install-testbed.sh." "module kube-aws.testbed/etcd" "" "go 1.24" "" \
    "require (" "	go.etcd.io/etcd/server/v3 $ETCD" "	go.etcd.io/etcd/etcdctl/v3 $ETCD" \
    "	go.etcd.io/etcd/etcdutl/v3 $ETCD" ")")
  [ -f "$w/go.mod" ] && grep -q "etcdutl/v3 $ETCD" "$w/go.mod" && return 0
  mkdir -p "$w"
  printf '%s\n' "$want" >"$w/go.mod"
}

# Wrapper module for the pod identity webhook: `go install …@version` reads the
# module's version list for deprecations, which the proxy refuses (403) for it.
webhook_wrapper() {
  local w=$DIR/src/webhook
  [ -f "$w/go.mod" ] && return 0
  mkdir -p "$w"
  printf '%s\n' "// Generated by scripts/install-testbed.sh." "module kube-aws.testbed/webhook" "" "go 1.26" "" \
    "require github.com/aws/amazon-eks-pod-identity-webhook $WEBHOOK" >"$w/go.mod"
}

# Wrapper module for aws-node-termination-handler: its main package is
# ./cmd, which `go install` would name "cmd".
nth_wrapper() {
  local w=$DIR/src/nth
  [ -f "$w/go.mod" ] && return 0
  mkdir -p "$w"
  printf '%s\n' "// Generated by scripts/install-testbed.sh." "module kube-aws.testbed/nth" "" "go 1.26" "" \
    "require github.com/aws/aws-node-termination-handler $NTH" >"$w/go.mod"
}

# The stages kwokctl gives kwok by default (fast node and pod lifecycles,
# node heartbeats through leases), from the pinned module's kustomize/stage.
kwok_stages() {
  local dir f
  dir=$(module_dir kwok "sigs.k8s.io/kwok@$KWOK")/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [ -f "$dir/$f" ] || die "building kwok failed: $dir/$f is missing from sigs.k8s.io/kwok@$KWOK"
    echo "---"
    cat "$dir/$f"
  done >"$BIN/kwok-stages.yaml.tmp"
  mv "$BIN/kwok-stages.yaml.tmp" "$BIN/kwok-stages.yaml"
}

k8s_ldflags() {
  local v p
  v="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1"
  v="$v -X k8s.io/component-base/version.gitMinor=${minor#*.} -X k8s.io/component-base/version.gitTreeState=clean"
  p=${v//component-base\/version/client-go\/pkg\/version}
  echo "-s -w $v $p"
}

# build_in COMPONENT DIR LDFLAGS PKG: builds PKG in the module at DIR into $BIN/COMPONENT
build_in() {
  local comp=$1 wdir=$2 ldflags=$3
  shift 3
  rm -rf "$DIR/tmp-$comp"
  (cd "$wdir" && run "$comp" go build -mod=mod -ldflags "$ldflags" -o "$DIR/tmp-$comp/$comp" "$@")
  mv "$DIR/tmp-$comp"/* "$BIN/"
  rm -rf "$DIR/tmp-$comp"
}

# go install PKG@VERSION for modules without replace directives.
install_at() {
  local comp=$1 ldflags=$2 pkg=$3
  rm -rf "$DIR/tmp-$comp"
  (cd "$DIR/src" && GOBIN="$DIR/tmp-$comp" run "$comp" go install -ldflags "$ldflags" "$pkg")
  mv "$DIR/tmp-$comp"/* "$BIN/"
  rm -rf "$DIR/tmp-$comp"
}

times=()
for c in "${COMPONENTS[@]}"; do
  IFS='|' read -r name bins how <<<"$c"
  start=$(date +%s)
  if built "$bins"; then
    times+=("$name up to date")
    continue
  fi
  : >"$DIR/log/$name.log"
  case $how in
  k8s)
    k8s_wrapper
    build_in "$name" "$DIR/src/kubernetes" "$(k8s_ldflags)" "k8s.io/kubernetes/cmd/$name"
    ;;
  etcd)
    etcd_wrapper
    build_in etcd "$DIR/src/etcd" "-s -w" go.etcd.io/etcd/server/v3
    build_in etcdctl "$DIR/src/etcd" "-s -w" go.etcd.io/etcd/etcdctl/v3
    build_in etcdutl "$DIR/src/etcd" "-s -w" go.etcd.io/etcd/etcdutl/v3
    ;;
  kwok)
    install_at kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK" "sigs.k8s.io/kwok/cmd/kwok@$KWOK"
    kwok_stages
    ;;
  helm)
    install_at helm "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
      "helm.sh/helm/v3/cmd/helm@$HELM"
    ;;
  webhook)
    webhook_wrapper
    build_in amazon-eks-pod-identity-webhook "$DIR/src/webhook" "-s -w" github.com/aws/amazon-eks-pod-identity-webhook
    ;;
  nth)
    nth_wrapper
    rm -f "$BIN"/aws-node-termination-handler-*.pin
    build_in aws-node-termination-handler "$DIR/src/nth" "-s -w" github.com/aws/aws-node-termination-handler/cmd
    echo "$NTH" >"$BIN/aws-node-termination-handler-$NTH.pin"
    ;;
  esac
  built "$bins" || die "building $name failed: go reported success but $bins is missing from $BIN"
  secs=$(($(date +%s) - start))
  say "$name built in ${secs}s"
  times+=("$name built in ${secs}s")
  echo "$(date -u +%FT%TZ) $name ${secs}s" >>"$DIR/build-times"
done
say "done ($pins) in $BIN:"
printf '  %s\n' "${times[@]}"
