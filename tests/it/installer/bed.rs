//! The bed of tests/it/installer.rs: a controller's root with the fakes on
//! PATH, its S3 and SSM kept across plans (`Bed`), and what one run of the
//! reconciler left (`Run`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use kube_aws::render::{self, RenderInput};

use super::fakes::*;
use super::*;

pub(super) fn write_exec(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub(super) fn tar_gz(src_dir: &Path, entry: &str, out: &Path) {
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

pub(super) fn sha(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

pub(super) struct Run {
    pub(super) code: i32,
    pub(super) log: Vec<String>,
    pub(super) s3: PathBuf,
    pub(super) stderr: String,
    /// (release, wait condition) in plan order, from the plan the run used.
    pub(super) wait_conditions: Vec<(String, String)>,
    /// The values files helm was given, `<release>.yaml`.
    pub(super) values: PathBuf,
    /// Keeps a one-run bed's files for the test.
    pub(super) _bed: Option<Bed>,
}

impl Run {
    pub(super) fn helm_upgrades(&self) -> Vec<String> {
        self.helm("upgrade --install ")
    }
    pub(super) fn helm(&self, verb: &str) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("helm {verb}")))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    }
    pub(super) fn position(&self, needle: &str) -> Option<usize> {
        self.log.iter().position(|l| l.contains(needle))
    }
    pub(super) fn status(&self, release: &str) -> serde_json::Value {
        let p = self
            .s3
            .join(format!("kube-aws-test/clusters/full/status/addons/{release}.json"));
        serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
    }
    pub(super) fn signals(&self) -> Vec<(String, String, String)> {
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
    pub(super) fn wait_condition(&self, release: &str) -> String {
        self.wait_conditions
            .iter()
            .find(|(n, _)| n == release)
            .map(|(_, w)| w.clone())
            .unwrap_or_else(|| panic!("{release} is not in the plan"))
    }
}

/// Controllers and their S3, SSM and stack, kept across plans.
pub(super) struct Bed {
    pub(super) dir: tempfile::TempDir,
    /// The controller's cloud-config as rendered by the latest publish.
    pub(super) cloud_config: String,
    pub(super) wait_conditions: Vec<(String, String)>,
    /// The controller's root (KUBE_AWS_ROOT; another name: another controller).
    pub(super) work: &'static str,
}

impl Bed {
    pub(super) fn new() -> Bed {
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

    pub(super) fn s3(&self) -> PathBuf {
        self.dir.path().join("s3")
    }

    /// What `kube-aws update` does for the addons: renders `input` (with fake
    /// charts and helm client), publishes the charts and the addon bundle, and
    /// sets the plan pointer to the control-plane stack's `AddonPlan` value.
    /// `tamper` may break a chart object.
    pub(super) fn publish(&mut self, mut input: RenderInput, tamper: impl FnOnce(&Path)) {
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
    pub(super) fn run(&self, fail: &str) -> Run {
        self.run_with(fail, &[])
    }

    pub(super) fn run_with(&self, fail: &str, env: &[(&str, &str)]) -> Run {
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
    pub(super) fn publish_secret_bundle(&self, node: &Path) {
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
    pub(super) fn reboot(&self) {
        let run = self.dir.path().join(self.work).join("run");
        let _ = std::fs::remove_dir_all(run);
        std::fs::write(self.dir.path().join(self.work).join(".booted"), "").unwrap();
    }

    pub(super) fn installed(&self) -> serde_json::Value {
        let p = self
            .s3()
            .join("kube-aws-test/clusters/full/status/addons/installed.json");
        serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
    }
}
