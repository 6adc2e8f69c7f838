//! The moto side of the real-node bed, shared by tests/it/real_node.rs's
//! booting tests: `kube-aws up` of a work tree against moto, the nodes'
//! relay to moto on the bridge, IAM enforced after `up`, and nodes booted
//! from their launch template's user-data, each as one of moto's instances
//! (its own IMDS emulator, its role's credentials).
//!
//! Everything a test starts is owned here or by a `BedNode`: the relay,
//! moto and the bridge by `MotoBed`, each node and its IMDS emulator by its
//! `BedNode`; a test declares its nodes after its bed, so they stop first,
//! also when it fails.
//!
//! The nodes themselves (`BedNode`: booted as moto's instances, their IMDS
//! emulators, their boots followed to Ready) are bed/node.rs; the boot and
//! addon timelines scripts/bench-node.sh prints, bed/timeline.rs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::nodebed::{self, Node, Planned};
use crate::common::{output_text, MotoEnv, Server};
use crate::node_iam_moto::{self, Creds};

mod node;
mod timeline;

pub use node::{expect_all_ready, BedNode, Followed};
pub use timeline::{addon_timeline, timeline};

pub const BED_BUCKET: &str = "kube-aws-nodebed";

pub const BED_CLUSTER: &str = "bed";

pub const BED_REGION: &str = "us-west-2";

/// A line of the node program's log saying a step failed: `kube-aws: step
/// NAME failed (exit 1): COMMAND`, or `(killed by signal 9 (SIGKILL))` when
/// a signal ended it (bootstrap.py `fail`, `how_it_ended`).
pub(crate) fn is_step_failure(line: &str) -> bool {
    line.strip_prefix("kube-aws: step ")
        .and_then(|rest| rest.split_once(" failed ("))
        .is_some_and(|(name, how)| {
            !name.contains(' ') && (how.starts_with("exit ") || how.starts_with("killed by signal "))
        })
}

/// How long a node may take from its start to Ready on a loaded 2-core
/// machine (measured 13-20 s alone; six sessions share the cores).
pub const READY_LIMIT: Duration = Duration::from_secs(420);

/// The bed's own kubeadm settings (see real_node.rs `kubeadm_config` for why
/// each), as a plugin of the test's work tree: kube-aws renders its file into
/// the nodes' cloud-configs, and the node program merges it into its kubeadm
/// documents (`/etc/kube-aws/kubeadm.d`, kubeadmcfg.patch). Nothing of the
/// bed is in kube-aws's own rendering. A joining node takes only its
/// JoinConfiguration (its kubelet's settings come from the cluster's
/// kubelet-config ConfigMap, which the first controller's init wrote).
pub const BED_PLUGIN: &str = r#"apiVersion: kube-aws/v1
kind: Plugin
metadata:
  name: nodebed
  version: 0.1.0
  description: the real-node bed's kubeadm settings (tests/it/real_node.rs)
enabledByDefault: true
spec:
  nodes:
    controller:
      files:
        - path: /etc/kube-aws/kubeadm.d/50-nodebed.json
          content: |
            [
             {"kind": "InitConfiguration", "nodeRegistration": {"ignorePreflightErrors": ["SystemVerification"]}},
             {"kind": "JoinConfiguration", "nodeRegistration": {"ignorePreflightErrors": ["SystemVerification"]}},
             {"kind": "UpgradeConfiguration", "apply": {"ignorePreflightErrors": ["SystemVerification"]},
              "node": {"ignorePreflightErrors": ["SystemVerification"]}},
             {"kind": "KubeletConfiguration", "failCgroupV1": false, "failSwapOn": false,
              "evictionHard": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
              "imageGCHighThresholdPercent": 100},
             {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
              "conntrack": {"maxPerCore": 0}}
            ]
    worker:
      files:
        - path: /etc/kube-aws/kubeadm.d/50-nodebed.json
          content: |
            [
             {"kind": "JoinConfiguration", "nodeRegistration": {"ignorePreflightErrors": ["SystemVerification"]}}
            ]
"#;

/// One of moto's instances, which a node stands for.
#[derive(Clone, Debug)]
pub struct Instance {
    pub id: String,
    /// Its private DNS name: the node's name.
    pub dns: String,
    /// Its private address, which the node takes on the bridge.
    pub ip: String,
}

