//! The addon reconciler (`kube-aws-node reconcile`, the node program as the
//! controller's cloud-config ships it) run for real with python3, with helm,
//! kubectl and aws replaced by recording fakes on PATH: the fakes map
//! `s3://` to a directory (with S3's conditional writes, If-None-Match and
//! If-Match on ETags, for the installer's lease and the installed record),
//! keep the plan pointer (the SSM parameter) there, decrypt with a stand-in
//! KMS, answer DescribeStacks and DescribeStackResource from it, and keep
//! each helm release's status (so a killed helm leaves it pending).
//!
//! The real helm and kubectl on the control-plane test bed, with S3, SSM and
//! KMS on moto, run in tests/it/installer_testbed.rs (the built-in plan, a
//! rejected release, a plan change). What stays here is what the test bed
//! cannot reach or stage: Helm v2 (Tiller cannot run on simulated nodes); helm
//! failing with a secret quoted in its error; a tampered or unlocked chart
//! object; wait conditions already complete or dropped by a newer plan
//! (moto ignores WaitConditions); an installer killed mid-plan and another
//! controller taking its lease over; a read of the installed record that is
//! denied; a reboot that empties the secret store; install timing precise
//! enough to show releases side by side.
//!
//! Checked: install order (independent releases side by side, up to the
//! plan's concurrency, log lines whole and named), dependants skipped after a
//! failure, every helm upgrade atomic, the Tiller step in Helm v2 mode only,
//! the CRD wait before dependants, signals and status files, sha256 and lock
//! checks, secret values blanked out of status messages and filled into the
//! values helm reads (from tmpfs, removed after the run, decrypted again
//! after a reboot); a plan change installs only the changed releases,
//! uninstalls dropped ones, signals only the new wait conditions, and a
//! repeat is a no-op on every controller (done, from the record); a complete
//! wait condition, or one a newer plan dropped, is never signalled; a killed
//! installer's lease is waited for, then taken over, its pending release
//! undone and the plan resumed and signalled, from the record, by another
//! controller; a failed plan is not retried before its retryAfter, and a plan
//! CloudFormation rolls back to is applied again; a denied read of the record
//! changes nothing. Not covered here: real helm/kubectl behaviour
//! (installer_testbed.rs), IMDS, IAM (the moto IAM tests), or whether
//! CloudFormation accepts the signals (nothing here can).

use crate::common;
use crate::render_fixtures;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use kube_aws::render::{self, HelmBinary, RenderInput};
use render_fixtures::*;

const SECRET_REF: &str = "kube-aws-secret.dex.clientSecret";
const SECRET_VALUE: &str = "s3cr3t: value with spaces";

/// DescribeStackResource says "does not exist" the first time for each wait
/// condition (CloudFormation creates it after the group, or after the
/// pointer), then CREATE_IN_PROGRESS until it is signalled, then
/// CREATE_COMPLETE; a state file `.wc/<ID>` overrides that.
const FAKE_AWS: &str = r#"#!/bin/bash
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
const FAKE_S3API: &str = r#"
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

const FAKE_KUBECTL: &str = r#"#!/bin/bash
echo "kubectl $*" >>"$FAKE_LOG"
case "$*" in
  "get --raw=/readyz") echo ok ;;
  get\ nodes*) echo True ;;
  *get\ pods*) echo "broken-0   0/1   CrashLoopBackOff" ;;
  *get\ events*) echo "Warning BackOff pod/broken-0 Back-off restarting failed container" ;;
esac
exit 0
"#;

const FAKE_HELM: &str = r#"#!/bin/bash
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

fn write_exec(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn tar_gz(src_dir: &Path, entry: &str, out: &Path) {
    let st = Command::new("tar")
        .arg("-czf")
        .arg(out)
        .arg("-C")
        .arg(src_dir)
        .arg(entry)
        .status()
        .unwrap();
    assert!(st.success());
}

fn sha(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

struct Run {
    code: i32,
    log: Vec<String>,
    s3: PathBuf,
    stderr: String,
    /// (release, wait condition) in plan order, from the plan the run used.
    wait_conditions: Vec<(String, String)>,
    /// The values files helm was given, `<release>.yaml`.
    values: PathBuf,
    /// Keeps a one-run bed's files for the test.
    _bed: Option<Bed>,
}

impl Run {
    fn helm_upgrades(&self) -> Vec<String> {
        self.helm("upgrade --install ")
    }
    fn helm(&self, verb: &str) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("helm {verb}")))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    }
    fn position(&self, needle: &str) -> Option<usize> {
        self.log.iter().position(|l| l.contains(needle))
    }
    fn status(&self, release: &str) -> serde_json::Value {
        let p = self
            .s3
            .join(format!("kube-aws-test/clusters/full/status/addons/{release}.json"));
        serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
    }
    fn signals(&self) -> Vec<(String, String, String)> {
        self.log
            .iter()
            .filter(|l| l.starts_with("aws ") && l.contains("cloudformation signal-resource"))
            .map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                let after = |k: &str| w[w.iter().position(|x| *x == k).unwrap() + 1].to_string();
                (after("--unique-id"), after("--logical-resource-id"), after("--status"))
            })
            .collect()
    }
    fn wait_condition(&self, release: &str) -> String {
        self.wait_conditions
            .iter()
            .find(|(n, _)| n == release)
            .map(|(_, w)| w.clone())
            .unwrap_or_else(|| panic!("{release} is not in the plan"))
    }
}

/// Controllers and their S3, SSM and stack, kept across plans.
struct Bed {
    dir: tempfile::TempDir,
    /// The controller's cloud-config as rendered by the latest publish.
    cloud_config: String,
    wait_conditions: Vec<(String, String)>,
    /// The controller's root (KUBE_AWS_ROOT; another name: another controller).
    work: &'static str,
}

