//! Faults on the real-node bed (issue 38), run inside the tests that boot
//! the cluster they need, so that no second cluster is booted for them.
//!
//! `a_leaving_controller_holds_while_its_removal_would_lose_quorum`: three
//! controllers; one's etcd stops (its static pod manifest moved away: the
//! kubelet stops the member, the instance runs on, as a failed disk or a
//! crash-looping etcd would); another is terminated through its auto scaling
//! group (moto holds it in `Terminating:Wait` on the `kube-aws-etcd-member`
//! hook, which the test puts as the control-plane stack does: moto's
//! CloudFormation creates no lifecycle hook; tests/support/moto_lifecycle.py),
//! and its
//! IMDS then says `Terminated`, which its `kube-aws-lifecycle.service` acts
//! on. Removing its member would leave two members with one answering, so it
//! holds: the member stays, the cluster keeps its three members and a
//! quorum, and the node's status object says why (step `etcd-quorum-hold`).
//! Once the stopped member is back it removes its member and completes the
//! action, and etcd has the two others.
//!
//! Not covered: the hook's global timeout (moto does not model it), a roll
//! driven by CloudFormation (the bed terminates the instance itself), and
//! the kubelet's own restart of a crashed etcd (the manifest is moved away,
//! so nothing restarts it until the test puts it back).

use std::time::{Duration, Instant};

use super::bed::{expect_all_ready, BedNode, MotoBed, BED_BUCKET, BED_CLUSTER, READY_LIMIT};
use super::pod_net;
use super::{etcd_members, expect_members, member_ips};

const HELD: &str = "/root/etcd.yaml.held";

/// See the module header. `leaving` is terminated, `down` loses its etcd,
/// `watcher` is the third, whose etcd the test reads.
pub(crate) fn a_leaving_controller_holds_while_its_removal_would_lose_quorum(
    bed: &MotoBed,
    leaving: &mut BedNode,
    down: &BedNode,
    watcher: &BedNode,
) {
    let t0 = Instant::now();
    let all = [&watcher.inst.ip, &leaving.inst.ip, &down.inst.ip];
    expect_members(watcher, &all.map(String::as_str), Duration::from_secs(60));
    down.node.sh(&format!("mv /etc/kubernetes/manifests/etcd.yaml {HELD}"));
    let health = format!(
        "curl -fsS -m 3 --cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/apiserver-etcd-client.crt \
         --key /etc/kubernetes/pki/apiserver-etcd-client.key https://{}:2379/health",
        down.inst.ip
    );
    watcher
        .node
        .wait_for(
            "the stopped member not answering",
            &format!("! {health}"),
            Duration::from_secs(120),
        )
        .unwrap_or_else(|e| panic!("{e}"));

    // The control-plane stack's termination hook, as CloudFormation puts it
    // (moto's CloudFormation does not create AWS::AutoScaling::LifecycleHook).
    let group = group_of(bed, &leaving.inst.id);
    bed.aws(&[
        "autoscaling",
        "put-lifecycle-hook",
        "--auto-scaling-group-name",
        &group,
        "--lifecycle-hook-name",
        "kube-aws-etcd-member",
        "--lifecycle-transition",
        "autoscaling:EC2_INSTANCE_TERMINATING",
        "--heartbeat-timeout",
        "300",
        "--default-result",
        "CONTINUE",
    ]);
    let term = bed.aws(&[
        "autoscaling",
        "terminate-instance-in-auto-scaling-group",
        "--instance-id",
        &leaving.inst.id,
        "--no-should-decrement-desired-capacity",
    ]);
    assert!(term.to_string().contains(&leaving.inst.id), "{term}");
    bed.set_lifecycle_state(leaving, "Terminated");

    // It holds: the reason in its status object, its member still there.
    let key = format!("clusters/{BED_CLUSTER}/status/nodes/{}.json", leaving.inst.id);
    let start = Instant::now();
    let report = loop {
        let got = bed.aws_text(&["s3", "cp", &format!("s3://{BED_BUCKET}/{key}"), "-"]);
        if let Some(r) = got.filter(|r| r.contains("etcd-quorum-hold")) {
            break r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "no hold reported; the leaving controller's lifecycle service:\n{}",
            leaving
                .node
                .sh("journalctl --no-pager -u kube-aws-lifecycle.service | tail -20")
        );
        std::thread::sleep(Duration::from_secs(3));
    };
    assert!(report.contains("do not") && report.contains("quorum"), "{report}");
    let t_hold = t0.elapsed();
    // `kube-aws status` says so: the node, holding, and why.
    let status = crate::common::output_text(&bed.kube_aws(&["status"]));
    assert!(
        status.contains("nodes that failed or hold:")
            && status.contains(&format!(
                "({}, controller) is holding at step etcd-quorum-hold",
                leaving.inst.id
            )),
        "kube-aws status does not name the holding controller: {status}"
    );
    let members = etcd_members(watcher);
    assert_eq!(
        member_ips(&members).len(),
        3,
        "nothing removed while it holds: {members:?}"
    );
    let journal = leaving.node.sh("journalctl --no-pager -u kube-aws-lifecycle.service");
    assert!(journal.contains("holding the termination"), "{journal}");

    // The stopped member is back: the leaving one removes its member and goes.
    down.node.sh(&format!("mv {HELD} /etc/kubernetes/manifests/etcd.yaml"));
    expect_members(
        watcher,
        &[watcher.inst.ip.as_str(), down.inst.ip.as_str()],
        Duration::from_secs(300),
    );
    // etcd may refuse the removal for a few seconds after the member is
    // back (its strict reconfiguration check: "unhealthy cluster", 503): the
    // leaving controller keeps holding and tries again.
    if let Err(e) = leaving.node.wait_for(
        "the leaving controller's removal",
        "journalctl --no-pager -u kube-aws-lifecycle.service | grep -q 'leaving: removed etcd member'",
        Duration::from_secs(60),
    ) {
        panic!(
            "{e}\n{}",
            leaving
                .node
                .sh("journalctl --no-pager -u kube-aws-lifecycle.service | tail -20")
        );
    }
    let state = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-instances",
        "--instance-ids",
        &leaving.inst.id,
    ]);
    assert!(
        !state.to_string().contains("Terminating:Wait"),
        "the lifecycle action was completed: {state}"
    );
    eprintln!(
        "quorum hold: reported {:.1}s after the etcd stop began; the member removed {:.1}s after the test began",
        t_hold.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The name of the auto scaling group that holds instance `id`.
fn group_of(bed: &MotoBed, id: &str) -> String {
    let got = bed.aws(&["autoscaling", "describe-auto-scaling-instances", "--instance-ids", id]);
    got["AutoScalingInstances"][0]["AutoScalingGroupName"]
        .as_str()
        .unwrap_or_else(|| panic!("{id} is in no auto scaling group: {got}"))
        .to_string()
}

/// The group's instances as EC2 Auto Scaling sees them: (id, health, state),
/// sorted.
fn group_health(bed: &MotoBed, group: &str) -> Vec<(String, String, String)> {
    let g = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--auto-scaling-group-names",
        group,
    ]);
    let mut v: Vec<(String, String, String)> = g["AutoScalingGroups"][0]["Instances"]
        .as_array()
        .unwrap_or_else(|| panic!("no group {group}: {g}"))
        .iter()
        .map(|i| {
            let s = |k: &str| i[k].as_str().unwrap_or("?").to_string();
            (s("InstanceId"), s("HealthStatus"), s("LifecycleState"))
        })
        .collect();
    v.sort();
    v
}

