#!/bin/bash
# kube-aws node bootstrap. Static: every value comes from the data files
# /etc/kube-aws/{runtime,node,kubeadm}.json written by cloud-init.
# First kube-aws-node-secrets decrypts this node's secrets from the published
# bundle (KMS, with the node's role) and fills the plugin secrets into its files.
# The first controller (an S3 If-None-Match lock) runs `kubeadm init` with the
# bundle's bootstrap token and certificate key, and publishes the CA certificate
# hash (not a secret) to S3; other controllers and workers join with the token
# and that hash. Each node then signals its auto scaling group's CreationPolicy.
# The addon installer runs once per addon plan and secrets version: on the
# first controller to come up with them, at create or after an update.
#
# `kube-aws-node-bootstrap upload-certs` (a timer on controllers) re-uploads the
# control-plane certificates under the bundle's certificate key, which kubeadm
# otherwise deletes after two hours, so controllers can join at any time.
#
# KUBE_AWS_ROOT prefixes every path (tests only).
set -euo pipefail
R=${KUBE_AWS_ROOT:-}
KA=$R/etc/kube-aws
SECRETS=$R/run/kube-aws/secrets
WORK=$R/var/lib/kube-aws
BIN=$R/opt/kube-aws/bin
ADMIN=$R/etc/kubernetes/admin.conf
mkdir -p "$WORK"
jget() {
  python3 -c 'import json,sys
v=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v=v[k]
print(json.dumps(v) if isinstance(v,(dict,list)) else ("" if v is None else v))' "$@"
}
region=$(jget "$KA/runtime.json" region)
stack=$(jget "$KA/runtime.json" stackName)
asg=$(jget "$KA/runtime.json" asgLogicalId)
bucket=$(jget "$KA/runtime.json" bucket)
prefix=$(jget "$KA/runtime.json" keyPrefix)
role=$(jget "$KA/node.json" role)

# Writes the kubeadm config (0600: it holds the token): the rendered documents
# plus what only exists at boot (API endpoint, installed version, secrets, CA hash).
kubeadm_config() { # MODE OUT
  (umask 077 && python3 - "$KA/kubeadm.json" "$KA/runtime.json" "$WORK/join.json" "$2" "$1" "$SECRETS" <<'PY'
import json, os, subprocess, sys
docs = json.load(open(sys.argv[1]))["documents"]
rt = json.load(open(sys.argv[2]))
join = json.load(open(sys.argv[3])) if os.path.exists(sys.argv[3]) else None
mode = sys.argv[5]
def secret(name):
    return open(os.path.join(sys.argv[6], "kubeadm", name)).read().strip()
version = subprocess.check_output(["kubeadm", "version", "-o", "short"], text=True).strip()
endpoint = rt["apiEndpoint"] + ":6443"
token = secret("bootstrap-token")
out = []
for d in docs:
    kind = d["kind"]
    if kind == "InitConfiguration":
        # Never expires: nodes of an auto scaling group join at any time.
        d["bootstrapTokens"] = [{"token": token, "ttl": "0s", "usages": ["signing", "authentication"],
                                 "groups": ["system:bootstrappers:kubeadm:default-node-token"]}]
        d["certificateKey"] = secret("certificate-key")
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
                                             "caCertHashes": [join["caCertHash"]]}}
        if mode == "control-plane":
            d["controlPlane"] = {"certificateKey": secret("certificate-key")}
    out.append(json.dumps(d))
with open(sys.argv[4], "w") as f:
    f.write("\n---\n".join(out) + "\n")
PY
  )
}

if [ "${1:-}" = upload-certs ]; then
  # Only on a controller that is part of the control plane.
  if [ "$role" != controller ] || [ ! -f "$ADMIN" ]; then exit 0; fi
  # /run does not survive a restart: decrypt again (filling files again is a no-op).
  "$BIN/kube-aws-node-secrets"
  kubeadm_config init "$WORK/upload-certs.yaml"
  KUBECONFIG=$ADMIN kubeadm init phase upload-certs --upload-certs --config "$WORK/upload-certs.yaml" >/dev/null
  exit 0
fi

imds=http://169.254.169.254/latest
tok=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$imds/api/token")
instance_id=$(curl -fsS -H "X-aws-ec2-metadata-token: $tok" "$imds/meta-data/instance-id")

signal() {
  aws --region "$region" cloudformation signal-resource --stack-name "$stack" \
    --logical-resource-id "$asg" --unique-id "$instance_id" --status "$1" || true
}
trap 'signal FAILURE' ERR

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
  signal FAILURE
  exit 1
}

# Starts the addon installer if no controller has run this plan, with these
# secrets, yet (a changed secret changes the values the charts get).
start_installer() {
  local plan version
  plan=$(sha256sum "$KA/addons/plan.json" | cut -d' ' -f1)
  version=$(jget "$KA/runtime.json" secretsVersion)
  if take_lock "installer-$plan${version:+-$version}"; then
    systemctl enable --now --no-block kube-aws-addons.service
  fi
}

"$BIN/kube-aws-node-secrets"

modprobe overlay
modprobe br_netfilter
sysctl --system >/dev/null
mkdir -p "$R/etc/containerd"
containerd config default >"$R/etc/containerd/config.toml"
sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' "$R/etc/containerd/config.toml"
systemctl daemon-reload
systemctl enable --now containerd
systemctl enable kubelet
python3 -c 'import json,sys
for u in json.load(open(sys.argv[1]))["enableUnits"]: print(u)' "$KA/node.json" |
  while IFS= read -r unit; do systemctl enable --now "$unit"; done

wait_join() {
  for _ in $(seq 1 180); do
    if aws --region "$region" s3 cp --only-show-errors "s3://$bucket/$prefix/bootstrap/join.json" "$WORK/join.json"; then
      return 0
    fi
    sleep 10
  done
  echo "kube-aws: no join data at s3://$bucket/$prefix/bootstrap/join.json after 30 minutes" >&2
  return 1
}

if [ "$role" = controller ]; then
  if take_lock init-lock; then
    kubeadm_config init "$WORK/kubeadm.yaml"
    # kubeadm prints the join commands with the token and certificate key: keep
    # them out of the boot log (cloud-init-output.log), in a private file.
    if ! (umask 077 && kubeadm init --config "$WORK/kubeadm.yaml" --upload-certs >"$WORK/kubeadm-init.log" 2>&1); then
      echo "kube-aws: kubeadm init failed; its output is in $WORK/kubeadm-init.log (it may show the bootstrap token)" >&2
      false
    fi
    hash=$(openssl x509 -pubkey -in "$R/etc/kubernetes/pki/ca.crt" | openssl rsa -pubin -outform der 2>/dev/null |
      sha256sum | cut -d' ' -f1)
    python3 -c 'import json,sys
json.dump({"caCertHash": "sha256:" + sys.argv[1]}, open(sys.argv[2], "w"))' "$hash" "$WORK/join.json"
    aws --region "$region" s3 cp --only-show-errors --sse AES256 "$WORK/join.json" \
      "s3://$bucket/$prefix/bootstrap/join.json"
  else
    wait_join
    kubeadm_config control-plane "$WORK/kubeadm.yaml"
    kubeadm join --config "$WORK/kubeadm.yaml"
  fi
  signal SUCCESS
  systemctl enable --now kube-aws-upload-certs.timer
  start_installer
else
  wait_join
  kubeadm_config worker "$WORK/kubeadm.yaml"
  kubeadm join --config "$WORK/kubeadm.yaml"
  signal SUCCESS
fi
