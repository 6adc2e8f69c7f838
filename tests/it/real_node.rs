//! A real node (issue 25, its first slice; tests/it/common/nodebed.rs,
//! scripts/install-nodebed.sh, docs/testing.md "The real-node bed"): a
//! privileged runc container with systemd as PID 1, containerd 1.6 and runc
//! from Debian, kubelet and kubeadm built at the pinned Kubernetes version,
//! and the control-plane images (built from the test bed's binaries, no
//! registry) already in its containerd.
//!
//! - `kubeadm init` inside the node brings up etcd, kube-apiserver,
//!   kube-controller-manager and kube-scheduler as static pods run by the real
//!   kubelet through containerd; the apiserver's `/readyz` answers `ok` at the
//!   node's own address from the host; the node becomes Ready (the CNI is
//!   Debian's bridge plugin with host-local IPAM); kube-proxy (iptables-nft)
//!   writes the service rules through which CoreDNS, run from its own image
//!   on the pod network, reaches the API and becomes Ready.
//!
//! - A controller boots from its rendered user-data as on EC2: `kube-aws up`
//!   against moto, the launch template's user-data (moto substituted it)
//!   seeds cloud-init, the stub fetches the cloud-config from moto's S3, and
//!   the node program runs every step (IMDS from tests/support/imds.py,
//!   secrets under the controller role with IAM enforced, the baked packages,
//!   kubeadm init under the S3 init lock) to a Ready node.
//!
//! Not covered yet (docs/testing.md, "The real-node bed", says what is
//! left): the node's CloudFormation signal (moto has no SignalResource), the
//! API through the cluster's endpoint from the host, joining nodes, addons.
//! The fakes of tests/it/node_bootstrap.rs, node_secrets.rs and installer.rs
//! still cover those. A host that cannot run the bed (not root, no runc, no
//! cgroups, no image) fails these tests, naming what is missing.

use std::time::{Duration, Instant};

use crate::common::nodebed::{self, Node};
use crate::common::output_text;

/// The preflight checks `kubeadm init` must skip in a node container, each
/// for a reason of the bed's, not of kube-aws's:
/// - SystemVerification: the kernel is the VM's own, without /lib/modules in
///   the container, and the host's cgroups are v1, which kubeadm 1.35's
///   validator reports as an error unless skipped (kubelet is told
///   `failCgroupV1: false` for the same reason).
const IGNORE_PREFLIGHT: &[&str] = &["SystemVerification"];

/// How long each stage may take on a loaded 2-core machine.
pub(crate) const BOOT_LIMIT: Duration = Duration::from_secs(120);
pub(crate) const READY_LIMIT: Duration = Duration::from_secs(300);

/// kubeadm's documents for the node. Three settings are the bed's, not
/// kube-aws's: `failCgroupV1: false` (the host's cgroups are v1); kubelet's
/// disk eviction thresholds at 0% and image GC at 100% (the node's disk is the
/// CI machine's, which reports 252 GiB of which often less than 15% is
/// available: kubelet then tainted the node with disk-pressure and CoreDNS
/// waited 40 s to be scheduled; kind sets the same); and kube-proxy's
/// `conntrack.maxPerCore: 0`, which keeps it from writing
/// net.netfilter.nf_conntrack_max, a sysctl of the host's initial network
/// namespace that a node container may not write (kind sets the same).
fn kubeadm_config(node: &Node, version: &str) -> String {
    format!(
        r#"apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: {ip}
nodeRegistration:
  name: {name}
  criSocket: unix:///run/containerd/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: {version}
networking:
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/12
apiServer:
  certSANs: ["{ip}", "127.0.0.1"]
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
failCgroupV1: false
failSwapOn: false
evictionHard:
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
"#,
        ip = node.ip,
        name = node.name,
    )
}

