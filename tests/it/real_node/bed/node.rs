//! The nodes of the real-node bed (tests/it/real_node/bed.rs): a node
//! booted as one of moto's instances from its launch template's user-data,
//! with its own IMDS emulator (tests/support/imds.py) serving its role's
//! credentials (renewed after an `update`, or a lifecycle state); its boot
//! log followed step by step to Ready, and what it said when it failed. No
//! test here.

use super::*;

impl MotoBed {
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
