#!/usr/bin/env bash
# Builds the built-in addons' container images from source, for the real-node
# bed (issue 41: the addons run for real): each program from the Go module
# proxy at the release its chart's appVersion names (or the nearest one the
# proxy serves, said below), written as an OCI image archive under the exact
# reference the chart's default values pull (scripts/nodebed/oci_image.py),
# so that the rendered values pull it unchanged once a test imports the
# archive into a node's containerd.
#
#   metrics-server: chart metrics-server 3.13.1 (plugins/metrics-server)
#     pulls registry.k8s.io/metrics-server/metrics-server:v0.8.1; the proxy
#     serves sigs.k8s.io/metrics-server v0.8.0 and refuses v0.8.1 (403, "not
#     available"), so the image holds v0.8.0's program under the v0.8.1 tag.
#     The upstream image is distroless with ENTRYPOINT ["/metrics-server"]
#     (its Dockerfile); the chart passes only args.
#   descheduler: chart descheduler 0.36.0 (plugins/descheduler) pulls
#     registry.k8s.io/descheduler/descheduler:v0.36.0 and runs
#     /bin/descheduler (its values' `command`); built from
#     sigs.k8s.io/descheduler v0.36.0.
#   dex: chart dex 0.24.0 (plugins/dex) pulls ghcr.io/dexidp/dex:v2.44.0
#     (its appVersion) and runs `dex serve … /etc/dex/config.yaml` (the
#     chart's args, no command). The proxy does not serve Dex v2.44.0, so it
#     is built from the tagged source tarball in $KUBE_AWS_SHARED_DATA/src
#     (its own go.mod: the dependencies come from the proxy), `dex` at
#     /usr/local/bin/dex and the web templates and static files at
#     /srv/dex/web, as upstream's Dockerfile lays them out. Upstream's
#     ENTRYPOINT is its docker-entrypoint, which runs gomplate (not built
#     here) over the config; this image has no entrypoint, so the chart's
#     args run `dex` from PATH, with the config as the chart writes it.
#     Built with Go 1.25.0, the toolchain upstream's Dockerfile pins
#     (golang:1.25.0), fetched by GOTOOLCHAIN from the module proxy: Go
#     1.25.2 and later refuse the URL Dex 2.44.0's in-cluster Kubernetes
#     storage builds ("https://[10.96.0.1]:443": net/url rejects an IPv4
#     address in brackets since CVE-2025-47912's fix), and Dex then exits
#     with "invalid IP-literal". `-X main.version=v2.44.0` as upstream's
#     release-binary target.
#   aws-node-termination-handler: chart aws-node-termination-handler 0.27.6
#     (plugins/aws-node-termination-handler) pulls
#     public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.25.6 (the
#     chart's `v{{ .Chart.AppVersion }}`); built from
#     github.com/aws/aws-node-termination-handler v1.25.6 (./cmd), the
#     program at /node-termination-handler and the entrypoint upstream's
#     Dockerfile gives it. The same module the test bed builds for the host
#     (scripts/install-testbed.sh), so a warm Go build cache makes it quick
#     (3 s; 165 s with empty Go caches).
#   cluster-autoscaler: chart cluster-autoscaler 9.59.0
#     (plugins/cluster-autoscaler) pulls
#     registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0 (the plugin's
#     values name the tag from src/config/versions.rs, for Kubernetes 1.35).
#     The proxy does not serve cluster-autoscaler 1.35.0: built from the
#     tagged source tarball in $KUBE_AWS_SHARED_DATA/src, whose module is
#     its cluster-autoscaler/ directory, with the AWS provider only: `-tags
#     aws`, as upstream's Makefile does for BUILD_TAGS=aws
#     (cloudprovider/builder/builder_aws.go is `//go:build aws`; without a
#     tag builder_all.go links every provider). Upstream's Dockerfile
#     copies the program to /cluster-autoscaler (distroless, CMD, no
#     entrypoint); the chart runs `command: [./cluster-autoscaler, …]` from
#     its working directory, and with no WorkingDir in the image config the
#     runtime starts it in /, where upstream's WORKDIR puts it.
#   aws-cloud-controller-manager: chart aws-cloud-controller-manager 0.0.11
#     (plugins/aws-cloud-controller-manager) pulls
#     registry.k8s.io/provider-aws/cloud-controller-manager at the tag
#     src/config/versions.rs names for the minor (v1.35.3 for 1.35; the
#     chart's own appVersion is v1.35.0); built from k8s.io/cloud-provider-aws
#     v1.35.3 (cmd/aws-cloud-controller-manager), the program at
#     /bin/aws-cloud-controller-manager, its entrypoint as upstream's
#     Dockerfile has it (the chart passes only args), `-X
#     k8s.io/component-base/version.gitVersion=v1.35.3` as upstream's
#     Makefile sets it. Its go.mod replaces github.com/google/cel-go with
#     github.com/cel-expr/cel-go v0.31.0 (the project's new path), which the
#     proxy refuses (403): that replace is not copied (SKIP_REPLACES), and the
#     required github.com/google/cel-go v0.31.0 comes from the proxy instead.
#   The EBS CSI driver: chart aws-ebs-csi-driver 2.64.0
#     (plugins/aws-ebs-csi-driver). Its controller Deployment
#     (templates/controller.yaml) runs five images, one row each; with no
#     snapshot CRDs on the bed the chart adds no csi-snapshotter, and the
#     volumemodifier is off by default (controller.volumeModificationFeature).
#     The node DaemonSet's images are not built (csi-node-driver-registrar:
#     the proxy serves github.com/kubernetes-csi/node-driver-registrar at no
#     version); its node plugin needs block devices the bed does not have.
#     The -eksbuild.N tags are EKS's builds of upstream's tags.
#   aws-ebs-csi-driver: public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.64.0
#     (the chart's `v{{ .Chart.AppVersion }}`). The proxy does not serve
#     github.com/kubernetes-sigs/aws-ebs-csi-driver v1.64.0: built from the
#     tagged source tarball in $KUBE_AWS_SHARED_DATA/src (its go.mod says
#     go 1.26.6: the local Go), ./cmd as upstream's Makefile builds it, the
#     program at /bin/aws-ebs-csi-driver and its entrypoint as upstream's
#     Dockerfile has them (the chart passes `controller` and flags as args).
#     The Makefile's -X flags: pkg/driver.driverVersion and
#     pkg/cloud.driverVersion v1.64.0, pkg/driver.gitCommit the tarball's
#     commit (`git get-tar-commit-id`); not pkg/driver.buildDate (the build's
#     date: the archive would differ at every build). Upstream's Dockerfile
#     builds with GOFIPS140=certified and sets GODEBUG=fips140=off in the
#     image; this build leaves GOFIPS140 off (the chart's `fips` is false).
#   csi-provisioner, csi-attacher, csi-resizer: the chart's sidecars
#     public.ecr.aws/csi-components/csi-provisioner:v6.3.0-eksbuild.4,
#     csi-attacher:v4.12.0-eksbuild.5 and csi-resizer:v2.2.1-eksbuild.3;
#     built from github.com/kubernetes-csi/external-provisioner/v6 v6.3.0
#     and external-attacher/v4 v4.12.0. The proxy refuses external-resizer/v2
#     v2.2.1 (403, "not available") and serves v2.2.0 and v2.3.0: the image
#     holds v2.2.0's program (the same minor; v2.3.0 is a newer feature
#     release, with CSI spec v1.13.0) under the v2.2.1 tag. Each program at
#     /<name> with ENTRYPOINT ["/<name>"], as each one's Dockerfile has it
#     (distroless; the chart passes only args), `-X main.version=<the version
#     built>` as their release-tools/build.make sets it.
#   csi-livenessprobe: the chart's liveness-probe sidecar,
#     public.ecr.aws/csi-components/livenessprobe:v2.19.0-eksbuild.5. The
#     proxy serves github.com/kubernetes-csi/livenessprobe at no version or
#     path, so the image holds our own re-implementation of upstream's v2.19.0
#     (scripts/nodebed/csi-livenessprobe: its header says what it does and
#     does not do; it accepts the chart's --csi-address, --probe-timeout and
#     --metrics-address), at /livenessprobe with upstream's Dockerfile's
#     ENTRYPOINT ["/livenessprobe"]. A `local:` row: keyed on every file of
#     its directory, so a change to the program rebuilds it.
#
# The archives land outside the clone, in a cache every clone on the machine
# shares: $CACHE/addon-images/<name>-<key>.tar, where CACHE is
# $KUBE_AWS_TESTBED_CACHE or ${XDG_CACHE_HOME:-$HOME/.cache}/kube-aws-testbed
# and <key> a hash of that addon's own pin line, of its source tarball or
# local directory (if any), of the Go version, of
# scripts/nodebed/oci_image.py and of RECIPE (bump it when build_addon
# changes): adding or changing one addon rebuilds only that one.
# .testbed/addon-images/<name>.tar (gitignored) points at the current
# archive. A second run builds nothing ("up to date").
# Arguments: addon names, to build only those (default: all).
# Needs Go and scripts/install-testbed.sh's helper conventions; no root.
# See docs/testing.md, "The addon images".
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

