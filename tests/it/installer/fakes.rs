//! The recording fakes of tests/it/installer.rs: aws (S3 in a directory,
//! with S3's conditional writes; SSM, a stand-in KMS, DescribeStacks and
//! DescribeStackResource), kubectl and helm, each a script on PATH.

/// DescribeStackResource says "does not exist" the first time for each wait
/// condition (CloudFormation creates it after the group, or after the
/// pointer), then CREATE_IN_PROGRESS until it is signalled, then
/// CREATE_COMPLETE; a state file `.wc/<ID>` overrides that.
pub(super) const FAKE_AWS: &str = r#"#!/bin/bash
all="$*"
echo "aws $all" >>"$FAKE_LOG"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --region|--content-type|--sse|--sse-kms-key-id|--query|--output) shift 2 ;;
    --only-show-errors) shift ;;
    *) args+=("$1"); shift ;;
  esac
done
map() { case "$1" in s3://*) echo "$FAKE_S3/${1#s3://}" ;; *) echo "$1" ;; esac; }
arg() { local i; for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[i]}" = "$1" ] && echo "${args[i + 1]}"; done; }
# FAKE_DENY: a comma list of key suffixes whose every S3 call is denied (no s3:GetObject, say).
denied() { local k; for k in ${FAKE_DENY//,/ }; do case "$1" in *"$k") return 0 ;; esac; done; return 1; }
if [ "${args[0]}" = s3 ] && [ "${args[1]}" = cp ]; then
  if denied "${args[2]}" || denied "${args[3]}"; then
    echo "An error occurred (AccessDenied) when calling the GetObject operation: Access Denied" >&2; exit 1
  fi
  src=$(map "${args[2]}"); dst=$(map "${args[3]}")
  mkdir -p "$(dirname "$dst")"
  cp "$src" "$dst"
  exit $?
fi
if [ "${args[0]}" = s3api ]; then
  if denied "$(arg --key)" || denied "$(arg --prefix)"; then
    echo "An error occurred (AccessDenied) when calling the ${args[1]} operation: Access Denied" >&2; exit 254
  fi
  mkdir -p "$FAKE_S3"
  exec flock "$FAKE_S3/.s3api.lock" python3 "$(dirname "$0")/s3api.py" "${args[@]:1}"
fi
if [ "${args[0]}" = kms ] && [ "${args[1]}" = decrypt ]; then
  # The fake KMS: a ciphertext is its plaintext (the secret bundle Bed::run writes).
  blob=$(arg --ciphertext-blob); printf '"%s"\n' "$(base64 -w0 "${blob#fileb://}")"
  exit 0
fi
if [ "${args[0]}" = ssm ] && [ "${args[1]}" = get-parameter ]; then
  # After its first read (the reconciler's start), `.later` stands for a newer plan.
  p="$FAKE_S3/.ssm$(arg --name)"
  echo x >>"$p.reads"
  if [ -e "$p.later" ] && [ "$(wc -l <"$p.reads")" -gt 1 ]; then p="$p.later"; fi
  [ -e "$p" ] || exit 254
  python3 -c 'import json, sys; print(json.dumps({"Parameter": {"Value": open(sys.argv[1]).read().strip()}}))' "$p"
  exit $?
fi
if [ "${args[0]}" = cloudformation ] && [ "${args[1]}" = describe-stacks ]; then
  st=UPDATE_IN_PROGRESS; [ -e "$FAKE_S3/.stack" ] && st=$(cat "$FAKE_S3/.stack")
  printf '{"Stacks": [{"StackStatus": "%s"}]}\n' "$st"
  exit 0
fi
if [ "${args[0]}" = cloudformation ]; then
  wc=$(arg --logical-resource-id)
  mkdir -p "$FAKE_S3/.wc"
  state="$FAKE_S3/.wc/$wc"
  case "${args[1]}" in
    describe-stack-resource)
      if [ ! -e "$state" ]; then
        echo CREATE_IN_PROGRESS >"$state"
        echo "An error occurred (ValidationError): Resource $wc does not exist for stack $(arg --stack-name)" >&2
        exit 254
      fi
      [ "$(cat "$state")" != missing ] || { echo "Resource $wc does not exist for stack" >&2; exit 254; }
      printf '{"StackResourceDetail": {"ResourceStatus": "%s"}}\n' "$(cat "$state")"
      exit 0 ;;
    signal-resource)
      echo CREATE_COMPLETE >"$state"
      exit 0 ;;
  esac
fi
echo "fake aws: unsupported: $*" >&2
exit 2
"#;

/// `aws s3api` on the fake S3 directory (run under a lock): list-objects-v2,
/// get-object and put-object with S3's conditional writes (ETag: the md5 of
/// the body, as S3's for a single-part upload).
pub(super) const FAKE_S3API: &str = r#"
import hashlib, json, os, shutil, sys
op, rest = sys.argv[1], sys.argv[2:]
def arg(k):
    return rest[rest.index(k) + 1] if k in rest else None
root = os.environ["FAKE_S3"]
def fail(code, text):
    sys.stderr.write("An error occurred (%s) when calling the %s operation: %s\n" % (code, op, text))
    sys.exit(254)
def etag(path):
    with open(path, "rb") as f:
        return '"%s"' % hashlib.md5(f.read()).hexdigest()
bucket = arg("--bucket")
if op == "list-objects-v2":
    prefix, base = arg("--prefix"), os.path.join(root, bucket)
    keys = []
    for top, _, files in os.walk(base):
        keys += [os.path.relpath(os.path.join(top, f), base) for f in files]
    keys = sorted(k for k in keys if k.startswith(prefix))[: int(arg("--max-keys") or 1000)]
    print(json.dumps({"KeyCount": len(keys), "Contents": [{"Key": k} for k in keys]} if keys else {"KeyCount": 0}))
    sys.exit(0)
obj = os.path.join(root, bucket, arg("--key"))
if op == "get-object":
    if not os.path.isfile(obj):
        fail("NoSuchKey", "The specified key does not exist.")
    shutil.copyfile(obj, rest[-1])
    print(json.dumps({"ETag": etag(obj)}))
elif op == "put-object":
    have = os.path.isfile(obj)
    if arg("--if-none-match") == "*" and have:
        fail("PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
    if arg("--if-match") is not None:
        if not have:
            fail("NoSuchKey", "The specified key does not exist.")
        if arg("--if-match").strip('"') != etag(obj).strip('"'):
            fail("PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    shutil.copyfile(arg("--body"), obj + ".part")
    os.replace(obj + ".part", obj)
    print(json.dumps({"ETag": etag(obj)}))
else:
    fail("Unsupported", " ".join(sys.argv))
"#;

pub(super) const FAKE_KUBECTL: &str = r#"#!/bin/bash
echo "kubectl $*" >>"$FAKE_LOG"
case "$*" in
  "get --raw=/readyz") echo ok ;;
  get\ nodes*) echo True ;;
  *get\ pods*) echo "broken-0   0/1   CrashLoopBackOff" ;;
  *get\ events*) echo "Warning BackOff pod/broken-0 Back-off restarting failed container" ;;
