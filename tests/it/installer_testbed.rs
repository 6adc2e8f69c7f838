//! The addon reconciler, as rendered, run against the real control plane of
//! the test bed (etcd, kube-apiserver, controller manager, scheduler, and kwok
//! simulating a controller and two pools) with the real helm v3 client and
//! the real kubectl built by scripts/install-testbed.sh, and the real upstream
//! charts of `$KUBE_AWS_SHARED_DATA/charts` rendered with the built-in
//! plugins' values. S3, SSM and KMS are moto, through the real aws CLI: the
//! bundle, the charts, the plan pointer, the installer's lease (conditional
//! writes), the installed record, the status objects and the KMS-encrypted
//! secret bundle the reconciler decrypts before each run are real there.
//! Two of the tests run the reconciler as the controller with moto's IAM
//! enforced (`Bed::under_controller_role`: the rendered ControllerRole made
//! in moto's IAM, assumed, its session handed to the reconciler): a first
//! install, a repeat, a run after a reboot (tmpfs gone, secrets decrypted
//! again) and a plan that drops a release. moto checks each call's action
//! and, for S3, the object; other services' resources and conditions are
//! tests/it/node_iam.rs's to check.
//!
//! Not covered, and why:
//! - CloudFormation signals: moto ignores WaitConditions, so `aws
//!   cloudformation` calls go to a recording stand-in (a wrapper in front of
//!   the real aws CLI) that answers DescribeStackResource and records
//!   SignalResource; everything else reaches moto unchanged.
//! - Images and containers: kwok runs no container; its stages mark each
//!   scheduled pod Running and Ready. So `helm --wait` here proves the objects
//!   are accepted, scheduled onto nodes with the right labels and taints, and
//!   rolled out, not that the images start.
//! - The helm client download: the reconciler installs the test bed's helm
//!   (built from source at the version nodes pin) from a local tarball, whose
//!   sha256 the plan carries in place of the upstream tarball's.
//! - Helm v2 (Tiller cannot run on simulated nodes): tests/it/installer.rs keeps
//!   that path under recording fakes.

use crate::common;

use common::installer_bed::{secret_value, Bed, BUCKET, BUILT_INS, PREFIX};
use common::testbed;
use serde_json::Value;

