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
//! - A worker joins with the bootstrap token of its own user-data and
//!   becomes Ready; three controllers join under the S3 join lock, etcd has
//!   three members, and a lost controller's replacement prunes its stale
//!   member and joins (tests/it/controllers_real_node.rs, with issue 38's
//!   faults of real_node/faults.rs on the same cluster); a bootstrap that fails (a plugin's unknown
//!   kube-apiserver flag) publishes its status object and `kube-aws status
//!   --wait` names node and step; the addon reconciler's timer installs the
//!   plan on the real controller: every built-in addon that runs here, with
//!   the real helm client and charts, on one cluster (real_node/addons.rs),
//!   and a broken addon named by `up --wait` (below). The moto side is
//!   tests/it/real_node/bed.rs.
//!
//! Not covered (docs/testing.md, "The real-node bed", says what is left): the
//! API through a real load balancer's name (the bed has none: each test
//! reads a controller's own address), the VPC CNI (the bed's bridge CNI with
//! routes between nodes instead: the worker test), pulls from a registry
//! (images are imported). A host that cannot run the bed (not
//! root, no runc, no cgroups, no image) fails these tests, naming what is
//! missing.

use std::time::{Duration, Instant};

use crate::common::nodebed::{self, Node};
use std::process::Output;

use crate::common::output_text;

/// The preflight checks `kubeadm init` must skip in a node container, each
/// for a reason of the bed's, not of kube-aws's:
/// - SystemVerification: the kernel is the VM's own, without /lib/modules in
///   the container, and the host's cgroups are v1, which kubeadm 1.35's
///   validator reports as an error unless skipped (kubelet is told
///   `failCgroupV1: false` for the same reason).
const IGNORE_PREFLIGHT: &[&str] = &["SystemVerification"];

/// How long each stage may take on a loaded 2-core machine.
const BOOT_LIMIT: Duration = Duration::from_secs(120);
const READY_LIMIT: Duration = Duration::from_secs(300);

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

mod addons;
pub(crate) mod bed;
pub(crate) mod faults;
pub(crate) mod upgrade;

use bed::{BedNode, MotoBed, READY_LIMIT as BOOT_READY_LIMIT};

/// The three controllers of `bed`'s controller group booted as a cluster
/// comes up: the first takes the init lock and `kubeadm init`s (the bed has
/// no load balancer: the API's name is its address, so it must be the one
/// that initialises); the second and third start together once it holds
/// the init lock and race for the join lock. Returns the group's
/// instances, the nodes and their followed boots, once all three are Ready.
pub(crate) fn boot_three_controllers(
    bed: &MotoBed,
    limit: Duration,
) -> (Vec<bed::Instance>, [BedNode; 3], Vec<bed::Followed>) {
    let insts = bed.instances(&format!("{}-controller", bed::BED_CLUSTER));
    assert_eq!(insts.len(), 3, "{insts:?}");
    let api_ip = insts[0].ip.clone();
    let c1 = bed.boot("controller", "ControllerRole", &insts[0], &api_ip, pod_net(0, &[]));
    c1.wait_step("kubeadm-init", limit);
    let c2 = bed.boot(
        "controller",
        "ControllerRole",
        &insts[1],
        &api_ip,
        pod_net(1, &[(&c1, 0)]),
    );
    let c3 = bed.boot(
        "controller",
        "ControllerRole",
        &insts[2],
        &api_ip,
        pod_net(2, &[(&c1, 0), (&c2, 1)]),
    );
    let f = bed::expect_all_ready(&[&c1, &c2, &c3], limit);
    (insts, [c1, c2, c3], f)
}

/// The S3 join lock is not left behind (each join, upgrade, renewal and
/// reconfiguration releases it).
pub(crate) fn expect_join_lock_released(bed: &MotoBed) {
    let keys = bed.aws(&[
        "s3api",
        "list-objects-v2",
        "--bucket",
        bed::BED_BUCKET,
        "--query",
        "Contents[].Key",
    ]);
    assert!(
        !keys.to_string().contains("/bootstrap/join-lock"),
        "the join lock was left in S3: {keys}"
    );
}

/// The checks every controller booted from its user-data passes: cloud-init
/// finishes clean, containerd runs on the node program's config.
fn check_booted_controller(ctl: &BedNode) {
    // The node program returns (after its signal) and cloud-init finishes
    // without an error in any module.
    let done = ctl.node.wait_for(
        "cloud-init done",
        "cloud-init status --wait >/dev/null 2>&1; cloud-init status --long | grep -qx 'status: done'",
        BOOT_LIMIT,
    );
    if let Err(e) = done {
        panic!(
            "{e}\n{}",
            output_text(&ctl.node.exec(&["cloud-init", "status", "--long"]))
        );
    }
    // containerd runs with the node program's config (restarted on it), not
    // the image's: kubeadm's pause image, the systemd cgroup driver, and
    // restrict_oom_score_adj (this host lacks CAP_SYS_RESOURCE, or it runs
    // as on EC2 without it).
    let config = std::fs::read_to_string(ctl.node.rootfs().join("etc/containerd/config.toml")).unwrap();
    assert!(
        !config.contains("scripts/install-nodebed.sh")
            && config.contains("SystemdCgroup = true")
            && config.contains("sandbox_image = \"registry.k8s.io/pause:3.10.1\""),
        "containerd's config is not the node program's:\n{config}"
    );
}