#[test]
fn kubeadm_init_in_a_real_node_makes_a_ready_control_plane() {
    let test = "real_node::kubeadm_init_in_a_real_node_makes_a_ready_control_plane";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let version = std::fs::read_to_string(image.join("kubernetes-version"))
        .unwrap_or_else(|e| panic!("{}: {e}", image.join("kubernetes-version").display()))
        .trim()
        .to_string();
    let t0 = Instant::now();
    let node = Node::start(&image, "cp");
    let started = t0.elapsed();
    let booted = node
        .wait_for(
            "containerd running",
            "systemctl is-active --quiet containerd && ctr -n k8s.io images ls -q | grep -q pause",
            BOOT_LIMIT,
        )
        .unwrap_or_else(|e| panic!("{e}"));

    // The sysctls kube-aws's cloud-config sets on every node (ip_forward,
    // which kubeadm's preflight requires, among them), as cloud-init would
    // write them; the bed's namespace starts with the kernel's defaults.
    std::fs::write(
        node.rootfs().join("etc/sysctl.d/99-kube-aws.conf"),
        include_str!("../../src/render/templates/sysctl.conf"),
    )
    .unwrap();
    node.sh("sysctl --system >/dev/null");
    std::fs::write(node.rootfs().join("root/kubeadm.yaml"), kubeadm_config(&node, &version)).unwrap();
    let t_init = Instant::now();
    let ignore = format!("--ignore-preflight-errors={}", IGNORE_PREFLIGHT.join(","));
    let out = node.exec(&["kubeadm", "init", "--config", "/root/kubeadm.yaml", &ignore]);
    let init = t_init.elapsed();
    assert!(
        out.status.success(),
        "kubeadm init failed in node {}:\n{}\n{}",
        node.name,
        output_text(&out),
        node.diagnostics()
    );

    // The apiserver answers at the node's own address, from the host.
    let kubeconfig = node.rootfs().join("etc/kubernetes/admin.conf");
    let kubectl = crate::common::testbed::bin_dir(test)
        .expect("the control-plane test bed")
        .join("kubectl");
    let readyz = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "--raw", "/readyz"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&readyz.stdout).trim(),
        "ok",
        "/readyz at https://{}:6443: {}",
        node.ip,
        output_text(&readyz)
    );

    let kctl = |args: &[&str]| {
        std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .unwrap()
    };
    let t_ready = Instant::now();
    let ready = kctl(&[
        "wait",
        "--for=condition=Ready",
        &format!("node/{}", node.name),
        &format!("--timeout={}s", READY_LIMIT.as_secs()),
    ]);
    assert!(
        ready.status.success(),
        "node {} not Ready: {}\n{}\n{}",
        node.name,
        output_text(&ready),
        output_text(&kctl(&["describe", "node", &node.name])),
        node.diagnostics()
    );
    let ready_after = t_ready.elapsed();
    // CoreDNS runs from its own image, on the bridge network.
    let t_dns = Instant::now();
    let dns = kctl(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "deployment/coredns",
        &format!("--timeout={}s", READY_LIMIT.as_secs()),
    ]);
    assert!(
        dns.status.success(),
        "CoreDNS not Ready: {}\n{}\n{}",
        output_text(&dns),
        output_text(&kctl(&["-n", "kube-system", "get", "pods", "-o", "wide"])),
        node.diagnostics()
    );
    eprintln!(
        "{test}: node started in {:.1}s, containerd up {:.1}s later, kubeadm init {:.1}s, \
         Ready {:.1}s after init, CoreDNS Ready {:.1}s after that; boot to Ready {:.1}s",
        started.as_secs_f64(),
        booted.as_secs_f64(),
        init.as_secs_f64(),
        ready_after.as_secs_f64(),
        t_dns.elapsed().as_secs_f64(),
        (started + booted + init + ready_after).as_secs_f64()
    );
}

/// A bed that cannot start names what is missing (here, the node image) and
/// exits non-zero, so the tests above fail instead of skipping.
#[test]
fn a_bed_that_cannot_start_names_the_missing_piece() {
    let out = std::process::Command::new("bash")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/nodebed/node.sh"))
        .args(["check", "/nonexistent/kube-aws-node-image/rootfs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("the real-node bed cannot start: missing ")
            && err.contains("the node image (run scripts/install-nodebed.sh)"),
        "{err}"
    );
}

pub(crate) const BED_BUCKET: &str = "kube-aws-nodebed";
pub(crate) const BED_CLUSTER: &str = "bed";
pub(crate) const BED_REGION: &str = "us-west-2";

/// The bed's own kubeadm settings (see `kubeadm_config` above for why each),
/// as a plugin of the test's work tree: kube-aws renders its file into the
/// controller's cloud-config, and the node program merges it into its kubeadm
/// documents (`/etc/kube-aws/kubeadm.d`, kubeadmcfg.patch). Nothing of the bed
/// is in kube-aws's own rendering.
pub(crate) const BED_PLUGIN: &str = r#"apiVersion: kube-aws/v1
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
             {"kind": "KubeletConfiguration", "failCgroupV1": false, "failSwapOn": false,
              "evictionHard": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
              "imageGCHighThresholdPercent": 100},
             {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
              "conntrack": {"maxPerCore": 0}}
            ]
