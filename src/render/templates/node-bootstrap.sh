#!/bin/bash
# kube-aws node bootstrap. Static: every value comes from the data files
# /etc/kube-aws/{runtime,node,kubeadm}.json written by cloud-init.
# First kube-aws-node-secrets decrypts this node's secrets from the published
# bundle (KMS, with the node's role) and fills the plugin secrets into its files;
# on controllers it also places the cluster PKI kube-aws generated (the CAs and
# the service-account key, src/pki.rs) in /etc/kubernetes/pki, so kubeadm signs
# every leaf certificate from the same CAs on every controller.
# The first controller (an S3 If-None-Match lock) runs `kubeadm init` with the
# bundle's bootstrap token; other controllers join with `controlPlane` (their
# PKI is already in place: no certificate upload) and workers join, all with
# the token and the CA certificate hash kube-aws computed (runtime.json
# caCertHash). Each node then signals its auto scaling group's CreationPolicy.
# The addon reconciler (a timer on controllers) installs each addon plan the
# stack points at once per secrets version, on one controller.
#
# Failures: `set -E` makes the ERR trap reach into functions and subshells, so
# every failing step signals FAILURE at once (not after the group's timeout),
# and publishes a report (node, role, step, the last lines of this script's
# log with every decrypted secret blanked) to s3://<bucket>/<prefix>/status/nodes/
# <instance-id>.json, which `kube-aws up --wait` and `kube-aws status` print.
#
# KUBE_AWS_ROOT prefixes every path (tests only).
set -Eeuo pipefail
shopt -s inherit_errexit
R=${KUBE_AWS_ROOT:-}
KA=$R/etc/kube-aws
SECRETS=$R/run/kube-aws/secrets
WORK=$R/var/lib/kube-aws
BIN=$R/opt/kube-aws/bin
mkdir -p "$WORK"
jget() {
  python3 -c 'import json,sys
v=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v=v[k]
print(json.dumps(v) if isinstance(v,(dict,list)) else ("" if v is None else v))' "$@"
}
# jlines FILE KEY...: a JSON list, one item a line.
jlines() {
  python3 -c 'import json,sys
v=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v=v[k]
for x in v: print(x)' "$@"
}
region=$(jget "$KA/runtime.json" region)
stack=$(jget "$KA/runtime.json" stackName)
asg=$(jget "$KA/runtime.json" asgLogicalId)
bucket=$(jget "$KA/runtime.json" bucket)
prefix=$(jget "$KA/runtime.json" keyPrefix)
role=$(jget "$KA/node.json" role)

# Writes the kubeadm config (0600: it holds the token): the rendered documents
# plus what only exists at boot (API endpoint, installed version, token, CA hash).
# Joins use the CA hash kube-aws computed from the CA it generated (runtime.json
# caCertHash, a stack parameter) and wait up to 30 minutes for discovery, as
# nodes boot together with the first controller's init (kubeadm's default is 5).
# A joining controller gets `controlPlane: {}`: the shared CAs and
# service-account key are already in /etc/kubernetes/pki (kube-aws-node-secrets),
# so it needs no certificateKey.
kubeadm_config() { # MODE OUT
  (umask 077 && python3 - "$KA/kubeadm.json" "$KA/runtime.json" "$WORK/instance.json" "$2" "$1" "$SECRETS" <<'PY'
import json, os, subprocess, sys
docs = json.load(open(sys.argv[1]))["documents"]
rt = json.load(open(sys.argv[2]))
mode = sys.argv[5]
instance_file = sys.argv[3]
instance = json.load(open(instance_file)) if os.path.exists(instance_file) else {}
def secret(name):
    return open(os.path.join(sys.argv[6], "kubeadm", name)).read().strip()
version = subprocess.check_output(["kubeadm", "version", "-o", "short"], text=True).strip()
endpoint = rt["apiEndpoint"] + ":6443"
token = secret("bootstrap-token")
out = []
for d in docs:
    kind = d["kind"]
    if kind in ("InitConfiguration", "JoinConfiguration") and instance.get("nodeName"):
        # The EC2 private DNS name: the cloud controller manager finds the
        # instance by it, and gives the node its providerID and zone labels.
        d.setdefault("nodeRegistration", {})["name"] = instance["nodeName"]
    if kind == "InitConfiguration":
        # Never expires: nodes of an auto scaling group join at any time.
        d["bootstrapTokens"] = [{"token": token, "ttl": "0s", "usages": ["signing", "authentication"],
                                 "groups": ["system:bootstrappers:kubeadm:default-node-token"]}]
    if kind == "ClusterConfiguration":
        d["controlPlaneEndpoint"] = endpoint
        d["kubernetesVersion"] = version
        d.setdefault("apiServer", {})["certSANs"] = [rt["apiEndpoint"]]
    # KubeletConfiguration is cluster-wide: init stores it in the kubelet-config
    # ConfigMap, which joining kubelets download; join takes only JoinConfiguration.
    if kind in ("InitConfiguration", "ClusterConfiguration", "KubeletConfiguration") and mode != "init":
        continue
    if kind == "JoinConfiguration":
        if mode == "init":
            continue
        d["discovery"] = {"bootstrapToken": {"apiServerEndpoint": endpoint, "token": token,
                                             "caCertHashes": [rt["caCertHash"]]}}
        if d["apiVersion"].endswith("/v1beta4"):
            d.setdefault("timeouts", {})["discovery"] = "30m0s"
        else:
            d["discovery"]["timeout"] = "30m0s"
        if mode == "control-plane":
            d["controlPlane"] = {}
    out.append(json.dumps(d))
with open(sys.argv[4], "w") as f:
    f.write("\n---\n".join(out) + "\n")
PY
  )
}

