#!/usr/bin/env bash
# Builds the real-node bed (docs/testing.md, "The real-node bed"): what a
# node container needs to boot systemd, containerd, kubelet and kubeadm.
#
#   1. binaries, from the Go module proxy at the test bed's pins:
#      kubelet and kube-proxy (k8s.io/kubernetes, through the test bed's own
#      wrapper module), crictl (sigs.k8s.io/cri-tools), CoreDNS
#      (github.com/coredns/coredns at kubeadm's CoreDNSVersion), and pause
#      (Kubernetes' own build/pause/linux/pause.c, compiled static with gcc);
#   2. OCI image archives, written without a registry, for exactly the images
#      `kubeadm config images list` names, each one layer holding the test
#      bed's binary (scripts/nodebed/oci_image.py);
#   3. a Debian root filesystem (debootstrap) with systemd, containerd, runc,
#      the CNI plugins, cloud-init and python3, the aws CLI (PyPI, the tools
#      venv's pin), the binaries in /usr/local/bin, and the images already
#      imported into its containerd.
#
# Needs the control-plane test bed (scripts/install-testbed.sh) first: kubeadm,
# kubectl and the control-plane binaries come from it. Needs root (debootstrap,
# containerd) and Debian's runc, containerd, debootstrap and gcc.
# Everything lands outside the clone, in the cache the control-plane bed
# uses (scripts/install-testbed.sh: $KUBE_AWS_TESTBED_CACHE or
# ${XDG_CACHE_HOME:-$HOME/.cache}/kube-aws-testbed), under node/: the image
# in node/<hash of its inputs: the pins, the test bed's pins and recipe, and
# this script's and scripts/nodebed/*'s content>/, the binaries, the Debian
# base, the aws CLI and the image archives each under a key of their pins
# and the functions that build them. .testbed/node/current points at the
# image. A second run, or a fresh clone on a machine that built it once,
# builds nothing ("up to date").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

say() { echo "install-nodebed: $*"; }
die() {
  echo "install-nodebed: $*" >&2
  exit 1
}

if [ "${KUBE_AWS_TESTBED:-}" = skip ] || [ "${KUBE_AWS_NODEBED:-}" = skip ]; then
  say "KUBE_AWS_TESTBED or KUBE_AWS_NODEBED=skip: not building; the real-node tests will skip and say so"
  exit 0
fi

# KUBE_AWS_TESTBED_K8S=1.35.4: a node image of another patch of the table,
# from the commands scripts/install-testbed.sh built for it with the same
# setting (.testbed/bin-v1.35.4), linked as .testbed/node/k8s-v1.35.4 instead
# of .testbed/node/current (scripts/install-upgradebed.sh).
OTHER=${KUBE_AWS_TESTBED_K8S:-}
TBLINK=.testbed/bin${OTHER:+-v$OTHER}
TB=$(readlink -f "$TBLINK" 2>/dev/null)/.. || true
[ -f "$TB/pins" ] || die "the control-plane test bed is missing ($TBLINK): run scripts/install-testbed.sh first${OTHER:+ with KUBE_AWS_TESTBED_K8S=$OTHER}"
TB=$(cd "$TB" && pwd)
for b in kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler etcd; do
  [ -x "$TB/bin/$b" ] || die "the control-plane test bed has no $b ($TB/bin): run scripts/install-testbed.sh first"
done
[ -f "$TB/src/kubernetes/go.mod" ] || die "the test bed's wrapper module $TB/src/kubernetes is missing: run scripts/install-testbed.sh"