"#;

/// The first `(instance id, private DNS name)` moto's EC2 lists with `Name` = `name`.
pub(crate) fn moto_instance(env: &crate::common::MotoEnv, name: &str) -> (String, String) {
    let r = env.aws_json(&[
        "ec2",
        "describe-instances",
        "--filters",
        &format!("Name=tag:Name,Values={name}"),
    ]);
    let i = r["Reservations"]
        .as_array()
        .and_then(|rs| rs.iter().flat_map(|r| r["Instances"].as_array().unwrap().iter()).next())
        .unwrap_or_else(|| panic!("no instance {name} in moto: {r}"))
        .clone();
    (
        i["InstanceId"].as_str().unwrap().to_string(),
        i["PrivateDnsName"].as_str().unwrap().to_string(),
    )
}

/// The user-data of the launch template whose user-data is `role`'s stub, as
/// moto's CloudFormation substituted it (`Fn::Sub`), decoded.
pub(crate) fn launch_template_user_data(env: &crate::common::MotoEnv, role: &str) -> String {
    use base64::Engine;
    let lts = env.aws_json(&["ec2", "describe-launch-templates"]);
    let mut seen = Vec::new();
    for lt in lts["LaunchTemplates"].as_array().unwrap() {
        let id = lt["LaunchTemplateId"].as_str().unwrap();
        let v = env.aws_json(&[
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
        if text.contains(&format!("kube-aws {role} user-data stub")) {
            return text;
        }
        seen.push(lt["LaunchTemplateName"].as_str().unwrap_or_default().to_string());
    }
    panic!("no launch template in moto holds the {role} stub; templates: {seen:?}")
}

/// `kube-aws up` of a one-controller work tree against moto (listening on
/// the bed's bridge), then a node boots from the controller launch
/// template's user-data as EC2 would run it: cloud-init runs the stub, which
/// fetches the cloud-config from moto's S3 and runs the node program, whose
/// steps (IMDS, secrets from SSM, S3 and KMS, packages, kubeadm init under
/// the S3 init lock) bring the node to Ready.
#[test]
fn a_controller_boots_from_its_rendered_user_data_to_a_ready_node() {
    use std::path::Path;
    use std::process::Command;
    let test = "real_node::a_controller_boots_from_its_rendered_user_data_to_a_ready_node";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let t0 = Instant::now();
    let _bridge = nodebed::bridge();
    let env = crate::common::MotoEnv::new();
    // The nodes reach moto through a relay on the bridge address (see
    // tests/support/tcp_relay.py for why moto itself stays on 127.0.0.1).
    let relay_port = crate::common::free_port();
    let mut relay = Command::new("python3");
    relay
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/tcp_relay.py"))
        .args([
            nodebed::HOST_IP,
            &relay_port.to_string(),
            "127.0.0.1",
            &env.moto.port.to_string(),
        ]);
    let relay = crate::common::Server::start_on(relay, nodebed::HOST_IP, relay_port);
    env.aws(&["s3", "mb", &format!("s3://{BED_BUCKET}")]);
    let kms = env.create_kms_key();
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path();
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: {BED_CLUSTER}\nregion: {BED_REGION}\ns3URI: s3://{BED_BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("plugins/nodebed")).unwrap();
    std::fs::write(dir.join("plugins/nodebed/plugin.yaml"), BED_PLUGIN).unwrap();
    let up = env.kube_aws(dir, &["up"]);
    assert!(up.status.success(), "kube-aws up: {}", output_text(&up));
    let t_up = t0.elapsed();

    let stub = launch_template_user_data(&env, "controller");
    assert!(!stub.contains("${"), "moto left a placeholder in the stub:\n{stub}");
    let userdata = dir.join("controller.user-data");
    std::fs::write(&userdata, &stub).unwrap();
    let runtime: serde_json::Value = {
        // runtime.json is the stub's first file: the API endpoint the node uses.
        let doc: serde_yaml::Value = serde_yaml::from_str(&stub).unwrap();
        let f = doc["write_files"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|f| f["path"].as_str() == Some("/etc/kube-aws/runtime.json"))
            .expect("runtime.json in the stub");
        serde_json::from_str(f["content"].as_str().unwrap()).unwrap()
    };
    let api = runtime["apiEndpoint"].as_str().unwrap().to_string();

    // The instance moto launched for the controller group: the node is it.
    let (instance_id, dns_name) = moto_instance(&env, &format!("{BED_CLUSTER}-controller"));
    // Its instance profile's role.
    let roles = env.aws_json(&["iam", "list-roles"]);
    let role = roles["Roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["RoleName"].as_str().unwrap_or_default().contains("-ControllerRole-"))
        .unwrap_or_else(|| panic!("no controller role in moto: {roles}"));
    let role_name = role["RoleName"].as_str().unwrap().to_string();
    // EC2's instance profile stands aside: with IAM enforced from here on,
    // an admin assumes the role and the IMDS hands the node its credentials;
    // every call the node makes is checked against the rendered policies.
    let (admin, admin_arn) = crate::node_iam_moto::admin(&env);
    crate::node_iam_moto::enforce_iam(&env);
    let c = crate::node_iam_moto::assume(&env, &admin, &admin_arn, "ControllerRole");
    let creds = serde_json::json!({"AccessKeyId": c.key, "SecretAccessKey": c.secret, "Token": c.token});

    let plan = Node::plan("ctl");
    let node_ip = plan.ip.clone();
    let mac = {
        let o: Vec<u8> = plan.ip.split('.').map(|p| p.parse().unwrap()).collect();
        format!("02:42:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3])
    };
    let imds_conf = dir.join("imds.json");
    std::fs::write(
        &imds_conf,
        serde_json::json!({
            "instanceId": instance_id,
            "localHostname": dns_name,
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
    let imds_port = crate::common::free_port();
    let mut cmd = Command::new("python3");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/imds.py"))
        .args(["--bind", nodebed::HOST_IP, "--port", &imds_port.to_string(), "--config"])
        .arg(&imds_conf);
    let _imds = crate::common::Server::start_on(cmd, nodebed::HOST_IP, imds_port);

    let t_boot = Instant::now();
    let node = Node::boot(
        &image,
        plan,
        &nodebed::Boot {
            userdata: Some(&userdata),
            env: vec![
                ("NODEBED_AWS_ENDPOINT", relay.url()),
                ("NODEBED_IMDS", format!("{}:{imds_port}", nodebed::HOST_IP)),
                ("NODEBED_MAC", mac.clone()),
                // EC2's DNS: the node's private DNS name, and the API's load
                // balancer, which here is the controller itself.
                ("NODEBED_HOSTS", format!("{node_ip} {dns_name};{node_ip} {api}")),
            ],
        },
    );

    // Each step of the node program as it appears in its boot log.
    let log = node.rootfs().join("var/lib/kube-aws/bootstrap.log");
    let limit = BOOT_LIMIT + READY_LIMIT;
    let mut steps: Vec<(String, Duration)> = Vec::new();
    let ready_line = format!("node {dns_name} is Ready");
    let outcome = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for l in text.lines() {
            if let Some(s) = l.strip_prefix("kube-aws: step ") {
                if !steps.iter().any(|(n, _)| n == s) {
                    steps.push((s.to_string(), t_boot.elapsed()));
                }
            }
        }
        if text.contains(&ready_line) {
            break Ok(());
        }
        if let Some(l) = text.lines().find(|l| l.contains(" failed (exit ")) {
            break Err(format!("the node program failed: {l}"));
        }
        // cloud-init's final stage ran the stub (which execs the node
        // program): once cloud-init is done, nothing more will come.
        if node.rootfs().join("var/lib/cloud/data/result.json").exists() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if !text.contains(&ready_line) {
                break Err("cloud-init finished without the node program saying the node is Ready".into());
            }
        }
        if t_boot.elapsed() > limit {
            break Err(format!("not Ready after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let ready = t_boot.elapsed();
    let times: Vec<String> = steps
        .iter()
        .map(|(n, t)| format!("{n} {:.1}s", t.as_secs_f64()))
        .collect();
    if let Err(e) = outcome {
        let cloud_init = node.exec(&[
            "sh",
            "-c",
            "tail -n 60 /var/log/cloud-init-output.log; cloud-init status --long",
        ]);
        panic!(
            "node {} ({dns_name}): {e}\nsteps: {}\n--- bootstrap.log ---\n{}\n--- cloud-init ---\n{}\n{}",
            node.name,
            times.join(", "),
            std::fs::read_to_string(&log).unwrap_or_default(),
            output_text(&cloud_init),
            node.diagnostics()
        );
    }
    // The node program returns (after its signal) and cloud-init finishes
    // without an error in any module.
    let done = node.wait_for(
        "cloud-init done",
        "cloud-init status --wait >/dev/null 2>&1; cloud-init status --long | grep -qx 'status: done'",
        BOOT_LIMIT,
    );
    if let Err(e) = done {
        panic!("{e}\n{}", output_text(&node.exec(&["cloud-init", "status", "--long"])));
    }
    // containerd runs with the node program's config (restarted on it), not
    // the image's: kubeadm's pause image, the systemd cgroup driver, and
    // restrict_oom_score_adj (this host lacks CAP_SYS_RESOURCE, or it runs
    // as on EC2 without it).
    let config = std::fs::read_to_string(node.rootfs().join("etc/containerd/config.toml")).unwrap();
    assert!(
        !config.contains("scripts/install-nodebed.sh")
            && config.contains("SystemdCgroup = true")
            && config.contains("sandbox_image = \"registry.k8s.io/pause:3.10.1\""),
        "containerd's config is not the node program's:\n{config}"
    );
    // The node as the cluster sees it, through admin.conf from the host.
    let kubeconfig = node.rootfs().join("etc/kubernetes/admin.conf");
    let kubectl = crate::common::testbed::bin_dir(test)
        .expect("the control-plane test bed")
        .join("kubectl");
    let get = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--server", &format!("https://{}:6443", node.ip)])
        .args([
            "get",
            "node",
            &dns_name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&get.stdout).trim(),
        "True",
        "{}",
        output_text(&get)
    );
    // The init lock the node took in moto's S3.
    let keys = crate::node_iam_moto::must(
        &env,
        &admin,
        &[
            "s3api",
            "list-objects-v2",
            "--bucket",
            BED_BUCKET,
            "--query",
            "Contents[].Key",
        ],
    );
    assert!(
        keys.as_array()
            .into_iter()
            .flatten()
            .any(|k| k.as_str().unwrap_or_default().ends_with("/bootstrap/init-lock")),
        "no init lock in moto's S3: {keys}"
    );

    // `kube-aws kubeconfig` with the admin's credentials (it decrypts the CA
    // key with them) gives a working `kubectl get nodes`. The host cannot
    // resolve the load balancer's name, so kubectl dials the controller and
    // checks the apiserver's certificate for that name.
    let mut kc = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
    env.apply(&mut kc);
    kc.env("AWS_ACCESS_KEY_ID", &admin.key)
        .env("AWS_SECRET_ACCESS_KEY", &admin.secret)
        .arg("--dir")
        .arg(dir)
        .args(["kubeconfig", "--file"])
        .arg(dir.join("kubeconfig"))
        .stdin(std::process::Stdio::null());
    let kc = kc.output().unwrap();
    assert!(kc.status.success(), "kube-aws kubeconfig: {}", output_text(&kc));
    let with_kube_aws = |args: &[&str]| {
        Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig"))
            .args(["--server", &format!("https://{}:6443", node.ip)])
            .args(["--tls-server-name", &api.to_lowercase()])
            .args(args)
            .output()
            .unwrap()
    };
    let readyz = with_kube_aws(&["get", "--raw", "/readyz"]);
    assert_eq!(
        String::from_utf8_lossy(&readyz.stdout).trim(),
        "ok",
        "/readyz: {}",
        output_text(&readyz)
    );
    let nodes = with_kube_aws(&["get", "nodes", "-o", "name"]);
    assert!(
        nodes.status.success() && String::from_utf8_lossy(&nodes.stdout).trim() == format!("node/{dns_name}"),
        "kubectl get nodes with kube-aws kubeconfig's credentials: {}",
        output_text(&nodes)
    );
    eprintln!(
        "{test}: up against moto {:.1}s; node boot to Ready {:.1}s; steps (from node start): {}",
        t_up.as_secs_f64(),
        ready.as_secs_f64(),
        times.join(", ")
    );
}