impl Bed {
    fn new() -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (name, text) in [("aws", FAKE_AWS), ("kubectl", FAKE_KUBECTL)] {
            write_exec(&root.join("fakes").join(name), text);
        }
        std::fs::write(root.join("fakes/s3api.py"), FAKE_S3API).unwrap();
        write_exec(&root.join("build/linux-amd64/helm"), FAKE_HELM);
        tar_gz(&root.join("build"), "linux-amd64", &root.join("helm.tgz"));
        Bed {
            dir,
            cloud_config: String::new(),
            wait_conditions: Vec::new(),
            work: "controller-1",
        }
    }

    fn s3(&self) -> PathBuf {
        self.dir.path().join("s3")
    }

    /// What `kube-aws update` does for the addons: renders `input` (with fake
    /// charts and helm client), publishes the charts and the addon bundle, and
    /// sets the plan pointer to the control-plane stack's `AddonPlan` value.
    /// `tamper` may break a chart object.
    fn publish(&mut self, mut input: RenderInput, tamper: impl FnOnce(&Path)) {
        let root = self.dir.path().to_path_buf();
        let (s3, build) = (self.s3(), root.join("build"));
        let helm_tgz = root.join("helm.tgz");
        input.helm_binary = HelmBinary {
            version: "v0.0.0-fake".into(),
            url: "https://helm.invalid/helm-fake.tar.gz".into(),
            sha256: sha(&helm_tgz),
        };
        // One archive per chart, with its crds/ files, published where the plan says.
        let mut objects = Vec::new();
        for a in &mut input.addons {
            let chart_dir = build.join("charts").join(&a.release.name);
            let c = chart_dir.join(&a.release.chart);
            std::fs::create_dir_all(c.join("crds")).unwrap();
            std::fs::write(
                c.join("Chart.yaml"),
                format!("name: {}\nversion: {}\n", a.release.chart, a.chart_version),
            )
            .unwrap();
            for f in &a.crds {
                std::fs::write(c.join("crds").join(f), "kind: CustomResourceDefinition\n").unwrap();
            }
            // Built once per bed: the same chart keeps its digest across plans.
            let tgz = root.join(format!("{}.tgz", a.release.name));
            if !tgz.exists() {
                tar_gz(&chart_dir, &a.release.chart, &tgz);
            }
            if a.digest.is_some() {
                a.digest = Some(sha(&tgz));
            }
            objects.push((a.release.name.clone(), tgz));
        }
        let rendered = render::render(&input).unwrap();
        let plan: serde_json::Value = serde_json::from_slice(rendered.get("addons/plan.json").unwrap()).unwrap();
        for (name, tgz) in &objects {
            let e = plan["releases"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name.as_str())
                .unwrap();
            let key = e["chartObject"].as_str().unwrap().strip_prefix("s3://").unwrap();
            std::fs::create_dir_all(s3.join(key).parent().unwrap()).unwrap();
            std::fs::copy(tgz, s3.join(key)).unwrap();
        }
        // The helm client, where `up` publishes it with the charts.
        let key = plan["helm"]["binary"]["object"]
            .as_str()
            .unwrap()
            .strip_prefix("s3://")
            .unwrap();
        std::fs::create_dir_all(s3.join(key).parent().unwrap()).unwrap();
        std::fs::copy(&helm_tgz, s3.join(key)).unwrap();
        tamper(&s3);
        // The pointer, exactly as the control-plane stack sets it.
        let stack: serde_json::Value =
            serde_json::from_slice(rendered.get("stacks/control-plane.json").unwrap()).unwrap();
        let pointer = &stack["Resources"]["AddonPlan"]["Properties"];
        let value = crate::common::installer_bed::pointer_value(&pointer["Value"]);
        let value = value.as_str();
        let target: serde_json::Value = serde_json::from_str(value).unwrap();
        let bundle = rendered.get("addons/bundle.json").unwrap();
        assert_eq!(target["sha256"], sha_bytes(bundle));
        let key = target["uri"].as_str().unwrap().strip_prefix("s3://").unwrap();
        std::fs::create_dir_all(s3.join(key).parent().unwrap()).unwrap();
        std::fs::write(s3.join(key), bundle).unwrap();
        let param = s3.join(format!(".ssm{}", pointer["Name"].as_str().unwrap()));
        std::fs::create_dir_all(param.parent().unwrap()).unwrap();
        std::fs::write(param, format!("{value}\n")).unwrap();
        // The reconciler and where it looks, as the controller's cloud-config carries them.
        self.cloud_config = rendered.text("userdata/controller.cloud-config").unwrap().to_string();
        self.wait_conditions = plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["waitCondition"].as_str().unwrap().into(),
                )
            })
            .collect();
    }

    /// One run of the reconciler (a tick of its timer) on the controller
    /// `self.work`; `fail` lists the releases helm fails.
    fn run(&self, fail: &str) -> Run {
        self.run_with(fail, &[])
    }

    fn run_with(&self, fail: &str, env: &[(&str, &str)]) -> Run {
        let root = self.dir.path();
        let node = root.join(self.work);
        // The controller's files: its cloud-config's (the node program,
        // reconciler.json, node.json), runtime.json, and what `kube-aws-node
        // secrets` left at boot (the store is tmpfs: `reboot` empties it).
        common::write_cloud_config_files(&self.cloud_config, &node);
        std::fs::write(
            node.join("etc/kube-aws/runtime.json"),
            r#"{"stackName": "full-ControlPlane-1ABC", "region": "eu-west-1", "bucket": "kube-aws-test",
                "keyPrefix": "clusters/full", "secretsVersion": "0123456789abcdef", "cluster": "full",
                "secretBundleParameter": "/kube-aws/full/secret-bundle/controller"}"#,
        )
        .unwrap();
        let secrets = node.join("run/kube-aws/secrets");
        if !node.join(".booted").exists() {
            std::fs::create_dir_all(secrets.join("kubeadm")).unwrap();
            std::fs::write(secrets.join(SECRET_REF), SECRET_VALUE).unwrap();
            std::fs::write(secrets.join("kubeadm/bootstrap-token"), "abcdef.0123456789abcdef").unwrap();
            std::fs::write(node.join(".booted"), "").unwrap();
        }
        self.publish_secret_bundle(&node);
        let values = root.join("helm-values");
        let _ = std::fs::remove_dir_all(&values);
        std::fs::create_dir_all(&values).unwrap();
        let log = root.join("calls.log");
        std::fs::write(&log, "").unwrap();
        let path = format!(
            "{}:{}",
            root.join("fakes").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("python3")
            .arg(node.join("opt/kube-aws/bin/kube-aws-node"))
            .arg("reconcile")
            .env("PATH", path)
            .env("FAKE_LOG", &log)
            .env("FAKE_S3", self.s3())
            .env("FAKE_HELM_FAIL", fail)
            .env("FAKE_VALUES", &values)
            .env("FAKE_HELM_STATE", root.join("helm-state"))
            // A pyenv shim puts its version's bin directory, where an `aws`
            // may be, before the fakes on PATH: the system python has none.
            .env("PYENV_VERSION", "system")
            // Every AWS call through the fake CLI (src/node/kube_aws_node/sdkcall.py).
            .env("KUBE_AWS_AWS_CALLS", "cli")
            .env("KUBE_AWS_ROOT", &node)
            .env("FAKE_SECRET_FILE", secrets.join(SECRET_REF))
            .env("KUBE_AWS_RETRY_DELAY", "0")
            .env("KUBE_AWS_POLL_INTERVAL", "0")
            .env("KUBE_AWS_SIGNAL_DELAY", "0")
            .env("KUBECONFIG", root.join("kubeconfig"))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            log: std::fs::read_to_string(&log)
                .unwrap()
                .lines()
                .map(String::from)
                .collect(),
            s3: self.s3(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            wait_conditions: self.wait_conditions.clone(),
            values: values.clone(),
            _bed: None,
        }
    }

    /// The secret bundle as `kube-aws update` publishes it (content-addressed,
    /// named by the stack's SSM pointer), for the plugin secrets the
    /// controller's node.json names; the fake KMS's ciphertext is the plaintext.
    fn publish_secret_bundle(&self, node: &Path) {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let node_json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(node.join("etc/kube-aws/node.json")).unwrap()).unwrap();
        let mut secrets = serde_json::Map::new();
        for n in node_json["secrets"]["names"].as_array().unwrap() {
            let n = n.as_str().unwrap();
            let v = if n == SECRET_REF {
                SECRET_VALUE.to_string()
            } else {
                format!("plain-{n}")
            };
            secrets.insert(n.into(), b64(&v).into());
        }
        let doc = serde_json::json!({"encryptionContext": {"kube-aws:cluster": "full"}, "secrets": secrets});
        let text = doc.to_string();
        let key = format!("secrets/{}/bundle.json", sha_bytes(text.as_bytes()));
        let p = self.s3().join("kube-aws-test/clusters/full").join(&key);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        let param = self.s3().join(".ssm/kube-aws/full/secret-bundle/controller");
        std::fs::create_dir_all(param.parent().unwrap()).unwrap();
        std::fs::write(param, format!("{key}\n")).unwrap();
    }

    /// The controller reboots: its tmpfs (the secret store, /run) is empty.
    fn reboot(&self) {
        let run = self.dir.path().join(self.work).join("run");
        let _ = std::fs::remove_dir_all(run);
        std::fs::write(self.dir.path().join(self.work).join(".booted"), "").unwrap();
    }

    fn installed(&self) -> serde_json::Value {
        let p = self
            .s3()
            .join("kube-aws-test/clusters/full/status/addons/installed.json");
        serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
    }
}