# --- pins -------------------------------------------------------------------
K8S=$(sed -n 's/.*kubernetes=\(v[0-9.]*\).*/\1/p' "$TB/pins")
[ -n "$K8S" ] || die "cannot read the kubernetes pin from $TB/pins"
minor=${K8S#v}
minor=${minor%.*}
K8SDIR=$(cd "$TB/src/kubernetes" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)
[ -d "$K8SDIR" ] || die "k8s.io/kubernetes@$K8S is not in the module cache"
consts=$K8SDIR/cmd/kubeadm/app/constants/constants.go
COREDNS=$(sed -n 's/^[[:space:]]*CoreDNSVersion = "\(v[0-9.]*\)"$/\1/p' "$consts")
PAUSE=$(sed -n 's/^[[:space:]]*PauseVersion = "\([0-9.]*\)"$/\1/p' "$consts")
ETCD_TAG=$(sed -n 's/^[[:space:]]*DefaultEtcdVersion = "\([0-9.-]*\)"$/\1/p' "$consts")
# crictl: the version k8s.io/kubernetes' build/dependencies.yaml names.
CRICTL=v$(sed -n '/name: "crictl"/{n;s/^[[:space:]]*version: \([0-9.]*\)$/\1/p}' "$K8SDIR/build/dependencies.yaml")
{ [ -n "$COREDNS" ] && [ -n "$PAUSE" ] && [ -n "$ETCD_TAG" ] && [ "$CRICTL" != v ]; } ||
  die "cannot read CoreDNSVersion, PauseVersion, DefaultEtcdVersion from $consts or crictl from build/dependencies.yaml"
# The Go module proxy here does not serve sigs.k8s.io/cri-tools v1.35.0
# (k8s.io/kubernetes v1.36.5 names it; 403 "not available"): the 1.36 image
# takes v1.36.0, which is what a node installs from pkgs.k8s.io's v1.36
# repository (`cri-tools-1.36.*`, src/render/cloudconfig.rs) and what the
# node program's version check accepts (the minor or the one before,
# src/node/kube_aws_node/bootstrap.py version_matches; v1.34.0 was refused).
case $CRICTL in v1.35.0) CRICTL=v1.36.0 ;; esac
SUITE=bookworm
MIRROR=${KUBE_AWS_NODEBED_MIRROR:-http://deb.debian.org/debian}
# The node image's Debian packages (besides debootstrap's minbase);
# python3-cffi-backend is named because debootstrap does not resolve the
# virtual package python3-cryptography needs (cloud-init fails to configure).
PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,iproute2,conntrack,ethtool,socat,kmod,ca-certificates,procps,util-linux,mount,python3,python3-cffi-backend,cloud-init,curl
# The aws CLI nodes use (the stub's `aws s3 cp`, the signals): the version
# the tools venv pins (scripts/install-tools.sh), from PyPI. Debian's awscli
# (2.9) is too old to take its endpoint from AWS_ENDPOINT_URL.
AWSCLI=$(sed -n 's/^[[:space:]]*"awscli==\([0-9.]*\)"$/\1/p' scripts/install-tools.sh)
[ -n "$AWSCLI" ] || die "cannot read the awscli pin from scripts/install-tools.sh"
BIN_RECIPE=1 # bump when the way binaries are built changes
ROOTFS_RECIPE=1

bin_pins="recipe=$BIN_RECIPE kubernetes=$K8S coredns=$COREDNS crictl=$CRICTL pause=$PAUSE"
base_pins="recipe=$ROOTFS_RECIPE suite=$SUITE packages=$PACKAGES"
# The node image: its binaries, the test bed's binaries, its base, and the
# files that make it (this script and scripts/nodebed/*, but node.sh, which
# only runs nodes).
inputs=$(
  {
    printf '%s\n' "$bin_pins" "$base_pins" "awscli=$AWSCLI" "$(cat "$TB/pins")"
    cat scripts/install-nodebed.sh scripts/nodebed/oci_image.py scripts/nodebed/containerd.toml.in \
      scripts/nodebed/10-bridge.conflist scripts/nodebed/kubelet.service scripts/nodebed/crictl.yaml
  } | sha256sum | cut -c1-12
)
# The clone's links (.testbed/node/current, k8s-v*) and its nodes' run
# directories stay in the clone; what is built goes to the shared store.
NB=$ROOT/.testbed/node
STORE=${KUBE_AWS_TESTBED_CACHE:-${XDG_CACHE_HOME:-${HOME:-$ROOT/.testbed}/.cache}/kube-aws-testbed}/node
DIR=$STORE/$inputs
mkdir -p "$NB" "$STORE/log"
LOG=$STORE/log

LINK=$NB/current
[ -z "$OTHER" ] || LINK=$NB/k8s-$K8S
up_to_date() {
  [ -f "$DIR/ready" ] || return 1
  touch "$DIR/used"
  ln -sfn "$DIR" "$LINK"
  say "up to date ($bin_pins; $SUITE) in $DIR"
}
up_to_date && exit 0

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, and containerd to import the images); the real-node tests need root too"
missing=()
for p in runc:runc containerd:containerd ctr:containerd debootstrap:debootstrap gcc:gcc ip:iproute2 iptables:iptables; do
  command -v "${p%%:*}" >/dev/null 2>&1 || missing+=("${p#*:}")