say() { echo "install-addon-images: $*"; }
die() {
  echo "install-addon-images: $*" >&2
  exit 1
}

if [ "${KUBE_AWS_TESTBED:-}" = skip ]; then
  say "KUBE_AWS_TESTBED=skip: not building; the tests that run addons will skip and say so"
  exit 0
fi
command -v go >/dev/null 2>&1 || die "go not found on PATH: the addon images are built from the Go module proxy"
DATA=${KUBE_AWS_SHARED_DATA:-$ROOT/../shared/data}

# --- pins -------------------------------------------------------------------
# name|module@version or src:<tarball in $DATA/src>[:<directory of its
# go.mod in the tarball's top directory>] or local:<directory of a Go module
# in this clone>|package|image|path in the image|entrypoint|plugin|chart
# version|extra files (a directory of the source tree=its path in the
# image)|Go toolchain (GOTOOLCHAIN; empty: the local go)|-X flags for the
# linker (separated by spaces)|Go build tags
ADDONS=(
  "metrics-server|sigs.k8s.io/metrics-server@v0.8.0|cmd/metrics-server|registry.k8s.io/metrics-server/metrics-server:v0.8.1|/metrics-server|/metrics-server|metrics-server|3.13.1"
  "descheduler|sigs.k8s.io/descheduler@v0.36.0|cmd/descheduler|registry.k8s.io/descheduler/descheduler:v0.36.0|/bin/descheduler||descheduler|0.36.0"
  "dex|src:dex-v2.44.0.tar.gz|cmd/dex|ghcr.io/dexidp/dex:v2.44.0|/usr/local/bin/dex||dex|0.24.0|web=/srv/dex/web|go1.25.0|main.version=v2.44.0"
  "external-dns|sigs.k8s.io/external-dns@v0.21.0||registry.k8s.io/external-dns/external-dns:v0.21.0|/ko-app/external-dns|/ko-app/external-dns|external-dns|1.21.1|||sigs.k8s.io/external-dns/pkg/apis/externaldns.Version=v0.21.0"
  "aws-node-termination-handler|github.com/aws/aws-node-termination-handler@v1.25.6|cmd|public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.25.6|/node-termination-handler|/node-termination-handler|aws-node-termination-handler|0.27.6"
  "cluster-autoscaler|src:autoscaler-cluster-autoscaler-1.35.0.tar.gz:cluster-autoscaler||registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0|/cluster-autoscaler||cluster-autoscaler|9.59.0||||aws"
  "aws-cloud-controller-manager|k8s.io/cloud-provider-aws@v1.35.3|cmd/aws-cloud-controller-manager|registry.k8s.io/provider-aws/cloud-controller-manager:v1.35.3|/bin/aws-cloud-controller-manager|/bin/aws-cloud-controller-manager|aws-cloud-controller-manager|0.0.11|||k8s.io/component-base/version.gitVersion=v1.35.3"
  "aws-ebs-csi-driver|src:aws-ebs-csi-driver-v1.64.0.tar.gz|cmd|public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.64.0|/bin/aws-ebs-csi-driver|/bin/aws-ebs-csi-driver|aws-ebs-csi-driver|2.64.0|||github.com/kubernetes-sigs/aws-ebs-csi-driver/pkg/driver.driverVersion=v1.64.0 github.com/kubernetes-sigs/aws-ebs-csi-driver/pkg/cloud.driverVersion=v1.64.0 github.com/kubernetes-sigs/aws-ebs-csi-driver/pkg/driver.gitCommit=6689789f192f8941878801f2730ea972a1196047"
  "csi-provisioner|github.com/kubernetes-csi/external-provisioner/v6@v6.3.0|cmd/csi-provisioner|public.ecr.aws/csi-components/csi-provisioner:v6.3.0-eksbuild.4|/csi-provisioner|/csi-provisioner|aws-ebs-csi-driver|2.64.0|||main.version=v6.3.0"
  "csi-attacher|github.com/kubernetes-csi/external-attacher/v4@v4.12.0|cmd/csi-attacher|public.ecr.aws/csi-components/csi-attacher:v4.12.0-eksbuild.5|/csi-attacher|/csi-attacher|aws-ebs-csi-driver|2.64.0|||main.version=v4.12.0"
  "csi-resizer|github.com/kubernetes-csi/external-resizer/v2@v2.2.0|cmd/csi-resizer|public.ecr.aws/csi-components/csi-resizer:v2.2.1-eksbuild.3|/csi-resizer|/csi-resizer|aws-ebs-csi-driver|2.64.0|||main.version=v2.2.0"
  "csi-livenessprobe|local:scripts/nodebed/csi-livenessprobe||public.ecr.aws/csi-components/livenessprobe:v2.19.0-eksbuild.5|/livenessprobe|/livenessprobe|aws-ebs-csi-driver|2.64.0"
)
# A module's replace directives that are not copied into the wrapper module
# (the header says why, per module): a regular expression on the replaced path.
SKIP_REPLACES='^replace github\.com/google/cel-go '

