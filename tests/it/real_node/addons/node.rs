//! The nodes of tests/it/real_node/addons.rs (moved from real_node.rs): a
//! controller booted from its user-data with the addon images imported
//! into its containerd (a baked AMI would hold them), and the part of a
//! cloud controller manager the bed plays when none runs (the Node's
//! addresses, its taints); the checks of a node the AWS cloud controller
//! manager initialized and of the cluster's DNS; the helm client served
//! over HTTP as a user's `helm.binary` names it; the work tree's charts
//! locked to the shared upstream charts; the logs of a failing pod. No
//! test here.

use super::bed::READY_LIMIT as BOOT_READY_LIMIT;
use super::*;

/// The last lines of the logs of the pods whose directory under
/// /var/log/pods starts with `prefix` (`<namespace>_<pod name>`), read on
/// the node: `kubectl logs` needs the kubelet's serving certificate, which
/// no one may have approved yet when a step fails early.
pub(super) fn pod_logs(ctl: &BedNode, prefix: &str) -> String {
    ctl.node
        .sh(&format!("tail -n 30 /var/log/pods/{prefix}*/*/*.log 2>&1 || true"))
}

/// The last lines of the kube-system pods matching `selector`, for a failure's message.
pub(super) fn system_logs(bed: &MotoBed, ctl: &BedNode, selector: &str) -> String {
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
pub(super) fn cloud_node_initialized(bed: &MotoBed, ctl: &BedNode, inst: &bed::Instance) -> String {
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
pub(super) fn dns_a(ctl: &BedNode, server: &str, name: &str) -> Vec<String> {
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
pub(super) fn lock_shared_charts(env: &crate::common::MotoEnv, dir: &std::path::Path) {
    let cache = kube_aws::chart::ChartCache::new(env.home.path().join("cache/kube-aws/charts"));
    crate::common::charts::lock_to_shared_charts(dir, &cache, &crate::common::charts::shared_charts());
}
