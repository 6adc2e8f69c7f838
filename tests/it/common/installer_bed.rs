//! A controller's side of the addon reconciler against the control-plane
//! test bed: its file system (under KUBE_AWS_ROOT), a moto account for S3 and
//! SSM, the real aws CLI behind a wrapper that answers CloudFormation (moto
//! ignores WaitConditions; with the calls in process, which go around the
//! wrapper, moto's server with the bed's signals and a stack holding the
//! plan's wait conditions instead), and `publish`, which does what `kube-aws up` does
//! for the addons with the shared upstream charts. Used by
//! tests/it/installer_testbed.rs and benches/installer.rs.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::charts::{lock_to_shared_charts, shared_charts};
use super::testbed::{ControlPlane, NODES_CLUSTER_YAML};
use super::MotoEnv;
use kube_aws::chart::ChartCache;
use kube_aws::pipeline::{prepare, PrepareOptions};
use kube_aws::render::{self, HelmBinary};
use serde_json::Value;

/// The built-ins whose charts the shared data holds and that run on kwok
/// nodes. The pod identity webhook is off: kwok runs no webhook server, and
/// its fail-closed entry would refuse the pods of the plugins' service
/// accounts (tests/it/testbed.rs dry-runs its manifests on the real apiserver).
pub const BUILT_INS: &str = "plugins:
  aws-vpc-cni: {enabled: true}
  aws-cloud-controller-manager: {enabled: true}
  metrics-server: {enabled: true}
  descheduler: {enabled: true}
  aws-ebs-csi-driver: {enabled: true}
  cluster-autoscaler: {enabled: true}
  cluster-dump: {enabled: true}
  external-dns: {enabled: true, hostedZoneId: Z0123456789ABC, domainFilter: example.com}
  dex: {enabled: true, issuerURL: https://dex.example.com, exposure: values, connector: github, connectorClientID: kube-aws-demo, connectorClientSecret: not-in-any-output, staticClientSecret: also-hidden, staticClientRedirectURIs: [https://app.example.com/callback]}
  pod-identity-webhook: {enabled: false}
";

pub const BUCKET: &str = "kube-aws-testbed";
pub const PREFIX: &str = "clusters/testbed";
/// The control-plane stack's name on the bed's controller (runtime.json).
const STACK: &str = "testbed-ControlPlane-1ABC";

/// `v` with every `{"Fn::Sub": "…"}` resolved as CloudFormation would for the
/// bed's control-plane stack (moto's account, us-west-2).
fn sub_resolved(v: &Value, kms_key: &str) -> Value {
    // The decrypt statements' keys: the publisher passes kmsKeyARN (then any
    // key a rotation retired, none here) as the DecryptKmsKeyARNs parameter.
    if v == &serde_json::json!({"Fn::Split": [",", {"Ref": "DecryptKmsKeyARNs"}]}) {
        return serde_json::json!([kms_key]);
    }
    match v {
        Value::Object(o) if o.len() == 1 && o.contains_key("Fn::Sub") => Value::String(
            o["Fn::Sub"]
                .as_str()
                .unwrap_or_else(|| panic!("Fn::Sub with variables is not resolved here: {v}"))
                .replace("${AWS::Partition}", "aws")
                .replace("${AWS::Region}", "us-west-2")
                .replace("${AWS::AccountId}", "123456789012")
                .replace("${AWS::StackName}", STACK),
        ),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), sub_resolved(x, kms_key))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(|x| sub_resolved(x, kms_key)).collect()),
        other => other.clone(),
    }
}

/// In front of the real aws CLI (moto): records every call; answers
/// `cloudformation describe-stacks` (UPDATE_IN_PROGRESS) and
/// `describe-stack-resource` (CREATE_IN_PROGRESS until signalled, then
/// CREATE_COMPLETE) and records `signal-resource`.
const AWS_WRAPPER: &str = r#"#!/bin/bash
echo "aws $*" >>"$FAKE_LOG"
args=("$@")
is_cfn=false; op=""; wc=""; status=""
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    cloudformation) is_cfn=true; op=${args[i + 1]} ;;
    --logical-resource-id) wc=${args[i + 1]} ;;
    --status) status=${args[i + 1]} ;;
  esac
