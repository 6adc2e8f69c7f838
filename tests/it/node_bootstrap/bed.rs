//! The bed of tests/it/node_bootstrap.rs: the recording fakes on PATH (the
//! real aws CLI against moto, recorded; kubeadm, curl, dnf, containerd,
//! kubectl), a published cluster on moto (`Cluster`) and one boot of a node
//! in it (`Boot`), and the clusters the tests share.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;

/// The real aws CLI (against moto), recorded. Only SignalResource stops here:
/// no stack with an auto scaling group to signal exists on moto; and with
/// FAKE_PUT_FAIL, a conditional PutObject gets S3's NoSuchBucket answer (an
/// answer that is neither "created" nor "held"), while the rest of S3 works.
pub(super) const RECORDING_AWS: &str = r#"#!/bin/bash
echo "aws $*" >>"$FAKE_LOG"
case "$*" in *"cloudformation signal-resource"*) exit 0 ;; esac
case "$*" in *"s3api put-object"*"--if-none-match"*)
  if [ -n "${FAKE_PUT_FAIL:-}" ]; then
    echo "An error occurred (NoSuchBucket) when calling the PutObject operation: The specified bucket does not exist" >&2
    exit 254
  fi ;;
esac
exec "$REAL_AWS" "$@"
"#;

pub(super) const FAKE_KUBEADM: &str = r#"#!/bin/bash
echo "kubeadm $*" >>"$FAKE_LOG"
case "$1 $2" in
  "version -o")
    # A failure inside the bootstrap's kubeadm_config function, which prints a secret.
    [ -z "${FAKE_VERSION_FAIL:-}" ] || { echo "kubeadm: cannot read config with token $FAKE_TOKEN" >&2; exit 3; }
    echo v1.31.2 ;;
  "init --config")
    cp "$3" "$FAKE_OUT/init.yaml"
    # As kubeadm does: the join commands, with the token in them.
    grep -o '"token": "[^"]*"' "$3" | head -n 1
    echo "kubeadm join api:6443 --token $FAKE_TOKEN --discovery-token-ca-cert-hash sha256:0"
    [ -z "${FAKE_INIT_FAIL:-}" ] || { echo "error execution phase preflight" >&2; exit 1; }
    : >"$KUBE_AWS_ROOT/etc/kubernetes/admin.conf" ;;
  "kubeconfig user") echo "apiVersion: v1" ;;
  "upgrade apply")
    echo "upgrade apply, join lock: $(aws s3api head-object --bucket "$FAKE_BUCKET" --key clusters/full/bootstrap/join-lock \
      >/dev/null 2>&1 && echo held || echo free)" >>"$FAKE_LOG"
    [ -z "${FAKE_UPGRADE_FAIL:-}" ] || { echo "[upgrade/health] FATAL: the control plane is not healthy" >&2; exit 1; } ;;
  "join --config")
    [ -z "${FAKE_JOIN_FAIL:-}" ] || { echo "error: couldn't validate the identity of the API Server" >&2; exit 1; }
    cp "$3" "$FAKE_OUT/join.yaml"
    # The join lock is held while a controller joins.
    if grep -q controlPlane "$3"; then
      echo "join lock: $(aws s3api head-object --bucket "$FAKE_BUCKET" --key clusters/full/bootstrap/join-lock \
        >/dev/null 2>&1 && echo held || echo free)" >>"$FAKE_LOG"
      : >"$KUBE_AWS_ROOT/etc/kubernetes/admin.conf"
    fi ;;
esac
exit 0
"#;

pub(super) const FAKE_CURL: &str = r#"#!/bin/bash
echo "curl $*" >>"$FAKE_LOG"
case "$*" in
  *api/token*) echo imds-token ;;
  *instance-id*) echo "$FAKE_INSTANCE_ID" ;;
  *local-hostname*) echo "${FAKE_HOSTNAME:-ip-10-0-1-23.eu-west-1.compute.internal}" ;;
  *meta-data/mac*) echo 0e:49:61:0f:c3:11 ;;
esac
"#;

pub(super) const FAKE_LOGGER: &str = "#!/bin/bash\necho \"$(basename \"$0\") $*\" >>\"$FAKE_LOG\"\n";