static VPC_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A VPC of its own for each bed, inside the bridge's 10.250.0.0/16: moto
/// gives the instances addresses in its subnets (/28s, from .4), and each
/// node takes its instance's address on the bridge, so that what EC2 says
/// of the controllers (etcd.py `controller_ips`, the CSR approver) is what
/// the nodes are. 10.250.128-247.0/24 by process and bed; the nodes of
/// `Node::plan` use 10.250.1-250.2-249, so a clash needs another test
/// process's planned node on the same octets at the same time.
fn vpc_cidr() -> String {
    let seq = VPC_SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("10.250.{}.0/24", 128 + (std::process::id() * 7 + seq) % 120)
}

/// A work tree `kube-aws up`'d against moto, with IAM enforced from then on.
pub struct MotoBed {
    pub image: PathBuf,
    pub env: MotoEnv,
    relay: Server,
    pub tree: tempfile::TempDir,
    /// The API endpoint's name (the load balancer's), as the stubs have it.
    pub api: String,
    /// Every launch template's user-data stub, by role (`controller`,
    /// `worker-<pool>`), as moto's CloudFormation substituted it.
    pub stubs: BTreeMap<String, String>,
    pub admin: Creds,
    pub admin_arn: String,
    pub kubectl: PathBuf,
    /// How long `kube-aws up` took.
    pub up: Duration,
    // last: it goes when no node is on it
    _bridge: nodebed::Bridge,
}

/// The decoded user-data stubs of moto's launch templates, by role.
fn launch_template_stubs(aws: impl Fn(&[&str]) -> serde_json::Value) -> BTreeMap<String, String> {
    use base64::Engine;
    let lts = aws(&["ec2", "describe-launch-templates"]);
    let mut out = BTreeMap::new();
    for lt in lts["LaunchTemplates"].as_array().unwrap() {
        let id = lt["LaunchTemplateId"].as_str().unwrap();
        let v = aws(&[
            "ec2",
            "describe-launch-template-versions",
            "--launch-template-id",
            id,
            "--versions",
            "$Latest",
        ]);
        let data = v["LaunchTemplateVersions"][0]["LaunchTemplateData"]["UserData"]
            .as_str()
            .unwrap_or_default();
        let text = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        // "# kube-aws <role> user-data stub: ..."
        let role = text
            .lines()
            .find_map(|l| l.strip_prefix("# kube-aws ")?.split_once(" user-data stub"))
            .map(|(r, _)| r.to_string());
        if let Some(r) = role {
            out.insert(r, text);
        }
    }
    out
}

