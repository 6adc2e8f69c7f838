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
mod cluster;
pub(crate) mod faults;
pub(crate) mod upgrade;

use bed::{BedNode, MotoBed, READY_LIMIT as BOOT_READY_LIMIT};
pub(crate) use cluster::{
    boot_three_controllers, check_rendered_controller, etcd_members, expect_join_lock_released, expect_members,
    member_ips, node_ready_status, pod_net, pod_to_service_to_pod,
};

/// The cluster.yaml lines of a worker pool of `count` nodes.
fn pool(count: u32) -> String {
    format!("worker:\n  nodePools:\n    - name: general\n      count: {count}\n")
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