/// Records the install; fails when told to (a missing package, say).
pub(super) const FAKE_DNF: &str = r#"#!/bin/bash
echo "dnf $*" >>"$FAKE_LOG"
[ -z "${FAKE_DNF_FAIL:-}" ] || { echo "Error: Unable to find a match: $FAKE_DNF_FAIL" >&2; exit 1; }
"#;

pub(super) const FAKE_CONTAINERD: &str =
    "#!/bin/bash\necho \"containerd $*\" >>\"$FAKE_LOG\"\necho 'SystemdCgroup = false'\n";

/// The node's own Node object: Ready, unless FAKE_NOT_READY names the reason.
/// A joining controller also reads kubeadm-config and kubelet-config (at this
/// node's version, or at FAKE_CLUSTER_VERSION: then it upgrades) and
/// kube-proxy's image (src/node/kube_aws_node/upgrade.py); what it puts
/// back (`replace -f`) is copied to FAKE_OUT.
pub(super) const FAKE_KUBECTL: &str = r#"#!/bin/bash
echo "kubectl $*" >>"$FAKE_LOG"
v=$(grep -o '"kubernetesVersion": *"[^"]*"' "$KUBE_AWS_ROOT/etc/kube-aws/node.json" | grep -o '[0-9][0-9.]*')
v=${FAKE_CLUSTER_VERSION:-$v}
case "$*" in
  *"get configmap kubeadm-config"*)
    echo '{"metadata": {"name": "kubeadm-config", "resourceVersion": "1"}, "data": {"ClusterConfiguration": "kind: ClusterConfiguration\nkubernetesVersion: v'"$v"'\n"}}'
    exit 0 ;;
  *"get configmap kubelet-config"*)
    echo '{"metadata": {"name": "kubelet-config", "resourceVersion": "1"}, "data": {"kubelet": "kind: KubeletConfiguration\n"}}'
    exit 0 ;;
  *"get daemonset kube-proxy"*) echo "registry.k8s.io/kube-proxy:v$v"; exit 0 ;;
  *" replace -f "*) cp "${@: -1}" "$FAKE_OUT/replaced-$(basename "${@: -1}")"; exit 0 ;;
esac
if [ -n "${FAKE_NOT_READY:-}" ]; then
  echo '{"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "'"$FAKE_NOT_READY"'"}]}}'
else
  echo '{"status": {"conditions": [{"type": "Ready", "status": "True"}]}}'
fi
"#;

pub(super) fn write_exec(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The nodes of one cluster: shared fake S3, one root per node.
pub(super) struct Cluster {
    pub(super) moto: common::MotoEnv,
    pub(super) dir: tempfile::TempDir,
    pub(super) rendered: kube_aws::render::Rendered,
    /// Nodes made so far: node N's root is `node-N`, its instance id [`instance_id`].
    pub(super) nodes: AtomicUsize,
    /// What CloudFormation substitutes for `${SecretsVersion}` in new nodes' stubs.
    pub(super) secrets_version: String,
}

pub(super) struct Boot {
    pub(super) ok: bool,
    pub(super) stdout: String,
    pub(super) stderr: String,
    pub(super) log: Vec<String>,
    pub(super) out: PathBuf,
}

impl Boot {
    pub(super) fn ran(&self, needle: &str) -> bool {
        self.log.iter().any(|l| l.contains(needle))
    }
    pub(super) fn yaml_docs(&self, file: &str) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.out.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        text.split("\n---\n")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }
    pub(super) fn doc(&self, file: &str, kind: &str) -> serde_json::Value {
        self.yaml_docs(file)
            .into_iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {file}"))
    }
}