# The boot. Everything below runs under the ERR trap: whatever fails, in a
# function or a subshell too, signals FAILURE and publishes the report.
LOG=$WORK/bootstrap.log
step=start
instance_id=
# Everything this script and its commands print also goes to $LOG, for the report.
exec 3>&1 4>&2
exec > >(tee -a "$LOG" >&3)
tee_out=$!
exec 2> >(tee -a "$LOG" >&4)
tee_err=$!

step() {
  step=$1
  echo "kube-aws: step $1"
}

signal() {
  aws --region "$region" cloudformation signal-resource --stack-name "$stack" \
    --logical-resource-id "$asg" --unique-id "${instance_id:-$(hostname)}" --status "$1" || true
}

# report EXIT_CODE COMMAND: the failure report, blanked of every secret this
# node decrypted (the rule kube-aws-node-secrets keeps for the addon installer
# too), published where `kube-aws status` reads it. Best effort: the FAILURE
# signal matters more.
report() {
  # Close the log pipes and wait for tee, so the log is complete.
  exec >&3 2>&4
  wait "$tee_out" "$tee_err" 2>/dev/null || true
  local out=$WORK/failure.json cmd_file=$WORK/failure.command tail_file=$WORK/failure.log
  printf '%s\n' "$2" | "$BIN/kube-aws-node-secrets" blank "$SECRETS" >"$cmd_file" || : >"$cmd_file"
  tail -n "${KUBE_AWS_REPORT_LINES:-60}" "$LOG" | "$BIN/kube-aws-node-secrets" blank "$SECRETS" >"$tail_file" ||
    echo "(the log could not be blanked of secrets, so it is left out)" >"$tail_file"
  python3 - "$out" "$KA/runtime.json" "$KA/node.json" "$WORK/instance.json" "$step" "$1" "$cmd_file" "$tail_file" \
    "${instance_id:-$(hostname)}" <<'PY' || return 0
import json, os, sys, time
out, runtime, node, instance, step, code, cmd_file, tail_file, instance_id = sys.argv[1:10]
rt = json.load(open(runtime))
nd = json.load(open(node))
inst = json.load(open(instance)) if os.path.exists(instance) else {}
json.dump({
    "instanceId": instance_id,
    "nodeName": inst.get("nodeName", ""),
    "role": rt.get("role", nd.get("role", "")),
    "stack": rt.get("stackName", ""),
    "asgLogicalId": rt.get("asgLogicalId", ""),
    "step": step,
    "exitCode": int(code),
    "command": open(cmd_file, errors="replace").read().strip(),
    "log": open(tail_file, errors="replace").read(),
    "timestamp": int(time.time()),
}, open(out, "w"), indent=2)
PY
  aws --region "$region" s3 cp --only-show-errors --sse AES256 --content-type application/json "$out" \
    "s3://$bucket/$prefix/status/nodes/${instance_id:-$(hostname)}.json" ||
    echo "kube-aws: cannot publish the failure report" >&2
}

# fail_boot EXIT_CODE COMMAND: report, signal FAILURE, stop.
fail_boot() {
  trap - ERR
  set +e
  echo "kube-aws: step $step failed (exit $1): $2" >&2
  report "$1" "$2"
  signal FAILURE
  exit "$1"
}
on_error() {
  local rc=$? cmd=$BASH_COMMAND
  # A failing subshell fails its parent too: only the script itself reports.
  [ "$BASH_SUBSHELL" -eq 0 ] || return "$rc"
  fail_boot "$rc" "$cmd"
}
trap on_error ERR

step metadata
imds=http://169.254.169.254/latest
tok=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$imds/api/token")
imds_get() { curl -fsS -H "X-aws-ec2-metadata-token: $tok" "$imds/meta-data/$1"; }
instance_id=$(imds_get instance-id)
# The node's name is its private DNS name, as EC2 (and the cloud controller
# manager) knows it; kubeadm gets it as data, in its config.
node_name=$(imds_get local-hostname)
mac=$(imds_get mac)
python3 - "$WORK/instance.json" "$instance_id" "$node_name" "$mac" <<'PY'
import json, re, sys
out, iid, name, mac = sys.argv[1:5]
name = name.strip().lower()
if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", name):
    sys.exit("kube-aws: IMDS local-hostname %r is not a DNS name Kubernetes accepts as a node name" % name)