fn sha_bytes(b: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(b))
}

/// Publishes `input` to a fresh controller and runs the reconciler once.
fn run_installer(input: RenderInput, fail: &str, tamper: impl FnOnce(&Path)) -> Run {
    let mut bed = Bed::new();
    bed.publish(input, tamper);
    let mut run = bed.run(fail);
    run._bed = Some(bed);
    run
}

/// The full fixture's releases in a dependency order: calico (bootstrap),
/// cert-manager, then metrics-server and dex (both depend on cert-manager
/// only, so they install side by side, in either order).
fn assert_full_order(upgrades: &[String]) {
    assert_eq!(upgrades[..2], ["calico", "cert-manager"], "{upgrades:?}");
    let mut rest = upgrades[2..].to_vec();
    rest.sort();
    assert_eq!(rest, ["dex", "metrics-server"], "{upgrades:?}");
}

fn helm_v3(mut input: RenderInput) -> RenderInput {
    input.cluster.helm.version = 3;
    input
}

#[test]
fn helm_v2_installs_tiller_then_everything_in_order() {
    let run = run_installer(full(), "", |_| {});
    assert_eq!(run.code, 0, "stderr:\n{}\nlog:\n{}", run.stderr, run.log.join("\n"));
    assert_full_order(&run.helm_upgrades());

    let tiller = run.position("kubectl apply -f").expect("tiller applied");
    assert!(run.log[tiller].ends_with("/tiller.yaml"));
    let rollout = run
        .position("rollout status deployment/tiller-deploy")
        .expect("tiller rollout waited");
    let init = run
        .position("helm init --client-only")
        .expect("helm v2 client initialised");
    let first = run.position("helm upgrade").unwrap();
    assert!(tiller < rollout && rollout < init && init < first, "{:#?}", run.log);
    let v2 = &run.log[first];
    assert!(
        v2.contains("--tiller-namespace kube-system") && v2.contains("--timeout 300 "),
        "{v2}"
    );
    assert!(
        !v2.contains("--create-namespace"),
        "helm v2 has no --create-namespace: {v2}"
    );

    // CRDs applied server-side before helm (helm installs crds/ once and
    // never upgrades them), and Established before any dependant starts.
    let line = |prefix: &str, file: &str| {
        run.log
            .iter()
            .position(|l| l.starts_with(prefix) && l.contains(file))
            .unwrap_or_else(|| panic!("no `{prefix} ... {file}`: {:#?}", run.log))
    };
    let apply = line(
        "kubectl apply --server-side --force-conflicts --field-manager=kube-aws -f",
        "crds/crd-issuers.yaml",
    );
    let crd = line("kubectl wait --for=condition=Established", "crds/crd-issuers.yaml");
    let cm = run.position("helm upgrade --install cert-manager").unwrap();
    let ms = run.position("helm upgrade --install metrics-server").unwrap();
    assert!(apply < cm && cm < crd && crd < ms, "{:#?}", run.log);
    assert!(run.position("crds/operator.tigera.io_installations.yaml").is_some());

    // The plugin manifest is applied once the bootstrap addons are in, before the rest.
    let manifest = run.position("manifests/dex/rbac.yaml").expect("manifest applied");
    assert!(manifest > run.position("helm upgrade --install calico").unwrap() && manifest < cm);

    // Signals run in the background, so their order is not the install order.
    let mut wcs: Vec<(String, String, String)> = run
        .wait_conditions
        .iter()
        .map(|(n, w)| (n.clone(), w.clone(), "SUCCESS".to_string()))
        .collect();
    let mut signals = run.signals();
    wcs.sort();
    signals.sort();
    assert_eq!(wcs.len(), 4);
    assert_eq!(signals, wcs);
    // Each wait condition did not exist at first (CloudFormation creates it
    // after the group): asked again, then signalled while it waited.
    for (_, wc) in &run.wait_conditions {
        let asked = run
            .log
            .iter()
            .filter(|l| {
                l.contains("describe-stack-resource")
                    && format!("{l} ").contains(&format!("--logical-resource-id {wc} "))
            })
            .count();
        assert_eq!(asked, 2, "{wc}: {:#?}", run.log);
    }
    // The wait conditions live in the root stack (after every pool), named
    // by reconciler.json's waitConditionStack, not in the node's own stack.
    assert!(run.log.iter().any(|l| format!("{l} ").contains("--stack-name full ")));
    assert!(!run
        .log
        .iter()
        .any(|l| l.contains("--stack-name full-ControlPlane-1ABC")));
    for name in ["calico", "cert-manager", "metrics-server", "dex"] {
        let s = run.status(name);
        assert_eq!(s["phase"], "ready", "{s}");
        assert_eq!(s["release"], name);
        assert!(s["startedAt"].as_str().unwrap().ends_with('Z') && s["updatedAt"].is_string());
    }
}

