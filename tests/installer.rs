//! The addon installer (install-addons.sh, as rendered) run for real with bash
//! and python3, with helm, kubectl, aws and curl replaced by recording fakes on
//! PATH: no Kubernetes API server or AWS account can run here, so this is the
//! one place fakes are right. The fakes map `s3://` to a directory.
//!
//! Checked: install order, dependants skipped after a failure, the Tiller step
//! in Helm v2 mode only, the CRD wait before dependants, signals and status
//! files, sha256 and lock checks, secret values blanked out of status
//! messages. Not covered: real helm/kubectl behaviour,
//! IMDS, or whether CloudFormation accepts the signals (moto cannot).

mod common;
mod render_fixtures;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use kube_aws::render::{self, HelmBinary, RenderInput};
use render_fixtures::*;

const SECRET_REF: &str = "kube-aws-secret.dex.clientSecret";
const SECRET_VALUE: &str = "s3cr3t: value with spaces";

/// Rejects the first signal of each wait condition, as CloudFormation does
/// while the wait condition does not exist yet.
const FAKE_AWS: &str = r#"#!/bin/bash
all="$*"
[[ "$all" == *signal-resource* ]] || echo "aws $all" >>"$FAKE_LOG"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --region|--content-type|--sse|--sse-kms-key-id) shift 2 ;;
    --only-show-errors) shift ;;
    *) args+=("$1"); shift ;;
  esac
done
map() { case "$1" in s3://*) echo "$FAKE_S3/${1#s3://}" ;; *) echo "$1" ;; esac; }
if [ "${args[0]}" = s3 ] && [ "${args[1]}" = cp ]; then
  src=$(map "${args[2]}"); dst=$(map "${args[3]}")
  mkdir -p "$(dirname "$dst")"
  cp "$src" "$dst"
  exit $?
fi
if [ "${args[0]}" = cloudformation ]; then
  marker="$FAKE_S3/.signalled-${args[5]}"
  if [ ! -e "$marker" ]; then
    touch "$marker"
    echo "aws-rejected $all" >>"$FAKE_LOG"
    exit 254
  fi
  echo "aws $all" >>"$FAKE_LOG"
  exit 0
fi
echo "fake aws: unsupported: $*" >&2
exit 2
"#;

const FAKE_CURL: &str = r#"#!/bin/bash
echo "curl $*" >>"$FAKE_LOG"
while [ $# -gt 0 ]; do
  case "$1" in -o) out=$2; shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac
done
cp "${url#file://}" "$out"
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
if [ "$1" = upgrade ]; then
  case ",${FAKE_HELM_FAIL:-}," in
    *",$3,"*)
      # helm may quote a rendered manifest, with a secret value in it.
      echo "Error: Secret \"$3\" is invalid: stringData.password: $(cat "$FAKE_SECRET_FILE")" >&2
      echo "Error: UPGRADE FAILED: timed out waiting for the condition ($3)" >&2; exit 1 ;;
  esac
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
    _dir: tempfile::TempDir,
}

impl Run {
    fn helm_upgrades(&self) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|l| l.strip_prefix("helm upgrade --install "))
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
}

