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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::nodebed::{self, Node, Planned};
use crate::common::{output_text, MotoEnv, Server};
use crate::node_iam_moto::{self, Creds};

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

    /// Boots a node as moto's instance `inst` (its address), from `role`'s
    /// stub, with the credentials of the rendered role `logical`
    /// (`ControllerRole`, `WorkerRole`); the API's name resolves to `api_ip`
    /// (the bed has no load balancer: a controller stands for it). `extra`
    /// adds settings of scripts/nodebed/node.sh start (NODEBED_POD_SUBNET,
    /// NODEBED_PEERS).
    pub fn boot(
        &self,
        role: &str,
        logical: &str,
        inst: &Instance,
        api_ip: &str,
        extra: Vec<(&'static str, String)>,
    ) -> BedNode {
        let plan = Planned {
            name: Node::plan(if role == "controller" { "ctl" } else { "wk" }).name,
            ip: inst.ip.clone(),
        };
        let stub = self
            .stubs
            .get(role)
            .unwrap_or_else(|| panic!("no {role} stub; launch templates hold {:?}", self.stubs.keys()));
        let userdata = self.dir().join(format!("{}.user-data", plan.name));
        std::fs::write(&userdata, stub).unwrap();
        let (role_name, creds) = self.role_credentials(logical);
        let mac = {
            let o: Vec<u8> = plan.ip.split('.').map(|p| p.parse().unwrap()).collect();
            format!("02:42:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
        };
        let conf = self.dir().join(format!("{}.imds.json", plan.name));
        std::fs::write(
            &conf,
            serde_json::json!({
                "instanceId": inst.id,
                "localHostname": inst.dns,
                "localIpv4": plan.ip,
                "mac": mac,
                "region": BED_REGION,
                "availabilityZone": format!("{BED_REGION}a"),
                "role": role_name,
                "credentials": creds,
            })
            .to_string(),
        )
        .unwrap();
        let imds = imds_server_on_a_free_port(&conf);
        let port = imds.port;
        let mut env = vec![
            ("NODEBED_AWS_ENDPOINT", self.relay.url()),
            ("NODEBED_IMDS", format!("{}:{port}", nodebed::HOST_IP)),
            ("NODEBED_MAC", mac),
            // EC2's DNS: the node's private DNS name, and the API's load
            // balancer, which here is a controller.
            (
                "NODEBED_HOSTS",
                format!("{} {};{api_ip} {}", plan.ip, inst.dns, self.api),
            ),
        ];
        env.extend(extra);
        let booted = Instant::now();
        let booted_at = std::time::SystemTime::now();
        let node = Node::boot(
            &self.image,
            plan,
            &nodebed::Boot {
                userdata: Some(&userdata),
                env,
            },
        );
        BedNode {
            node,
            inst: inst.clone(),
            role: role.to_string(),
            booted,
            booted_at,
            imds: Some(imds),
            imds_conf: conf,
        }
    }

    /// The name of the rendered role `logical` and credentials of it.
    fn role_credentials(&self, logical: &str) -> (String, serde_json::Value) {
        let c = node_iam_moto::assume(&self.env, &self.admin, &self.admin_arn, logical);
        let role_name = {
            let roles = self.aws(&["iam", "list-roles"]);
            roles["Roles"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["RoleName"].as_str().unwrap().to_string())
                .find(|n| n.contains(&format!("-{logical}-")))
                .unwrap()
        };
        let creds = serde_json::json!({"AccessKeyId": c.key, "SecretAccessKey": c.secret, "Token": c.token});
        (role_name, creds)
    }

    /// A running node's IMDS serves new credentials of the rendered role
    /// `logical`. moto recreates a modified nested stack whole, its roles
    /// with it (tests/it/update_rolls_moto.rs), so a node that outlives an
    /// `update` of its stack holds credentials of a role that is gone; on
    /// AWS the role is updated in place and the instance keeps its profile.
    pub fn recredential(&self, n: &mut BedNode, logical: &str) {
        let (role_name, creds) = self.role_credentials(logical);
        let mut conf: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&n.imds_conf).unwrap()).unwrap();
        conf["role"] = role_name.into();
        conf["credentials"] = creds;
        std::fs::write(&n.imds_conf, conf.to_string()).unwrap();
        let port = n.imds.as_ref().unwrap().port;
        // Stopped first: the node knows its IMDS by this address.
        drop(n.imds.take());
        n.imds = Some(imds_server(&n.imds_conf, port));
    }

    /// A running node's IMDS answers `autoscaling/target-lifecycle-state`
    /// with `state`, as EC2 does for an instance a lifecycle hook holds
    /// (`Terminated` once the group terminates it).
    pub fn set_lifecycle_state(&self, n: &mut BedNode, state: &str) {
        let mut conf: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&n.imds_conf).unwrap()).unwrap();
        conf["targetLifecycleState"] = state.into();
        std::fs::write(&n.imds_conf, conf.to_string()).unwrap();
        let port = n.imds.as_ref().unwrap().port;
        drop(n.imds.take());
        n.imds = Some(imds_server(&n.imds_conf, port));
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