if not re.fullmatch(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", mac.strip().lower()):
    sys.exit("kube-aws: IMDS mac %r is not a MAC address" % mac)
json.dump({"instanceId": iid, "nodeName": name, "mac": mac.strip().lower()}, open(out, "w"))
PY

# take_lock NAME: 0 when this node created bootstrap/NAME, 1 when another node
# did; any other answer is retried, then fails the boot (never guessed).
take_lock() {
  local err i
  for i in 1 2 3 4 5; do
    if err=$(aws --region "$region" s3api put-object --bucket "$bucket" --key "$prefix/bootstrap/$1" \
      --if-none-match '*' 2>&1 >/dev/null); then
      return 0
    fi
    case "$err" in *PreconditionFailed* | *ConditionalRequestConflict*) return 1 ;; esac
    sleep "$((i * ${KUBE_AWS_RETRY_DELAY:-3}))"
  done
  echo "kube-aws: cannot take the lock s3://$bucket/$prefix/bootstrap/$1: $err" >&2
  fail_boot 1 "take_lock $1"
}

# Starts the addon reconciler's timer: it reads the stack's plan pointer and
# installs each plan once, under its own S3 lock (install-addons.sh).
start_installer() {
  systemctl enable --now kube-aws-addons.timer
}

# AL2023's amazon-ec2-net-utils makes systemd-networkd manage every ENI
# (80-ec2.network), which races the VPC CNI on the ENIs it attaches and
# flushes its routes and rules. As the EKS AMI does, match that network to the
# primary ENI only (awslabs/amazon-eks-ami nodeadm internal/system/networking.go
# wrote /etc/systemd/network/80-ec2.network.d/10-eks_primary_eni_only.conf with
# `[Match] PermanentMACAddress=<primary MAC>`); its udev rule that sets up
# policy routes for hot-plugged ENIs is masked by the empty
# /etc/udev/rules.d/99-vpc-policy-routes.rules cloud-init writes (EKS AMI
# templates/al2023/provisioners/install-worker.sh).
step network
python3 - "$WORK/instance.json" "$R/etc/systemd/network/80-ec2.network.d/10-kube-aws-primary-eni-only.conf" <<'PY'
import json, os, sys
mac = json.load(open(sys.argv[1]))["mac"]
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
with open(sys.argv[2], "w") as f:
    f.write("# kube-aws: systemd-networkd manages the primary ENI only; the VPC CNI owns the others.\n"
            "[Match]\nPermanentMACAddress=%s\n" % mac)
PY
networkctl reload

step secrets
"$BIN/kube-aws-node-secrets"

# The Kubernetes packages, pinned to the exact patch (node.json). The
# repository excludes them so no later `dnf upgrade` moves them.
step packages
pkgs=$(jlines "$KA/node.json" kubernetesPackages)
mapfile -t pkgs <<<"$pkgs"
dnf install -y --disableexcludes=kubernetes "${pkgs[@]}"

step kernel
modprobe overlay
modprobe br_netfilter
sysctl --system >/dev/null

step containerd
mkdir -p "$R/etc/containerd"
containerd config default >"$R/etc/containerd/config.toml"
sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' "$R/etc/containerd/config.toml"
systemctl daemon-reload
systemctl enable --now containerd
systemctl enable kubelet

step plugin-units
units=$(jlines "$KA/node.json" enableUnits)
while IFS= read -r unit; do
  # `--`: a unit name is never read as an option.
  [ -z "$unit" ] || systemctl enable --now -- "$unit"
done <<<"$units"

if [ "$role" = controller ]; then
  step init-lock
  if take_lock init-lock; then
    step kubeadm-init
    kubeadm_config init "$WORK/kubeadm.yaml"
    # kubeadm prints the join commands with the token: keep them out of the
    # boot log (cloud-init-output.log), in a private file.
    if ! (umask 077 && kubeadm init --config "$WORK/kubeadm.yaml" >"$WORK/kubeadm-init.log" 2>&1); then
      echo "kube-aws: kubeadm init failed; its output is in $WORK/kubeadm-init.log (it may show the bootstrap token)" >&2
      false
    fi
  else
    step kubeadm-join
    kubeadm_config control-plane "$WORK/kubeadm.yaml"
    kubeadm join --config "$WORK/kubeadm.yaml"
  fi
  signal SUCCESS
  step timers
  # Approves kubelet serving certificates (serverTLSBootstrap) that match the
  # cluster's instances; see /opt/kube-aws/bin/kube-aws-csr-approver.
  systemctl enable --now kube-aws-csr-approver.timer
  step installer
  start_installer
else
  step kubeadm-join
  kubeadm_config worker "$WORK/kubeadm.yaml"
  kubeadm join --config "$WORK/kubeadm.yaml"
  signal SUCCESS
fi
