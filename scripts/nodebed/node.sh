#!/usr/bin/env bash
# Starts and stops one node of the real-node bed (docs/testing.md, "The
# real-node bed"): a privileged runc container with systemd as PID 1, in a
# network namespace of its own on the host bridge kanb0 (10.250.0.0/16),
# with its own cgroup namespace (so systemd and kubelet see their own cgroup
# root, as kind's node containers do on a cgroup v1 host).
#
#   node.sh check                       what the host lacks, if anything
#   node.sh start NAME IP WORKDIR [ROOTFS [USERDATA]]
#                                       mounts an overlay on ROOTFS (default
#                                       .testbed/node/current/rootfs) at WORKDIR/rootfs and
#                                       boots it; prints the init's host PID. With USERDATA,
#                                       cloud-init runs it (NoCloud seed) at boot
#                                       In the environment, NODEBED_AWS_ENDPOINT (a URL)
#                                       becomes the node's AWS_ENDPOINT_URL (every unit's and
#                                       login's), and NODEBED_IMDS (HOST:PORT) answers for
#                                       169.254.169.254:80 in the node's network namespace
#                                       (a DNAT): the only settings of the bed a node carries.
#                                       NODEBED_MAC sets eth0's MAC address (what the IMDS
#                                       says), NODEBED_HOSTS adds "IP NAME" lines (";"
#                                       between) to /etc/hosts: the names EC2's DNS would
#                                       answer (the node's private DNS name, the API's load
#                                       balancer, which the bed has not: its controller's IP)
#                                       NODEBED_POD_SUBNET (a CIDR) is the node's pod subnet in
#                                       its bridge CNI config (default 10.244.0.0/24, which two
#                                       nodes of one cluster must not share), and NODEBED_PEERS
#                                       ("NAME IP SUBNET" lines, ";" between) the nodes of the
#                                       same cluster already running: each gets a route to the
#                                       new node's pod subnet through its address, and the new
#                                       node one to each of theirs (all on the one bridge)
#   node.sh bridge [TOKEN]              makes the host bridge (kanb0, 10.250.0.1), so that a
#                                       test's servers (moto, IMDS) can bind to its address;
#                                       TOKEN (<pid>.<n>) holds it until `unbridge TOKEN` or
#                                       until process <pid> is gone
#   node.sh unbridge [TOKEN]            lets TOKEN's hold go, and deletes the bridge when no
#                                       node is on it and no live process holds it
#   node.sh exec NAME CMD...            runs CMD in the node
#   node.sh sweep                       stops the nodes of test processes that are gone
#   node.sh stop NAME WORKDIR [keep]    kills the container by its id, deletes it,
#                                       its cgroups and its network namespace, unmounts
#                                       its root filesystem and (unless keep) deletes its files
#
# NAME is the runc container id (also the hostname and netns kanb-NAME);
# IP is the node's address in 10.250.0.0/16 (10.250.0.1 is the host's).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BRIDGE=kanb0
HOST_IP=10.250.0.1
CGROUP_PARENT=kube-aws-nodebed

# Serialises the bridge's creation and deletion between nodes started and
# stopped at the same time (tests run in parallel).
LOCK=/run/kube-aws-nodebed.lock
# Holds on the bridge of tests whose servers listen on it before (or
# between) their nodes: another test's last node must not take it away.
HOLDERS=/run/kube-aws-nodebed-bridge

die() {
  echo "nodebed: $*" >&2
  exit 1
}

check() {
  local bad=()
  [ "$(id -u)" = 0 ] || bad+=("root (the node is a privileged container; run the tests as root)")
  command -v runc >/dev/null 2>&1 || bad+=("runc (apt-get install runc)")
  command -v ip >/dev/null 2>&1 || bad+=("ip (apt-get install iproute2)")
  command -v iptables >/dev/null 2>&1 || bad+=("iptables (apt-get install iptables): the metadata route into each node")
  [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] || bad+=("cgroups (no memory controller under /sys/fs/cgroup)")
  [ -e /proc/self/ns/cgroup ] || bad+=("cgroup namespaces (kernel without CONFIG_CGROUPS ns)")
  [ -d "${1:-$ROOT/.testbed/node/current/rootfs}" ] || bad+=("the node image (run scripts/install-nodebed.sh)")
  if [ "${#bad[@]}" -gt 0 ]; then
    echo "the real-node bed cannot start: missing ${bad[*]}" >&2
    exit 2
  fi
}