# Each plugin's chart must still be the one whose image is built here.
for a in "${ADDONS[@]}"; do
  IFS='|' read -r name _ _ image _ _ plugin chart _ _ _ _ <<<"$a"
  grep -q "^ *version: $chart$" "plugins/$plugin/plugin.yaml" ||
    die "plugins/$plugin/plugin.yaml no longer pins chart $chart: check its image ($image) and update ADDONS"
done

# The recipe's version: bump it when build_addon's way of building changes.
RECIPE=2
common="recipe=$RECIPE go=$(go env GOVERSION) oci=$(sha256sum scripts/nodebed/oci_image.py | cut -c1-12)"
CACHE=${KUBE_AWS_TESTBED_CACHE:-${XDG_CACHE_HOME:-${HOME:-$ROOT/.testbed}/.cache}/kube-aws-testbed}
DIR=$CACHE/addon-images
mkdir -p "$DIR/log" "$ROOT/.testbed"
# .testbed/addon-images was one symlink to a whole table's directory
# before the keys were per addon: it becomes a directory of links.
[ -L "$ROOT/.testbed/addon-images" ] && rm "$ROOT/.testbed/addon-images"
mkdir -p "$ROOT/.testbed/addon-images"

run() {
  local comp=$1
  shift
  if ! "$@" >>"$DIR/log/$comp.log" 2>&1; then
    tail -n 30 "$DIR/log/$comp.log" >&2
    die "building $comp failed (see $DIR/log/$comp.log)"
  fi
}