/// The `runtime.json` a stub writes (its first file).
pub fn stub_runtime(stub: &str) -> serde_json::Value {
    let doc: serde_yaml::Value = serde_yaml::from_str(stub).unwrap();
    let f = doc["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str() == Some("/etc/kube-aws/runtime.json"))
        .expect("runtime.json in the stub");
    serde_json::from_str(f["content"].as_str().unwrap()).unwrap()
}

/// `kube-aws up --wait --timeout 20m`, running as the bed's admin while the
/// test boots the nodes (`MotoBed::up_waiting`); killed on drop.
pub struct WaitingUp {
    child: std::process::Child,
    out: PathBuf,
    err: PathBuf,
}

impl WaitingUp {
    fn start(env: &MotoEnv, admin: &Creds, dir: &Path) -> WaitingUp {
        let (out, err) = (dir.join("up-wait.stdout"), dir.join("up-wait.stderr"));
        let mut c = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
        env.apply(&mut c);
        let child = c
            .env("AWS_ACCESS_KEY_ID", &admin.key)
            .env("AWS_SECRET_ACCESS_KEY", &admin.secret)
            .env("NO_COLOR", "1")
            .arg("--dir")
            .arg(dir)
            .args(["up", "--wait", "--timeout", "20m"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let mut up = WaitingUp { child, out, err };
        // moto creates a stack's resources inside CreateStack; `up` prints
        // "creating stack" once that call has returned.
        let start = Instant::now();
        while !std::fs::read_to_string(&up.out)
            .unwrap_or_default()
            .contains("creating stack")
        {
            if let Some(status) = up.child.try_wait().unwrap() {
                panic!(
                    "kube-aws up --wait ended ({status}) before the stack was created:\n{}",
                    up.text()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(180),
                "kube-aws up --wait created no stack in 180 s:\n{}",
                up.text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        up
    }

    /// Its stdout and stderr so far.
    pub fn text(&self) -> String {
        format!(
            "{}{}",
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default()
        )
    }

    /// Waits at most `limit` for it to end: its exit code (None when it was
    /// still running and has been killed) and its output.
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code(), self.text());
            }
            if start.elapsed() >= limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return (None, self.text());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for WaitingUp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl MotoBed {
    /// `kube-aws up` of a work tree whose cluster.yaml is the bed's (one
    /// controller, no VPC CNI, no cloud controller manager) plus `extra`
    /// (YAML keys at the top level), with the bed's plugin and the plugins in
    /// `plugins` (name, plugin.yaml); then IAM is enforced.
    pub fn up(test: &'static str, image: &Path, extra: &str, plugins: &[(&str, &str)]) -> MotoBed {
        MotoBed::start(test, image, extra, plugins, false, &|_, _, _| {}).0
    }

    /// As `up`, but moto honours the groups' CreationPolicy and takes their
    /// signals (tests/support/moto_signals.py), and `kube-aws up --wait` is
    /// left running as the admin: the stack stays CREATE_IN_PROGRESS until
    /// the booted nodes signal. Returns once the stack's resources exist.
    pub fn up_waiting(test: &'static str, image: &Path, extra: &str, plugins: &[(&str, &str)]) -> (MotoBed, WaitingUp) {
        let (bed, up) = MotoBed::start(test, image, extra, plugins, true, &|_, _, _| {});
        (bed, up.expect("kube-aws up --wait"))
    }

    /// As `up_waiting`, with `prepare(env, work tree, moto's URL as the
    /// nodes and their pods reach it: the relay on the bridge)` run on the
    /// written work tree before `kube-aws up` (to lock its charts into the
    /// cache `up` reads, to write values that point a pod at moto).
    pub fn up_waiting_prepared(
        test: &'static str,
        image: &Path,
        extra: &str,
        plugins: &[(&str, &str)],
        prepare: &dyn Fn(&MotoEnv, &Path, &str),
    ) -> (MotoBed, WaitingUp) {
        let (bed, up) = MotoBed::start(test, image, extra, plugins, true, prepare);
        (bed, up.expect("kube-aws up --wait"))
    }

    fn start(
        test: &'static str,
        image: &Path,
        extra: &str,
        plugins: &[(&str, &str)],
        waiting: bool,
        prepare: &dyn Fn(&MotoEnv, &Path, &str),
    ) -> (MotoBed, Option<WaitingUp>) {
        let t0 = Instant::now();
        let bridge = nodebed::bridge();
        let env = if waiting {
            MotoEnv::with_signals()
        } else {
            MotoEnv::new()
        };
        // The nodes reach moto through a relay on the bridge address (see
        // tests/support/tcp_relay.py for why moto itself stays on 127.0.0.1).
        let relay = Server::start_on_free_port(nodebed::HOST_IP, |relay_port| {
            let mut relay = Command::new("python3");
            relay
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/tcp_relay.py"))
                .args([
                    nodebed::HOST_IP,
                    &relay_port.to_string(),
                    "127.0.0.1",
                    &env.moto.port.to_string(),
                ]);
            relay
        });
        env.aws(&["s3", "mb", &format!("s3://{BED_BUCKET}")]);
        let kms = env.create_kms_key();
        let tree = tempfile::tempdir().unwrap();
        let dir = tree.path();
        std::fs::write(
            dir.join("cluster.yaml"),
            format!(
                "clusterName: {BED_CLUSTER}\nregion: {BED_REGION}\ns3URI: s3://{BED_BUCKET}/clusters\nkmsKeyARN: {kms}\n\
                 network: {{vpcCIDR: {vpc}}}\n\
                 plugins:\n  aws-vpc-cni: {{enabled: false}}\n{ccm}{extra}",
                vpc = vpc_cidr(),
                // Off unless the test turns it on (in `extra`) and gives it
                // moto's endpoint (the reconciler's real-node test).
                ccm = if extra.contains("  aws-cloud-controller-manager:") {
                    ""
                } else {
                    "  aws-cloud-controller-manager: {enabled: false}\n"
                }
            ),
        )
        .unwrap();
        for (name, text) in [("nodebed", BED_PLUGIN)].iter().chain(plugins) {
            std::fs::create_dir_all(dir.join("plugins").join(name)).unwrap();
            std::fs::write(dir.join("plugins").join(name).join("plugin.yaml"), text).unwrap();
        }
        prepare(&env, dir, &relay.url());
        // The admin is made while moto still lets anyone in.
        let (admin, admin_arn) = node_iam_moto::admin(&env);
        let waiting_up = if waiting {
            Some(WaitingUp::start(&env, &admin, dir))
        } else {
            let up = env.kube_aws(dir, &["up"]);
            assert!(up.status.success(), "kube-aws up: {}", output_text(&up));
            None
        };
        let stubs = launch_template_stubs(|a| env.aws_json(a));
        for (role, s) in &stubs {
            assert!(!s.contains("${"), "moto left a placeholder in the {role} stub:\n{s}");
        }
        let api = stub_runtime(stubs.get("controller").expect("the controller's stub"))["apiEndpoint"]
            .as_str()
            .unwrap()
            .to_string();
        // EC2's instance profiles stand aside: with IAM enforced from here
        // on, an admin assumes each node's role and its IMDS hands the node
        // the credentials; every call a node makes is checked against the
        // rendered policies.
        node_iam_moto::enforce_iam(&env);
        let kubectl = crate::common::testbed::bin_dir(test)
            .expect("the control-plane test bed")
            .join("kubectl");
        let bed = MotoBed {
            image: image.to_path_buf(),
            env,
            relay,
            tree,
            api,
            stubs,
            admin,
            admin_arn,
            kubectl,
            up: t0.elapsed(),
            _bridge: bridge,
        };
        (bed, waiting_up)
    }

    pub fn dir(&self) -> &Path {
        self.tree.path()
    }

    /// Reads the launch templates' user-data stubs again (after an `update`), as the admin.
    pub fn refresh_stubs(&mut self) {
        self.stubs = launch_template_stubs(|a| self.aws(a));
    }

    /// The aws CLI as the admin (IAM is enforced).
    pub fn aws(&self, args: &[&str]) -> serde_json::Value {
        node_iam_moto::must(&self.env, &self.admin, args)
    }

    /// The aws CLI as the admin: its output, or None when it fails.
    pub fn aws_text(&self, args: &[&str]) -> Option<String> {
        let (ok, out) = crate::common::iam::aws_as(&self.env, &self.admin, args);
        ok.then_some(out)
    }

    /// The status object `name` under the cluster's `status/` in the bucket
    /// (`addons/installed.json`, `addons/<release>.json`), as the admin reads
    /// it; panics when it is not there.
    pub fn status_object(&self, name: &str) -> String {
        let uri = format!("s3://{BED_BUCKET}/clusters/{BED_CLUSTER}/status/{name}");
        self.aws_text(&["s3", "cp", &uri, "-"])
            .unwrap_or_else(|| panic!("no status object {uri}"))
    }

    /// `kube-aws` in the work tree, as the admin.
    pub fn kube_aws(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
        self.env.apply(&mut c);
        c.env("AWS_ACCESS_KEY_ID", &self.admin.key)
            .env("AWS_SECRET_ACCESS_KEY", &self.admin.secret)
            .arg("--dir")
            .arg(self.dir())
            .args(args)
            .stdin(Stdio::null());
        c.output().unwrap()
    }

    /// moto's instances whose `Name` tag is `name`, in launch order.
    pub fn instances(&self, name: &str) -> Vec<Instance> {
        let r = self.aws(&[
            "ec2",
            "describe-instances",
            "--filters",
            &format!("Name=tag:Name,Values={name}"),
            "Name=instance-state-name,Values=pending,running",
        ]);
        let mut v: Vec<(String, Instance)> = r["Reservations"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["Instances"].as_array().unwrap().iter())
            .map(|i| {
                (
                    i["LaunchTime"].as_str().unwrap_or_default().to_string(),
                    Instance {
                        id: i["InstanceId"].as_str().unwrap().to_string(),
                        dns: i["PrivateDnsName"].as_str().unwrap().to_string(),
                        ip: i["PrivateIpAddress"].as_str().unwrap().to_string(),
                    },
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
        assert!(!v.is_empty(), "no instance {name} in moto: {r}");
        v.into_iter().map(|(_, i)| i).collect()
    }

    /// kubectl with `ctl`'s admin.conf, dialing the controller's address
    /// (the host cannot resolve the load balancer's name).
    /// The control-plane bed's real helm (v3) against `ctl`'s API server,
    /// with the cluster's admin.conf.
    pub fn helm(&self, ctl: &BedNode, args: &[&str]) -> Output {
        Command::new(self.kubectl.with_file_name("helm"))
            .arg("--kubeconfig")
            .arg(ctl.node.rootfs().join("etc/kubernetes/admin.conf"))
            .args(["--kube-apiserver", &format!("https://{}:6443", ctl.node.ip)])
            .args(args)
            .env("HELM_CACHE_HOME", self.dir().join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir().join("helm/config"))
            .env("HELM_DATA_HOME", self.dir().join("helm/data"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn kubectl(&self, ctl: &BedNode, args: &[&str]) -> Output {
        Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(ctl.node.rootfs().join("etc/kubernetes/admin.conf"))
            .args(["--server", &format!("https://{}:6443", ctl.node.ip)])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}