#[test]
fn helm_v3_failure_skips_dependants_with_the_reason() {
    let input = helm_v3(full());
    let run = run_installer(input.clone(), "cert-manager", |_| {});
    assert_ne!(run.code, 0);
    assert!(
        run.position("tiller").is_none(),
        "no Tiller in Helm v3 mode: {:#?}",
        run.log
    );
    assert!(run.position("helm init").is_none());
    // Bounded retries (3 attempts), then dependants never start.
    assert_eq!(
        run.helm_upgrades(),
        ["calico", "cert-manager", "cert-manager", "cert-manager"]
    );
    let v3 = run
        .log
        .iter()
        .find(|l| l.starts_with("helm upgrade --install cert-manager"))
        .unwrap();
    assert!(v3.contains("--timeout 600s") && v3.contains("--create-namespace"));
    // Every attempt is atomic: helm itself undoes a failed install or upgrade.
    for l in run.log.iter().filter(|l| l.starts_with("helm upgrade --install ")) {
        assert!(l.contains(" --atomic "), "{l}");
    }

    let failed = run.status("cert-manager");
    assert_eq!(failed["phase"], "failed");
    let msg = failed["message"].as_str().unwrap();
    assert!(msg.contains("UPGRADE FAILED: timed out"), "helm error tail: {msg}");
    // helm quoted a secret value: the status object (in S3) names it instead.
    assert!(
        msg.contains(&format!("stringData.password: <secret {SECRET_REF}>")),
        "{msg}"
    );
    assert!(!msg.contains("s3cr3t"), "{msg}");
    assert!(
        msg.contains("CrashLoopBackOff") && msg.contains("Back-off restarting"),
        "pods and events: {msg}"
    );
    for name in ["metrics-server", "dex"] {
        let s = run.status(name);
        assert_eq!(s["phase"], "skipped");
        assert!(
            s["message"]
                .as_str()
                .unwrap()
                .contains("depends on cert-manager, which is failed"),
            "{s}"
        );
    }
    assert_eq!(run.status("calico")["phase"], "ready");
    let mut statuses: Vec<String> = run
        .signals()
        .into_iter()
        .map(|(id, _, st)| format!("{id}={st}"))
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        [
            "calico=SUCCESS",
            "cert-manager=FAILURE",
            "dex=FAILURE",
            "metrics-server=FAILURE"
        ]
    );
}