done
if $is_cfn; then
  mkdir -p "$FAKE_STATE/wc"
  case "$op" in
    describe-stacks)
      echo '{"Stacks": [{"StackStatus": "UPDATE_IN_PROGRESS"}]}'
      exit 0 ;;
    describe-stack-resource)
      state=CREATE_IN_PROGRESS
      [ -e "$FAKE_STATE/wc/$wc" ] && state=CREATE_COMPLETE
      printf '{"StackResourceDetail": {"LogicalResourceId": "%s", "ResourceStatus": "%s"}}\n' "$wc" "$state"
      exit 0 ;;
    signal-resource)
      echo "$status" >"$FAKE_STATE/wc/$wc"
      exit 0 ;;
  esac
  echo "aws wrapper: unsupported cloudformation call: $*" >&2
  exit 2
fi
exec "$REAL_AWS" "$@"
"#;

fn write_exec(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn sha(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

/// One controller's file system, its moto account, and the plan it was given.
pub struct Bed {
    dir: tempfile::TempDir,
    pub env: MotoEnv,
    pub cp: std::sync::Arc<ControlPlane>,
    /// (release, namespace, wait condition) in plan order.
    pub releases: Vec<(String, String, String)>,
    pub plan: Value,
    /// The controller's cloud-config, as the latest publish rendered it.
    cloud_config: String,
    /// The moto KMS key the secret bundle is encrypted with.
    kms_key: String,
    /// The control-plane stack the latest publish rendered.
    stack: Value,
    /// The controller role's session, once [`Bed::under_controller_role`]
    /// switched IAM enforcement on: the reconciler then runs as it.
    role: Option<super::iam::Creds>,
    /// The reconciler makes the calls sdkcall.py answers in its own process
    /// (the tools venv's python, which has botocore) instead of through the
    /// wrapper's aws CLI; off by default: the tests read the wrapper's log.
    in_process_calls: bool,
    /// The wait conditions' stack in moto, once made (calls in process
    /// only): the rendered reconciler.json's `waitConditionStack`.
    wc_stack: std::sync::Mutex<Option<String>>,
}

impl Bed {
    pub fn new(cp: std::sync::Arc<ControlPlane>) -> Bed {
        Bed::with_calls(cp, false)
    }

    /// A bed whose reconciler makes the calls sdkcall.py answers in its own
    /// process (`in_process`), CloudFormation's among them: moto then serves
    /// the signals (tests/support/moto_signals.py) for a stack of the plan's
    /// wait conditions, made at the first `reconcile`.
    pub fn with_calls(cp: std::sync::Arc<ControlPlane>, in_process: bool) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let env = if in_process {
            MotoEnv::with_signals()
        } else {
            MotoEnv::new()
        };
        env.aws(&[
            "s3api",
            "create-bucket",
            "--bucket",
            BUCKET,
            "--create-bucket-configuration",
            "LocationConstraint=us-west-2",
        ]);
        write_exec(&root.join("wrap/aws"), AWS_WRAPPER);
        // The helm client tarball the plan pins: the test bed's helm.
        let build = root.join("build/linux-amd64");
        std::fs::create_dir_all(&build).unwrap();
        std::fs::copy(cp.bin.join("helm"), build.join("helm")).unwrap();
        let st = Command::new("tar")
            .arg("-czf")
            .arg(root.join("helm.tgz"))
            .arg("-C")
            .arg(root.join("build"))
            .arg("linux-amd64")
            .status()
            .unwrap();
        assert!(st.success());
        let kms_key = env.create_kms_key();
        Bed {
            dir,
            env,
            cp,
            releases: Vec::new(),
            plan: Value::Null,
            cloud_config: String::new(),
            kms_key,
            stack: Value::Null,
            role: None,
            in_process_calls: in_process,
            wc_stack: Default::default(),
        }
    }

    /// The wait conditions' stack's status in moto (calls in process):
    /// CREATE_COMPLETE once every release's condition is signalled.
    pub fn stack_status(&self) -> String {
        let out = self.env.aws_json(&[
            "cloudformation",
            "describe-stacks",
            "--stack-name",
            self.wc_stack.lock().unwrap().as_deref().unwrap_or_default(),
        ]);
        out["Stacks"][0]["StackStatus"].as_str().unwrap_or("?").to_string()
    }

    /// The control-plane stack in moto with one wait condition per release of
    /// the plan, each waiting for one signal (CreationPolicy), as the
    /// rendered stack has them: it stays CREATE_IN_PROGRESS until all are
    /// signalled (moto_signals.py).
    fn make_wait_condition_stack(&self, node: &Path) {
        let mut made = self.wc_stack.lock().unwrap();
        if made.is_some() {
            return;
        }
        let reconciler: Value =
            serde_json::from_slice(&std::fs::read(node.join("etc/kube-aws/addons/reconciler.json")).unwrap()).unwrap();
        let stack = reconciler["waitConditionStack"].as_str().unwrap().to_string();
        let resources: serde_json::Map<String, Value> = self
            .releases
            .iter()
            .map(|(_, _, wc)| {
                (
                    wc.clone(),
                    serde_json::json!({"Type": "AWS::CloudFormation::WaitCondition",
                        "CreationPolicy": {"ResourceSignal": {"Count": 1, "Timeout": "PT30M"}}}),
                )
            })
            .collect();
        let template = serde_json::json!({ "Resources": resources }).to_string();
        self.env.aws(&[
            "cloudformation",
            "create-stack",
            "--stack-name",
            &stack,
            "--template-body",
            &template,
        ]);
        *made = Some(stack);
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// What `kube-aws up` does for the addons, with the work tree `plugins`
    /// (a cluster.yaml `plugins:` block) over the test bed's cluster: the
    /// pipeline pins the shared charts, render writes the plan, and the
    /// charts, the bundle and the pointer go to moto.
    pub fn publish(&mut self, plugins: &str) {
        self.publish_with(plugins, None)
    }

    /// [`Bed::publish`], with the plan's `concurrency` replaced (benches/installer.rs
    /// compares 1 with the default): the bundle is re-hashed and the pointer
    /// names the new one, as a publish of that plan would.
    pub fn publish_with(&mut self, plugins: &str, concurrency: Option<u32>) {
        let wt = self.path("wt");
        std::fs::create_dir_all(&wt).unwrap();
        // The key the bed encrypts the secret bundle with is the cluster's
        // kmsKeyARN, so the rendered role may decrypt exactly that.
        let cluster_yaml = format!(
            "{}\nkubernetesVersion: \"{}\"\nkmsKeyARN: {}\n{plugins}",
            NODES_CLUSTER_YAML.replace("s3://kube-aws-testbed", &format!("s3://{BUCKET}/clusters")),
            self.cp.version.trim_start_matches('v'),
            self.kms_key
        );
        std::fs::write(wt.join("cluster.yaml"), cluster_yaml).unwrap();
        let cache = ChartCache::new(self.path("cache"));
        let archives = lock_to_shared_charts(&wt, &cache, &shared_charts());
        let mut prepared = prepare(&PrepareOptions {
            dir: wt,
            cache_dir: cache.root().to_path_buf(),
            require_charts: true,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let helm_tgz = std::fs::read(self.path("helm.tgz")).unwrap();
        prepared.input.helm_binary = HelmBinary {
            version: "v3.16.3".into(),
            url: "https://helm.invalid/helm-bed.tar.gz".into(),
            sha256: sha(&helm_tgz),
        };
        let rendered = render::render(&prepared.input).unwrap_or_else(|e| panic!("{e}"));
        let plan: Value = serde_json::from_slice(rendered.get("addons/plan.json").unwrap()).unwrap();
        let up = |key: &str, file: &Path| {
            self.env.aws(&[
                "s3",
                "cp",
                "--only-show-errors",
                &file.display().to_string(),
                &format!("s3://{key}"),
            ]);
        };
        for e in plan["releases"].as_array().unwrap() {
            let name = e["name"].as_str().unwrap();
            let key = e["chartObject"].as_str().unwrap().strip_prefix("s3://").unwrap();
            up(key, &archives[name]);
        }
        // The helm client, where `up` publishes it with the charts.
        let helm_object = plan["helm"]["binary"]["object"].as_str().unwrap();
        up(helm_object.strip_prefix("s3://").unwrap(), &self.path("helm.tgz"));
        let stack: Value = serde_json::from_slice(rendered.get("stacks/control-plane.json").unwrap()).unwrap();
        let pointer = &stack["Resources"]["AddonPlan"]["Properties"];
        let mut value = pointer_value(&pointer["Value"]);
        let mut target: Value = serde_json::from_str(&value).unwrap();
        let mut bundle = rendered.get("addons/bundle.json").unwrap().to_vec();
        assert_eq!(target["sha256"], sha(&bundle));
        let mut plan = plan;
        if let Some(c) = concurrency {
            plan["concurrency"] = c.into();
            let mut doc: Value = serde_json::from_slice(&bundle).unwrap();
            doc["files"]["plan.json"] = serde_json::to_string(&plan).unwrap().into();
            bundle = serde_json::to_vec(&doc).unwrap();
            target["sha256"] = sha(&bundle).into();
            target["uri"] = format!("{}.c{c}", target["uri"].as_str().unwrap()).into();
            value = target.to_string();
        }
        std::fs::write(self.path("bundle.json"), &bundle).unwrap();
        up(
            target["uri"].as_str().unwrap().strip_prefix("s3://").unwrap(),
            &self.path("bundle.json"),
        );
        self.env.aws(&[
            "ssm",
            "put-parameter",
            "--overwrite",
            "--type",
            "String",
            "--name",
            pointer["Name"].as_str().unwrap(),
            "--value",
            &value,
        ]);
        self.cloud_config = rendered.text("userdata/controller.cloud-config").unwrap().to_string();
        self.stack = stack;
        self.releases = plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["namespace"].as_str().unwrap().into(),
                    e["waitCondition"].as_str().unwrap().into(),
                )
            })
            .collect();
        self.plan = plan;
    }

    /// From here on the reconciler runs as the controller, with IAM enforced:
    /// the rendered `ControllerRole` of the latest publish is made in moto's
    /// IAM as CloudFormation would make it (its `Fn::Sub`s resolved for the
    /// control-plane stack), enforcement is switched on, the test acts as an
    /// admin user for its own calls, and the reconciler gets the role's
    /// session credentials (in place of EC2's instance profile).
    pub fn under_controller_role(&mut self) {
        use super::iam::{admin, assume, enforce_iam};
        let (admin_creds, admin_arn) = admin(&self.env);
        let role = &self.stack["Resources"]["ControllerRole"]["Properties"];
        assert!(
            role.is_object(),
            "no ControllerRole in the rendered control-plane stack"
        );
        let name = format!("{STACK}-ControllerRole-1XYZ");
        self.env.aws(&[
            "iam",
            "create-role",
            "--role-name",
            &name,
            "--assume-role-policy-document",
            &sub_resolved(&role["AssumeRolePolicyDocument"], &self.kms_key).to_string(),
        ]);
        // Its inline policies, and kube-aws's own managed policies attached
        // to it (etcd's, the keys', the plugins', src/render/cfn/iam_size.rs),
        // which grant the same as inline policies would: put as such, under
        // their logical IDs.
        let mut policies: Vec<(String, &Value)> = role["Policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["PolicyName"].as_str().unwrap().to_string(), &p["PolicyDocument"]))
            .collect();
        for (id, p) in self.stack["Resources"].as_object().unwrap() {
            let roles = p["Properties"]["Roles"].as_array();
            if p["Type"] == "AWS::IAM::ManagedPolicy"
                && roles.is_some_and(|r| r.iter().any(|r| r["Ref"] == "ControllerRole"))
            {
                policies.push((id.clone(), &p["Properties"]["PolicyDocument"]));
            }
        }
        for (policy, document) in policies {
            self.env.aws(&[
                "iam",
                "put-role-policy",
                "--role-name",
                &name,
                "--policy-name",
                &policy,
                "--policy-document",
                &sub_resolved(document, &self.kms_key).to_string(),
            ]);
        }
        // The managed AmazonSSMManagedInstanceCore (ManagedPolicyArns) is
        // left out: moto does not load AWS's managed policies unless told,
        // and without it (it allows ssm:GetParameter on `*`) the SSM pointers
        // the reconciler reads must be allowed by kube-aws's own statements.
        enforce_iam(&self.env);
        self.env.act_as(&admin_creds.key, &admin_creds.secret);
        self.role = Some(assume(&self.env, &admin_creds, &admin_arn, "ControllerRole"));
    }

    /// One tick of the reconciler's timer, on this controller.
    pub fn reconcile(&self) -> Run {
        // The controller's files: its cloud-config's (the node program,
        // reconciler.json) and runtime.json, under KUBE_AWS_ROOT.
        let node = self.path("node");
        super::write_cloud_config_files(&self.cloud_config, &node);
        if self.in_process_calls {
            self.make_wait_condition_stack(&node);
        }
        std::fs::write(
            node.join("etc/kube-aws/runtime.json"),
            serde_json::json!({
                "stackName": STACK, "region": "us-west-2", "bucket": BUCKET,
                "keyPrefix": PREFIX, "secretsVersion": "0123456789abcdef", "cluster": "testbed",
                "secretBundleParameter": "/kube-aws/testbed/secret-bundle/controller",
            })
            .to_string(),
        )
        .unwrap();
        // The secret bundle in moto's S3, each plugin secret the controller's
        // node.json names KMS-encrypted (a stand-in value, `secret_value`):
        // the reconciler decrypts them with moto's KMS before it runs.
        self.publish_secret_bundle(&node);
        let log = self.path("calls.log");
        std::fs::write(&log, "").unwrap();
        // The tools venv's python (not a pyenv shim: see PYENV_VERSION below)
        // has botocore; the system python has none.
        let mut cmd = Command::new(if self.in_process_calls {
            super::tool("python3")
        } else {
            PathBuf::from("python3")
        });
        cmd.arg(node.join("opt/kube-aws/bin/kube-aws-node")).arg("reconcile");
        self.env.apply(&mut cmd);
        let path = format!(
            "{}:{}:{}",
            self.path("wrap").display(),
            self.cp.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        if let Some(r) = &self.role {
            cmd.env("AWS_ACCESS_KEY_ID", &r.key)
                .env("AWS_SECRET_ACCESS_KEY", &r.secret)
                .env("AWS_SESSION_TOKEN", r.token.as_deref().unwrap_or_default());
        }
        let out = cmd
            .env("PATH", path)
            // A pyenv shim puts its version's bin directory (with an `aws`)
            // before the wrapper on PATH: the system python has none.
            .env("PYENV_VERSION", "system")
            // Every AWS call through the wrapper (src/node/kube_aws_node/sdkcall.py),
            // unless the caller asked for the node's in-process calls.
            .env("KUBE_AWS_AWS_CALLS", if self.in_process_calls { "" } else { "cli" })
            .env("REAL_AWS", super::aws_cli::shim())
            .env("FAKE_LOG", &log)
            .env("FAKE_STATE", self.path("state"))
            .env("KUBE_AWS_ROOT", &node)
            .env("KUBE_AWS_RETRY_DELAY", "1")
            .env("KUBE_AWS_POLL_INTERVAL", "1")
            .env("KUBE_AWS_SIGNAL_DELAY", "0")
            .env("KUBECONFIG", &self.cp.kubeconfig)
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            calls: std::fs::read_to_string(&log).unwrap(),
        }
    }

    fn publish_secret_bundle(&self, node: &Path) {
        let node_json: Value =
            serde_json::from_slice(&std::fs::read(node.join("etc/kube-aws/node.json")).unwrap()).unwrap();
        let values: Vec<(&str, String)> = node_json["secrets"]["names"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| n.as_str().unwrap())
            .filter(|n| n.starts_with("kube-aws-secret."))
            .map(|n| (n, secret_value(n)))
            .collect();
        let entries: Vec<(&str, &[u8])> = values.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        let cts = self
            .env
            .encrypt_entries("us-west-2", &self.kms_key, "testbed", &entries);
        let mut secrets = serde_json::Map::new();
        for ((n, _), ct) in entries.iter().zip(cts) {
            secrets.insert((*n).into(), ct.into());
        }
        let doc = serde_json::json!({"encryptionContext": {"kube-aws:cluster": "testbed"}, "secrets": secrets});
        let text = doc.to_string();
        let file = self.path("secret-bundle.json");
        std::fs::write(&file, &text).unwrap();
        // Content-addressed, named by the stack's pointer, as `up` publishes it.
        let key = format!("secrets/{}/bundle.json", sha(text.as_bytes()));
        self.env.aws(&[
            "s3",
            "cp",
            "--only-show-errors",
            &file.display().to_string(),
            &format!("s3://{BUCKET}/{PREFIX}/{key}"),
        ]);
        self.env.aws(&[
            "ssm",
            "put-parameter",
            "--overwrite",
            "--type",
            "String",
            "--name",
            "/kube-aws/testbed/secret-bundle/controller",
            "--value",
            &key,
        ]);
    }

    /// The plugin secret references (`kube-aws-secret.…`) in the files the
    /// published bundle marks as holding some.
    pub fn secret_references(&self) -> Vec<String> {
        let bundle: Value = serde_json::from_slice(&std::fs::read(self.path("bundle.json")).unwrap()).unwrap();
        let re = regex::Regex::new(r"kube-aws-secret\.[A-Za-z0-9_.-]*[A-Za-z0-9_-]").unwrap();
        let mut refs: Vec<String> = bundle["secretFiles"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|f| {
                let text = bundle["files"][f["path"].as_str().unwrap()]
                    .as_str()
                    .unwrap_or_default();
                re.find_iter(text).map(|m| m.as_str().to_string()).collect::<Vec<_>>()
            })
            .collect();
        refs.sort();
        refs.dedup();
        refs
    }

    /// An object under the cluster's prefix in moto's S3, as JSON.
    pub fn object(&self, key: &str) -> Value {
        let out = self.path("object.json");
        self.env.aws(&[
            "s3",
            "cp",
            "--only-show-errors",
            &format!("s3://{BUCKET}/{PREFIX}/{key}"),
            &out.display().to_string(),
        ]);
        serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
    }

    /// A status object the reconciler wrote to moto's S3.
    pub fn status(&self, release: &str) -> Value {
        let out = self.path(&format!("status-{release}.json"));
        self.env.aws(&[
            "s3",
            "cp",
            "--only-show-errors",
            &format!("s3://{BUCKET}/{PREFIX}/status/addons/{release}.json"),
            &out.display().to_string(),
        ]);
        serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
    }

    /// The wait conditions signalled, with their status.
    pub fn signalled(&self, wc: &str) -> Option<String> {
        std::fs::read_to_string(self.path(&format!("state/wc/{wc}")))
            .ok()
            .map(|s| s.trim().to_string())
    }
}

/// The stand-in plaintext of the plugin secret `reference` on the bed's controller.
pub fn secret_value(reference: &str) -> String {
    format!("plain-{}", reference.trim_start_matches("kube-aws-secret."))
}

pub struct Run {
    pub code: i32,
    pub stderr: String,
    pub calls: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\nstderr:\n{}\ncalls:\n{}",
            self.code, self.stderr, self.calls
        )
    }
}

/// The addon plan pointer's value as CloudFormation sets it: the text, or,
/// with release secrets (issue 27), its Fn::Sub with each `${AddonSecrets*}`
/// replaced by a value standing for the publisher's hash.
pub fn pointer_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => {
            let mut text = v["Fn::Sub"].as_str().expect("a string or an Fn::Sub").to_string();
            while let Some(at) = text.find("${") {
                let end = at + text[at..].find('}').expect("a closed ${");
                let param = text[at + 2..end].to_string();
                text.replace_range(at..=end, &format!("published-{param}"));
            }
            text
        }
    }
}