#[test]
fn the_built_in_plan_installs_with_the_real_helm_on_the_real_control_plane() {
    let Some(cp) = testbed::shared("the_built_in_plan_installs_with_the_real_helm_on_the_real_control_plane") else {
        return;
    };
    let mut bed = Bed::new(cp.clone());
    bed.publish(BUILT_INS);
    // The reconciler runs as the controller, with moto's IAM enforced.
    bed.under_controller_role();
    let run = bed.reconcile();
    for (name, _, _) in &bed.releases {
        eprintln!("{name}: {}", bed.status(name));
    }
    assert_eq!(run.code, 0, "{run}");
    assert!(bed.releases.len() >= 4, "{:?}", bed.releases);
    for (name, ns, wc) in &bed.releases {
        let s = bed.status(name);
        assert_eq!(s["phase"], "ready", "{name}: {s}\n{run}");
        assert_eq!(bed.signalled(wc).as_deref(), Some("SUCCESS"), "{name}");
        // helm's own record of the release, from the API server.
        let list = cp
            .kubectl(&[
                "get",
                "secrets",
                "-n",
                ns,
                "-l",
                &format!("owner=helm,name={name},status=deployed"),
                "-o",
                "name",
            ])
            .unwrap();
        assert!(!list.trim().is_empty(), "{name}: no deployed helm release in {ns}");
    }
    // A release starts only once everything it depends on is ready, and the
    // bootstrap addons come first (status times are whole seconds).
    let status: std::collections::BTreeMap<String, Value> = bed
        .releases
        .iter()
        .map(|(n, _, _)| (n.clone(), bed.status(n)))
        .collect();
    for e in bed.plan["releases"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap();
        let started = status[name]["startedAt"].as_str().unwrap();
        let mut before: Vec<&str> = e["dependsOn"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| d.as_str().unwrap())
            .collect();
        if e["bootstrap"] != true {
            before.extend(
                bed.plan["releases"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|b| b["bootstrap"] == true)
                    .map(|b| b["name"].as_str().unwrap()),
            );
        }
        for d in before {
            let ready = status[d]["updatedAt"].as_str().unwrap();
            assert!(
                ready <= started,
                "{name} started at {started}, before {d} was ready at {ready}"
            );
        }
    }
    // The CNI chart's CRD is Established (the installer waited for it).
    let established = cp
        .kubectl(&[
            "get",
            "crd",
            "eniconfigs.crd.k8s.amazonaws.com",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ])
        .unwrap();
    assert_eq!(established, "True");
    // A plugin manifest (cluster-dump's CronJob) went in by server-side apply.
    let managers = cp
        .kubectl(&[
            "get",
            "cronjob",
            "-n",
            "kube-system",
            "cluster-dump",
            "-o",
            "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation}{\"\\n\"}{end}",
        ])
        .unwrap();
    assert!(
        managers.lines().any(|l| l.ends_with("/Apply")),
        "cluster-dump's CronJob was not server-side applied: {managers}"
    );
    // dex's secret parameters reached helm filled in from the controller's
    // store, and its manifests were all applied.
    let refs = bed.secret_references();
    assert!(refs.iter().any(|r| r.starts_with("kube-aws-secret.dex.")), "{refs:?}");
    let values = std::process::Command::new(cp.bin.join("helm"))
        .args(["get", "values", "dex", "-n"])
        .arg(&bed.releases.iter().find(|(n, _, _)| n == "dex").unwrap().1)
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .output()
        .unwrap();
    let values = String::from_utf8_lossy(&values.stdout);
    for r in refs.iter().filter(|r| r.starts_with("kube-aws-secret.dex.")) {
        assert!(
            values.contains(&secret_value(r)) && !values.contains(r.as_str()),
            "{r} not filled in dex's values:\n{values}"
        );
    }
    assert!(!run.stderr.contains("could not be applied"), "{run}");
    // moto's S3 took the lease's conditional writes: created (If-None-Match),
    // then released (If-Match its ETag); the record lists every release at its
    // wait condition.
    assert!(run.calls.contains("kms decrypt"), "{run}");
    let lease = bed.object("bootstrap/addons-lease");
    assert_eq!(lease["released"], true, "{lease}\n{run}");
    let record = bed.object("status/addons/installed.json");
    let mut recorded: Vec<(String, String)> = record["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().into(),
                r["waitCondition"].as_str().unwrap().into(),
            )
        })
        .collect();
    recorded.sort();
    let mut want: Vec<(String, String)> = bed.releases.iter().map(|(n, _, w)| (n.clone(), w.clone())).collect();
    want.sort();
    assert_eq!(recorded, want, "{record}");
    // A second tick with the same plan is a no-op: nothing installed, nothing signalled.
    let again = bed.reconcile();
    assert_eq!(again.code, 0, "{again}");
    assert!(
        !again.calls.contains("signal-resource") && !again.calls.contains("/charts/"),
        "{again}"
    );

    // A reboot (tmpfs empty: no decrypted secret, no unpacked plan), then a
    // plan that changes dex: the reconciler decrypts again under its role,
    // and dex is upgraded with its secrets filled in, never the references.
    std::fs::remove_dir_all(bed.path("node/run")).unwrap();
    bed.publish(&BUILT_INS.replace("connectorClientID: kube-aws-demo", "connectorClientID: kube-aws-demo-2"));
    let rebooted = bed.reconcile();
    assert_eq!(rebooted.code, 0, "{rebooted}");
    let (_, dex_ns, dex_wc) = bed.releases.iter().find(|(n, _, _)| n == "dex").unwrap().clone();
    assert_eq!(bed.signalled(&dex_wc).as_deref(), Some("SUCCESS"), "{rebooted}");
    let values = std::process::Command::new(cp.bin.join("helm"))
        .args(["get", "values", "dex", "-n", &dex_ns, "--kubeconfig"])
        .arg(&cp.kubeconfig)
        .output()
        .unwrap();
    let values = String::from_utf8_lossy(&values.stdout);
    assert!(
        values.contains("kube-aws-demo-2"),
        "dex was not upgraded:\n{values}\n{rebooted}"
    );
    for r in refs.iter().filter(|r| r.starts_with("kube-aws-secret.dex.")) {
        assert!(
            values.contains(&secret_value(r)) && !values.contains(r.as_str()),
            "{r} not filled in dex's values after the reboot:\n{values}"
        );
    }
}