/// A node booted from its user-data; stops (node, then its IMDS) on drop.
pub struct BedNode {
    pub node: Node,
    pub inst: Instance,
    pub role: String,
    pub booted: Instant,
    /// The same moment by the wall clock (cloud-init's status has epoch times).
    pub booted_at: std::time::SystemTime,
    imds: Option<Server>,
    imds_conf: PathBuf,
}

/// The IMDS emulator of a node (tests/support/imds.py) on `port`, serving `conf`.
fn imds_server(conf: &Path, port: u16) -> Server {
    Server::start_on(imds_command(conf, port), nodebed::HOST_IP, port)
}

/// The same on a port found free (a node's first boot: its restarts keep it).
fn imds_server_on_a_free_port(conf: &Path) -> Server {
    Server::start_on_free_port(nodebed::HOST_IP, |port| imds_command(conf, port))
}

fn imds_command(conf: &Path, port: u16) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/imds.py"))
        .args(["--bind", nodebed::HOST_IP, "--port", &port.to_string(), "--config"])
        .arg(conf);
    cmd
}

/// What a node's boot log said: each step's time from the node's start, and
/// how it ended.
pub struct Followed {
    pub steps: Vec<(String, Duration)>,
    pub outcome: Result<Duration, String>,
}

impl Followed {
    pub fn times(&self) -> String {
        self.steps
            .iter()
            .map(|(n, t)| format!("{n} {:.1}s", t.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl BedNode {
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.node.rootfs().join("var/lib/kube-aws/bootstrap.log")).unwrap_or_default()
    }

    pub fn ready_line(&self) -> String {
        format!("node {} is Ready", self.inst.dns.to_lowercase())
    }

    /// Returns once the node program has begun `step`; panics with what the
    /// node said if it failed, or `limit` passed, first.
    /// Copies `image` from this node's containerd into each of `to`'s, as
    /// the registry serves it in a cluster (the bed's nodes have none, and
    /// each node image holds only its own version's images). A newer
    /// kubeadm's `upgrade apply` runs its health-check Job's pause image on
    /// any node, an old controller included (cmd/kubeadm/app/phases/upgrade/
    /// health.go `createJob`, v1.36.5: `images.GetPauseImage`), and an old
    /// node image has the older pause only: the Job's pod sat in
    /// ErrImagePull there and the check missed its fixed minute.
    pub fn share_image(&self, image: &str, to: &[&BedNode]) {
        // Not /tmp: systemd mounts a tmpfs there, out of the host's view.
        const TAR: &str = "root/kube-aws-shared-image.tar";
        self.node.sh(&format!("ctr -n k8s.io images export /{TAR} {image}"));
        let bytes = std::fs::read(self.node.rootfs().join(TAR)).unwrap();
        for n in to {
            std::fs::write(n.node.rootfs().join(TAR), &bytes).unwrap();
            n.node.sh(&format!(
                "ctr -n k8s.io images import /{TAR} >/dev/null && rm -f /{TAR}"
            ));
        }
    }

    pub fn wait_step(&self, step: &str, limit: Duration) {
        let line = format!("kube-aws: step {step}");
        loop {
            let text = self.log();
            if text.lines().any(|l| l == line) {
                return;
            }
            let failed = text.lines().find(|l| is_step_failure(l)).map(str::to_string);
            if failed.is_some() || self.booted.elapsed() > limit {
                let f = Followed {
                    steps: vec![],
                    outcome: Err(String::new()),
                };
                let why = failed.unwrap_or_else(|| format!("no step {step} after {limit:?}"));
                panic!("{}", self.explain(&f, &why));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Follows the node program's boot log until the node is Ready, a step
    /// fails, cloud-init is done without either, or `limit` passes.
    pub fn follow(&self, limit: Duration) -> Followed {
        let mut steps: Vec<(String, Duration)> = Vec::new();
        let ready_line = self.ready_line();
        let outcome = loop {
            let text = self.log();
            for l in text.lines() {
                if let Some(s) = l.strip_prefix("kube-aws: step ") {
                    if !is_step_failure(l) && !steps.iter().any(|(n, _)| n == s) {
                        steps.push((s.to_string(), self.booted.elapsed()));
                    }
                }
            }
            // The bootstrap's last step: the Ready wait after the timers (an
            // upgrade's `kubeadm upgrade apply` waits for Ready before it too).
            let last = text.find("kube-aws: step reconfigure-timer").map(|i| &text[i..]);
            if last.is_some_and(|t| t.contains(&ready_line)) {
                break Ok(self.booted.elapsed());
            }
            if let Some(l) = text.lines().find(|l| is_step_failure(l)) {
                break Err(format!("the node program failed: {l}"));
            }
            // cloud-init's final stage ran the stub (which execs the node
            // program): once cloud-init is done, nothing more will come.
            if self.node.rootfs().join("var/lib/cloud/data/result.json").exists() && !self.log().contains(&ready_line) {
                break Err("cloud-init finished without the node program saying the node is Ready".into());
            }
            if self.booted.elapsed() > limit {
                break Err(format!("not Ready after {limit:?}"));
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        Followed { steps, outcome }
    }

    /// What the node said, for a failure message.
    pub fn explain(&self, f: &Followed, e: &str) -> String {
        let cloud_init = self.node.exec(&[
            "sh",
            "-c",
            "tail -n 40 /var/log/cloud-init-output.log; cloud-init status --long",
        ]);
        format!(
            "node {} ({}, {}): {e}\nsteps: {}\n--- bootstrap.log ---\n{}\n--- cloud-init ---\n{}\n{}",
            self.node.name,
            self.role,
            self.inst.dns,
            f.times(),
            self.log(),
            output_text(&cloud_init),
            self.node.diagnostics()
        )
    }

    /// Follows the boot to Ready; panics with what the node said otherwise.
    pub fn expect_ready(&self, limit: Duration) -> Followed {
        let f = self.follow(limit);
        if let Err(e) = &f.outcome {
            panic!("{}", self.explain(&f, e));
        }
        f
    }
}

/// Follows the boots of `nodes` at once (each step timed as it appears),
/// panicking with the first one's failure after all have ended.
pub fn expect_all_ready(nodes: &[&BedNode], limit: Duration) -> Vec<Followed> {
    let followed: Vec<Followed> = std::thread::scope(|s| {
        let hs: Vec<_> = nodes.iter().map(|n| s.spawn(move || n.follow(limit))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (n, f) in nodes.iter().zip(&followed) {
        if let Err(e) = &f.outcome {
            panic!("{}", n.explain(f, e));
        }
    }
    followed
}

/// A node's boot, step by step, from its container's start: cloud-init's
/// stages (their start, from /var/lib/cloud/data/status.json), each step of
/// the node program (as its boot log showed it) and Ready; each row's
/// duration runs to the next row, and the slowest is named. What
/// scripts/bench-node.sh prints.
pub fn timeline(n: &BedNode, f: &Followed) -> String {
    let mut rows: Vec<(String, f64)> = Vec::new();
    let status = std::fs::read_to_string(n.node.rootfs().join("var/lib/cloud/data/status.json")).unwrap_or_default();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap_or_default();
    let t0 = n
        .booted_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    for stage in ["init-local", "init", "modules-config", "modules-final"] {
        if let Some(t) = status["v1"][stage]["start"].as_f64() {
            rows.push((format!("cloud-init {stage}"), t - t0));
        }
    }
    for (s, t) in &f.steps {
        rows.push((format!("step {s}"), t.as_secs_f64()));
    }
    if let Ok(t) = &f.outcome {
        rows.push(("Ready".into(), t.as_secs_f64()));
    }
    rows.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut out = format!(
        "{} ({}, {}): seconds from the container's start\n",
        n.node.name, n.role, n.inst.dns
    );
    let mut slowest = (String::new(), 0.0f64);
    for (i, (what, at)) in rows.iter().enumerate() {
        let took = rows.get(i + 1).map(|(_, next)| next - at);
        if let Some(d) = took {
            if d > slowest.1 {
                slowest = (what.clone(), d);
            }
        }
        out.push_str(&format!(
            "  {at:7.1}  {:>7}  {what}\n",
            took.map(|d| format!("{d:.1}")).unwrap_or_default()
        ));
    }
    out.push_str(&format!("  slowest: {} ({:.1}s)\n", slowest.0, slowest.1));
    out
}

/// The addons' bring-up on a controller, from its container's start: each
/// release's install started and ready (its status object's `startedAt`
/// and `updatedAt`, which the reconciler writes at "installing" and at its
/// last phase, to the second), the first and the last addon Ready, and the
/// slowest release. What scripts/bench-node.sh prints after the boot
/// timelines (issue 41, "Timing").
pub fn addon_timeline(bed: &MotoBed, n: &BedNode, releases: &[&str]) -> String {
    let t0 = n
        .booted_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let at = |v: &serde_json::Value, k: &str| -> f64 {
        let s = v[k].as_str().unwrap_or_default();
        let t = humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("{k} {s:?} in {v}: {e}"));
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
            - t0
    };
    let mut rows = Vec::new();
    for r in releases {
        let path = bed.dir().join(format!("status-{r}.json"));
        bed.aws(&[
            "s3api",
            "get-object",
            "--bucket",
            BED_BUCKET,
            "--key",
            &format!("clusters/{BED_CLUSTER}/status/addons/{r}.json"),
            path.to_str().unwrap(),
        ]);
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["phase"], "ready", "{r}: {v}");
        rows.push((r.to_string(), at(&v, "startedAt"), at(&v, "updatedAt")));
    }
    rows.sort_by(|a, b| a.2.total_cmp(&b.2));
    let mut out = format!(
        "{} addons: seconds from the container's start (started, ready, took)\n",
        n.node.name
    );
    for (r, s, e) in &rows {
        out.push_str(&format!("  {s:7.1}  {e:7.1}  {:6.1}  {r}\n", e - s));
    }
    // The reconciler's own gates before the first release (issue 37's
    // fixed gates), from its journal: when its service started (the timer),
    // asked /readyz (after the plan, the lease and the plugin secrets), and
    // began the first install (after /readyz, the manifests, the helm client).
    let journal = n
        .node
        .sh("journalctl --no-pager -o short-unix -u kube-aws-addons.service | head -200");
    let mark = |needle: &str| -> Option<f64> {
        journal
            .lines()
            .find(|l| l.contains(needle))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|t| t.parse::<f64>().ok())
            .map(|t| t - t0)
    };
    let show = |t: Option<f64>| t.map_or("-".to_string(), |t| format!("{t:.1}s"));
    out.push_str(&format!(
        "  reconciler: service started {}, asked /readyz {}, first install {}\n",
        show(mark("Starting kube-aws-addons.service")),
        show(mark("waiting for the apiserver's /readyz")),
        show(mark(": installing"))
    ));
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        let slowest = rows.iter().max_by(|a, b| (a.2 - a.1).total_cmp(&(b.2 - b.1))).unwrap();
        out.push_str(&format!(
            "  first addon Ready {:.1}s ({}); all addons Ready {:.1}s; slowest release: {} ({:.1}s)\n",
            first.2,
            first.0,
            last.2,
            slowest.0,
            slowest.2 - slowest.1
        ));
    }
    out
}