#[test]
fn a_tampered_chart_is_refused_before_helm_runs() {
    let input = helm_v3(full());
    let run = run_installer(input, "", |s3| {
        let dir = s3.join("kube-aws-test/clusters/full/charts");
        // Every chart object is rewritten (not the helm client's, published
        // beside them); calico's is the first one the installer meets.
        let helm = std::fs::read(s3.parent().unwrap().join("helm.tgz")).unwrap();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if std::fs::read(&p).unwrap() != helm {
                std::fs::write(p, b"not the chart").unwrap();
            }
        }
    });
    assert_ne!(run.code, 0);
    assert!(run.helm_upgrades().is_empty(), "{:#?}", run.log);
    let s = run.status("calico");
    assert_eq!(s["phase"], "failed");
    assert!(
        s["message"].as_str().unwrap().contains("does not match its sha256"),
        "{s}"
    );
}

#[test]
fn a_tampered_helm_client_is_refused_and_no_release_is_touched() {
    let input = helm_v3(full());
    let run = run_installer(input, "", |s3| {
        let helm = std::fs::read(s3.parent().unwrap().join("helm.tgz")).unwrap();
        let dir = s3.join("kube-aws-test/clusters/full/charts");
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if std::fs::read(&p).unwrap() == helm {
                std::fs::write(p, b"not helm").unwrap();
            }
        }
    });
    assert_ne!(run.code, 0);
    assert!(run.helm_upgrades().is_empty(), "{:#?}", run.log);
    let s = run.status("calico");
    assert_eq!(s["phase"], "failed");
    let m = s["message"].as_str().unwrap();
    assert!(m.contains("cannot install the helm client from s3://"), "{s}");
    assert!(run.stderr.contains("does not match its sha256"), "{}", run.stderr);
}

#[test]
fn an_unlocked_chart_is_refused() {
    let mut input = helm_v3(full());
    input.addons[2].digest = None;
    let run = run_installer(input, "", |_| {});
    assert_ne!(run.code, 0);
    assert_eq!(run.helm_upgrades(), ["calico", "cert-manager", "dex"]);
    let s = run.status("metrics-server");
    assert_eq!(s["phase"], "failed");
    assert!(s["message"].as_str().unwrap().contains("not locked"), "{s}");
}

#[test]
fn no_charts_means_no_tiller_and_no_helm() {
    let mut input = full();
    input.addons.clear();
    let run = run_installer(input, "", |_| {});
    assert_eq!(run.code, 0, "{}\n{:#?}", run.stderr, run.log);
    assert!(
        run.position("tiller").is_none() && !run.log.iter().any(|l| l.contains("s3 cp") && l.contains(".tgz")),
        "{:#?}",
        run.log
    );
}

/// The plan after an update: metrics-server's values changed, dex dropped.
fn changed_plan(mut input: RenderInput) -> RenderInput {
    let ms = input
        .addons
        .iter_mut()
        .find(|a| a.release.name == "metrics-server")
        .unwrap();
    ms.values_yaml.push_str("replicas: 3\n");
    input.addons.retain(|a| a.release.name != "dex");
    // dex's plugin is gone with its release: its manifest too.
    input.plugins.cluster.manifests.retain(|m| m.plugin != "dex");
    input
}

#[test]
fn a_new_plan_installs_what_changed_uninstalls_what_was_dropped_and_a_repeat_does_nothing() {
    let mut bed = Bed::new();
    let first = helm_v3(full());
    bed.publish(first.clone(), |_| {});
    let one = bed.run("");
    assert_eq!(one.code, 0, "{}\n{:#?}", one.stderr, one.log);
    assert_full_order(&one.helm_upgrades());
    let installed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            bed.s3()
                .join("kube-aws-test/clusters/full/status/addons/installed.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let names: Vec<&str> = installed["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["calico", "cert-manager", "dex", "metrics-server"]);
    // helm got the bundle's values with the secret filled in; the published bundle keeps the reference.
    let dex = std::fs::read_to_string(one.values.join("dex.yaml")).unwrap();
    assert!(dex.contains(SECRET_VALUE) && !dex.contains(SECRET_REF), "{dex}");

    // The same plan again (the next tick of the timer): nothing.
    let again = bed.run("");
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.helm_upgrades().is_empty() && again.signals().is_empty(),
        "{:#?}",
        again.log
    );

    // A new plan: only metrics-server is installed and signalled; dex is uninstalled.
    bed.publish(changed_plan(first.clone()), |_| {});
    let two = bed.run("");
    assert_eq!(two.code, 0, "{}\n{:#?}", two.stderr, two.log);
    assert_eq!(two.helm_upgrades(), ["metrics-server"]);
    assert_eq!(two.helm("uninstall "), ["dex"]);
    assert!(
        two.position("helm uninstall dex --namespace dex --wait").is_some(),
        "{:#?}",
        two.log
    );
    // The dropped plugin's manifest objects are deleted (issue 24, finding
    // 10: a leftover fail-closed webhook configuration would block pods).
    assert!(
        two.position("kubectl delete --ignore-not-found --wait=false -f")
            .is_some(),
        "{:#?}",
        two.log
    );
    assert!(
        two.stderr.contains("pruned ClusterRoleBinding oidc-admins"),
        "{}",
        two.stderr
    );
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            bed.s3()
                .join("kube-aws-test/clusters/full/status/addons/installed.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(record["manifestObjects"], serde_json::json!([]), "{record}");
    assert!(
        !one.log.iter().any(|l| l.starts_with("kubectl delete")),
        "the first plan prunes nothing: {:#?}",
        one.log
    );
    let signalled: Vec<String> = two.signals().into_iter().map(|(_, wc, _)| wc).collect();
    assert_eq!(signalled, [two.wait_condition("metrics-server")]);
    assert_eq!(
        two.wait_condition("calico"),
        one.wait_condition("calico"),
        "unchanged entries keep their ID"
    );
    assert_ne!(
        two.wait_condition("metrics-server"),
        one.wait_condition("metrics-server")
    );
    // Only the new plan's new wait condition was looked up.
    assert!(!two.log.iter().any(|l| l.contains("describe-stack-resource")
        && format!("{l} ").contains(&format!("--logical-resource-id {} ", one.wait_condition("calico")))));
    let three = bed.run("");
    assert!(three.helm_upgrades().is_empty() && three.helm("uninstall ").is_empty() && three.signals().is_empty());

    // Another controller, whose timer sees the plan once it is installed, does
    // nothing: the record says it is done (no lease taken, no secret decrypted).
    bed.work = "controller-2";
    let o = bed.run("");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.helm_upgrades().is_empty() && o.signals().is_empty(), "{:#?}", o.log);
    assert!(
        !o.log
            .iter()
            .any(|l| l.contains("addons-lease") || l.contains("kms decrypt")),
        "{:#?}",
        o.log
    );
}