/// A release the API server rejects (a label key it refuses), in a namespace
/// of this test's own, with a release that depends on it. (Charts whose
/// cluster-scoped objects are named after the release: the other test
/// installs the built-ins on the same API server.)
#[test]
fn a_release_the_api_server_rejects_fails_with_its_reason_and_its_dependants_are_skipped() {
    let Some(cp) =
        testbed::shared("a_release_the_api_server_rejects_fails_with_its_reason_and_its_dependants_are_skipped")
    else {
        return;
    };
    let ns = format!("rejected-{}", std::process::id());
    let mut bed = Bed::new(cp.clone());
    bed.publish(&format!(
        "charts:
  - name: broken-descheduler
    chart: descheduler
    repo: https://kubernetes-sigs.github.io/descheduler/
    version: 0.36.0
    namespace: {ns}
    timeout: 60s
    set:
      podLabels:
        \"bad key!\": x
  - name: after-broken
    chart: external-dns
    repo: https://kubernetes-sigs.github.io/external-dns/
    version: 1.21.1
    namespace: {ns}
    dependsOn: [broken-descheduler]
plugins:
  aws-vpc-cni: {{enabled: false}}
  aws-cloud-controller-manager: {{enabled: false}}
"
    ));
    let run = bed.reconcile();
    assert_ne!(run.code, 0, "{run}");
    let broken = bed.status("broken-descheduler");
    assert_eq!(broken["phase"], "failed", "{broken}");
    let msg = broken["message"].as_str().unwrap();
    assert!(
        msg.contains("bad key!") && msg.contains("Invalid value"),
        "the API server's reason is not in the status: {msg}"
    );
    let after = bed.status("after-broken");
    assert_eq!(after["phase"], "skipped", "{after}");
    assert!(
        after["message"].as_str().unwrap().contains("broken-descheduler"),
        "{after}"
    );
    let wc = |n: &str| bed.releases.iter().find(|(r, _, _)| r == n).unwrap().2.clone();
    assert_eq!(bed.signalled(&wc("broken-descheduler")).as_deref(), Some("FAILURE"));
    assert_eq!(bed.signalled(&wc("after-broken")).as_deref(), Some("FAILURE"));
    // helm --atomic undid the failed first install: no release record is left.
    let left = cp
        .kubectl(&[
            "get",
            "secrets",
            "-n",
            &ns,
            "-l",
            "owner=helm,name=broken-descheduler",
            "-o",
            "name",
        ])
        .unwrap();
    assert!(left.trim().is_empty(), "helm left {left}");
    // Nothing of the skipped release reached the API server.
    let deployed = cp.kubectl(&["get", "deployments", "-n", &ns, "-o", "name"]).unwrap();
    assert!(!deployed.contains("external-dns"), "{deployed}");
}

