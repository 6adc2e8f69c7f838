//! An HA restore on the real-node bed (issue 38; the helpers of
//! tests/it/real_node/faults.rs), run inside
//! tests/it/controllers_real_node.rs's test once every controller is lost:
//! three new controllers bring the snapshot back (the function's header
//! says what it checks and what it does not cover).

use super::*;

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