#[test]
fn complete_or_dropped_wait_conditions_are_never_signalled() {
    let mut bed = Bed::new();
    bed.publish(helm_v3(full()), |_| {});
    let wcs = bed.wait_conditions.clone();
    assert_eq!(wcs[3].0, "dex");
    let state = bed.s3().join(".wc");
    std::fs::create_dir_all(&state).unwrap();
    // calico's wait condition is already complete; dex's is no longer in the
    // stack, and a newer plan is live by the time it is asked.
    std::fs::write(state.join(&wcs[0].1), "CREATE_COMPLETE").unwrap();
    std::fs::write(state.join(&wcs[3].1), "missing").unwrap();
    for (_, wc) in &wcs[1..3] {
        std::fs::write(state.join(wc), "CREATE_IN_PROGRESS").unwrap();
    }
    let pointer = bed.s3().join(".ssm/kube-aws/full/addon-plan");
    std::fs::write(
        pointer.with_extension("later"),
        r#"{"uri": "s3://kube-aws-test/clusters/full/addons/0/bundle.json", "sha256": "0"}"#,
    )
    .unwrap();
    let run = bed.run("");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let signalled: Vec<String> = run.signals().into_iter().map(|(_, wc, _)| wc).collect();
    assert_eq!(signalled.len(), 2, "{signalled:?}");
    assert!(
        !signalled.contains(&wcs[0].1) && !signalled.contains(&wcs[3].1),
        "{signalled:?}"
    );
    assert!(
        run.stderr.contains(&format!(
            "{} (calico) is CREATE_COMPLETE: nothing waits for its signal",
            wcs[0].1
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "{} (dex) is not in the stack and a newer plan is live: not signalled",
            wcs[3].1
        )),
        "{}",
        run.stderr
    );
    // Each was asked once, not retried for half an hour.
    for wc in [&wcs[0].1, &wcs[3].1] {
        let asked = run
            .log
            .iter()
            .filter(|l| {
                l.contains("describe-stack-resource")
                    && format!("{l} ").contains(&format!("--logical-resource-id {wc} "))
            })
            .count();
        assert_eq!(asked, 1, "{wc}");
    }
}

#[test]
fn independent_releases_install_side_by_side_with_whole_log_lines() {
    let mut bed = Bed::new();
    bed.publish(helm_v3(full()), |_| {});
    let run = bed.run_with("", &[("FAKE_HELM_SLEEP", "1")]);
    assert_eq!(run.code, 0, "{}\n{:#?}", run.stderr, run.log);
    let at = |what: &str| {
        run.position(what)
            .unwrap_or_else(|| panic!("no {what}: {:#?}", run.log))
    };
    // metrics-server and dex depend on cert-manager only: both start once it
    // is done, and each starts before the other ends (the plan's concurrency is 4).
    let cm_end = at("helm-end cert-manager");
    let (ms, dex) = (at("helm-start metrics-server"), at("helm-start dex"));
    assert!(cm_end < ms && cm_end < dex, "{:#?}", run.log);
    assert!(
        ms < at("helm-end dex") && dex < at("helm-end metrics-server"),
        "{:#?}",
        run.log
    );
    // The bootstrap addon goes alone, first.
    assert!(at("helm-end calico") < at("helm-start cert-manager"));
    // Every log line is whole and says which release it is about.
    let line = regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ kube-aws-addons: ").unwrap();
    for l in run.stderr.lines() {
        assert!(line.is_match(l), "not a whole log line: {l:?}\n{}", run.stderr);
    }
    for name in ["calico", "cert-manager", "metrics-server", "dex"] {
        assert!(
            run.stderr.contains(&format!("kube-aws-addons: {name}: installing\n"))
                && run.stderr.contains(&format!("kube-aws-addons: {name}: ready\n")),
            "{name}: {}",
            run.stderr
        );
        assert_eq!(run.status(name)["phase"], "ready");
    }
}

fn with_values(mut input: RenderInput, releases: &[&str], extra: &str) -> RenderInput {
    for a in input
        .addons
        .iter_mut()
        .filter(|a| releases.contains(&a.release.name.as_str()))
    {
        a.values_yaml.push_str(extra);
    }
    input
}

