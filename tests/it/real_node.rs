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
//! Not covered yet (docs/testing.md, "The real-node bed", says what is
//! left): booting from kube-aws's rendered user-data through cloud-init
//! (needs the aws CLI in the image, moto's S3 and an IMDS emulator), the node
//! program's steps, joining nodes, addons. The fakes of
//! tests/it/node_bootstrap.rs, node_secrets.rs and installer.rs still cover
//! those. A host that cannot run the bed (not root, no runc, no cgroups, no
//! image) fails these tests, naming what is missing.

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