/// The fixture's bucket, and the secret bundle `kube-aws up` publishes, for every role of `rendered`:
/// each entry a node.json names, encrypted with moto's KMS under its
/// encryption context (the bootstrap token is TOKEN), and the PKI's public
/// half.
pub(super) fn publish_secrets(moto: &common::MotoEnv, rendered: &kube_aws::render::Rendered, dir: &Path) {
    use base64::Engine;
    let mut names = std::collections::BTreeSet::new();
    let mut certificates = serde_json::Map::new();
    for role in ["controller", "worker-general"] {
        let files = dir.join(format!("cc-{role}"));
        common::write_cloud_config_files(rendered.text(&format!("userdata/{role}.cloud-config")).unwrap(), &files);
        let node: serde_json::Value =
            serde_json::from_slice(&std::fs::read(files.join("etc/kube-aws/node.json")).unwrap()).unwrap();
        for n in node["secrets"]["names"].as_array().unwrap() {
            names.insert(n.as_str().unwrap().to_string());
        }
        for c in node["secrets"]["pki"]["certificates"].as_array().into_iter().flatten() {
            certificates.insert(
                c.as_str().unwrap().into(),
                "-----BEGIN CERTIFICATE-----
"
                .into(),
            );
        }
    }
    let values: Vec<(&str, String)> = names
        .iter()
        .map(|name| {
            let value = if name == "kubeadm/bootstrap-token" {
                TOKEN.to_string()
            } else {
                format!("value of {name}")
            };
            (name.as_str(), value)
        })
        .collect();
    let entries: Vec<(&str, &[u8])> = values.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
    // The bucket, the key and every entry in one process (a CLI start per
    // call was most of the setup).
    let made = moto.setup(serde_json::json!({
        "region": "eu-west-1",
        "buckets": [BUCKET],
        "createKey": true,
        "encrypt": {
            "cluster": "full",
            "entries": entries
                .iter()
                .map(|(n, v)| serde_json::json!({"name": n, "plaintext": base64::engine::general_purpose::STANDARD.encode(v)}))
                .collect::<Vec<_>>(),
        },
    }));
    let key = made["keyArn"].as_str().unwrap().to_string();
    let cts: Vec<String> = made["ciphertexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert_eq!(cts.len(), entries.len(), "{made}");
    let mut secrets = serde_json::Map::new();
    for ((name, _), ct) in entries.iter().zip(cts) {
        // Checked: it is base64 (the bundle's encoding).
        base64::engine::general_purpose::STANDARD.decode(&ct).unwrap();
        secrets.insert(name.to_string(), ct.into());
    }
    let bundle = serde_json::json!({
        "apiVersion": "kube-aws/v1",
        "kind": "SecretBundle",
        "kmsKeyARN": key,
        "encryptionContext": {"kube-aws:cluster": "full"},
        "secrets": secrets,
        "certificates": certificates,
    });
    let path = dir.join("bundle.json");
    let body = bundle.to_string();
    std::fs::write(&path, &body).unwrap();
    // As `up` publishes it for nodes: at its content-addressed key, which each
    // role's stack names in its pointer parameter.
    let key = format!("secrets/{}/bundle.json", kube_aws::digest::sha256_hex(body.as_bytes()));
    moto.aws(&[
        "s3",
        "cp",
        path.to_str().unwrap(),
        &format!("s3://{BUCKET}/clusters/full/{key}"),
        "--region",
        "eu-west-1",
    ]);
    for role in ["controller", "worker-general"] {
        put_string_parameter(
            moto,
            &kube_aws::render::layout::secret_bundle_parameter("full", role),
            &key,
        );
    }
}

/// A String parameter in the fixture's region, as the stacks create them.
pub(super) fn put_string_parameter(moto: &common::MotoEnv, name: &str, value: &str) {
    moto.aws(&[
        "ssm",
        "put-parameter",
        "--region",
        "eu-west-1",
        "--type",
        "String",
        "--name",
        name,
        "--value",
        value,
    ]);
}

/// The addon bundle at its content-addressed key and the control-plane
/// stack's plan pointer naming it, as `up` publishes them: a controller's
/// boot reads the cluster-wide kubeadm documents from it (reconfigure.py).
pub(super) fn publish_addon_plan(moto: &common::MotoEnv, rendered: &kube_aws::render::Rendered, dir: &Path) {
    use kube_aws::render::layout;
    let text = rendered.text(layout::ADDON_BUNDLE).unwrap();
    let sha = kube_aws::digest::sha256_hex(text.as_bytes());
    let path = dir.join("addon-bundle.json");
    std::fs::write(&path, text).unwrap();
    let uri = format!(
        "s3://{BUCKET}/clusters/full/{}",
        layout::content_addressed(layout::ADDON_BUNDLE, &sha)
    );
    moto.aws(&["s3", "cp", path.to_str().unwrap(), &uri, "--region", "eu-west-1"]);
    put_string_parameter(
        moto,
        "/kube-aws/full/addon-plan",
        &serde_json::json!({"uri": uri, "sha256": sha}).to_string(),
    );
}

/// The controllers' etcd settings parameter, as the control-plane stack
/// creates it (controllers mint the join token under its kmsKeyARN:
/// join_token.cluster_key).
pub(super) fn publish_etcd_settings(moto: &common::MotoEnv, rendered: &kube_aws::render::Rendered) {
    let stack: serde_json::Value = serde_json::from_str(rendered.text("stacks/control-plane.json").unwrap()).unwrap();
    let p = &stack["Resources"]["EtcdSettings"]["Properties"];
    put_string_parameter(moto, p["Name"].as_str().unwrap(), p["Value"].as_str().unwrap());
}

impl Cluster {
    pub(super) fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let fakes = dir.path().join("fakes");
        for (name, text) in [
            ("aws", RECORDING_AWS),
            ("kubeadm", FAKE_KUBEADM),
            ("curl", FAKE_CURL),
            ("containerd", FAKE_CONTAINERD),
            ("systemctl", FAKE_LOGGER),
            ("modprobe", FAKE_LOGGER),
            ("sysctl", FAKE_LOGGER),
            ("networkctl", FAKE_LOGGER),
            ("dnf", FAKE_DNF),
            ("kubectl", FAKE_KUBECTL),
        ] {
            write_exec(&fakes.join(name), text);
        }
        let rendered = kube_aws::render::render(&full()).unwrap();
        let moto = common::MotoEnv::new();
        publish_secrets(&moto, &rendered, dir.path());
        publish_addon_plan(&moto, &rendered, dir.path());
        publish_etcd_settings(&moto, &rendered);
        Cluster {
            moto,
            dir,
            rendered,
            nodes: AtomicUsize::new(0),
            secrets_version: "0123456789abcdef".into(),
        }
    }

    /// A fresh node of `role` (`controller`, `worker-general`), its files in
    /// place; IMDS gives it its own instance id ([`instance_id`]).
    pub(super) fn node(&self, role: &str) -> PathBuf {
        let n = self.nodes.fetch_add(1, Ordering::SeqCst) + 1;
        let root = self.dir.path().join(format!("node-{n}"));
        common::write_cloud_config_files(
            self.rendered.text(&format!("userdata/{role}.cloud-config")).unwrap(),
            &root,
        );
        let stub = self.rendered.text(&format!("userdata/{role}.stub")).unwrap();
        let stub = stub
            .replace("${AWS::Region}", "eu-west-1")
            .replace("${AWS::StackName}", "full-ControlPlane-1ABC")
            .replace("${ApiEndpoint}", "api.full.example.com")
            .replace("${SecretsVersion}", &self.secrets_version)
            .replace("${CACertHash}", CA_HASH);
        common::write_cloud_config_files(&stub, &root);
        root
    }

    pub(super) fn boot(&self, root: &Path, args: &[&str], env: &[(&str, &str)]) -> Boot {
        let out = root.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let log = root.join("calls.log");
        std::fs::write(&log, "").unwrap();
        let path = format!(
            "{}:{}",
            self.dir.path().join("fakes").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("python3");
        self.moto.apply(&mut cmd);
        cmd.arg(root.join("opt/kube-aws/bin/kube-aws-node"))
            .arg("bootstrap")
            .args(args)
            .env("PATH", path)
            .env("REAL_AWS", common::aws_cli::shim())
            // Every AWS call through the recording CLI, the in-process ones too
            // (src/node/kube_aws_node/sdkcall.py): the tests read its log.
            .env("KUBE_AWS_AWS_CALLS", "cli")
            .env("KUBE_AWS_ROOT", root)
            .env("KUBE_AWS_RETRY_DELAY", "0")
            .env("KUBE_AWS_POLL_INTERVAL", "0")
            .env("KUBE_AWS_JOIN_LOCK_POLL", "0")
            .env("FAKE_BUCKET", BUCKET)
            .env("FAKE_INSTANCE_ID", instance_id(root))
            .env("FAKE_LOG", &log)
            .env("FAKE_OUT", &out)
            .env("KUBE_AWS_TOKEN_WAIT", "0")
            .env("KUBE_AWS_TOKEN_POLL", "0")
            .env("FAKE_TOKEN", TOKEN);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        Boot {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            log: std::fs::read_to_string(&log)
                .unwrap()
                .lines()
                .map(String::from)
                .collect(),
            out,
        }
    }

    /// The join token the first controller minted and published (join_token.py).
    pub(super) fn published_token(&self) -> String {
        let p: serde_json::Value = serde_json::from_str(&self.moto.aws(&[
            "ssm",
            "get-parameter",
            "--region",
            "eu-west-1",
            "--name",
            &kube_aws::render::layout::bootstrap_token_parameter("full"),
            "--with-decryption",
            "--output",
            "json",
        ]))
        .unwrap();
        assert_eq!(p["Parameter"]["Type"], "SecureString", "{p}");
        let record: serde_json::Value = serde_json::from_str(p["Parameter"]["Value"].as_str().unwrap()).unwrap();
        record["token"].as_str().unwrap().to_string()
    }

    /// An object under the cluster's prefix, read from moto.
    pub(super) fn object(&self, key: &str) -> Option<String> {
        let mut cmd = Command::new(common::tool("aws"));
        self.moto.apply(&mut cmd);
        cmd.args(["s3", "cp", &format!("s3://{BUCKET}/clusters/full/{key}"), "-"]);
        let o = common::aws_cli::output(&cmd);
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }
}

/// The instance id IMDS gives the node at `root` (`node-N`): its own, so
/// that nodes of a shared cluster publish their failure reports at their own
/// keys (status/nodes/<instance-id>.json) and take their locks as themselves.
pub(super) fn instance_id(root: &Path) -> String {
    let n: u64 = root
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("node-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a node root: {}", root.display()));
    format!("i-{n:017x}")
}