/// A new plan on a running cluster: the release whose values changed is
/// upgraded and signalled, the unchanged one is left alone (no chart fetched,
/// no signal), the dropped one is uninstalled from the API server, a
/// dropped one the record names but helm does not know (a restore's snapshot
/// from before its install) is taken for gone on the real helm's "release:
/// not found" (without that, stop 51 saw the run exit 1 with "could not be
/// uninstalled: … release: not found"), and a repeat of the plan does
/// nothing.
#[test]
fn a_new_plan_upgrades_what_changed_uninstalls_what_was_dropped_and_a_repeat_does_nothing() {
    let Some(cp) =
        testbed::shared("a_new_plan_upgrades_what_changed_uninstalls_what_was_dropped_and_a_repeat_does_nothing")
    else {
        return;
    };
    let ns = format!("replan-{}", std::process::id());
    let chart = |name: &str, chart: &str, version: &str, rev: u32| {
        format!(
            "  - name: {name}\n    chart: {chart}\n    repo: https://kubernetes-sigs.github.io/{chart}/\n    \
             version: {version}\n    namespace: {ns}\n    set: {{podLabels: {{rev: \"{rev}\"}}}}\n"
        )
    };
    let plugins_off = "plugins:\n  aws-vpc-cni: {enabled: false}\n  aws-cloud-controller-manager: {enabled: false}\n";
    let mut bed = Bed::new(cp.clone());
    bed.publish(&format!(
        "charts:\n{}{}{plugins_off}",
        chart("keep-dns", "external-dns", "1.21.1", 1),
        chart("drop-dns", "external-dns", "1.21.1", 1),
    ));
    // The reconciler runs as the controller, with moto's IAM enforced: the
    // installed record it reads to find drop-dns is the finding-2 path.
    bed.under_controller_role();
    let one = bed.reconcile();
    assert_eq!(one.code, 0, "{one}");
    let first_wc: std::collections::BTreeMap<String, String> =
        bed.releases.iter().map(|(n, _, w)| (n.clone(), w.clone())).collect();
    let deployed = |name: &str| {
        cp.kubectl(&[
            "get",
            "secrets",
            "-n",
            &ns,
            "-l",
            &format!("owner=helm,name={name}"),
            "-o",
            "name",
        ])
        .unwrap()
    };
    assert!(!deployed("drop-dns").trim().is_empty());

    // A release the record names but helm does not know, as a restore
    // leaves one that the snapshot never had (issue 38): dropped from the
    // plan, it counts as uninstalled, not as a failure on every run.
    let mut record = bed.object("status/addons/installed.json");
    record["releases"]
        .as_array_mut()
        .expect("the installed record's releases")
        .push(serde_json::json!({"name": "ghost-dns", "namespace": ns, "waitCondition": "", "secrets": ""}));
    let with_ghost = bed.path("installed-with-ghost.json");
    std::fs::write(&with_ghost, record.to_string()).unwrap();
    bed.env.aws(&[
        "s3",
        "cp",
        "--only-show-errors",
        &with_ghost.display().to_string(),
        &format!("s3://{}/{}/status/addons/installed.json", BUCKET, PREFIX),
    ]);

    // keep-dns's pods get another label; drop-dns leaves the plan.
    bed.publish(&format!(
        "charts:\n{}{plugins_off}",
        chart("keep-dns", "external-dns", "1.21.1", 2)
    ));
    let two = bed.reconcile();
    assert_eq!(two.code, 0, "{two}");
    let (_, _, new_wc) = bed.releases.iter().find(|(n, _, _)| n == "keep-dns").unwrap().clone();
    assert_ne!(new_wc, first_wc["keep-dns"], "changed values give a new wait condition");
    assert_eq!(bed.signalled(&new_wc).as_deref(), Some("SUCCESS"));
    let rev = cp
        .kubectl(&[
            "get",
            "deployment",
            "-n",
            &ns,
            "keep-dns-external-dns",
            "-o",
            "jsonpath={.spec.template.metadata.labels.rev}",
        ])
        .unwrap();
    assert_eq!(rev, "2", "keep-dns was not upgraded:\n{two}");
    assert!(
        deployed("drop-dns").trim().is_empty(),
        "drop-dns's helm release is still there"
    );
    let gone = cp.kubectl(&["get", "deployments", "-n", &ns, "-o", "name"]).unwrap();
    assert!(!gone.contains("drop-dns"), "{gone}");
    // The real helm's answer for the ghost ("release: not found") took it
    // for gone: the record no longer names it, and the run ended 0 above.
    assert!(
        two.stderr.contains("ghost-dns") && two.stderr.contains("nothing to uninstall"),
        "{two}"
    );
    let names: Vec<String> = bed.object("status/addons/installed.json")["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names, vec!["keep-dns".to_string()], "the installed record");

    // The same plan again: nothing fetched, installed or signalled.
    let three = bed.reconcile();
    assert_eq!(three.code, 0, "{three}");
    assert!(
        !three.calls.contains("signal-resource") && !three.calls.contains("/charts/"),
        "{three}"
    );
}