done
dpkg -s libc6-dev >/dev/null 2>&1 || missing+=(libc6-dev)
if [ "${#missing[@]}" -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null 2>&1 || die "go not found on PATH: the node's binaries are built with Go (as the test bed's)"

exec 9>"$STORE/.lock"
flock 9
# Another clone may have built it while this one waited for the lock.
up_to_date && exit 0

export CGO_ENABLED=0
export GOFLAGS="-trimpath -buildvcs=false"
export GOWORK=off

run() {
  local comp=$1
  shift
  if ! "$@" >>"$LOG/$comp.log" 2>&1; then
    echo "install-nodebed: building $comp failed: \`$*\` exited non-zero; the last lines of $LOG/$comp.log:" >&2
    tail -n 25 "$LOG/$comp.log" | sed 's/^/  /' >&2
    exit 1
  fi
}

timed() {
  local name=$1 start secs
  shift
  start=$(date +%s)
  : >"$LOG/$name.log"
  "$@"
  secs=$(($(date +%s) - start))
  say "$name built in ${secs}s"
  echo "$(date -u +%FT%TZ) $name ${secs}s" >>"$STORE/build-times"
}

# --- 1. binaries --------------------------------------------------------------
k8s_ldflags() {
  local v p
  v="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1"
  v="$v -X k8s.io/component-base/version.gitMinor=${minor#*.} -X k8s.io/component-base/version.gitTreeState=clean"
  p=${v//component-base\/version/client-go\/pkg\/version}
  echo "-s -w $v $p"
}
build_k8s() {
  local name=$1
  (cd "$TB/src/kubernetes" && run "$name" go build -mod=mod -ldflags "$(k8s_ldflags)" -o "$BIN/$name.tmp" "k8s.io/kubernetes/cmd/$name")
  mv "$BIN/$name.tmp" "$BIN/$name"
}
install_go() {
  local name=$1 ldflags=$2 pkg=$3
  rm -rf "$BIN/tmp-$name"
  mkdir -p "$STORE/src"
  (cd "$STORE/src" && GOBIN="$BIN/tmp-$name" run "$name" go install -ldflags "$ldflags" "$pkg")
  mv "$BIN/tmp-$name"/* "$BIN/$name"
  rm -rf "$BIN/tmp-$name"
}
build_pause() {
  run pause gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE-kube-aws-nodebed" -o "$BIN/pause.tmp" "$K8SDIR/build/pause/linux/pause.c"
  strip "$BIN/pause.tmp"
  mv "$BIN/pause.tmp" "$BIN/pause"
}
# CoreDNS at kubeadm's version, with the plugins kubeadm's Corefile uses and
# every other in-tree plugin but the cloud and tracing ones (azure, clouddns,
# route53, nomad, etcd, trace, dnstap, geoip), whose SDKs would double the
# build: coremain and the plugins are CoreDNS's own packages at $COREDNS.
build_coredns() {
  local w=$STORE/src/coredns-$COREDNS p
  mkdir -p "$w"
  {
    echo "// Generated by scripts/install-nodebed.sh: CoreDNS $COREDNS without the cloud plugins."
    echo "package main"
    echo
    echo "import ("
    for p in acl any auto autopath bind bufsize cache cancel chaos debug dns64 dnssec errors file forward \
      grpc header health hosts k8s_external kubernetes loadbalance local log loop metadata metrics minimal \
      multisocket nsid pprof ready reload rewrite root secondary sign template timeouts tls transfer tsig \
      view whoami; do
      echo "	_ \"github.com/coredns/coredns/plugin/$p\""
    done
    echo "	_ \"github.com/coredns/caddy/onevent\""
    echo "	\"github.com/coredns/coredns/coremain\""
    echo ")"
    echo
    echo "func main() { coremain.Run() }"
  } >"$w/main.go"
  printf '%s\n' "module kube-aws.nodebed/coredns" "" "go 1.24.0" "" "require github.com/coredns/coredns $COREDNS" >"$w/go.mod"
  (cd "$w" && run coredns go build -mod=mod -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS" -o "$BIN/coredns.tmp" .)
  mv "$BIN/coredns.tmp" "$BIN/coredns"
}

# Each intermediate's key: its pins and the functions that build it.
recipe_of() {
  local text
  text=$(declare -f "$@") || die "recipe_of: not a function among: $*"
  printf '%s' "$text" | sha256sum | cut -c1-12
}
bin_key=$(printf '%s %s' "$bin_pins" "$(recipe_of run k8s_ldflags build_k8s install_go build_pause build_coredns)" |
  sha256sum | cut -c1-12)
BIN=$STORE/bin-$bin_key
mkdir -p "$BIN"
[ -x "$BIN/kubelet" ] || timed kubelet build_k8s kubelet
[ -x "$BIN/kube-proxy" ] || timed kube-proxy build_k8s kube-proxy
[ -x "$BIN/pause" ] || timed pause build_pause
[ -x "$BIN/crictl" ] || timed crictl install_go crictl "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL"
[ -x "$BIN/coredns" ] || timed coredns build_coredns

# --- 2. the Debian base (before the images: kube-proxy's takes iptables from it)
debootstrap_base() {
  rm -rf "$BASE.tmp"
  mkdir -p "$STORE/debs"
  run base debootstrap --variant=minbase --cache-dir="$STORE/debs" --include="$PACKAGES" "$SUITE" "$BASE.tmp" "$MIRROR"
  rm -rf "$BASE.tmp/var/cache/apt/archives"/*.deb "$BASE.tmp/var/lib/apt/lists"/*_Packages
  mv "$BASE.tmp" "$BASE"
}
base_key=$(printf '%s %s' "$base_pins" "$(recipe_of run debootstrap_base)" | sha256sum | cut -c1-12)
BASE=$STORE/base-$base_key
[ -d "$BASE" ] || timed base debootstrap_base

# The aws CLI, in a directory of its own in the image (/usr/local/lib/kube-aws-awscli),
# so that its botocore, urllib3 and PyYAML do not meet Debian's (cloud-init's).
awscli() {
  rm -rf "$AWSDIR.tmp"
  run awscli python3 -m pip install --quiet --no-compile --disable-pip-version-check --target "$AWSDIR.tmp" "awscli==$AWSCLI"
  mv "$AWSDIR.tmp" "$AWSDIR"
}
AWSDIR=$STORE/awscli-$AWSCLI-$(recipe_of run awscli)
[ -d "$AWSDIR" ] || timed awscli awscli

# --- 3. images ----------------------------------------------------------------
# exactly what kubeadm asks for at this version
mapfile -t IMAGES < <("$TB/bin/kubeadm" config images list --kubernetes-version "$K8S" 2>>"$LOG/images.log")
[ "${#IMAGES[@]}" -ge 7 ] || die "\`kubeadm config images list --kubernetes-version $K8S\` listed ${#IMAGES[*]} images (see $LOG/images.log)"
# kube-proxy (iptables mode) runs iptables and conntrack: its image also
# holds Debian's iptables-nft (xtables-nft-multi under each name kube-proxy
# calls), conntrack, the xtables extensions, and the libraries they link,
# all taken from the Debian base; the binaries are dynamically linked.
kube_proxy_files() {
  local f n lib
  local -A libs=()
  for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore xtables-nft-multi; do
    echo "--file=$BASE/usr/sbin/xtables-nft-multi=/usr/sbin/$n"
  done
  echo "--file=$BASE/usr/sbin/conntrack=/usr/sbin/conntrack"
  for f in "$BASE"/usr/lib/x86_64-linux-gnu/xtables/*.so; do
    echo "--file=$f=/usr/lib/x86_64-linux-gnu/xtables/${f##*/}"
  done
  for f in /usr/sbin/xtables-nft-multi /usr/sbin/conntrack "${BASE}"/usr/lib/x86_64-linux-gnu/xtables/*.so; do
    f=${f#"$BASE"}
    while read -r lib; do
      [ -n "$lib" ] && libs[$lib]=1
    done < <(chroot "$BASE" ldd "$f" | sed -n 's#.*[[:space:]]\(/[^ ]*\) (0x.*#\1#p')
  done
  for lib in "${!libs[@]}"; do
    echo "--file=$(readlink -f "$BASE$lib")=$lib"
  done
}

write_images() {
  mkdir -p "$IMG"
  local ref name bin entry dest extra
  for ref in "${IMAGES[@]}"; do
    name=${ref%:*}
    name=${name##*/}
    entry='' extra=''
    case $name in
    kube-apiserver | kube-controller-manager | kube-scheduler) bin=$TB/bin/$name dest=/usr/local/bin/$name ;;
    # As registry.k8s.io/etcd: etcd, etcdctl and etcdutl.
    etcd) bin=$TB/bin/etcd dest=/usr/local/bin/etcd extra="--file=$TB/bin/etcdctl=/usr/local/bin/etcdctl --file=$TB/bin/etcdutl=/usr/local/bin/etcdutl" ;;
    kube-proxy) bin=$BIN/kube-proxy dest=/usr/local/bin/kube-proxy extra=$(kube_proxy_files) ;;
    coredns) bin=$BIN/coredns dest=/coredns entry=/coredns ;;
    pause) bin=$BIN/pause dest=/pause entry=/pause ;;
    *) die "kubeadm lists an image this bed cannot build: $ref" ;;
    esac
    # shellcheck disable=SC2086 # $extra is a list of options, split on purpose
    run images python3 scripts/nodebed/oci_image.py "$IMG/$name.tar" "$ref" --file "$bin=$dest" ${entry:+--entrypoint "$entry"} $extra
  done
}
img_key=$(
  {
    printf '%s\n' "$bin_key" "$base_key" "$(cat "$TB/pins")"
    cat scripts/nodebed/oci_image.py
    declare -f write_images kube_proxy_files
  } | sha256sum | cut -c1-12
)
IMG=$STORE/images-$img_key
[ -f "$IMG/done" ] || {
  timed images write_images
  touch "$IMG/done"
}