esac
exit 0
"#;

pub(super) const FAKE_HELM: &str = r#"#!/bin/bash
echo "helm $*" >>"$FAKE_LOG"
# Each release's last revision and its status, as helm keeps them in the
# cluster: FAKE_HELM_STATE/<release> holds "STATUS REVISION".
mkdir -p "$FAKE_HELM_STATE"
state="$FAKE_HELM_STATE/$2"; [ "$1" = upgrade ] && state="$FAKE_HELM_STATE/$3"
read -r status rev <"$state" 2>/dev/null || { status=""; rev=0; }
case "$1" in
  history)
    [ -n "$status" ] || { echo "Error: release: not found" >&2; exit 1; }
    printf '[{"revision":%s,"status":"%s"}]\n' "$rev" "$status"; exit 0 ;;
  uninstall|delete) rm -f "$FAKE_HELM_STATE/$2" "$FAKE_HELM_STATE/$3" ;;
  rollback) echo "deployed $3" >"$state"; exit 0 ;;
esac
if [ "$1" = upgrade ]; then
  case "$status" in pending-*)
    echo "Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress" >&2; exit 1 ;;
  esac
  # The values helm was given, as it read them (FAKE_VALUES/<release>.yaml).
  prev=""; for a in "$@"; do [ "$prev" = -f ] && cp "$a" "$FAKE_VALUES/$3.yaml"; prev=$a; done
  if [ "$3" = "${FAKE_HELM_DIE:-}" ]; then
    # The installer is killed (the instance terminated) while helm runs: the
    # release is left pending.
    if [ -n "$status" ]; then echo "pending-upgrade $((rev + 1))" >"$state"; else echo "pending-install 1" >"$state"; fi
    echo "helm-killed $3" >>"$FAKE_LOG"; kill -KILL "$PPID"; exit 1
  fi
fi
if [ "$1" = upgrade ] && [ -n "${FAKE_HELM_SLEEP:-}" ]; then
  # A release that takes a while, marked where it starts and ends.
  echo "helm-start $3" >>"$FAKE_LOG"
  sleep "$FAKE_HELM_SLEEP"
  echo "helm-end $3" >>"$FAKE_LOG"
fi
if [ "$1" = upgrade ]; then
  case ",${FAKE_HELM_FAIL:-}," in
    *",$3,"*)
      # helm may quote a rendered manifest, with a secret value in it.
      echo "Error: Secret \"$3\" is invalid: stringData.password: $(cat "$FAKE_SECRET_FILE")" >&2
      echo "Error: UPGRADE FAILED: timed out waiting for the condition ($3)" >&2; exit 1 ;;
  esac
  echo "deployed $((rev + 1))" >"$state"
fi
exit 0
"#;