/// The HTTP status of `path` on the node's own API server (000: no answer).
fn api_code(n: &BedNode, path: &str) -> String {
    let out = n.node.exec(&[
        "curl",
        "-sk",
        "-m",
        "3",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("https://127.0.0.1:6443{path}"),
    ]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// How many kube-apiserver containers the node's containerd has had (a
/// kubelet restart of it adds one).
fn apiserver_containers(n: &BedNode) -> usize {
    n.node
        .sh("crictl --runtime-endpoint unix:///run/containerd/containerd.sock ps -a --name '^kube-apiserver$' -q")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// `a_whole_cluster_readyz_outage_costs_no_controller_and_no_data` (issue 38,
/// "planned restarts never cost a controller"): three controllers; two
/// members' etcd stop at once (their static pod manifests moved away, as a
/// restart of etcd does for its duration), so etcd loses its quorum and
/// every API server's `/readyz` fails, for two minutes. On EC2 the network
/// load balancer's target group stops routing to them (it checks `/readyz`);
/// the controller group checks EC2 status only (render/cfn/nodes.rs,
/// `HealthCheckType: EC2`), and nothing in kube-aws marks a running
/// controller unhealthy (health.py does only after a failed bootstrap). So:
/// every sample of the outage has the same three instances, Healthy and
/// InService; no etcd member is removed (the survivors' lifecycle watch
/// prunes only members whose instance is gone); once the members are back,
/// every API server answers `/readyz` again within a bound (measured and
/// printed), and a ConfigMap written before is there.
///
/// Not covered: the load balancer itself (the bed has none: `/readyz` is
/// read on each controller), EC2's own status checks (moto runs none), and
/// a renewal or reconfiguration on every controller at once (each takes
/// about 80 to 190 s per controller here, serialised by its lock: the
/// renewal and reconfiguration tests run one controller).
pub(crate) fn a_whole_cluster_readyz_outage_costs_no_controller_and_no_data(bed: &MotoBed, ctls: [&BedNode; 3]) {
    let t0 = Instant::now();
    let [via, a, b] = ctls;
    let group = &group_of(bed, &via.inst.id);
    let cm = bed.kubectl(
        via,
        &[
            "create",
            "configmap",
            "outage-marker",
            "-n",
            "default",
            "--from-literal=kept=yes",
        ],
    );
    assert!(cm.status.success(), "{}", crate::common::output_text(&cm));
    let before = group_health(bed, group);
    assert_eq!(before.len(), 3, "{before:?}");
    for (id, health, state) in &before {
        assert!(health == "Healthy" && state == "InService", "{id}: {health} {state}");
    }
    let ips: Vec<&str> = ctls.iter().map(|c| c.inst.ip.as_str()).collect();
    expect_members(via, &ips, Duration::from_secs(60));
    let restarts_before: Vec<usize> = ctls.iter().map(|c| apiserver_containers(c)).collect();

    // Two of three members stop: no quorum, no /readyz anywhere.
    for n in [a, b] {
        n.node.sh(&format!("mv /etc/kubernetes/manifests/etcd.yaml {HELD}"));
    }
    for n in ctls {
        if let Err(e) = n.node.wait_for(
            "its API server's /readyz failing",
            "! curl -fsk -m 3 https://127.0.0.1:6443/readyz >/dev/null",
            Duration::from_secs(180),
        ) {
            for m in [a, b] {
                m.node.sh(&format!("mv {HELD} /etc/kubernetes/manifests/etcd.yaml"));
            }
            panic!("{e}");
        }
    }
    let outage = Instant::now();
    let t_down = t0.elapsed();
    let mut samples = 0;
    let mut livez_failed = 0;
    let mut readyz_ok = 0;
    while outage.elapsed() < Duration::from_secs(120) {
        let now = group_health(bed, group);
        samples += 1;
        if now != before {
            for m in [a, b] {
                m.node.sh(&format!("mv {HELD} /etc/kubernetes/manifests/etcd.yaml"));
            }
            panic!(
                "the group changed during the outage ({:.0}s in): {now:?}, before {before:?}",
                outage.elapsed().as_secs_f64()
            );
        }
        for n in ctls {
            livez_failed += usize::from(api_code(n, "/livez") != "200");
            readyz_ok += usize::from(api_code(n, "/readyz") == "200");
        }
        std::thread::sleep(Duration::from_secs(10));
    }
    let held_for = outage.elapsed();

    // The members are back: every API server ready again, within a bound.
    for n in [a, b] {
        n.node.sh(&format!("mv {HELD} /etc/kubernetes/manifests/etcd.yaml"));
    }
    let back = Instant::now();
    let mut ready_after = Vec::new();
    for n in ctls {
        n.node
            .wait_for(
                "its API server's /readyz answering again",
                "curl -fsk -m 3 https://127.0.0.1:6443/readyz >/dev/null",
                Duration::from_secs(300).saturating_sub(back.elapsed()),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        ready_after.push(format!("{:.1}s", back.elapsed().as_secs_f64()));
    }
    let t_back = back.elapsed();
    assert_eq!(group_health(bed, group), before, "the group after the outage");
    expect_members(via, &ips, Duration::from_secs(60));
    let got = bed.kubectl(
        via,
        &[
            "get",
            "configmap",
            "outage-marker",
            "-n",
            "default",
            "-o",
            "jsonpath={.data.kept}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "yes",
        "the ConfigMap written before the outage: {}",
        crate::common::output_text(&got)
    );
    let restarts: Vec<usize> = ctls
        .iter()
        .zip(&restarts_before)
        .map(|(c, b)| apiserver_containers(c) - b)
        .collect();
    assert_eq!(readyz_ok, 0, "an API server answered /readyz without etcd's quorum");
    eprintln!(
        "readyz outage: every /readyz failing {:.1}s after the stop; held {:.1}s ({samples} samples of the group, \
         unchanged; /livez failed in {livez_failed} of {} reads; kube-apiserver containers restarted by the kubelet: \
         {restarts:?}); every /readyz ok {:.1}s after etcd's members were put back ({ready_after:?}); {:.1}s in all",
        t_down.as_secs_f64(),
        held_for.as_secs_f64(),
        samples * 3,
        t_back.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// A ConfigMap's `v`, or None when it does not exist.
/// None when the API says it is not found; an API that does not answer yet
/// (a restored controller's API server still settling, seen under load) is
/// asked again for up to two minutes.
fn configmap_value(bed: &MotoBed, via: &BedNode, name: &str) -> Option<String> {
    let start = Instant::now();
    loop {
        let got = bed.kubectl(
            via,
            &["get", "configmap", name, "-n", "default", "-o", "jsonpath={.data.v}"],
        );
        if got.status.success() {
            return Some(String::from_utf8_lossy(&got.stdout).into_owned());
        }
        let said = crate::common::output_text(&got);
        if said.contains("NotFound") || said.contains("not found") {
            return None;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the API did not answer for ConfigMap {name}: {said}"
        );
        std::thread::sleep(Duration::from_secs(3));
    }
}

/// A chart of one ConfigMap (its value `v`), for the restore's real releases.
fn write_restore_chart(bed: &MotoBed) -> std::path::PathBuf {
    let dir = bed.dir().join("restore-chart");
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: restore-demo\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(dir.join("values.yaml"), "v: \"1\"\n").unwrap();
    std::fs::write(
        dir.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-v\ndata:\n  v: {{ .Values.v | quote }}\n",
    )
    .unwrap();
    dir
}

/// `an_ha_restore_on_three_new_controllers_brings_the_snapshot_back` (issue
/// 38, "restores that reconcile", on real nodes): the cluster's controllers
/// (`olds`, every etcd member among them) take a snapshot (the backup
/// service of the first, as its timer would). Before it, a ConfigMap is
/// written and a real helm release `demo` installed (the control-plane
/// bed's helm 3, a chart of one ConfigMap); after it, another ConfigMap,
/// `demo` upgraded to revision 2 and a release `ghost` installed. The
/// installed-addons record names both at their wait conditions, as an
/// earlier reconciler run writes it. `kube-aws restore --snapshot KEY
/// --yes` (as the admin, against moto) writes the request and terminates
/// every controller; the old nodes are gone (their containers stopped);
/// the group launches three; the first booted takes the restore lock,
/// restores the snapshot and `kubeadm init`s on it, the other two join it
/// (booted once it has, as the bed's API name is its address).
/// Then etcd has the three new members only, the ConfigMap written before
/// the snapshot is there and the one written after is not; helm says `demo`
/// is at revision 1 and knows no `ghost`; and the new controllers'
/// reconciler matches the record to what helm holds (helm_release.py
/// `match_restored`): it names exactly the releases `helm list -A` shows,
/// none of them current, so the reconciler brings each to the plan.
///
/// Not covered: the old controllers' termination hooks (moto's
/// CloudFormation creates no lifecycle hook; the instances go at once), a
/// release brought back to the plan by the reconciler (the plan on this bed
/// has no releases, so no helm client is published for the nodes: the
/// reconciler's upgrade of what the snapshot holds is reconcile.py's unit
/// tests and the reconciler's real-node test), the load balancer (the first
/// new controller's address stands for the API's name).
pub(crate) fn an_ha_restore_on_three_new_controllers_brings_the_snapshot_back(
    bed: &MotoBed,
    named: &str,
    olds: Vec<BedNode>,
    first_pod_range: u32,
) -> [BedNode; 3] {
    let t0 = Instant::now();
    let via = &olds[0];
    let cm = |name: &str| {
        let o = bed.kubectl(
            via,
            &["create", "configmap", name, "-n", "default", "--from-literal=v=1"],
        );
        assert!(o.status.success(), "{}", crate::common::output_text(&o));
    };
    cm("before-snapshot");
    // Real helm releases (the control-plane bed's helm 3, a chart of one
    // ConfigMap, so that no pod waits on the bed's uninitialized taint):
    // `demo` installed before the snapshot, upgraded after it; `ghost`
    // installed after it.
    let chart = write_restore_chart(bed);
    let chart = chart.to_str().unwrap();
    let helm = |node: &BedNode, args: &[&str]| {
        let o = bed.helm(node, args);
        assert!(o.status.success(), "helm {args:?}: {}", crate::common::output_text(&o));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    helm(via, &["install", "demo", chart, "-n", "demo", "--create-namespace"]);
    // A snapshot now, from `via`'s member, and the key it was written to. Not
    // the backup timer's service: it writes only on the etcd leader and only
    // when a snapshot is due, and succeeds without writing otherwise (after
    // the renewal fault's etcd restarts the leader may be another member:
    // stop 45's CI run restored an older snapshot and lost this ConfigMap).
    // (As a login would run it: /etc/environment has the bed's AWS
    // endpoint, moto, as every unit has it; node.sh.)
    let backup = via.node.sh(
        "set -a; . /etc/environment; set +a; /opt/kube-aws/bin/kube-aws-node etcd-backup --now 2>&1; echo \"exit $?\"",
    );
    let key = backup
        .lines()
        .find_map(|l| l.strip_prefix("kube-aws: etcd backup ok: "))
        .unwrap_or_else(|| panic!("the etcd backup --now: {backup}"))
        .trim()
        .to_string();
    assert!(backup.trim_end().ends_with("exit 0"), "the etcd backup --now: {backup}");
    let prefix = format!("clusters/{BED_CLUSTER}/etcd/");
    assert!(key.starts_with(&prefix), "the snapshot {key} is not under {prefix}");
    cm("after-snapshot");
    helm(via, &["upgrade", "demo", chart, "-n", "demo", "--set", "v=2"]);
    helm(via, &["install", "ghost", chart, "-n", "ghost", "--create-namespace"]);
    let record_key = format!("clusters/{BED_CLUSTER}/status/addons/installed.json");
    let record = serde_json::json!({
        "plan": "0123abcd", "secretsVersions": [], "manifestObjects": [], "holder": via.inst.id,
        "updatedAt": "2026-12-04T00:00:00Z",
        "releases": [
            {"name": "demo", "namespace": "demo", "waitCondition": "DemoReady", "secrets": "h1"},
            {"name": "ghost", "namespace": "ghost", "waitCondition": "GhostReady", "secrets": "h2"},
        ],
    });
    let put = |key: &str, file: &str, body: &serde_json::Value| {
        let path = bed.dir().join(file);
        std::fs::write(&path, body.to_string()).unwrap();
        bed.aws(&[
            "s3api",
            "put-object",
            "--bucket",
            BED_BUCKET,
            "--key",
            key,
            "--body",
            path.to_str().unwrap(),
        ]);
    };
    put(&record_key, "installed-before-restore.json", &record);

    // The addon installer's lease, held by an old controller for ten more
    // minutes: a reconciler run cut off mid-install by the loss of every
    // controller (CI saw one; its new reconcilers waited out the expiry,
    // past this test's 300 s). The new controllers take it over because EC2
    // lists its holder's instance as gone (lease.py, etcd.gone).
    let lease_key = format!("clusters/{BED_CLUSTER}/bootstrap/addons-lease");
    let lost_holder = via.inst.id.clone();
    let until = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(600));
    let lease = serde_json::json!({
        "holder": format!("{}/4242", via.inst.id), "instance": via.inst.id, "run": "cut-off",
        "expiresAt": until.to_string(), "released": false,
    });
    put(&lease_key, "lease-before-restore.json", &lease);

    let known: Vec<String> = bed.instances(named).into_iter().map(|i| i.id).collect();
    let out = bed.kube_aws(&["restore", "--snapshot", &key, "--yes"]);
    let said = crate::common::output_text(&out);
    assert!(out.status.success(), "kube-aws restore: {said}");
    for o in olds.iter().filter(|o| known.contains(&o.inst.id)) {
        assert!(
            said.contains(&o.inst.id),
            "restore did not terminate {}: {said}",
            o.inst.id
        );
    }
    let old_ips: Vec<String> = olds.iter().map(|o| o.inst.ip.clone()).collect();
    drop(olds);
    let news: Vec<_> = bed
        .instances(named)
        .into_iter()
        .filter(|i| !known.contains(&i.id))
        .collect();
    assert_eq!(news.len(), 3, "the group's replacements: {news:?}");
    let t_boot = Instant::now();
    let k = first_pod_range;
    let api_ip = news[0].ip.clone();
    let n1 = bed.boot("controller", "ControllerRole", &news[0], &api_ip, pod_net(k, &[]));
    n1.wait_step("kubeadm-init", READY_LIMIT + Duration::from_secs(120));
    let n2 = bed.boot(
        "controller",
        "ControllerRole",
        &news[1],
        &api_ip,
        pod_net(k + 1, &[(&n1, k)]),
    );
    let n3 = bed.boot(
        "controller",
        "ControllerRole",
        &news[2],
        &api_ip,
        pod_net(k + 2, &[(&n1, k), (&n2, k + 1)]),
    );
    let f = expect_all_ready(&[&n1, &n2, &n3], READY_LIMIT + Duration::from_secs(120));
    let t_ready = t_boot.elapsed();
    let log = n1.log();
    assert!(
        log.contains("took the restore lock and restores") && log.contains(&key),
        "the first replacement did not restore {key}: {}",
        f[0].times()
    );
    // The others join the restored cluster (the request's status names it
    // served by then, or they join it as the request says).
    for (n, fi) in [(&n2, &f[1]), (&n3, &f[2])] {
        assert!(
            fi.steps.iter().any(|(s, _)| s == "kubeadm-join") && !n.log().contains("took the restore lock"),
            "{} did not join the restored cluster: {}",
            n.inst.id,
            fi.times()
        );
    }
    expect_members(
        &n1,
        &[n1.inst.ip.as_str(), n2.inst.ip.as_str(), n3.inst.ip.as_str()],
        Duration::from_secs(120),
    );
    // The joiners deleted the old controllers' etcd Pods before their
    // `kubeadm join` (upgrade.py `forget_stale_etcd_pods`): on a quiet bed
    // the first join found only those and failed ("error syncing endpoints
    // with etcd") until they did.
    let stale_pods: Vec<String> = [&n2, &n3]
        .iter()
        .flat_map(|n| {
            n.log()
                .lines()
                .filter(|l| l.contains("deleting the etcd Pod"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let members = member_ips(&etcd_members(&n1));
    assert!(
        !members.iter().any(|m| old_ips.contains(m)),
        "an old member is left: {members:?}"
    );
    assert_eq!(
        configmap_value(bed, &n1, "before-snapshot").as_deref(),
        Some("1"),
        "the ConfigMap written before the snapshot"
    );
    assert_eq!(
        configmap_value(bed, &n1, "after-snapshot"),
        None,
        "a ConfigMap written after the snapshot came back"
    );
    // helm's own view of the restored cluster: `demo` at the snapshot's
    // revision, `ghost` never installed.
    let history: serde_json::Value =
        serde_json::from_str(&helm(&n1, &["history", "demo", "-n", "demo", "-o", "json"])).unwrap();
    let last = history.as_array().and_then(|h| h.last()).cloned().unwrap_or_default();
    assert_eq!(
        (last["revision"].as_i64(), last["status"].as_str()),
        (Some(1), Some("deployed")),
        "demo after the restore: {history}"
    );
    let ghost = bed.helm(&n1, &["status", "ghost", "-n", "ghost"]);
    assert!(
        !ghost.status.success() && crate::common::output_text(&ghost).contains("release: not found"),
        "ghost after the restore: {}",
        crate::common::output_text(&ghost)
    );
    // The record: reset by the restorer (`restoredFrom` the key, nothing
    // current), then matched by the new controllers' reconciler to the
    // releases the snapshot holds (helm_release.py `match_restored`): `ghost`
    // struck, `demo` kept to be brought to the plan.
    let read_record = || {
        let got = bed
            .aws_text(&["s3", "cp", &format!("s3://{BED_BUCKET}/{record_key}"), "-"])
            .expect("the installed record after the restore");
        serde_json::from_str::<serde_json::Value>(&got).unwrap_or_else(|e| panic!("{e}: {got}"))
    };
    let t_match = Instant::now();
    let doc = loop {
        let doc = read_record();
        if doc["restoredFrom"].is_null() || t_match.elapsed() > Duration::from_secs(300) {
            break doc;
        }
        std::thread::sleep(Duration::from_secs(5));
    };
    assert!(
        doc["restoredFrom"].is_null() && doc["plan"] != "0123abcd",
        "no reconciler matched the record to the restored releases within 300 s: {doc}\n{}",
        n1.node
            .sh("journalctl --no-pager -u kube-aws-addons.service | tail -n 30")
    );
    // (helm list after the record was matched: the node has no helm to
    // uninstall `demo` with, the plan having no releases on this bed.)
    let names = |list: &serde_json::Value| -> std::collections::BTreeSet<(String, String)> {
        let field = |r: &serde_json::Value, k: &str| r[k].as_str().unwrap_or_default().to_string();
        let items = list.as_array().cloned().unwrap_or_default();
        items
            .iter()
            .map(|r| (field(r, "name"), field(r, "namespace")))
            .collect()
    };
    let took_over = [&n1, &n2, &n3].iter().any(|n| {
        n.node
            .sh("journalctl --no-pager -u kube-aws-addons.service")
            .contains(&format!("EC2 lists its instance {lost_holder} as gone: taking it over"))
    });
    assert!(
        took_over,
        "no new controller took over the lease of the lost {lost_holder}: {}",
        n1.node
            .sh("journalctl --no-pager -u kube-aws-addons.service | tail -n 30")
    );
    let present = names(&serde_json::from_str(&helm(&n1, &["list", "-A", "-o", "json"])).unwrap());
    let recorded = names(&doc["releases"]);
    assert_eq!(recorded, present, "the record against helm's releases: {doc}");
    assert_eq!(doc["releases"][0]["waitCondition"], "", "{doc}");
    assert_eq!(doc["releases"][0]["secrets"], "", "{doc}");
    eprintln!(
        "HA restore of {key}: three new controllers Ready {:.1}s after the first booted (restorer: {}; \
         joiners: {}; {}); the record matched to helm's releases {present:?} {:.1}s after they were; \
         stale etcd Pods deleted by the joiners: {stale_pods:?}; {:.1}s in all",
        t_ready.as_secs_f64(),
        f[0].times(),
        f[1].times(),
        f[2].times(),
        t_match.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    [n1, n2, n3]
}

/// `a_renewal_restart_on_every_controller_at_once_costs_no_controller`
/// (issue 38, "planned restarts never cost a controller"): three
/// controllers; `kube-aws-node certs --force` starts on all three at the
/// same moment (as the daily timers of controllers booted together would,
/// on the day their certificates come due). Each renews kubeadm's
/// certificates and restarts its four static pods one at a time, etcd
/// included, and each takes the cluster's join lock for it (certs.py
/// `S3Lock`): one controller restarts at a time. Sampled every 2 s during
/// the renewals: each controller's own `/readyz`, and whether any of them
/// answers (what the network load balancer, which routes to the ready ones,
/// would serve). Checked: every sample had a controller ready (the API was
/// never down), each controller's own unready time is bounded (measured and
/// printed), the group kept the same three Healthy instances, etcd the same
/// three members, and all three renewed.
///
/// Not covered: the load balancer itself (the bed has none; "any ready" is
/// the test's reading of the three). The reconfiguration's restarts on
/// every controller at once are the next fault, run last on the cluster.
pub(crate) fn a_renewal_restart_on_every_controller_at_once_costs_no_controller(bed: &MotoBed, ctls: [&BedNode; 3]) {
    let group = group_of(bed, &ctls[0].inst.id);
    let said = restarts_on_every_controller_at_once(
        bed,
        &group,
        ctls,
        "systemctl reset-failed kube-aws-forced-renewal.service 2>/dev/null; \
         systemd-run --unit kube-aws-forced-renewal --no-block /opt/kube-aws/bin/kube-aws-node certs --force",
        "kube-aws-forced-renewal.service",
        "renewed ",
    );
    eprintln!("renewal restarts on every controller at once: {said}");
}

/// `a_reconfiguration_on_every_controller_at_once_costs_no_controller`
/// (issue 38, "planned restarts never cost a controller"): three
/// controllers up; a plugin bringing Dex's OIDC flags on kube-apiserver is
/// added to the work tree and `kube-aws update` publishes it (`rolls:
/// nothing`: the ClusterConfiguration travels in the addon bundle, not the
/// user data); then `kube-aws-reconfigure.service` starts on all three at
/// the same moment (as their timers could). Each takes the join lock,
/// uploads the ClusterConfiguration and writes its static pod manifests
/// again (reconfigure.py), so the API servers restart one at a time; sampled
/// as the renewal fault is. Checked: every sample had a ready API server,
/// each one's unready time bounded, the group unchanged while they ran, etcd
/// the same three members, and every running kube-apiserver has the flag.
///
/// Run last on its cluster: moto answers the update by recreating the
/// nested stacks whole (new roles, whose credentials each node gets again:
/// MotoBed::recredential; a group of the same name whose instances are
/// moto's new ones), so the faults that need the group to hold these
/// nodes come before it. Not covered: the load balancer (as above).
pub(crate) fn a_reconfiguration_on_every_controller_at_once_costs_no_controller(
    bed: &mut MotoBed,
    mut ctls: [BedNode; 3],
) {
    let t0 = Instant::now();
    let dir = bed.dir().join("plugins/oidcflags");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), super::upgrade::OIDC_PLUGIN).unwrap();
    let upd = bed.kube_aws(&["update", "--yes"]);
    let said = crate::common::output_text(&upd);
    assert!(upd.status.success(), "kube-aws update: {said}");
    assert!(
        said.contains("rolls: nothing: no instance is replaced, launched or terminated"),
        "{said}"
    );
    let t_update = t0.elapsed();
    for n in ctls.iter_mut() {
        bed.recredential(n, "ControllerRole");
    }
    // The group as moto recreated it (its instances moto's new ones).
    let now = bed.instances(&format!("{BED_CLUSTER}-controller"));
    let group = group_of(bed, &now.first().expect("no controller instance after the update").id);
    let said = restarts_on_every_controller_at_once(
        bed,
        &group,
        [&ctls[0], &ctls[1], &ctls[2]],
        "systemctl reset-failed kube-aws-reconfigure.service 2>/dev/null; \
         systemctl start --no-block kube-aws-reconfigure.service",
        "kube-aws-reconfigure.service",
        "kube-apiserver: manifest written again",
    );
    for n in &ctls {
        let running = n
            .node
            .sh("crictl ps --state running --name kube-apiserver -q | head -1 | xargs -r crictl inspect");
        assert!(
            running.contains(super::upgrade::ISSUER_FLAG),
            "{}'s running kube-apiserver has no {}",
            n.inst.dns,
            super::upgrade::ISSUER_FLAG
        );
    }
    eprintln!(
        "reconfiguration on every controller at once: the update {:.1}s; {said}",
        t_update.as_secs_f64()
    );
}

/// Runs `start` on the three controllers at the same moment and samples
/// each one's `/readyz` every 2 s while `unit` runs on any of them. Asserts
/// that every sample had a ready controller (what the network load
/// balancer, which routes to the ready ones, would serve), that each
/// controller's longest unready stretch is under 5 minutes, that the
/// group and etcd's members did not change, and that `unit` succeeded on
/// each with `done` in its journal. Returns what it measured.
fn restarts_on_every_controller_at_once(
    bed: &MotoBed,
    group: &str,
    ctls: [&BedNode; 3],
    start: &str,
    unit: &str,
    done: &str,
) -> String {
    let t0 = Instant::now();
    let before = group_health(bed, group);
    let ips: Vec<&str> = ctls.iter().map(|c| c.inst.ip.as_str()).collect();
    expect_members(ctls[0], &ips, Duration::from_secs(60));
    for n in ctls {
        n.node.sh(start);
    }
    let running = |n: &BedNode| {
        let s = n.node.sh(&format!("systemctl show -p ActiveState --value {unit}"));
        matches!(s.trim(), "active" | "activating")
    };
    let mut samples = 0usize;
    let mut none_ready = 0usize;
    let mut unready = [0usize; 3];
    let mut longest = [Duration::ZERO; 3];
    let mut since: [Option<Instant>; 3] = [None; 3];
    let mut changed = None;
    while ctls.iter().any(|n| running(n)) {
        assert!(
            t0.elapsed() < Duration::from_secs(1200),
            "{unit} did not end in 20 minutes"
        );
        let ready: Vec<bool> = ctls.iter().map(|n| api_code(n, "/readyz") == "200").collect();
        samples += 1;
        none_ready += usize::from(!ready.iter().any(|r| *r));
        for (k, r) in ready.iter().enumerate() {
            if *r {
                if let Some(s) = since[k].take() {
                    longest[k] = longest[k].max(s.elapsed());
                }
            } else {
                unready[k] += 1;
                since[k].get_or_insert_with(Instant::now);
            }
        }
        if samples.is_multiple_of(10) && changed.is_none() {
            let now = group_health(bed, group);
            if now != before {
                changed = Some(now);
            }
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let took = t0.elapsed();
    for (k, n) in ctls.iter().enumerate() {
        if let Some(s) = since[k].take() {
            longest[k] = longest[k].max(s.elapsed());
        }
        let result = n.node.sh(&format!("systemctl show -p Result --value {unit}"));
        let journal = n.node.sh(&format!("journalctl --no-pager -o cat -u {unit} | tail -15"));
        assert!(
            result.trim() == "success" && journal.contains(done),
            "{}'s {unit} ({}): {journal}",
            n.inst.dns,
            result.trim()
        );
    }
    assert_eq!(changed, None, "the group changed during {unit} (before: {before:?})");
    assert_eq!(group_health(bed, group), before, "the group after {unit}");
    expect_members(ctls[0], &ips, Duration::from_secs(60));
    assert_eq!(
        none_ready, 0,
        "{none_ready} of {samples} samples had no controller ready: the restarts overlapped"
    );
    // Each controller's own API server is unready only while its restarts
    // run (up to four, each up to the kubelet's 20 s look at the manifests,
    // then the start and the health check): bounded at 5 minutes.
    for (k, n) in ctls.iter().enumerate() {
        assert!(
            longest[k] < Duration::from_secs(300),
            "{}'s /readyz failed for {:.0}s in a row",
            n.inst.dns,
            longest[k].as_secs_f64()
        );
    }
    format!(
        "all done {:.1}s after they started; {samples} samples, none without a ready controller; each \
         controller's longest unready stretch {:?}s ({:?} unready samples)",
        took.as_secs_f64(),
        longest.map(|d| d.as_secs()),
        unready
    )
}