# --- 4. the node's root filesystem ------------------------------------------------
# The images go into the node's containerd store with the host's containerd
# (the same Debian build as the node's), started on a private socket; its CRI
# plugin labels them io.cri-containerd.image=managed, as a pull would.
import_images() {
  local r=$1 sock state pid
  state=$(mktemp -d)
  sock=$state/containerd.sock
  cat >"$state/config.toml" <<EOF
version = 2
root = "$r/var/lib/containerd"
state = "$state/state"
[grpc]
  address = "$sock"
EOF
  containerd --config "$state/config.toml" >>"$LOG/import.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    [ -S "$sock" ] && ctr -a "$sock" version >/dev/null 2>&1 && break
    sleep 0.1
  done
  local ok=1 f
  for f in "$IMG"/*.tar; do
    ctr -a "$sock" -n k8s.io images import --no-unpack=false "$f" >>"$LOG/import.log" 2>&1 || {
      ok=0
      break
    }
  done
  ctr -a "$sock" -n k8s.io images ls >>"$LOG/import.log" 2>&1 || true
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -rf "$state"
  [ "$ok" = 1 ] || die "importing $f into the node's containerd failed; see $LOG/import.log"
}

# Empty Debian packages named as Amazon Linux 2023 names what the
# cloud-config installs, each depending on Debian's package of the same tools.
al2023_aliases() {
  local r=$1 d name dep
  d=$(mktemp -d)
  for name in conntrack-tools:conntrack iptables-nft:iptables iproute-tc:iproute2; do
    dep=${name#*:}
    name=${name%%:*}
    mkdir -p "$d/$name/DEBIAN"
    printf '%s\n' "Package: $name" "Version: 1.0+kube-aws-nodebed" "Architecture: all" "Depends: $dep" \
      "Maintainer: kube-aws <kube-aws@localhost>" \
      "Description: Amazon Linux 2023's name for Debian's $dep (the real-node bed)" >"$d/$name/DEBIAN/control"
    dpkg-deb --build --root-owner-group "$d/$name" "$r/tmp/$name.deb" >>"$LOG/rootfs.log" 2>&1
    chroot "$r" dpkg -i "/tmp/$name.deb" >>"$LOG/rootfs.log" 2>&1 || die "installing $name in the node image failed; see $LOG/rootfs.log"
    rm -f "$r/tmp/$name.deb"
  done
  rm -rf "$d"
}

make_rootfs() {
  local r=$DIR.tmp/rootfs
  rm -rf "$DIR.tmp"
  mkdir -p "$DIR.tmp"
  cp -a "$BASE" "$r"
  install -m 0755 "$BIN/kubelet" "$BIN/kube-proxy" "$BIN/crictl" "$TB/bin/kubeadm" "$TB/bin/kubectl" "$r/usr/local/bin/"
  cp -a "$AWSDIR" "$r/usr/local/lib/kube-aws-awscli"
  printf '%s\n' '#!/usr/bin/python3' '# the aws CLI (scripts/install-nodebed.sh)' 'import sys' \
    'sys.path.insert(0, "/usr/local/lib/kube-aws-awscli")' 'from awscli.clidriver import main' 'sys.exit(main())' \
    >"$r/usr/local/bin/aws"
  chmod 0755 "$r/usr/local/bin/aws"
  mkdir -p "$r/etc/containerd" "$r/etc/cni/net.d" "$r/etc/kubernetes/manifests" "$r/var/lib/kubelet" "$r/etc/systemd/system/multi-user.target.wants"
  sed "s#@PAUSE_IMAGE@#$(printf '%s\n' "${IMAGES[@]}" | grep /pause:)#" scripts/nodebed/containerd.toml.in >"$r/etc/containerd/config.toml"
  install -m 0644 scripts/nodebed/10-bridge.conflist "$r/etc/cni/net.d/"
  # The CNI plugins also where Amazon Linux 2023 and the EKS AMI have them,
  # /opt/cni/bin: the node program writes `containerd config default`, whose
  # CRI plugin looks there (Debian installs them in /usr/lib/cni). Without
  # these, no pod on the pod network started on a booted node ("failed to
  # find plugin bridge in path [/opt/cni/bin]", tests/it/real_node.rs).
  mkdir -p "$r/opt/cni/bin"
  for f in "$r"/usr/lib/cni/*; do
    ln -sfn "/usr/lib/cni/${f##*/}" "$r/opt/cni/bin/${f##*/}"
  done
  install -m 0644 scripts/nodebed/crictl.yaml "$r/etc/crictl.yaml"
  install -m 0644 scripts/nodebed/kubelet.service "$r/etc/systemd/system/kubelet.service"
  ln -sf /etc/systemd/system/kubelet.service "$r/etc/systemd/system/multi-user.target.wants/kubelet.service"
  # What a container does not need, or cannot do (kind masks the same).
  local u
  for u in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
    systemd-modules-load.service systemd-remount-fs.service systemd-sysctl.service \
    systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
  done
  # As on Amazon Linux 2023: systemd-networkd runs (the node program's
  # network step reloads it), and the packages the cloud-config's `packages`
  # names under AL2023's names are installed (cloud-init's packages module
  # asks apt for them by those names: conntrack-tools, iptables-nft and
  # iproute-tc are empty packages that depend on Debian's conntrack,
  # iptables and iproute2). Nodes have no internet: no apt source.
  chroot "$r" systemctl enable systemd-networkd.service >>"$LOG/rootfs.log" 2>&1
  # The host configures a node's eth0 (node.sh), not networkd, so networkd's
  # wait-online would wait its 2 minutes for a link it does not manage, and
  # cloud-init's network stage with it: the network is up when the node starts.
  ln -sf /dev/null "$r/etc/systemd/system/systemd-networkd-wait-online.service"
  al2023_aliases "$r"
  : >"$r/etc/apt/sources.list"
  # cloud-init's locale module sets Debian's en_US.UTF-8, which the image
  # does not generate; Amazon Linux 2023's is C.UTF-8.
  printf '%s\n' "# scripts/install-nodebed.sh: Amazon Linux 2023's locale" "locale: C.UTF-8" \
    >"$r/etc/cloud/cloud.cfg.d/90-kube-aws-nodebed.cfg"
  # cloud-init runs only when a test gives the node a datasource.
  touch "$r/etc/cloud/cloud-init.disabled"
  : >"$r/etc/machine-id"
  echo "node" >"$r/etc/hostname"
  printf '127.0.0.1 localhost\n' >"$r/etc/hosts"
  : >"$r/etc/resolv.conf"
  printf 'overlay\nbr_netfilter\n' >"$r/etc/modules-load.d/k8s.conf"
  import_images "$r"
  printf '%s\n' "${IMAGES[@]}" >"$DIR.tmp/images"
  echo "$K8S" >"$DIR.tmp/kubernetes-version"
  rm -rf "$DIR"
  mv "$DIR.tmp" "$DIR"
  touch "$DIR/ready"
}
timed rootfs make_rootfs
touch "$DIR/used" "$IMG/used"
ln -sfn "$DIR" "$LINK"
# Older node images and image sets go (each is 1.5 GB) once no clone has
# linked them for KUBE_AWS_TESTBED_KEEP_DAYS days (default 14; an up-to-date
# run's link counts: other clones' links cannot be seen from here), but
# never one this clone links (current, and the other patches' k8s-v*), nor
# one a running node's overlay still has as its lower layer.
KEEP_DAYS=${KUBE_AWS_TESTBED_KEEP_DAYS:-14}
keep=()
for l in "$NB"/current "$NB"/k8s-v*; do
  [ -L "$l" ] && keep+=("$(readlink -f "$l")")
done
for old in "$STORE"/[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f] "$STORE"/images-*; do
  case $old in "$DIR" | "$IMG") continue ;; esac
  [ -d "$old" ] || continue
  case " ${keep[*]} " in *" $(readlink -f "$old") "*) continue ;; esac
  stamp=$old/used
  [ -e "$stamp" ] || stamp=$old
  [ -n "$(find "$stamp" -maxdepth 0 -mtime "+$KEEP_DAYS")" ] || continue
  grep -qF "lowerdir=$(cd "$old" && pwd -P)/" /proc/self/mountinfo && continue
  rm -rf "$old"
done
say "done ($bin_pins; $SUITE $PACKAGES) in $DIR"