/// Publishes fake charts and a fake helm client, renders `input` with their
/// digests, and runs the rendered installer. `tamper` may break a chart object.
fn run_installer(mut input: RenderInput, fail: &str, tamper: impl FnOnce(&Path)) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (fakes, s3, build) = (root.join("fakes"), root.join("s3"), root.join("build"));
    for (name, text) in [("aws", FAKE_AWS), ("curl", FAKE_CURL), ("kubectl", FAKE_KUBECTL)] {
        write_exec(&fakes.join(name), text);
    }
    write_exec(&build.join("linux-amd64/helm"), FAKE_HELM);
    let helm_tgz = root.join("helm.tgz");
    tar_gz(&build, "linux-amd64", &helm_tgz);
    input.helm_binary = HelmBinary {
        version: "v0.0.0-fake".into(),
        url: format!("file://{}", helm_tgz.display()),
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
        let tgz = root.join(format!("{}.tgz", a.release.name));
        tar_gz(&chart_dir, &a.release.chart, &tgz);
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
    tamper(&s3);
    // The controller's layout: /etc/kube-aws/addons holds addons/* and manifests/.
    let addons = root.join("etc/addons");
    for (rel, bytes) in &rendered.files {
        let dest = if let Some(r) = rel.strip_prefix("addons/") {
            addons.join(r)
        } else if rel.starts_with("manifests/") {
            addons.join(rel)
        } else {
            continue;
        };
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(&dest, bytes).unwrap();
    }
    std::fs::write(
        root.join("etc/runtime.json"),
        r#"{"stackName": "full-ControlPlane-1ABC", "region": "eu-west-1"}"#,
    )
    .unwrap();
    // What kube-aws-node-secrets leaves on a controller.
    let secret_file = root.join(format!("secrets/{SECRET_REF}"));
    std::fs::create_dir_all(root.join("secrets/kubeadm")).unwrap();
    std::fs::write(&secret_file, SECRET_VALUE).unwrap();
    std::fs::write(root.join("secrets/kubeadm/bootstrap-token"), "abcdef.0123456789abcdef").unwrap();
    // The node script the installer blanks secrets with, as the controller has it.
    let node_secrets = root.join("node-bin/kube-aws-node-secrets");
    std::fs::create_dir_all(node_secrets.parent().unwrap()).unwrap();
    std::fs::write(&node_secrets, include_str!("../src/render/templates/node-secrets.py")).unwrap();
    std::fs::set_permissions(&node_secrets, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = addons.join("install-addons.sh");
    let log = root.join("calls.log");
    std::fs::write(&log, "").unwrap();
    let path = format!("{}:{}", fakes.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .arg(&script)
        .env("PATH", path)
        .env("FAKE_LOG", &log)
        .env("FAKE_S3", &s3)
        .env("FAKE_HELM_FAIL", fail)
        .env("KUBE_AWS_ADDON_DIR", &addons)
        .env("KUBE_AWS_ETC", root.join("etc"))
        .env("KUBE_AWS_WORK_DIR", root.join("work"))
        .env("KUBE_AWS_BIN_DIR", root.join("bin"))
        .env("KUBE_AWS_SECRETS_DIR", root.join("secrets"))
        .env("KUBE_AWS_NODE_SECRETS", &node_secrets)
        .env("FAKE_SECRET_FILE", &secret_file)
        .env("KUBE_AWS_RETRY_DELAY", "0")
        .env("KUBE_AWS_POLL_INTERVAL", "0")
        .env("KUBE_AWS_SIGNAL_DELAY", "0")
        .env("KUBECONFIG", root.join("kubeconfig"))
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        log: std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(String::from)
            .collect(),
        s3,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        wait_conditions: plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["waitCondition"].as_str().unwrap().into(),
                )
            })
            .collect(),
        _dir: dir,
    }
}

fn helm_v3(mut input: RenderInput) -> RenderInput {
    input.cluster.helm.version = 3;
    input
}

#[test]
fn helm_v2_installs_tiller_then_everything_in_order() {
    let run = run_installer(full(), "", |_| {});
    assert_eq!(run.code, 0, "stderr:\n{}\nlog:\n{}", run.stderr, run.log.join("\n"));
    assert_eq!(run.helm_upgrades(), ["calico", "cert-manager", "metrics-server", "dex"]);

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

    // CRDs Established before any dependant starts.
    let crd = run.position("crds/crd-issuers.yaml").expect("cert-manager CRD wait");
    assert!(run.log[crd].starts_with("kubectl wait --for=condition=Established"));
    let cm = run.position("helm upgrade --install cert-manager").unwrap();
    let ms = run.position("helm upgrade --install metrics-server").unwrap();
    assert!(cm < crd && crd < ms);
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
    let rejected = run.log.iter().filter(|l| l.starts_with("aws-rejected")).count();
    assert_eq!(rejected, 4, "each signal was retried after a rejection");
    assert!(run
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
        // Every chart object is rewritten; calico's is the first one the installer meets.
        for e in std::fs::read_dir(dir).unwrap() {
            std::fs::write(e.unwrap().path(), b"not the chart").unwrap();
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
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.position("tiller").is_none() && run.position("curl").is_none(),
        "{:#?}",
        run.log
    );
}
