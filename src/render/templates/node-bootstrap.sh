#!/bin/bash
# kube-aws node bootstrap. Static: every value comes from the data files
# /etc/kube-aws/{runtime,node,kubeadm}.json written by cloud-init.
# The first controller runs `kubeadm init` and publishes the join data to S3
# (server-side encrypted); other controllers and workers join with it. Each
# node then signals its auto scaling group's CreationPolicy.
set -euo pipefail
KA=${KUBE_AWS_ETC:-/etc/kube-aws}
WORK=/var/lib/kube-aws
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
kms=$(jget "$KA/node.json" kmsKeyARN)
imds=http://169.254.169.254/latest
tok=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$imds/api/token")
instance_id=$(curl -fsS -H "X-aws-ec2-metadata-token: $tok" "$imds/meta-data/instance-id")

signal() {
  aws --region "$region" cloudformation signal-resource --stack-name "$stack" \
    --logical-resource-id "$asg" --unique-id "$instance_id" --status "$1" || true
}
trap 'signal FAILURE' ERR

sse=(--sse AES256)
if [ -n "$kms" ]; then sse=(--sse aws:kms --sse-kms-key-id "$kms"); fi

modprobe overlay
modprobe br_netfilter
sysctl --system >/dev/null
mkdir -p /etc/containerd
containerd config default >/etc/containerd/config.toml
sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml
systemctl daemon-reload
systemctl enable --now containerd
systemctl enable kubelet
python3 -c 'import json,sys
for u in json.load(open(sys.argv[1]))["enableUnits"]: print(u)' "$KA/node.json" |
  while IFS= read -r unit; do systemctl enable --now "$unit"; done

# Writes the kubeadm config: the rendered documents plus what only exists at
# boot (API endpoint, installed version, join data).
kubeadm_config() {
  python3 - "$KA/kubeadm.json" "$KA/runtime.json" "$WORK/join.json" "$WORK/kubeadm.yaml" "$1" <<'PY'
import json, os, subprocess, sys
docs = json.load(open(sys.argv[1]))["documents"]
rt = json.load(open(sys.argv[2]))
join = json.load(open(sys.argv[3])) if os.path.exists(sys.argv[3]) else None
mode = sys.argv[5]
version = subprocess.check_output(["kubeadm", "version", "-o", "short"], text=True).strip()
endpoint = rt["apiEndpoint"] + ":6443"
out = []
for d in docs:
    kind = d["kind"]
    if kind == "ClusterConfiguration":
        d["controlPlaneEndpoint"] = endpoint
        d["kubernetesVersion"] = version
        d.setdefault("apiServer", {})["certSANs"] = [rt["apiEndpoint"]]
    if kind in ("InitConfiguration", "ClusterConfiguration") and mode != "init":
        continue
    if kind == "JoinConfiguration":
        if mode == "init":
            continue
        d["discovery"] = {"bootstrapToken": {"apiServerEndpoint": endpoint, "token": join["token"],
                                             "caCertHashes": [join["caCertHash"]]}}
        if mode == "control-plane":
            d["controlPlane"] = {"certificateKey": join["certificateKey"]}
    out.append(json.dumps(d))
with open(sys.argv[4], "w") as f:
    f.write("\n---\n".join(out) + "\n")
PY
}

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
  if aws --region "$region" s3api put-object --bucket "$bucket" --key "$prefix/bootstrap/init-lock" \
    --if-none-match '*' --body /dev/null >/dev/null 2>&1; then
    kubeadm_config init
    kubeadm init --config "$WORK/kubeadm.yaml" --upload-certs
    export KUBECONFIG=/etc/kubernetes/admin.conf
    key=$(kubeadm init phase upload-certs --upload-certs | tail -n 1)
    token=$(kubeadm token create --ttl 0)
    hash=$(openssl x509 -pubkey -in /etc/kubernetes/pki/ca.crt | openssl rsa -pubin -outform der 2>/dev/null |
      sha256sum | cut -d' ' -f1)
    python3 -c 'import json,sys
json.dump({"token": sys.argv[1], "caCertHash": "sha256:" + sys.argv[2], "certificateKey": sys.argv[3]},
          open(sys.argv[4], "w"))' "$token" "$hash" "$key" "$WORK/join.json"
    aws --region "$region" s3 cp --only-show-errors "${sse[@]}" "$WORK/join.json" \
      "s3://$bucket/$prefix/bootstrap/join.json"
    signal SUCCESS
    systemctl enable --now --no-block kube-aws-addons.service
  else
    wait_join
    kubeadm_config control-plane
    kubeadm join --config "$WORK/kubeadm.yaml"
    signal SUCCESS
  fi
else
  wait_join
  kubeadm_config worker
  kubeadm join --config "$WORK/kubeadm.yaml"
  signal SUCCESS
fi