# One addon from the Go module proxy: a wrapper module (as for the test
# bed's programs: the proxy's version list is not needed then), a static
# build. From a source tarball: the tarball's own module, built in place.
# Then an image archive.
build_addon() {
  local name=$1 modver=$2 pkg=$3 image=$4 dest=$5 entry=$6 extra=$7 out=$8 toolchain=$9 xflags=${10} tags=${11}
  local ldflags="-s -w" x
  for x in $xflags; do ldflags+=" -X $x"; done
  local tagflags=()
  [ -n "$tags" ] && tagflags=(-tags "$tags")
  export GOTOOLCHAIN=${toolchain:-local}
  local w=$DIR/src/$name-$key tmp=$DIR/tmp-$name-$key
  rm -rf "$w" "$tmp"
  mkdir -p "$w" "$tmp"
  if [ "${modver#src:}" != "$modver" ]; then
    local spec=${modver#src:} top
    local tarball=${spec%%:*} moddir=
    [ "$tarball" != "$spec" ] && moddir=${spec#*:}
    tar -xzf "$DATA/src/$tarball" -C "$w"
    top=$(find "$w" -mindepth 1 -maxdepth 1 -type d)${moddir:+/$moddir}
    [ -f "$top/go.mod" ] || die "$name: $tarball holds no Go module at ${moddir:-its top}"
    (cd "$top" && CGO_ENABLED=0 run "$name" go build -mod=mod -trimpath "${tagflags[@]}" -ldflags "$ldflags" \
      -o "$tmp/$name" "./$pkg")
    w=$top
  elif [ "${modver#local:}" != "$modver" ]; then
    # A program of ours, in a directory of this clone (its go.mod and go.sum):
    # copied out and built there, so the build writes nothing into the clone.
    cp -R "$ROOT/${modver#local:}/." "$w/"
    (cd "$w" && CGO_ENABLED=0 run "$name" go build -mod=mod -trimpath "${tagflags[@]}" -ldflags "$ldflags" \
      -o "$tmp/$name" "./$pkg")
  else
    printf '%s\n' "// Generated by scripts/install-addon-images.sh." "module kube-aws.testbed/$name" "" \
      "go 1.26" "" "require ${modver%@*} ${modver#*@}" >"$w/go.mod"
    # The module's own replace directives to module versions (Go applies only
    # the main module's: descheduler v0.36.0 requires a kube-openapi the proxy
    # does not serve, and replaces it with one it does).
    local gomod
    gomod=$(cd "$w" && GOFLAGS=-mod=mod go mod download -json "$modver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    [ -f "$gomod" ] || die "cannot download $modver's go.mod from the Go module proxy"
    sed -n 's#^replace \([^ ]*\) => \([^ .][^ ]*\) \(v[^ ]*\)$#replace \1 => \2 \3#p' "$gomod" |
      { grep -Ev "$SKIP_REPLACES" || true; } >>"$w/go.mod"
    (cd "$w" && CGO_ENABLED=0 run "$name" go build -mod=mod -trimpath "${tagflags[@]}" -ldflags "$ldflags" \
      -o "$tmp/$name" "${modver%@*}${pkg:+/$pkg}")
  fi
  local files=(--file "$tmp/$name=$dest:0755")
  if [ -n "$extra" ]; then
    local from=${extra%%=*} to=${extra#*=} f
    [ -d "$w/$from" ] || die "$name: no $from in its source"
    while IFS= read -r f; do
      files+=(--file "$w/$from/$f=$to/$f:0644")
    done < <(cd "$w/$from" && find . -type f ! -name '*.go' | sed 's#^\./##' | sort)
  fi
  run "$name" python3 scripts/nodebed/oci_image.py "$tmp/image.tar" "$image" \
    "${files[@]}" ${entry:+--entrypoint "$entry"}
  mv "$tmp/image.tar" "$out"
  rm -rf "$tmp" "$DIR/src/$name-$key"
  unset GOTOOLCHAIN
}

for a in "${ADDONS[@]}"; do
  IFS='|' read -r name modver pkg image dest entry _ _ extra toolchain xflags tags <<<"$a"
  # Names given as arguments: only those.
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then
    continue
  fi
  src=
  if [ "${modver#src:}" != "$modver" ]; then
    tarball=${modver#src:}
    tarball=${tarball%%:*}
    [ -f "$DATA/src/$tarball" ] || die "$name: no source tarball $DATA/src/$tarball (set KUBE_AWS_SHARED_DATA)"
    src=$(sha256sum "$DATA/src/$tarball" | cut -c1-12)
  elif [ "${modver#local:}" != "$modver" ]; then
    # Keyed on every file of the directory: a change rebuilds it.
    [ -f "${modver#local:}/go.mod" ] || die "$name: no Go module at ${modver#local:}"
    src=$(cd "${modver#local:}" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
  fi
  key=$(printf '%s src=%s %s' "$a" "$src" "$common" | sha256sum | cut -c1-12)
  out=$DIR/$name-$key.tar
  start=$(date +%s)
  if [ -s "$out" ]; then
    say "$name up to date ($out)"
  else
    build_addon "$name" "$modver" "$pkg" "$image" "$dest" "$entry" "$extra" "$out" "$toolchain" "$xflags" "$tags"
    say "$name built in $(($(date +%s) - start))s ($out)"
  fi
  ln -sfn "$out" "$ROOT/.testbed/addon-images/$name.tar"
done
say "done: ${*:-all ${#ADDONS[@]}} in $ROOT/.testbed/addon-images ($common)"
