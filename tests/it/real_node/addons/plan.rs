//! The plan's own addons on the shared cluster of
//! tests/it/real_node/addons.rs (the checks the test
//! `addons_the_plan_ccm_metrics_server_descheduler_webhook_run_up_wait_names_every_addon_and_a_worker_joins`
//! runs): the AWS cloud controller manager, cluster DNS, the installed
//! record, the helm client, the pod identity webhook, metrics-server with
//! the kubelet's serving certificate approved, the descheduler, `up
//! --wait`; then a worker joins and metrics-server answers for both nodes.
//! Not covered here: Dex and IRSA (their own files), the VPC CNI.

use super::*;

/// The plan's own addons on the shared cluster: the AWS cloud controller
/// manager initialized the node, cluster DNS answers, the installed record
/// names every release, the helm client is the one `up` published, the pod
/// identity webhook rolled out and mutates, metrics-server serves the
/// node's metrics (the kubelet's serving certificate approved by the
/// approver), a descheduler Job succeeded, and `up --wait` returned 0
/// naming every addon ready.
pub(super) fn the_plan_ccm_metrics_server_descheduler_and_webhook_run_and_up_wait_names_every_addon(c: &Cluster) {
    let (bed, ctl, inst) = (&c.bed, &c.ctl, &c.inst);
    let t0 = Instant::now();
    let zone = super::cloud_node_initialized(bed, ctl, inst);
    let t_initialized = t0.elapsed();
    // With the node initialized, CoreDNS (no toleration for the
    // uninitialized taint) schedules and serves the cluster's names through
    // its Service: the kubernetes Service's address, asked of kube-dns's.
    let svc = |ns: &str, name: &str| {
        let o = bed.kubectl(
            ctl,
            &["-n", ns, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}"],
        );
        assert!(o.status.success(), "{}", output_text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let (dns, api) = (svc("kube-system", "kube-dns"), svc("default", "kubernetes"));
    let start = Instant::now();
    let answer = loop {
        let a = super::dns_a(ctl, &dns, "kubernetes.default.svc.cluster.local");
        if !a.is_empty() || start.elapsed() > Duration::from_secs(180) {
            break a;
        }
        std::thread::sleep(Duration::from_secs(3));
    };
    assert_eq!(
        answer,
        vec![api.clone()],
        "kube-dns ({dns}) on kubernetes.default.svc.cluster.local:\n{}",
        output_text(&bed.kubectl(ctl, &["-n", "kube-system", "get", "pods", "-o", "wide"]))
    );
    let t_dns = t0.elapsed();

    let timer = ctl.node.sh("systemctl show -p ActiveState kube-aws-addons.timer");
    assert_eq!(timer.trim(), "ActiveState=active", "{timer}");
    // The installed record, in S3.
    let record = bed.status_object("addons/installed.json");
    assert!(
        record.contains("\"plan\"")
            && record.contains("pod-identity-webhook")
            && record.contains("MutatingWebhookConfiguration")
            && ADDONS.iter().all(|a| record.contains(&format!("\"{a}\""))),
        "the installed record: {record}"
    );
    // The helm client the node ran is the copy `up` published with the chart.
    bed.aws(&[
        "s3api",
        "head-object",
        "--bucket",
        bed::BED_BUCKET,
        "--key",
        &format!("clusters/{}/charts/{}.tgz", bed::BED_CLUSTER, c.helm_sha256),
    ]);
    // The webhook runs on the real controller, from the image built here.
    let rollout = bed.kubectl(
        ctl,
        &[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment/pod-identity-webhook",
            "--timeout=300s",
        ],
    );
    assert!(
        rollout.status.success(),
        "the webhook did not roll out: {}\n{}\n{}",
        output_text(&rollout),
        output_text(&bed.kubectl(ctl, &["-n", "kube-system", "get", "pods", "-o", "wide"])),
        output_text(&bed.kubectl(
            ctl,
            &[
                "-n",
                "kube-system",
                "describe",
                "pods",
                "-l",
                "app=pod-identity-webhook"
            ]
        ))
    );
    let t_rolled = t0.elapsed();
    // It mutates a pod whose service account names a role.
    let sa = bed.kubectl(ctl, &["create", "serviceaccount", "demo"]);
    assert!(sa.status.success(), "{}", output_text(&sa));
    let ann = bed.kubectl(
        ctl,
        &[
            "annotate",
            "serviceaccount",
            "demo",
            "eks.amazonaws.com/role-arn=arn:aws:iam::123456789012:role/demo",
        ],
    );
    assert!(ann.status.success(), "{}", output_text(&ann));
    let start = Instant::now();
    let env = loop {
        let o = bed.kubectl(
            ctl,
            &[
                "run",
                "demo",
                "--image=registry.k8s.io/pause:3.10.1",
                "--overrides={\"spec\":{\"serviceAccountName\":\"demo\"}}",
                "--dry-run=server",
                "-o",
                "jsonpath={.spec.containers[0].env}",
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if text.contains("AWS_ROLE_ARN") || start.elapsed() > Duration::from_secs(60) {
            break format!("{text}\n{}", output_text(&o));
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    assert!(
        env.contains("arn:aws:iam::123456789012:role/demo") && env.contains("AWS_WEB_IDENTITY_TOKEN_FILE"),
        "the webhook did not mutate the pod: {env}"
    );
    // metrics-server: the node's metrics through its APIService, scraped
    // from the kubelet over TLS (no --kubelet-insecure-tls).
    node_metrics(bed, ctl, &inst.dns, Duration::from_secs(180));
    let t_metrics = t0.elapsed();
    let top = bed.kubectl(ctl, &["top", "node", &inst.dns]);
    assert!(
        top.status.success() && String::from_utf8_lossy(&top.stdout).contains(&inst.dns),
        "kubectl top node: {}",
        output_text(&top)
    );
    // The kubelet's serving certificate is the approver's work.
    serving_certificate_approved(bed, ctl, &inst.dns);
    // The descheduler's CronJob (every minute here) runs its container to
    // completion: a Job of the release succeeds.
    let start = Instant::now();
    let jobs = loop {
        let o = bed.kubectl(
            ctl,
            &[
                "-n",
                "kube-system",
                "get",
                "jobs",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.succeeded}/{.status.failed}{\"\\n\"}{end}",
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let done = text.lines().any(|l| l.starts_with("descheduler-") && l.contains("=1/"));
        if done || start.elapsed() > Duration::from_secs(180) {
            break text;
        }
        std::thread::sleep(Duration::from_secs(5));
    };
    assert!(
        jobs.lines().any(|l| l.starts_with("descheduler-") && l.contains("=1/")),
        "no descheduler Job succeeded: {jobs}\n{}\n{}",
        output_text(&bed.kubectl(ctl, &["-n", "kube-system", "get", "cronjobs,jobs,pods", "-o", "wide"])),
        super::system_logs(bed, ctl, "app.kubernetes.io/instance=descheduler")
    );
    let t_descheduled = t0.elapsed();
    // `kube-aws up --wait`, running since before the boot, returned 0 once
    // the controllers' group and every addon's wait condition were
    // signalled, naming every addon ready.
    let (code, up_text) = &c.up;
    let named = |l: &&str| {
        l.contains(&format!(
            "is CREATE_COMPLETE; every addon is ready ({}): ",
            ADDONS.len()
        )) && ADDONS.iter().all(|a| l.contains(a))
    };
    assert!(
        *code == Some(0) && up_text.lines().any(|l| named(&l)),
        "kube-aws up --wait (exit {code:?}):\n{up_text}"
    );
    eprintln!(
        "plan: initialized by the cloud controller manager {:.1}s (zone {zone}); cluster DNS answering {:.1}s; \
         webhook rolled out {:.1}s; node metrics served {:.1}s; a descheduler run done {:.1}s, after the addons were ready",
        t_initialized.as_secs_f64(),
        t_dns.as_secs_f64(),
        t_rolled.as_secs_f64(),
        t_metrics.as_secs_f64(),
        t_descheduled.as_secs_f64(),
    );
}

/// Asserts that the approver (kube-aws-csr-approver on the controllers)
/// approved a kubelet-serving request of node `dns`.
fn serving_certificate_approved(bed: &MotoBed, ctl: &BedNode, dns: &str) {
    let csrs = bed.kubectl(ctl, &["get", "csr", "-o", "json"]);
    let csrs: serde_json::Value = serde_json::from_slice(&csrs.stdout).unwrap_or_default();
    let approved = csrs["items"].as_array().into_iter().flatten().any(|c| {
        c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
            && c["spec"]["username"] == format!("system:node:{dns}").as_str()
            && c["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["type"] == "Approved")
    });
    assert!(approved, "no approved kubelet-serving request of {dns}: {csrs}");
}

/// The node's metrics through metrics-server's APIService, asked for up to
/// `limit`: the answer, or a panic with what ran and metrics-server's log.
fn node_metrics(bed: &MotoBed, ctl: &BedNode, dns: &str, limit: Duration) -> String {
    let start = Instant::now();
    let path = format!("/apis/metrics.k8s.io/v1beta1/nodes/{dns}");
    let metrics = loop {
        let o = bed.kubectl(ctl, &["get", "--raw", &path]);
        if o.status.success() || start.elapsed() > limit {
            break o;
        }
        std::thread::sleep(Duration::from_secs(3));
    };
    assert!(
        metrics.status.success() && String::from_utf8_lossy(&metrics.stdout).contains("\"cpu\""),
        "no metrics of {dns} from metrics-server: {}\n{}\n{}",
        output_text(&metrics),
        output_text(&bed.kubectl(ctl, &["get", "nodes,csr", "-o", "wide"])),
        super::system_logs(bed, ctl, "app.kubernetes.io/name=metrics-server")
    );
    String::from_utf8_lossy(&metrics.stdout).into_owned()
}

/// A worker joins the shared cluster after the other checks (a scale-up by
/// hand, as the cluster-autoscaler would ask for one: the pool's group's
/// desired capacity raised to one, moto launching the instance), booted
/// from the worker launch template's user-data with the addon images
/// imported as on the controller (a pod may land on it). The cloud
/// controller manager initializes it as it did the controller, the
/// approver approves its kubelet's serving certificate, and metrics-server,
/// a pod on the controller, scrapes the worker's kubelet over TLS verified
/// with the cluster CA: a pod reaching another node, its answer routed back
/// to the controller's pod subnet (the bed's routes between nodes, in the
/// VPC CNI's place). `metrics.k8s.io` answers for every node and `kubectl
/// top nodes` lists both. Then pods across the nodes
/// (real_node/cluster.rs `pod_to_service_to_pod`): a pod on the worker answers the
/// controller, and a pod on the controller writes to it through a Service by
/// its DNS name, resolved by CoreDNS through kube-dns's Service, routed by
/// kube-proxy. Not covered: the VPC CNI itself; the pods there are static
/// pods from the etcd image (the bed has no image with a general client).
pub(super) fn a_worker_joins_and_metrics_server_answers_for_every_node(c: &Cluster) -> String {
    let (bed, ctl) = (&c.bed, &c.ctl);
    let t0 = Instant::now();
    let groups = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--filters",
        &format!("Name=tag-key,Values=k8s.io/cluster-autoscaler/{}", bed::BED_CLUSTER),
    ]);
    let group = groups["AutoScalingGroups"][0]["AutoScalingGroupName"]
        .as_str()
        .unwrap_or_else(|| panic!("no worker group: {groups}"))
        .to_string();
    bed.aws(&[
        "autoscaling",
        "set-desired-capacity",
        "--auto-scaling-group-name",
        &group,
        "--desired-capacity",
        "1",
    ]);
    let inst = bed.instances(&format!("{}-worker-general", bed::BED_CLUSTER)).remove(0);
    let wk = bed.boot(
        "worker-general",
        "WorkerRole",
        &inst,
        &c.inst.ip,
        super::pod_net(1, &[(ctl, 0)]),
    );
    let images: Vec<&Path> = c.images.iter().map(|p| p.as_path()).collect();
    let f = super::ready_importing(bed, &wk, &images, bed::READY_LIMIT);
    let t_ready = t0.elapsed();
    let zone = super::cloud_node_initialized(bed, ctl, &inst);
    let metrics = node_metrics(bed, ctl, &inst.dns, Duration::from_secs(240));
    let t_metrics = t0.elapsed();
    serving_certificate_approved(bed, ctl, &inst.dns);
    let top = bed.kubectl(ctl, &["top", "nodes"]);
    let listed = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success() && listed.contains(&inst.dns) && listed.contains(&c.inst.dns),
        "kubectl top nodes: {}",
        output_text(&top)
    );
    assert!(metrics.contains(&inst.dns), "{metrics}");
    // Pods across the two nodes, and a Service by its DNS name: CoreDNS
    // runs here (the cloud controller manager initialized the controller).
    let net = super::pod_to_service_to_pod(bed, ctl, &wk, true);
    format!(
        "worker: Ready {:.1}s after the scale-up ({}), initialized in {zone}; its metrics served {:.1}s; {net}",
        t_ready.as_secs_f64(),
        f.times(),
        t_metrics.as_secs_f64()
    )
}