fn lease_body(bed: &Bed) -> serde_json::Value {
    let p = bed.s3().join("kube-aws-test/clusters/full/bootstrap/addons-lease");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn expired(lease: &serde_json::Value) -> bool {
    let at = humantime::parse_rfc3339(lease["expiresAt"].as_str().unwrap()).unwrap();
    at < std::time::SystemTime::now()
}

/// The killed installer's lease: long enough for the next controller's tick
/// to run while it is live, on a loaded machine too (4 s was not: stop 50's
/// `make test` at load 26 ran that tick after the lease had expired, and
/// it took the plan over).
const LEASE_TTL_SECONDS: u64 = 15;

/// The installer is killed mid-plan (its instance terminated): its lease is
/// left, unreleased; no other controller installs until it expires; then one
/// takes it over, resumes from the record (what the dead one recorded is not
/// installed again) and signals every wait condition, including those the
/// dead one installed but never signalled.
#[test]
fn a_killed_installer_is_taken_over_when_its_lease_expires_and_the_plan_is_finished_and_signalled() {
    let mut bed = Bed::new();
    bed.publish(helm_v3(full()), |_| {});
    // CloudFormation has not created the wait conditions yet: the installer's
    // signals wait for them (a minute apart) when it is killed.
    let state = bed.s3().join(".wc");
    std::fs::create_dir_all(&state).unwrap();
    for (_, wc) in &bed.wait_conditions {
        std::fs::write(state.join(wc), "missing").unwrap();
    }
    let one = bed.run_with(
        "",
        &[
            ("FAKE_HELM_DIE", "cert-manager"),
            ("KUBE_AWS_LEASE_TTL", &LEASE_TTL_SECONDS.to_string()),
            ("KUBE_AWS_SIGNAL_DELAY", "60"),
        ],
    );
    assert_ne!(one.code, 0, "{}", one.stderr);
    assert!(one.position("helm-killed cert-manager").is_some(), "{:#?}", one.log);
    assert!(one.signals().is_empty(), "{:#?}", one.log);
    let lease = lease_body(&bed);
    assert!(!expired(&lease), "the killed installer's lease is live: {lease}");
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&bed.installed()), ["calico"], "recorded as it went");

    // The wait conditions now wait. Another controller's tick, while the dead
    // installer's lease is live: it installs nothing, but signals calico, which
    // the record shows installed at its wait condition.
    for (_, wc) in &bed.wait_conditions {
        std::fs::write(state.join(wc), "CREATE_IN_PROGRESS").unwrap();
    }
    bed.work = "controller-2";
    let early = bed.run("");
    assert_eq!(early.code, 0, "{}", early.stderr);
    assert!(early.helm_upgrades().is_empty(), "{:#?}", early.log);
    assert!(early.stderr.contains("lease is held by"), "{}", early.stderr);
    let signalled: Vec<String> = early.signals().into_iter().map(|(_, wc, _)| wc).collect();
    assert_eq!(signalled, [early.wait_condition("calico")]);
    assert!(
        early.stderr.contains(&format!(
            "{} (calico) signalled SUCCESS: the installed record has it",
            early.wait_condition("calico")
        )),
        "{}",
        early.stderr
    );

    // Past the dead installer's lease (read from the lease itself, so a
    // slow machine does not shorten the wait).
    let until = humantime::parse_rfc3339(lease_body(&bed)["expiresAt"].as_str().unwrap()).unwrap()
        + std::time::Duration::from_millis(500);
    if let Ok(left) = until.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(left);
    }
    let two = bed.run("");
    assert_eq!(two.code, 0, "{}\n{:#?}", two.stderr, two.log);
    assert!(two.stderr.contains("taking it over"), "{}", two.stderr);
    let mut upgraded = two.helm_upgrades();
    upgraded.sort();
    assert_eq!(
        upgraded,
        ["cert-manager", "dex", "metrics-server"],
        "resumed, not restarted"
    );
    // The killed helm left cert-manager pending-install: undone before it is installed.
    let undo = two
        .position("helm uninstall cert-manager")
        .expect("pending install undone");
    assert!(
        undo < two.position("helm upgrade --install cert-manager").unwrap(),
        "{:#?}",
        two.log
    );
    assert!(
        two.stderr
            .contains("cert-manager: left pending-install at revision 1 by a stopped installer"),
        "{}",
        two.stderr
    );
    let mut signalled: Vec<String> = two.signals().into_iter().map(|(_, wc, _)| wc).collect();
    signalled.sort();
    let mut rest: Vec<String> = ["cert-manager", "dex", "metrics-server"]
        .iter()
        .map(|n| two.wait_condition(n))
        .collect();
    rest.sort();
    assert_eq!(signalled, rest, "{:#?}", two.log);
    let installed = bed.installed();
    assert_eq!(names(&installed), ["calico", "cert-manager", "dex", "metrics-server"]);
    assert!(expired(&lease_body(&bed)), "released after the run");

    // Done, from the record: the next tick of either controller does nothing.
    for c in ["controller-1", "controller-2"] {
        bed.work = c;
        let again = bed.run("");
        assert_eq!(again.code, 0, "{}", again.stderr);
        assert!(
            again.helm_upgrades().is_empty() && again.signals().is_empty(),
            "{c}: {:#?}",
            again.log
        );
    }
}