bridge_up() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge 2>/dev/null || true
  fi
  ip addr show dev "$BRIDGE" | grep -qF " $HOST_IP/16 " || ip addr add "$HOST_IP/16" dev "$BRIDGE" 2>/dev/null || true
  ip link set "$BRIDGE" up
}

# The bridge goes with its last node, unless a live test process holds it
# (call under the lock).
bridge_down() {
  local h pid
  for h in "$HOLDERS"/*; do
    [ -e "$h" ] || continue
    pid=${h##*/}
    pid=${pid%%.*}
    if kill -0 "$pid" 2>/dev/null; then
      return 0
    fi
    rm -f "$h"
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1 && [ -z "$(ls /sys/class/net/$BRIDGE/brif 2>/dev/null)" ]; then
    ip link del "$BRIDGE" 2>/dev/null || true
  fi
}

netns_up() {
  local name=$1 ip=$2 ns=kanb-$1 hv
  hv=kv$(printf '%s' "$name" | sha256sum | cut -c1-10)
  bridge_up
  ip netns add "$ns"
  ip link add "$hv" type veth peer name eth0 netns "$ns"
  ip link set "$hv" master "$BRIDGE" up
  ip -n "$ns" link set lo up
  [ -z "${NODEBED_MAC:-}" ] || ip -n "$ns" link set eth0 address "$NODEBED_MAC"
  ip -n "$ns" addr add "$ip/16" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$HOST_IP"
  pod_routes "$name" "$ip"
  # The instance metadata endpoint, as EC2's link-local one: the test's
  # emulator on the host, for this node alone.
  if [ -n "${NODEBED_IMDS:-}" ]; then
    ip netns exec "$ns" iptables -t nat -A OUTPUT -d 169.254.169.254/32 -p tcp --dport 80 \
      -j DNAT --to-destination "$NODEBED_IMDS" || die "cannot route 169.254.169.254 to $NODEBED_IMDS in $ns"
  fi
}

# Pods of different nodes reach each other as on a VPC whose route table
# sends each node's pod range to it: every node of the cluster is on the one
# bridge, so a route through the peer's address is all it takes. (Call under
# the lock, after the new node's eth0 is up.)
pod_routes() {
  local name=$1 ip=$2 peer pip psub
  [ -n "${NODEBED_POD_SUBNET:-}" ] && [ -n "${NODEBED_PEERS:-}" ] || return 0
  while read -r peer pip psub; do
    [ -n "$peer" ] || continue
    [ -e "/var/run/netns/kanb-$peer" ] || continue
    ip -n "kanb-$name" route replace "$psub" via "$pip" dev eth0 ||
      die "cannot route $psub via $pip in kanb-$name"
    ip -n "kanb-$peer" route replace "$NODEBED_POD_SUBNET" via "$ip" dev eth0 ||
      die "cannot route $NODEBED_POD_SUBNET via $ip in kanb-$peer"
  done < <(printf '%s\n' "$NODEBED_PEERS" | tr ';' '\n')
}

# Units that raise limits above this host's hard ones, or lower their OOM
# score, fail to start where the host lacks CAP_SYS_RESOURCE (as a sandboxed
# CI machine does): their limits become the host's own.
limits_dropins() {
  local r=$1 u d
  local nofile nproc core
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  core=$(ulimit -Hc)
  if grep -q '^CapBnd:' /proc/self/status && python3 -c 'import sys; sys.exit(0 if int([l.split()[1] for l in open("/proc/self/status") if l.startswith("CapBnd:")][0],16) >> 24 & 1 else 1)'; then
    return 0
  fi
  for u in containerd systemd-journald systemd-logind systemd-journald@ kubelet; do
    d=$r/etc/systemd/system/$u.service.d
    mkdir -p "$d"
    printf '%s\n' "# node.sh: the host lacks CAP_SYS_RESOURCE" "[Service]" "LimitNOFILE=$nofile" \
      "LimitNPROC=$nproc" "LimitCORE=$core" "OOMScoreAdjust=0" >"$d/10-nodebed-limits.conf"
  done
}

