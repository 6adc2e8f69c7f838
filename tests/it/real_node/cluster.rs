//! The helpers of tests/it/real_node.rs that its booting tests, the
//! cluster tests (tests/it/controllers_real_node.rs, real_node/upgrade.rs,
//! real_node/faults.rs) and the addon tests (real_node/addons.rs) share, on
//! the bed of real_node/bed.rs: three controllers booted as a cluster comes
//! up, each node's pod range and its routes (`pod_net`), etcd's members as
//! a controller lists them, the Ready condition of a node, pod traffic
//! between nodes and through a Service, and the checks of a controller
//! booted from its rendered user-data (cloud-init's end, the API name pin,
//! the init lock, `kube-aws kubeconfig`, Secrets encrypted at rest and
//! audited). No test here: each check runs inside the test that boots the
//! cluster it needs.

use super::*;

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