/// Plan 2 changes calico, cert-manager and metrics-server; cert-manager fails
/// (helm --atomic rolls it back), metrics-server, which depends on it, is
/// skipped, calico is upgraded. CloudFormation then rolls the stack back: the
/// pointer names plan 1 again, and plan 1 is applied again (calico back to its
/// plan-1 values) on the same controller.
#[test]
fn a_failed_release_is_rolled_back_and_a_plan_cloudformation_rolls_back_to_is_applied_again() {
    let mut bed = Bed::new();
    let first = helm_v3(full());
    bed.publish(first.clone(), |_| {});
    let one = bed.run("");
    assert_eq!(one.code, 0, "{}", one.stderr);

    bed.publish(
        with_values(
            first.clone(),
            &["calico", "cert-manager", "metrics-server"],
            "plan: 2\n",
        ),
        |_| {},
    );
    let two = bed.run("cert-manager");
    assert_ne!(two.code, 0);
    let cm: Vec<&String> = two
        .log
        .iter()
        .filter(|l| l.starts_with("helm upgrade --install cert-manager "))
        .collect();
    assert!(!cm.is_empty() && cm.iter().all(|l| l.contains(" --atomic ")), "{cm:?}");
    assert_eq!(two.status("metrics-server")["phase"], "skipped");
    assert!(!two.helm_upgrades().contains(&"metrics-server".to_string()));
    // The record: calico at plan 2's wait condition; cert-manager (rolled
    // back by helm) and metrics-server (skipped) still at plan 1's.
    let rec = bed.installed();
    let at = |name: &str| -> String {
        rec["releases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["waitCondition"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(at("calico"), two.wait_condition("calico"));
    assert_eq!(at("cert-manager"), one.wait_condition("cert-manager"));
    assert_eq!(at("metrics-server"), one.wait_condition("metrics-server"));
    assert!(rec["retryAfter"].is_number(), "{rec}");
    // The next tick does not hammer the failing release.
    let later = bed.run("cert-manager");
    assert_eq!(later.code, 0, "{}", later.stderr);
    assert!(later.helm_upgrades().is_empty(), "{:#?}", later.log);

    // CloudFormation rolled back: the pointer names plan 1 again.
    bed.publish(first, |_| {});
    assert_eq!(bed.wait_conditions, one.wait_conditions);
    let three = bed.run("");
    assert_eq!(three.code, 0, "{}\n{:#?}", three.stderr, three.log);
    assert_eq!(three.helm_upgrades(), ["calico"], "{:#?}", three.log);
    let calico = std::fs::read_to_string(three.values.join("calico.yaml")).unwrap();
    assert!(!calico.contains("plan: 2"), "{calico}");
    let rec = bed.installed();
    let entries: Vec<(String, String)> = rec["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().into(),
                r["waitCondition"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut want = one.wait_conditions.clone();
    want.sort();
    assert_eq!(entries, want);
    assert!(rec.get("retryAfter").is_none(), "{rec}");
}

/// After a reboot the secret store (tmpfs) is empty: the reconciler decrypts
/// the plugin secrets again, so the next plan's release gets the real value,
/// and nothing filled in is left outside tmpfs once the run is over.
#[test]
fn after_a_reboot_the_secrets_are_decrypted_again_and_no_filled_value_is_left_on_disk() {
    let mut bed = Bed::new();
    let first = helm_v3(full());
    bed.publish(first.clone(), |_| {});
    assert_eq!(bed.run("").code, 0);
    bed.reboot();
    assert!(!bed.dir.path().join("controller-1/run/kube-aws/secrets").exists());
    bed.publish(with_values(first, &["dex"], "replicas: 2\n"), |_| {});
    let run = bed.run("");
    assert_eq!(run.code, 0, "{}\n{:#?}", run.stderr, run.log);
    assert_eq!(run.helm_upgrades(), ["dex"]);
    assert!(run.position("kms decrypt").is_some(), "{:#?}", run.log);
    let dex = std::fs::read_to_string(run.values.join("dex.yaml")).unwrap();
    assert!(dex.contains(SECRET_VALUE) && !dex.contains(SECRET_REF), "{dex}");
    // helm read the values from tmpfs (/run), and that directory is gone.
    let upgrade = run
        .log
        .iter()
        .find(|l| l.starts_with("helm upgrade --install dex "))
        .unwrap();
    let node = bed.dir.path().join("controller-1");
    assert!(
        upgrade.contains(&format!("-f {}/run/kube-aws/addons/", node.display())),
        "{upgrade}"
    );
    let tmp = node.join("run/kube-aws/addons");
    assert_eq!(
        std::fs::read_dir(&tmp).map(|d| d.count()).unwrap_or(0),
        0,
        "{}",
        tmp.display()
    );
    let store = node.join("run/kube-aws/secrets");
    for e in walkdir(&node) {
        if e.starts_with(&store) {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&e).unwrap()).into_owned();
        assert!(
            !text.contains(SECRET_VALUE),
            "a filled value outside tmpfs: {}",
            e.display()
        );
    }
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else if p.is_file() {
            out.push(p);
        }
    }
    out
}

/// The controller may not read the installed record (a 403): the run fails
/// and installs, uninstalls and signals nothing, where taking the 403 for
/// "nothing installed" would upgrade every release and never uninstall dex.
#[test]
fn a_denied_read_of_the_installed_record_fails_the_run_and_changes_nothing() {
    let mut bed = Bed::new();
    let first = helm_v3(full());
    bed.publish(first.clone(), |_| {});
    assert_eq!(bed.run("").code, 0);
    bed.publish(changed_plan(first), |_| {});
    let denied = bed.run_with("", &[("FAKE_DENY", "status/addons/installed.json")]);
    assert_ne!(denied.code, 0);
    assert!(
        denied.helm_upgrades().is_empty() && denied.helm("uninstall ").is_empty() && denied.signals().is_empty(),
        "{:#?}",
        denied.log
    );
    assert!(
        denied.stderr.contains("cannot read the installed record") && denied.stderr.contains("AccessDenied"),
        "{}",
        denied.stderr
    );
    assert!(!denied.log.iter().any(|l| l.contains("addons-lease")), "no lease taken");
    // Once it may read it, the same plan goes ahead.
    let ok = bed.run("");
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert_eq!(ok.helm_upgrades(), ["metrics-server"]);
    assert_eq!(ok.helm("uninstall "), ["dex"]);
}