config_json() {
  local name=$1 work=$2 ns=$3
  python3 - "$name" "$work" "$ns" "$CGROUP_PARENT" <<'EOF'
import json, resource, sys
name, work, ns, parent = sys.argv[1:]
# as many open files as this process may have (runc may not raise it)
nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
caps = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
    "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
]
# only the capabilities this host has (a sandbox may lack CAP_SYS_RESOURCE)
bnd = int([l.split()[1] for l in open("/proc/self/status") if l.startswith("CapBnd:")][0], 16)
caps = [c for i, c in enumerate(caps) if bnd >> i & 1]
nosd = ["nosuid", "nodev"]
cfg = {
    "ociVersion": "1.0.2",
    "hostname": name,
    "root": {"path": work + "/rootfs", "readonly": False},
    "process": {
        "terminal": False,
        "user": {"uid": 0, "gid": 0},
        "args": ["/sbin/init"],
        # systemd's way to know it is in a container (kind says docker too)
        "env": ["container=docker", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "cwd": "/",
        "capabilities": {k: caps for k in ("bounding", "effective", "permitted", "inheritable", "ambient")},
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": nofile, "soft": nofile}],
        "noNewPrivileges": False,
    },
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": nosd + ["noexec", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": nosd + ["noexec"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": nosd + ["noexec"]},
        # rw: systemd and kubelet manage the node's own subtree (its cgroup namespace's root)
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": nosd + ["noexec", "relatime"]},
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": nosd + ["mode=755", "size=512m"]},
        {"destination": "/run/lock", "type": "tmpfs", "source": "tmpfs", "options": nosd + ["noexec", "size=5m"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": nosd + ["mode=1777"]},
        {"destination": "/dev/kmsg", "type": "bind", "source": "/dev/kmsg", "options": ["bind", "rw"]},
        # containerd's store: not on the overlay (see start)
        {"destination": "/var/lib/containerd", "type": "bind", "source": work + "/containerd", "options": ["rbind", "rw"]},
    ],
    "linux": {
        "namespaces": [
            {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "cgroup"},
            {"type": "network", "path": "/var/run/netns/" + ns},
        ],
        "cgroupsPath": "/" + parent + "/" + name,
        "resources": {"devices": [{"allow": True, "access": "rwm"}]},
        "devices": [
            {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438, "uid": 0, "gid": 0},
            {"path": "/dev/loop-control", "type": "c", "major": 10, "minor": 237, "fileMode": 432, "uid": 0, "gid": 0},
        ],
        "rootfsPropagation": "shared",
    },
}
json.dump(cfg, open(work + "/config.json", "w"), indent=1)
EOF
}

# The node's root filesystem is an overlay: the image (read-only, shared by
# every node) under WORKDIR/upper, mounted at WORKDIR/rootfs. Its containerd
# store cannot live on an overlay (containerd's own overlay mounts need a
# plain upper directory), so WORKDIR/containerd is a hard-linked copy of the
# image's (layers and snapshots are never written in place; the bolt
# databases, which are, are copied), bind-mounted at /var/lib/containerd.
# Copying and deleting a full 1.5 GB copy took 9 s and 30-45 s on the CI
# machine's disk; this takes well under a second each.
# Every node's systemd, kubelet (cAdvisor), containerd and pods share the
# host kernel's inotify limits, which count per user: with a few clusters up
# at once (make test runs three tests side by side, HA tests hold four to
# six nodes) the default 128 instances ran out and kubelets exited at start
# ("Failed to start cAdvisor" err="inotify_init: too many open files"), so
# static pods, etcd's among them, never started. kind raises the same two
# limits for the same reason ("Pod errors due to too many open files",
# https://kind.sigs.k8s.io/docs/user/known-issues/#pod-errors-due-to-too-many-open-files).
# Raised, never lowered.
inotify_limits() {
  local key want have
  for key in max_user_instances:8192 max_user_watches:1048576; do
    want=${key#*:}
    key=fs.inotify.${key%%:*}
    have=$(sysctl -n "$key" 2>/dev/null || echo 0)
    if [ "$have" -lt "$want" ]; then
      sysctl -q -w "$key=$want" >/dev/null || die "cannot raise $key to $want (needs root): kubelets fail with 'too many open files'"
    fi
  done
}

start() {
  local name=$1 ip=$2 work=$3 rootfs=${4:-$ROOT/.testbed/node/current/rootfs} userdata=${5:-} db
  check "$rootfs"
  sweep
  inotify_limits
  rootfs=$(cd "$rootfs" && pwd -P)
  mkdir -p "$work"
  work=$(cd "$work" && pwd -P)
  umount "$work/rootfs" 2>/dev/null || true
  rm -rf "$work/rootfs" "$work/upper" "$work/ovl" "$work/containerd"
  mkdir -p "$work/rootfs" "$work/upper" "$work/ovl"
  mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$work/upper,workdir=$work/ovl" "$work/rootfs" ||
    die "cannot mount the node's overlay root filesystem on $work/rootfs"
  cp -al "$rootfs/var/lib/containerd" "$work/containerd"
  find "$rootfs/var/lib/containerd" -name '*.db' -printf '%P\n' | while read -r db; do
    cp --remove-destination -p "$rootfs/var/lib/containerd/$db" "$work/containerd/$db"
  done
  echo "$name" >"$work/rootfs/etc/hostname"
  printf '127.0.0.1 localhost\n%s %s\n' "$ip" "$name" >"$work/rootfs/etc/hosts"
  [ -z "${NODEBED_HOSTS:-}" ] || printf '%s\n' "$NODEBED_HOSTS" | tr ';' '\n' >>"$work/rootfs/etc/hosts"
  # CoreDNS (dnsPolicy Default) refuses to start without an upstream; the
  # host's bridge address answers nothing, which is all the bed needs.
  echo "nameserver $HOST_IP" >"$work/rootfs/etc/resolv.conf"
  limits_dropins "$work/rootfs"
  if [ -n "${NODEBED_POD_SUBNET:-}" ]; then
    # host-local IPAM hands out addresses from the node's own range (the
    # bed's stand-in for the VPC CNI's ENI addresses); see pod_routes.
    python3 - "$work/rootfs/etc/cni/net.d/10-bridge.conflist" "$NODEBED_POD_SUBNET" <<'EOF' || die "bad NODEBED_POD_SUBNET $NODEBED_POD_SUBNET"
import ipaddress, json, sys
path, subnet = sys.argv[1:]
ipaddress.ip_network(subnet)
c = json.load(open(path))
c["plugins"][0]["ipam"]["ranges"] = [[{"subnet": subnet}]]
json.dump(c, open(path, "w"), indent=1)
EOF
  fi
  if [ -n "${NODEBED_AWS_ENDPOINT:-}" ]; then
    # moto stands for AWS: every unit (cloud-init's, the node program's
    # timers) and every login gets its endpoint.
    mkdir -p "$work/rootfs/etc/systemd/system.conf.d"
    printf '%s\n' "# node.sh: the bed's AWS endpoint (moto)" "[Manager]" \
      "DefaultEnvironment=AWS_ENDPOINT_URL=$NODEBED_AWS_ENDPOINT" >"$work/rootfs/etc/systemd/system.conf.d/50-nodebed-aws.conf"
    echo "AWS_ENDPOINT_URL=$NODEBED_AWS_ENDPOINT" >>"$work/rootfs/etc/environment"
  fi
  # The node program makes the secrets step's calls in its own process when
  # its python3 can import botocore (src/node/kube_aws_node/sdkcall.py): here
  # the image's aws CLI directory (awscli 1.46 vendors botocore and aliases
  # it once `awscli` is imported) is on the system python's path, as a
  # distribution's packaged CLI or python3-botocore would be.
  echo /usr/local/lib/kube-aws-awscli >"$work/rootfs/usr/lib/python3/dist-packages/kube-aws-awscli.pth"
  if [ -n "$userdata" ]; then
    # cloud-init's NoCloud datasource stands in for EC2's instance metadata:
    # the same user-data, from a seed directory instead of 169.254.169.254.
    rm -f "$work/rootfs/etc/cloud/cloud-init.disabled"
    mkdir -p "$work/rootfs/var/lib/cloud/seed/nocloud"
    cp "$userdata" "$work/rootfs/var/lib/cloud/seed/nocloud/user-data"
    printf 'instance-id: i-%s\nlocal-hostname: %s\n' "$(printf '%s' "$name" | sha256sum | cut -c1-17)" "$name" \
      >"$work/rootfs/var/lib/cloud/seed/nocloud/meta-data"
  fi
  {
    flock 8
    netns_up "$name" "$ip"
  } 8>"$LOCK"
  config_json "$name" "$work" "kanb-$name"
  runc run -d -b "$work" --pid-file "$work/pid" "$name" </dev/null >"$work/console.log" 2>&1 ||
    die "runc run $name failed: $(tail -n 5 "$work/console.log")"
  cat "$work/pid"
}

# Removes the node's cgroups, deepest first, in every hierarchy.
cgroups_down() {
  local name=$1 h d
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    d=$h$CGROUP_PARENT/$name
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

stop() {
  local name=$1 work=${2:-} keep=${3:-}
  if runc state "$name" >/dev/null 2>&1; then
    runc kill "$name" KILL 2>/dev/null || true
    for _ in $(seq 50); do
      [ "$(runc state "$name" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])' 2>/dev/null)" = running ] || break
      sleep 0.1
    done
    runc delete -f "$name" 2>/dev/null || true
  fi
  cgroups_down "$name"
  {
    flock 8
    # the host's end of the veth first: deleting the namespace removes it
    # only later, and the bridge would still count it as a port
    ip link del "kv$(printf '%s' "$name" | sha256sum | cut -c1-10)" 2>/dev/null || true
    ip netns del "kanb-$name" 2>/dev/null || true
    bridge_down
  } 8>"$LOCK"
  # With keep the node's files stay (its journal and pod logs are in
  # WORKDIR/upper/var/log), but the overlay is unmounted all the same.
  if [ -n "$work" ]; then
    umount "$work/rootfs" 2>/dev/null || umount -l "$work/rootfs" 2>/dev/null || true
    [ "$keep" = keep ] || rm -rf "$work/rootfs" "$work/upper" "$work/ovl" "$work/containerd"
  fi
}

# Stops the nodes a test process left behind when it was killed before its
# handles dropped: tests name nodes kanb-<role>-<pid>-<n> (tests/it/common/
# nodebed.rs), so a node whose <pid> no longer runs is an orphan. Each is
# stopped by its container id, like any other; other nodes are left alone.
sweep() {
  local id owner
  for id in $({ runc list -q 2>/dev/null; ip netns list 2>/dev/null | sed -n 's/^kanb-\(kanb-[^ ]*\).*/\1/p'; } | sort -u); do
    owner=$(printf '%s' "$id" | sed -n 's/^kanb-[a-z0-9]*-\([0-9]*\)-[0-9]*$/\1/p')
    [ -n "$owner" ] || continue
    kill -0 "$owner" 2>/dev/null && continue
    echo "nodebed: stopping $id, left behind by process $owner" >&2
    stop "$id" "$ROOT/.testbed/node/run/$id"
    rm -rf "${ROOT:?}/.testbed/node/run/$id"
  done
}

cmd=${1:-}
shift || true
case $cmd in
check) check "$@" ;;
bridge)
  {
    flock 8
    bridge_up
    if [ -n "${1:-}" ]; then
      mkdir -p "$HOLDERS"
      : >"$HOLDERS/$1"
    fi
  } 8>"$LOCK"
  ;;
unbridge)
  {
    flock 8
    [ -z "${1:-}" ] || rm -f "$HOLDERS/$1"
    bridge_down
  } 8>"$LOCK"
  ;;
start) start "$@" ;;
exec)
  name=$1
  shift
  exec runc exec "$name" "$@"
  ;;
stop) stop "$@" ;;
sweep) sweep ;;
*) die "usage: node.sh check|start|bridge|unbridge|exec|stop|sweep ..." ;;
esac