/// Pod traffic between nodes (the worker on `pod_net(1, …)`, the controller
/// on `pod_net(0, …)`): a pod on the worker, reached from the controller
/// across the routes, and a pod on the controller writing to it through a
/// Service, by its ClusterIP or, with `by_name`, by its DNS name (which needs
/// CoreDNS running: a cloud controller manager must have initialized a
/// node). What it said, for the test's summary. Not covered: the VPC CNI,
/// which gives pods VPC addresses on the nodes' network interfaces (it
/// needs EC2).
pub(crate) fn pod_to_service_to_pod(bed: &MotoBed, ctl: &BedNode, wk: &BedNode, by_name: bool) -> String {
    // Pod traffic between nodes: a pod on the worker's pod network (a static
    // pod from the etcd image already on the node, listening on 2379: no
    // scheduler or taint in the way) answers the controller across the
    // routes, as a Service's backend on another node would.
    let image = ctl
        .node
        .sh("sed -n 's/^ *image: *//p' /etc/kubernetes/manifests/etcd.yaml");
    wk.node.sh(&format!(
        "cat >/etc/kubernetes/manifests/podnet.yaml <<'EOF'\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: podnet, namespace: kube-system, labels: {{app: podnet}}}}\n\
         spec:\n  containers:\n  \
         - name: etcd\n    image: {}\n    command: [etcd, --data-dir=/tmp/etcd, \
         --listen-client-urls=http://0.0.0.0:2379, --advertise-client-urls=http://127.0.0.1:2379, \
         --listen-peer-urls=http://127.0.0.1:2380]\nEOF",
        image.trim()
    ));
    // The address of a node's ready pod sandbox whose name starts with `name`.
    let ip_of = |name: &str| {
        format!(
            "crictl pods --name '^{name}' --state ready -q | head -1 | \
             xargs -r crictl inspectp -o go-template --template '{{{{.status.network.ip}}}}'"
        )
    };
    wk.node
        .wait_for(
            "the podnet pod's address",
            &format!("[ -n \"$({})\" ]", ip_of("podnet-")),
            Duration::from_secs(120),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let pod_ip = wk.node.sh(&ip_of("podnet-")).trim().to_string();
    assert!(
        pod_ip.starts_with("10.244.1."),
        "the worker's pod has {pod_ip:?}, not an address of its range"
    );
    let across = ctl
        .node
        .wait_for(
            "the worker's pod from the controller",
            &format!("curl -fsS --max-time 5 http://{pod_ip}:2379/health | grep -q true"),
            Duration::from_secs(90),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    // Pod to Service to pod, across the nodes (issue 41): a pod on the
    // controller's network (a static pod from the same image, running
    // etcdctl) writes a key through the Service `podnet`: kube-proxy's rules
    // on the controller send the connection to the worker's pod (the
    // Service's one endpoint: the mirror pod carries the manifest's label),
    // across the routes. The worker's pod then holds the key.
    let svc = bed.kubectl(
        ctl,
        &[
            "-n",
            "kube-system",
            "create",
            "service",
            "clusterip",
            "podnet",
            "--tcp=2379:2379",
        ],
    );
    assert!(svc.status.success(), "{}", output_text(&svc));
    let cluster_ip = bed.kubectl(
        ctl,
        &[
            "-n",
            "kube-system",
            "get",
            "service",
            "podnet",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    let cluster_ip = String::from_utf8_lossy(&cluster_ip.stdout).trim().to_string();
    assert!(
        cluster_ip
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.octets()[0] == 10 && (96..112).contains(&ip.octets()[1])),
        "the Service's ClusterIP {cluster_ip:?} is not of kubeadm's default service range 10.96.0.0/12"
    );
    // By the Service's name, the client asks the cluster's DNS (CoreDNS,
    // through kube-dns's Service) first.
    let target = if by_name {
        "podnet.kube-system.svc.cluster.local".to_string()
    } else {
        cluster_ip.clone()
    };
    ctl.node.sh(&format!(
        "cat >/etc/kubernetes/manifests/podnet-client.yaml <<'EOF'\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: podnet-client, namespace: kube-system}}\nspec:\n  \
         containers:\n  - name: etcdctl\n    image: {}\n    command: [etcdctl, \
         --endpoints=http://{target}:2379, --dial-timeout=5s, put, written-by, controller-pod]\nEOF",
        image.trim()
    ));
    let t_svc = Instant::now();
    // base64 of "written-by" and of "controller-pod" (etcd's JSON gateway).
    let through_service = ctl.node.wait_for(
        "the key the controller's pod wrote through the Service",
        &format!(
            "curl -fsS --max-time 5 -X POST -d '{{\"key\":\"d3JpdHRlbi1ieQ==\"}}' \
             http://{pod_ip}:2379/v3/kv/range | grep -q Y29udHJvbGxlci1wb2Q="
        ),
        Duration::from_secs(150),
    );
    if let Err(e) = through_service {
        panic!(
            "{e}\n--- the client pod ---\n{}\n--- the Service's endpoints ---\n{}",
            ctl.node.sh(
                "crictl ps -a --name etcdctl -q | head -1 | xargs -r crictl logs 2>&1 | tail -20; \
                 crictl pods --name podnet-client"
            ),
            output_text(&bed.kubectl(ctl, &["-n", "kube-system", "get", "endpointslices,pods", "-o", "wide"]))
        );
    }
    let client_ip = ctl.node.sh(&ip_of("podnet-client-"));
    assert!(
        client_ip.trim().starts_with("10.244.0."),
        "the client pod has {client_ip:?}, not an address of the controller's pod range"
    );
    format!(
        "the controller reached the worker's pod {pod_ip} {:.1}s after it had an address; \
         the controller's pod {} wrote through the Service ({target}) in {:.1}s",
        across.as_secs_f64(),
        client_ip.trim(),
        t_svc.elapsed().as_secs_f64()
    )
}

/// The Ready condition of `name` as the API of `ctl` says it.
pub(crate) fn node_ready_status(bed: &MotoBed, ctl: &BedNode, name: &str) -> Output {
    bed.kubectl(
        ctl,
        &[
            "get",
            "node",
            name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
    )
}

/// A controller booted from its rendered user-data (`kube-aws up` of a
/// one-controller work tree against moto, listening on the bed's bridge,
/// then the node boots from the controller launch template's user-data as
/// EC2 would run it: cloud-init runs the stub, which fetches the
/// cloud-config from moto's S3 and runs the node program, whose steps
/// (IMDS, secrets from SSM, S3 and KMS, packages, kubeadm init under the S3
/// init lock) bring the node to Ready), checked: cloud-init's end, the API
/// name pin, the Node Ready, the init lock, `kube-aws kubeconfig`, Secrets
/// encrypted at rest and audited. Run inside
/// real_node/upgrade.rs's Dex flag test, on its controller before the
/// update (one boot for both: issue 37).
pub(crate) fn check_rendered_controller(
    test: &str,
    bed: &MotoBed,
    inst: &bed::Instance,
    ctl: &BedNode,
    f: &bed::Followed,
) {
    use std::process::Command;
    let ready = f.outcome.clone().unwrap();
    check_booted_controller(ctl);
    // kubeadm init reached its own API server by the cluster's name (an NLB
    // fails open to controllers that do not answer yet: apihost.py), and the
    // pin is gone once the boot ended.
    assert!(
        ctl.log()
            .contains(&format!("resolves to this controller ({})", inst.ip)),
        "no API name pin in the boot log:\n{}",
        ctl.log()
    );
    let hosts = ctl.node.sh("cat /etc/hosts");
    assert!(!hosts.contains("# kube-aws:"), "the pin outlived the boot:\n{hosts}");
    // The node as the cluster sees it, through admin.conf from the host.
    let get = node_ready_status(bed, ctl, &inst.dns);
    assert_eq!(
        String::from_utf8_lossy(&get.stdout).trim(),
        "True",
        "{}",
        output_text(&get)
    );
    // The init lock the node took in moto's S3.
    let keys = bed.aws(&[
        "s3api",
        "list-objects-v2",
        "--bucket",
        bed::BED_BUCKET,
        "--query",
        "Contents[].Key",
    ]);
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
    let dir = bed.dir();
    let kc = bed.kube_aws(&["kubeconfig", "--file", dir.join("kubeconfig").to_str().unwrap()]);
    assert!(kc.status.success(), "kube-aws kubeconfig: {}", output_text(&kc));
    let with_kube_aws = |args: &[&str]| {
        Command::new(&bed.kubectl)
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig"))
            .args(["--server", &format!("https://{}:6443", ctl.node.ip)])
            .args(["--tls-server-name", &bed.api.to_lowercase()])
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
        nodes.status.success() && String::from_utf8_lossy(&nodes.stdout).trim() == format!("node/{}", inst.dns),
        "kubectl get nodes with kube-aws kubeconfig's credentials: {}",
        output_text(&nodes)
    );
    check_secrets_encrypted_and_audited(bed, ctl);
    eprintln!(
        "{test}: up against moto {:.1}s; node boot to Ready {:.1}s; steps (from node start): {}",
        bed.up.as_secs_f64(),
        ready.as_secs_f64(),
        f.times()
    );
}

/// On a booted controller (issue 36 §4): the static pod's API server reads
/// the EncryptionConfiguration the node program placed from the KMS-encrypted
/// bundle, so a Secret is `k8s:enc:secretbox:v1:` in the real etcd (read
/// with etcdctl inside the etcd container); the rewrite service records the
/// key once every control-plane node's API server has the flag; the audit
/// log on the node's disk records the Secret's creation, without its value.
fn check_secrets_encrypted_and_audited(bed: &MotoBed, ctl: &BedNode) {
    const VALUE: &str = "real-node-plaintext-4c1d";
    let made = bed.kubectl(
        ctl,
        &[
            "create",
            "secret",
            "generic",
            "enc-check",
            "-n",
            "default",
            &format!("--from-literal=v={VALUE}"),
        ],
    );
    assert!(made.status.success(), "{}", output_text(&made));
    let raw = ctl
        .node
        .sh("id=$(crictl ps --name '^etcd$' --state running -q | head -1); \
         crictl exec \"$id\" etcdctl --endpoints https://127.0.0.1:2379 --cacert /etc/kubernetes/pki/etcd/ca.crt \
         --cert /etc/kubernetes/pki/etcd/healthcheck-client.crt --key /etc/kubernetes/pki/etcd/healthcheck-client.key \
         get /registry/secrets/default/enc-check --print-value-only | head -c 200 | od -An -c | tr -d ' \\n'");
    assert!(raw.starts_with("k8s:enc:secretbox:v1:key-"), "etcd holds: {raw}");
    assert!(!raw.contains(VALUE), "plaintext in etcd: {raw}");
    let mode = ctl.node.sh("stat -c %a /etc/kubernetes/pki/encryption.json");
    assert_eq!(mode.trim(), "600");
    // The rewrite waits until every kube-apiserver's pod reports Ready,
    // which its mirror pod says a little after the API first answers (a
    // run right after the boot said "wait: … is not Ready" once, in CI):
    // the service is started again, as its timer would, until it records.
    let start = Instant::now();
    let (recorded, journal) = loop {
        let run = ctl.node.exec(&["systemctl", "start", "kube-aws-encryption.service"]);
        assert!(run.status.success(), "{}", output_text(&run));
        let journal = ctl
            .node
            .sh("journalctl -u kube-aws-encryption --no-pager -o cat | tail -3");
        let recorded = bed.kubectl(
            ctl,
            &[
                "get",
                "configmap",
                "kube-aws-encryption",
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.data.rewrittenWith}",
            ],
        );
        if recorded.status.success() || start.elapsed() > Duration::from_secs(120) {
            break (recorded, journal);
        }
        std::thread::sleep(Duration::from_secs(5));
    };
    assert!(
        String::from_utf8_lossy(&recorded.stdout).starts_with("secretbox:key-"),
        "{}\n{journal}",
        output_text(&recorded)
    );
    let audit = ctl
        .node
        .sh("grep -c '\"resource\":\"secrets\".*\"name\":\"enc-check\"' /var/log/kubernetes/audit/audit.log || true");
    assert!(
        audit.trim().parse::<u32>().unwrap_or(0) >= 1,
        "no audit event for the Secret: {audit}"
    );
    let leaked = ctl
        .node
        .sh(&format!("grep -c {VALUE} /var/log/kubernetes/audit/audit.log || true"));
    assert_eq!(leaked.trim(), "0", "a Secret's value in the audit log");
}

/// The cluster.yaml lines of a worker pool of `count` nodes.
fn pool(count: u32) -> String {
    format!("worker:\n  nodePools:\n    - name: general\n      count: {count}\n")
}

/// Each node of a test's cluster gets its own pod range on the bridge CNI
/// (host-local IPAM): 10.244.<k>.0/24 for its k-th node, inside kube-aws's
/// podSubnet (10.244.0.0/16), with routes between the nodes' namespaces
/// (scripts/nodebed/node.sh start, NODEBED_POD_SUBNET and NODEBED_PEERS). It is
/// not the node's `spec.podCIDR` (the controller manager allocates that in
/// its own order): on EC2 the VPC CNI gives pods VPC addresses and ignores
/// podCIDR too.
pub(crate) fn pod_net(k: u32, peers: &[(&BedNode, u32)]) -> Vec<(&'static str, String)> {
    let peers: Vec<String> = peers
        .iter()
        .map(|(n, j)| format!("{} {} 10.244.{j}.0/24", n.node.name, n.node.ip))
        .collect();
    vec![
        ("NODEBED_POD_SUBNET", format!("10.244.{k}.0/24")),
        ("NODEBED_PEERS", peers.join(";")),
    ]
}

/// A pool of one worker: its node boots from the worker launch template's
/// user-data beside the controller (as an auto scaling group's would), takes
/// the bootstrap token from its own secrets (decrypted under the worker
/// role, IAM enforced), joins through the API's name (the controller, here)
/// with the CA hash kube-aws computed, and becomes Ready.
#[test]
fn a_worker_joins_with_the_bootstrap_token_and_becomes_ready() {
    let test = "real_node::a_worker_joins_with_the_bootstrap_token_and_becomes_ready";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let t0 = Instant::now();
    let (bed, up) = MotoBed::up_waiting(test, &image, &pool(1), &[]);
    let ctl_inst = bed.instances(&format!("{}-controller", bed::BED_CLUSTER)).remove(0);
    let wk_inst = bed.instances(&format!("{}-worker-general", bed::BED_CLUSTER)).remove(0);
    let ctl = bed.boot("controller", "ControllerRole", &ctl_inst, &ctl_inst.ip, pod_net(0, &[]));
    let wk = bed.boot(
        "worker-general",
        "WorkerRole",
        &wk_inst,
        &ctl_inst.ip,
        pod_net(1, &[(&ctl, 0)]),
    );
    let mut f = bed::expect_all_ready(&[&ctl, &wk], BOOT_READY_LIMIT);
    let (cf, wf) = (f.remove(0), f.remove(0));

    // The worker joined: no init or join lock, no control plane of its own.
    let steps: Vec<&str> = wf.steps.iter().map(|(s, _)| s.as_str()).collect();
    assert!(
        steps.contains(&"kubeadm-join") && !steps.iter().any(|s| s.contains("lock") || s.contains("init")),
        "the worker's steps: {steps:?}"
    );
    // With the join token the controller minted and published after its
    // init (issue 27: never the bundle's init token, which workers cannot decrypt).
    let join = std::fs::read_to_string(wk.node.rootfs().join("var/lib/kube-aws/kubeadm.yaml")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(join.split("\n---\n").next().unwrap()).unwrap();
    let discovery = &doc["discovery"]["bootstrapToken"];
    let token = discovery["token"].as_str().unwrap_or_default();
    assert_eq!(doc["kind"], "JoinConfiguration", "{join}");
    assert!(
        discovery["apiServerEndpoint"].as_str() == Some(&format!("{}:6443", bed.api.to_lowercase()))
            && discovery["caCertHashes"][0]
                .as_str()
                .unwrap_or_default()
                .starts_with("sha256:"),
        "the worker's discovery: {discovery}"
    );
    let tokens = ctl
        .node
        .sh("kubeadm token list --kubeconfig /etc/kubernetes/admin.conf -o jsonpath='{.token}{\"\\n\"}'");
    assert!(
        !token.is_empty() && tokens.lines().any(|t| t.trim() == token),
        "the worker's token is not one the controller's kubeadm lists"
    );
    let published = bed.aws(&[
        "ssm",
        "get-parameter",
        "--name",
        &format!("/kube-aws/{}/bootstrap-token", bed::BED_CLUSTER),
        "--with-decryption",
    ]);
    let record: serde_json::Value =
        serde_json::from_str(published["Parameter"]["Value"].as_str().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(
        record["token"].as_str(),
        Some(token),
        "the worker did not join with the published token"
    );
    // It never decrypted the bundle's init token; the join token is in its store (for blanking).
    wk.node.sh(
        "test ! -e /run/kube-aws/secrets/kubeadm/bootstrap-token && test -s /run/kube-aws/secrets/kubeadm/join-token",
    );
    // The cluster sees it Ready, as a worker (no control-plane role), with
    // its kubelet's client certificate from the TLS bootstrap.
    let get = node_ready_status(&bed, &ctl, &wk_inst.dns);
    assert_eq!(
        String::from_utf8_lossy(&get.stdout).trim(),
        "True",
        "{}",
        output_text(&get)
    );
    let labels = bed.kubectl(
        &ctl,
        &["get", "node", &wk_inst.dns, "-o", "jsonpath={.metadata.labels}"],
    );
    assert!(
        labels.status.success()
            && !String::from_utf8_lossy(&labels.stdout).contains("node-role.kubernetes.io/control-plane"),
        "{}",
        output_text(&labels)
    );
    // (a link to an absolute path in the node: read there)
    wk.node.sh("test -s /var/lib/kubelet/pki/kubelet-client-current.pem");
    // The controller routes the worker's pod range through the worker's
    // address (node.sh's stand-in for a VPC route table).
    let route = ctl.node.sh("ip route show 10.244.1.0/24");
    assert!(
        route.contains(&format!("via {}", wk.node.ip)),
        "the controller's route to the worker's pods: {route}"
    );
    // Pod traffic between nodes, and pod to Service to pod (by its
    // ClusterIP: no cloud controller manager here, so CoreDNS stays Pending).
    let net = pod_to_service_to_pod(&bed, &ctl, &wk, false);
    eprintln!("{test}: {net}");
    // Each node signalled SUCCESS to its group's CreationPolicy under its own
    // role once Ready (moto holds the stack until then: moto_signals.py), and
    // `kube-aws up --wait`, running since before the boot, ends with the
    // stack created.
    let (code, up_text) = up.finish(Duration::from_secs(180));
    assert!(
        code == Some(0) && up_text.contains("is CREATE_COMPLETE"),
        "kube-aws up --wait (exit {code:?}):\n{up_text}"
    );
    // The boot timelines (scripts/bench-node.sh prints them).
    eprintln!(
        "--- boot timeline ---\n{}{}--- end ---",
        bed::timeline(&ctl, &cf),
        bed::timeline(&wk, &wf)
    );
    eprintln!(
        "{test}: up {:.1}s; controller Ready {:.1}s ({}); worker Ready {:.1}s ({}); test {:.1}s",
        bed.up.as_secs_f64(),
        cf.outcome.clone().unwrap().as_secs_f64(),
        cf.times(),
        wf.outcome.clone().unwrap().as_secs_f64(),
        wf.times(),
        t0.elapsed().as_secs_f64()
    );
}

/// etcd's members (name, peer URLs, learner) as `ctl`'s etcd lists them
/// (its v3 JSON gateway, with the apiserver's etcd client certificate).
pub(crate) fn etcd_members(ctl: &BedNode) -> Vec<serde_json::Value> {
    let out = ctl.node.sh("curl -fsS --cacert /etc/kubernetes/pki/etcd/ca.crt \
         --cert /etc/kubernetes/pki/apiserver-etcd-client.crt --key /etc/kubernetes/pki/apiserver-etcd-client.key \
         -X POST -d '{}' https://127.0.0.1:2379/v3/cluster/member/list");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["members"].as_array().cloned().unwrap_or_default()
}

/// The hosts of the members' peer URLs, sorted.
pub(crate) fn member_ips(members: &[serde_json::Value]) -> Vec<String> {
    let mut ips: Vec<String> = members
        .iter()
        .flat_map(|m| m["peerURLs"].as_array().cloned().unwrap_or_default())
        .filter_map(|u| {
            let u = u.as_str()?.trim_start_matches("https://").to_string();
            Some(u.rsplit_once(':').map(|(h, _)| h.to_string()).unwrap_or(u))
        })
        .collect();
    ips.sort();
    ips
}

/// Waits until `ctl`'s etcd lists exactly `want` (sorted member addresses),
/// none of them a learner; panics with the last list otherwise.
pub(crate) fn expect_members(ctl: &BedNode, want: &[&str], limit: Duration) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    let start = Instant::now();
    loop {
        let m = etcd_members(ctl);
        if member_ips(&m) == want && !m.iter().any(|m| m["isLearner"] == true) {
            return;
        }
        assert!(start.elapsed() < limit, "etcd members {m:?}, not {want:?}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// A test plugin that brings a flag kube-apiserver does not know, and
/// shortens kubeadm's wait for a healthy control plane from its 4 minutes to
/// one (a setting of this test's, not of the bed's).
const BAD_FLAG_PLUGIN: &str = r#"apiVersion: kube-aws/v1
kind: Plugin
metadata:
  name: badflag
  version: 0.1.0
  description: an unknown kube-apiserver flag (tests/it/real_node.rs)
enabledByDefault: true
spec:
  kubernetes:
    apiServer:
      flags: {no-such-flag: "true"}
  nodes:
    controller:
      files:
        - path: /etc/kube-aws/kubeadm.d/60-badflag.json
          content: |
            [{"kind": "InitConfiguration", "timeouts": {"controlPlaneComponentHealthCheck": "1m0s"}}]
"#;

/// A controller whose bootstrap fails (kube-apiserver exits on the plugin's
/// unknown flag, so `kubeadm init` never sees a healthy control plane)
/// publishes its failure report, the status object
/// `status/nodes/<instance id>.json`, naming the step, and signals FAILURE
/// to its group's CreationPolicy (under its own role, IAM enforced);
/// `kube-aws up --wait`, running since before the node booted, ends with
/// the failure and names the node and the step, and so does `kube-aws
/// status --wait` afterwards. moto honours the CreationPolicy and the signal
/// only through tests/support/moto_signals.py (its header says what it does
/// not model: the policy's timeout, the rollback's deletes).
#[test]
fn a_node_whose_bootstrap_fails_reports_the_step_and_up_wait_names_it() {
    let test = "real_node::a_node_whose_bootstrap_fails_reports_the_step_and_up_wait_names_it";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let t0 = Instant::now();
    let (bed, up) = MotoBed::up_waiting(test, &image, "", &[("badflag", BAD_FLAG_PLUGIN)]);
    let inst = bed.instances(&format!("{}-controller", bed::BED_CLUSTER)).remove(0);
    let ctl = bed.boot("controller", "ControllerRole", &inst, &inst.ip, vec![]);
    let f = ctl.follow(BOOT_READY_LIMIT);
    let failed_at = f.outcome.as_ref().err().cloned().unwrap_or_default();
    assert!(
        failed_at.contains("step kubeadm-init failed (exit "),
        "{}",
        ctl.explain(&f, "expected kubeadm init to fail")
    );
    // kube-apiserver refused the flag (kubeadm's own output is kept in a
    // private file: it may show the bootstrap token).
    let apiserver = ctl
        .node
        .sh("crictl ps -a --name kube-apiserver -q | head -1 | xargs -r crictl logs 2>&1 | tail -5");
    assert!(
        apiserver.contains("unknown flag: --no-such-flag"),
        "kube-apiserver said: {apiserver}"
    );
    // The status object (published after the failure line is logged: wait).
    let key = format!("clusters/{}/status/nodes/{}.json", bed::BED_CLUSTER, inst.id);
    let path = bed.dir().join("report.json");
    let start = Instant::now();
    loop {
        let (ok, out) = crate::node_iam_moto::aws_as(
            &bed.env,
            &bed.admin,
            &[
                "s3api",
                "get-object",
                "--bucket",
                bed::BED_BUCKET,
                "--key",
                &key,
                path.to_str().unwrap(),
            ],
        );
        if ok {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no status object {key}: {out}\n{}",
            ctl.log()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(report["step"], "kubeadm-init", "{report}");
    assert_eq!(report["instanceId"], inst.id.as_str(), "{report}");
    assert_eq!(report["nodeName"], inst.dns.as_str(), "{report}");
    assert_eq!(report["role"], "controller", "{report}");
    assert!(report["exitCode"].as_i64().unwrap_or(0) != 0, "{report}");
    // No secret in it: the bootstrap token (in the node's secrets store).
    let token = ctl.node.sh("cat /run/kube-aws/secrets/kubeadm/bootstrap-token");
    assert!(
        !token.trim().is_empty() && !report.to_string().contains(token.trim()),
        "the failure report holds the bootstrap token"
    );
    // `kube-aws up --wait` ends with the group's failure and names the node
    // and the step.
    let headline = format!(
        "node {} ({}, controller) failed at step kubeadm-init",
        inst.dns, inst.id
    );
    let (code, up_text) = up.finish(Duration::from_secs(180));
    assert!(
        code.is_some_and(|c| c != 0) && up_text.contains(&headline) && up_text.contains("FAILURE signal"),
        "kube-aws up --wait (exit {code:?}), expected the group's FAILURE and {headline:?}:\n{up_text}"
    );
    let said = up_text.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    eprintln!("{test}: kube-aws up --wait ended (exit {code:?}): {said}");
    // So does `kube-aws status --wait` afterwards.
    let st = bed.kube_aws(&["status", "--wait"]);
    let text = output_text(&st);
    assert!(
        text.contains("failed nodes:") && text.contains(&headline),
        "kube-aws status --wait:\n{text}"
    );
    eprintln!(
        "{test}: failed at kubeadm-init {:.1}s after the node started ({}); test {:.1}s",
        ctl.booted.elapsed().as_secs_f64(),
        f.times(),
        t0.elapsed().as_secs_f64()
    );
}

/// The last lines of the kube-system pods matching `selector`, for a failure's message.
fn system_logs(bed: &MotoBed, ctl: &BedNode, selector: &str) -> String {
    output_text(&bed.kubectl(ctl, &["-n", "kube-system", "logs", "-l", selector, "--tail=30"]))
}

/// The helm client as a user names it in cluster.yaml: the test bed's helm
/// in a tarball served over HTTP. The server and its directory live as long
/// as the returned value; `yaml` is the `helm:` section that names it.
pub(crate) struct ServedHelm {
    _dir: tempfile::TempDir,
    _http: crate::common::Server,
    pub yaml: String,
    /// The tarball's sha256, as `helm.binary.sha256` gives it.
    pub sha256: String,
}

pub(crate) fn served_helm(test: &str) -> ServedHelm {
    let dir = tempfile::tempdir().unwrap();
    let helm = crate::common::testbed::bin_dir(test)
        .expect("the control-plane test bed")
        .join("helm");
    let tgz = crate::common::charts::helm_tarball(&std::fs::read(&helm).unwrap());
    std::fs::write(dir.path().join("helm.tgz"), &tgz).unwrap();
    let http = crate::common::start_http(dir.path());
    let sha256 = kube_aws::chart::cache::sha256_hex(&tgz);
    let yaml = format!(
        "helm:\n  binary: {{url: \"http://127.0.0.1:{}/helm.tgz\", sha256: {sha256}, version: {}}}\n",
        http.port,
        kube_aws::render::HelmBinary::default_v3().version
    );
    ServedHelm {
        _dir: dir,
        _http: http,
        yaml,
        sha256,
    }
}

/// The one controller of an addon test, booted from its user-data with
/// `env` (scripts/nodebed/node.sh start settings): once the node program has
/// restarted containerd on its config (the step after `containerd`), the
/// pod identity webhook's image and each of `images` go into its store (a
/// baked AMI would hold them, as the bed's image holds the control
/// plane's); then Ready, and the bed's part for the node done: no cloud
/// controller manager runs here (its image and EC2 API are not here), so
/// the test gives the Node the addresses a CCM would, from its
/// registration on, removes the taint kubelet's `--cloud-provider=external`
/// puts on the node, and the control-plane taint (the bed has no workers: the one
/// controller takes the addons, as a single-node cluster's would).
pub(crate) fn addon_controller(
    bed: &MotoBed,
    env: Vec<(&'static str, String)>,
    images: &[&std::path::Path],
) -> (bed::Instance, BedNode, bed::Followed) {
    addon_controller_with(bed, env, images, false)
}

/// As `addon_controller`; with `cloud_controller`, the node's
/// `node.cloudprovider.kubernetes.io/uninitialized` taint is left for the
/// cloud controller manager the plan runs (only the control-plane taint is
/// removed by the test).
pub(crate) fn addon_controller_with(
    bed: &MotoBed,
    env: Vec<(&'static str, String)>,
    images: &[&std::path::Path],
    cloud_controller: bool,
) -> (bed::Instance, BedNode, bed::Followed) {
    let inst = bed.instances(&format!("{}-controller", bed::BED_CLUSTER)).remove(0);
    let ctl = bed.boot("controller", "ControllerRole", &inst, &inst.ip, env);
    let f = if cloud_controller {
        ready_importing(bed, &ctl, images, BOOT_READY_LIMIT)
    } else {
        // No CCM: the node gets the addresses a CCM would give it as soon as
        // its Node is registered, as a CCM does. The kubelet asks for its
        // serving certificate once its Node has addresses, and `kubectl
        // logs` (the reconciler's diagnosis of a crashing container) needs
        // both: given after Ready, they came after the first helm wait of
        // the broken-addon test ended (stop 52's third run).
        let ready = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let start = Instant::now();
                while !ready.load(std::sync::atomic::Ordering::Relaxed) && start.elapsed() < BOOT_READY_LIMIT {
                    if give_cloud_node_addresses(bed, &ctl, &inst).status.success() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(2));
                }
            });
            struct Done<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let _done = Done(&ready);
            ready_importing(bed, &ctl, images, BOOT_READY_LIMIT)
        })
    };
    if !cloud_controller {
        cloud_node_addresses(bed, &ctl, &inst);
    }
    let mut taints = vec!["taint", "node", &inst.dns, "node-role.kubernetes.io/control-plane-"];
    if !cloud_controller {
        taints.push("node.cloudprovider.kubernetes.io/uninitialized-");
    }
    let untaint = bed.kubectl(&ctl, &taints);
    assert!(untaint.status.success(), "{}", output_text(&untaint));
    (inst, ctl, f)
}

/// Follows `node`'s boot to Ready (panicking with what it said otherwise)
/// while [`import_images`] puts `images` into its store: the boot does not
/// wait for the images, and each step is timed as it appears (followed
/// only after the import, every step before it would be timed at the
/// import's end, as the addon tests' timelines were until stop 51).
pub(crate) fn ready_importing(
    bed: &MotoBed,
    node: &BedNode,
    images: &[&std::path::Path],
    limit: std::time::Duration,
) -> bed::Followed {
    let f = std::thread::scope(|s| {
        let follow = s.spawn(|| node.follow(limit));
        import_images(bed, node, images);
        follow.join().unwrap()
    });
    if let Err(e) = &f.outcome {
        panic!("{}", node.explain(&f, e));
    }
    f
}

/// Once the node program of `node` (booting) has restarted containerd on its
/// config (the step after `containerd`), puts the pod identity webhook's
/// image (`webhook_image`, written once per bed) and each of `images` into
/// its store (a baked AMI would hold them, as the bed's image holds the
/// control plane's).
pub(crate) fn import_images(bed: &MotoBed, node: &BedNode, images: &[&std::path::Path]) {
    let webhook = bed.dir().join("webhook.tar");
    if !webhook.exists() {
        webhook_image(&webhook);
    }
    let images: Vec<&std::path::Path> = std::iter::once(webhook.as_path())
        .chain(images.iter().copied())
        .collect();
    while !node.log().contains("step plugin-units") {
        assert!(
            node.booted.elapsed() < BOOT_READY_LIMIT,
            "{}",
            node.explain(&node.follow(Duration::ZERO), "no plugin-units step")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut import = Vec::new();
    for (i, image) in images.iter().enumerate() {
        std::fs::copy(image, node.node.rootfs().join(format!("root/image-{i}.tar"))).unwrap();
        import.push(format!("ctr -n k8s.io images import /root/image-{i}.tar >/dev/null"));
    }
    node.node
        .wait_for(
            "the addon images imported",
            &import.join(" && "),
            Duration::from_secs(120),
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The pod identity webhook's image, as the rendered manifest names it,
/// written from the test bed's binary (built from source at the pinned
/// version by scripts/install-testbed.sh): one layer with /webhook.
fn webhook_image(out: &std::path::Path) {
    let bin = crate::common::testbed::bin_dir("webhook image")
        .expect("the control-plane test bed")
        .join("amazon-eks-pod-identity-webhook");
    let o = std::process::Command::new("python3")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/nodebed/oci_image.py"))
        .arg(out)
        .arg("public.ecr.aws/eks/amazon-eks-pod-identity-webhook:v0.6.17")
        .arg("--file")
        .arg(format!("{}=/webhook", bin.display()))
        .args(["--entrypoint", "/webhook"])
        .output()
        .unwrap();
    assert!(o.status.success(), "oci_image.py: {}", output_text(&o));
}

/// Waits for the AWS cloud controller manager (the plan's bootstrap
/// release, against moto's EC2) to initialize the node: its
/// `node.cloudprovider.kubernetes.io/uninitialized` taint gone, its
/// providerID `aws:///<zone>/<instance>`, its zone label and its addresses
/// from the instance (moto's private IP and DNS name). Returns the zone.
fn cloud_node_initialized(bed: &MotoBed, ctl: &BedNode, inst: &bed::Instance) -> String {
    let start = Instant::now();
    let node = loop {
        let o = bed.kubectl(ctl, &["get", "node", &inst.dns, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let tainted = v["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == "node.cloudprovider.kubernetes.io/uninitialized");
        if (!tainted && v["spec"]["providerID"].is_string()) || start.elapsed() > Duration::from_secs(240) {
            break v;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    let zone = node["metadata"]["labels"]["topology.kubernetes.io/zone"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let why = || {
        format!(
            "the cloud controller manager did not initialize {}: {node}\n{}\n{}",
            inst.dns,
            output_text(&bed.kubectl(ctl, &["-n", "kube-system", "get", "pods", "-o", "wide"])),
            system_logs(bed, ctl, "k8s-app=aws-cloud-controller-manager")
        )
    };
    assert!(zone.starts_with(bed::BED_REGION), "{}", why());
    assert_eq!(
        node["spec"]["providerID"].as_str(),
        Some(format!("aws:///{zone}/{}", inst.id).as_str()),
        "{}",
        why()
    );
    let has = |kind: &str, value: &str| {
        node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["type"] == kind && a["address"] == value)
    };
    assert!(
        has("InternalIP", &inst.ip) && has("InternalDNS", &inst.dns),
        "{}",
        why()
    );
    zone
}

/// The A records `server` (a DNS server's address, port 53) gives for
/// `name`, asked over UDP from inside the node (its host network, so a
/// Service address goes through kube-proxy's rules) by the node's python3:
/// the bed's image has no dig or nslookup. Empty when nothing answers.
fn dns_a(ctl: &BedNode, server: &str, name: &str) -> Vec<String> {
    const ASK: &str = r#"
import random, socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
qid = random.randrange(65536)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(q, (server, 53))
r = s.recv(4096)
if struct.unpack(">H", r[:2])[0] != qid:
    sys.exit("another query's answer")
count = struct.unpack(">H", r[6:8])[0]
i = len(q)
for _ in range(count):
    while r[i] not in (0,) and r[i] < 0xC0:
        i += r[i] + 1
    i += 2 if r[i] >= 0xC0 else 1
    kind, _, _, size = struct.unpack(">HHIH", r[i:i + 10])
    i += 10
    if kind == 1 and size == 4:
        print(socket.inet_ntoa(r[i:i + 4]))
    i += size
"#;
    let o = ctl.node.exec(&["python3", "-c", ASK, server, name]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The addresses the AWS cloud controller manager gives a node (its
/// private IP and DNS name), which no CCM sets here: metrics-server and
/// the apiserver (`kubectl logs`) dial the InternalIP first, and the
/// kubelet asks for a serving certificate naming them.
fn cloud_node_addresses(bed: &MotoBed, ctl: &BedNode, inst: &bed::Instance) {
    let patched = give_cloud_node_addresses(bed, ctl, inst);
    assert!(patched.status.success(), "{}", output_text(&patched));
}

/// `kubectl patch` of `inst`'s Node status with its addresses (fails while
/// the Node is not registered).
fn give_cloud_node_addresses(bed: &MotoBed, ctl: &BedNode, inst: &bed::Instance) -> Output {
    let addresses = format!(
        r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"{ip}"}},{{"type":"InternalDNS","address":"{dns}"}},{{"type":"Hostname","address":"{dns}"}}]}}}}"#,
        ip = inst.ip,
        dns = inst.dns
    );
    bed.kubectl(
        ctl,
        &[
            "patch",
            "node",
            &inst.dns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &addresses,
        ],
    )
}

/// Locks the work tree's charts (its plugins' and cluster.yaml's) to the
/// real upstream charts of `shared/data/charts`, in the cache `up` reads.
fn lock_shared_charts(env: &crate::common::MotoEnv, dir: &std::path::Path) {
    let cache = kube_aws::chart::ChartCache::new(env.home.path().join("cache/kube-aws/charts"));
    crate::common::charts::lock_to_shared_charts(dir, &cache, &crate::common::charts::shared_charts());
}