/// Clusters shared by the failure tests, each set up once per test binary
/// (a moto server, the bundle, the plan and a controller's boot cost most of
/// such a test's time). They run in parallel threads, so what may share one
/// is narrow: a shared cluster's tests read only what their own nodes wrote
/// (each node has its own instance id, hence its own failure report and
/// lock holder), and none of them changes what another's boot reads.
/// - [`fresh`]: no controller ever initialized it (its tests' controllers
///   fail at or before `kubeadm init`, so none publishes a join token);
/// - [`initialized`]: one controller initialized it (join token and
///   PKI published); its tests boot workers (which take no lock) and at most
///   one test joins controllers (the join lock's).
///
/// The tests that check a whole cluster's story (which node inits, the
/// join lock, the upgrade status) keep a cluster of their own.
pub(super) static FRESH: Mutex<Option<Arc<Cluster>>> = Mutex::new(None);
pub(super) static INITIALIZED: Mutex<Option<Arc<Cluster>>> = Mutex::new(None);

extern "C" fn drop_shared_clusters() {
    for slot in [&FRESH, &INITIALIZED] {
        if let Ok(mut g) = slot.lock() {
            g.take();
        }
    }
}

/// The cluster in `slot`, made (with `prepare`) by the first test that asks
/// and dropped (moto stopped, its directory removed) when the binary exits.
pub(super) fn shared(slot: &'static Mutex<Option<Arc<Cluster>>>, prepare: fn(&Cluster)) -> Arc<Cluster> {
    // A test that failed while holding the lock poisons it; the next one sets up again.
    let mut g = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = g.as_ref() {
        return c.clone();
    }
    let c = Arc::new(Cluster::new());
    prepare(&c);
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    // Statics are never dropped: stop the moto servers at exit.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(drop_shared_clusters);
    });
    *g = Some(c.clone());
    c
}

pub(super) fn fresh() -> Arc<Cluster> {
    shared(&FRESH, |_| {})
}

pub(super) fn initialized() -> Arc<Cluster> {
    shared(&INITIALIZED, |c| {
        let ctl = c.node("controller");
        let b = c.boot(&ctl, &[], &[]);
        assert!(b.ok, "{}\n{:#?}", b.stderr, b.log);
    })
}
