#!/bin/bash
# Applies the full cloud-config named in runtime.json: download, verify, run
# the node program (`kube-aws-node bootstrap`, which signals from then on).
set -Eeuo pipefail
rt=/etc/kube-aws/runtime.json
get() { python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$rt" "$1"; }
src=$(get cloudConfig)
sum=$(get cloudConfigSha256)
region=$(get region)
fail() {
  aws --region "$region" cloudformation signal-resource --stack-name "$(get stackName)" \
    --logical-resource-id "$(get asgLogicalId)" --unique-id "$(hostname)" --status FAILURE || true
}
trap fail ERR
dst=/var/lib/kube-aws/cloud-config
mkdir -p /var/lib/kube-aws
for i in 1 2 3 4 5 6 7 8 9 10; do
  aws --region "$region" s3 cp --only-show-errors "$src" "$dst.part" && break
  sleep "$((i * 3))"
done
echo "$sum  $dst.part" | sha256sum -c --quiet -
mv "$dst.part" "$dst"
for m in write_files yum_add_repo package_update_upgrade_install; do
  cloud-init --file "$dst" single --name "$m" --frequency always
done
exec /opt/kube-aws/bin/kube-aws-node bootstrap
