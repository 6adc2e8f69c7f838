//! The addon reconciler (`kube-aws-node reconcile`, the node program as the
//! controller's cloud-config ships it) run for real with python3, with helm,
//! kubectl and aws replaced by recording fakes on PATH: the fakes map
//! `s3://` to a directory (with S3's conditional writes, If-None-Match and
//! If-Match on ETags, for the installer's lease and the installed record),
//! keep the plan pointer (the SSM parameter) there, decrypt with a stand-in
//! KMS, answer DescribeStacks and DescribeStackResource from it, and keep
//! each helm release's status (so a killed helm leaves it pending).
//!
//! The real helm and kubectl on the control-plane test bed, with S3, SSM and
//! KMS on moto, run in tests/it/installer_testbed.rs (the built-in plan, a
//! rejected release, a plan change). What stays here is what the test bed
//! cannot reach or stage: Helm v2 (Tiller cannot run on simulated nodes); helm
//! failing with a secret quoted in its error; a tampered or unlocked chart
//! object; wait conditions already complete or dropped by a newer plan
//! (moto ignores WaitConditions); an installer killed mid-plan and another
//! controller taking its lease over; a read of the installed record that is
//! denied; a reboot that empties the secret store; install timing precise
//! enough to show releases side by side.
//!
//! Checked: install order (independent releases side by side, up to the
//! plan's concurrency, log lines whole and named), dependants skipped after a
//! failure, every helm upgrade atomic, the Tiller step in Helm v2 mode only,
//! the CRD wait before dependants, signals and status files, sha256 and lock
//! checks, secret values blanked out of status messages and filled into the
//! values helm reads (from tmpfs, removed after the run, decrypted again
//! after a reboot); a plan change installs only the changed releases,
//! uninstalls dropped ones, signals only the new wait conditions, and a
//! repeat is a no-op on every controller (done, from the record); a complete
//! wait condition, or one a newer plan dropped, is never signalled; a killed
//! installer's lease is waited for, then taken over, its pending release
//! undone and the plan resumed and signalled, from the record, by another
//! controller; a failed plan is not retried before its retryAfter, and a plan
//! CloudFormation rolls back to is applied again; a denied read of the record
//! changes nothing. Not covered here: real helm/kubectl behaviour
//! (installer_testbed.rs), IMDS, IAM (the moto IAM tests), or whether
//! CloudFormation accepts the signals (nothing here can).

use crate::common;
use crate::render_fixtures;

use std::path::{Path, PathBuf};

use kube_aws::render::{HelmBinary, RenderInput};
use render_fixtures::*;

mod bed;
mod fakes;
mod recovery;

use bed::{Bed, Run};

const SECRET_REF: &str = "kube-aws-secret.dex.clientSecret";
const SECRET_VALUE: &str = "s3cr3t: value with spaces";

fn sha_bytes(b: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(b))
}

/// Publishes `input` to a fresh controller and runs the reconciler once.
fn run_installer(input: RenderInput, fail: &str, tamper: impl FnOnce(&Path)) -> Run {
    let mut bed = Bed::new();
    bed.publish(input, tamper);
    let mut run = bed.run(fail);
    run._bed = Some(bed);
    run
}

/// The full fixture's releases in a dependency order: calico (bootstrap),
/// cert-manager, then metrics-server and dex (both depend on cert-manager
/// only, so they install side by side, in either order).
fn assert_full_order(upgrades: &[String]) {
    assert_eq!(upgrades[..2], ["calico", "cert-manager"], "{upgrades:?}");
    let mut rest = upgrades[2..].to_vec();
    rest.sort();
    assert_eq!(rest, ["dex", "metrics-server"], "{upgrades:?}");
}

fn helm_v3(mut input: RenderInput) -> RenderInput {
    input.cluster.helm.version = 3;
    input
}

#[test]
fn helm_v2_installs_tiller_then_everything_in_order() {
    let run = run_installer(full(), "", |_| {});
    assert_eq!(run.code, 0, "stderr:\n{}\nlog:\n{}", run.stderr, run.log.join("\n"));
    assert_full_order(&run.helm_upgrades());

    let tiller = run.position("kubectl apply -f").expect("tiller applied");
    assert!(run.log[tiller].ends_with("/tiller.yaml"));
    let rollout = run
        .position("rollout status deployment/tiller-deploy")
        .expect("tiller rollout waited");
    let init = run
        .position("helm init --client-only")
        .expect("helm v2 client initialised");
    let first = run.position("helm upgrade").unwrap();
    assert!(tiller < rollout && rollout < init && init < first, "{:#?}", run.log);
    let v2 = &run.log[first];
    assert!(
        v2.contains("--tiller-namespace kube-system") && v2.contains("--timeout 300 "),
        "{v2}"
    );
    assert!(
        !v2.contains("--create-namespace"),
        "helm v2 has no --create-namespace: {v2}"
    );

    // CRDs applied server-side before helm (helm installs crds/ once and
    // never upgrades them), and Established before any dependant starts.
    let line = |prefix: &str, file: &str| {
        run.log
            .iter()
            .position(|l| l.starts_with(prefix) && l.contains(file))
            .unwrap_or_else(|| panic!("no `{prefix} ... {file}`: {:#?}", run.log))
    };
    let apply = line(
        "kubectl apply --server-side --force-conflicts --field-manager=kube-aws -f",
        "crds/crd-issuers.yaml",
    );
    let crd = line("kubectl wait --for=condition=Established", "crds/crd-issuers.yaml");
    let cm = run.position("helm upgrade --install cert-manager").unwrap();
    let ms = run.position("helm upgrade --install metrics-server").unwrap();
    assert!(apply < cm && cm < crd && crd < ms, "{:#?}", run.log);
    assert!(run.position("crds/operator.tigera.io_installations.yaml").is_some());

    // The plugin manifest is applied once the bootstrap addons are in, before the rest.
    let manifest = run.position("manifests/dex/rbac.yaml").expect("manifest applied");
    assert!(manifest > run.position("helm upgrade --install calico").unwrap() && manifest < cm);

    // Signals run in the background, so their order is not the install order.
    let mut wcs: Vec<(String, String, String)> = run
        .wait_conditions
        .iter()
        .map(|(n, w)| (n.clone(), w.clone(), "SUCCESS".to_string()))
        .collect();
    let mut signals = run.signals();
    wcs.sort();
    signals.sort();
    assert_eq!(wcs.len(), 4);
    assert_eq!(signals, wcs);
    // Each wait condition did not exist at first (CloudFormation creates it
    // after the group): asked again, then signalled while it waited.
    for (_, wc) in &run.wait_conditions {
        let asked = run
            .log
            .iter()
            .filter(|l| {
                l.contains("describe-stack-resource")
                    && format!("{l} ").contains(&format!("--logical-resource-id {wc} "))
            })
            .count();
        assert_eq!(asked, 2, "{wc}: {:#?}", run.log);
    }
    // The wait conditions live in the root stack (after every pool), named
    // by reconciler.json's waitConditionStack, not in the node's own stack.
    assert!(run.log.iter().any(|l| format!("{l} ").contains("--stack-name full ")));
    assert!(!run
        .log
        .iter()
        .any(|l| l.contains("--stack-name full-ControlPlane-1ABC")));
    for name in ["calico", "cert-manager", "metrics-server", "dex"] {
        let s = run.status(name);
        assert_eq!(s["phase"], "ready", "{s}");
        assert_eq!(s["release"], name);
        assert!(s["startedAt"].as_str().unwrap().ends_with('Z') && s["updatedAt"].is_string());
    }
}

#[test]
fn helm_v3_failure_skips_dependants_with_the_reason() {
    let input = helm_v3(full());
    let run = run_installer(input.clone(), "cert-manager", |_| {});
    assert_ne!(run.code, 0);
    assert!(
        run.position("tiller").is_none(),
        "no Tiller in Helm v3 mode: {:#?}",
        run.log
    );
    assert!(run.position("helm init").is_none());
    // Bounded retries (3 attempts), then dependants never start.
    assert_eq!(
        run.helm_upgrades(),
        ["calico", "cert-manager", "cert-manager", "cert-manager"]
    );
    let v3 = run
        .log
        .iter()
        .find(|l| l.starts_with("helm upgrade --install cert-manager"))
        .unwrap();
    assert!(v3.contains("--timeout 600s") && v3.contains("--create-namespace"));
    // Every attempt is atomic: helm itself undoes a failed install or upgrade.
    for l in run.log.iter().filter(|l| l.starts_with("helm upgrade --install ")) {
        assert!(l.contains(" --atomic "), "{l}");
    }

    let failed = run.status("cert-manager");
    assert_eq!(failed["phase"], "failed");
    let msg = failed["message"].as_str().unwrap();
    assert!(msg.contains("UPGRADE FAILED: timed out"), "helm error tail: {msg}");
    // helm quoted a secret value: the status object (in S3) names it instead.
    assert!(
        msg.contains(&format!("stringData.password: <secret {SECRET_REF}>")),
        "{msg}"
    );
    assert!(!msg.contains("s3cr3t"), "{msg}");
    assert!(
        msg.contains("CrashLoopBackOff") && msg.contains("Back-off restarting"),
        "pods and events: {msg}"
    );
    for name in ["metrics-server", "dex"] {
        let s = run.status(name);
        assert_eq!(s["phase"], "skipped");
        assert!(
            s["message"]
                .as_str()
                .unwrap()
                .contains("depends on cert-manager, which is failed"),
            "{s}"
        );
    }
    assert_eq!(run.status("calico")["phase"], "ready");
    let mut statuses: Vec<String> = run
        .signals()
        .into_iter()
        .map(|(id, _, st)| format!("{id}={st}"))
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        [
            "calico=SUCCESS",
            "cert-manager=FAILURE",
            "dex=FAILURE",
            "metrics-server=FAILURE"
        ]
    );
}

#[test]
fn a_tampered_chart_is_refused_before_helm_runs() {
    let input = helm_v3(full());
    let run = run_installer(input, "", |s3| {
        let dir = s3.join("kube-aws-test/clusters/full/charts");
        // Every chart object is rewritten (not the helm client's, published
        // beside them); calico's is the first one the installer meets.
        let helm = std::fs::read(s3.parent().unwrap().join("helm.tgz")).unwrap();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if std::fs::read(&p).unwrap() != helm {
                std::fs::write(p, b"not the chart").unwrap();
            }
        }
    });
    assert_ne!(run.code, 0);
    assert!(run.helm_upgrades().is_empty(), "{:#?}", run.log);
    let s = run.status("calico");
    assert_eq!(s["phase"], "failed");
    assert!(
        s["message"].as_str().unwrap().contains("does not match its sha256"),
        "{s}"
    );
}

#[test]
fn a_tampered_helm_client_is_refused_and_no_release_is_touched() {
    let input = helm_v3(full());
    let run = run_installer(input, "", |s3| {
        let helm = std::fs::read(s3.parent().unwrap().join("helm.tgz")).unwrap();
        let dir = s3.join("kube-aws-test/clusters/full/charts");
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if std::fs::read(&p).unwrap() == helm {
                std::fs::write(p, b"not helm").unwrap();
            }
        }
    });
    assert_ne!(run.code, 0);
    assert!(run.helm_upgrades().is_empty(), "{:#?}", run.log);
    let s = run.status("calico");
    assert_eq!(s["phase"], "failed");
    let m = s["message"].as_str().unwrap();
    assert!(m.contains("cannot install the helm client from s3://"), "{s}");
    assert!(run.stderr.contains("does not match its sha256"), "{}", run.stderr);
}

#[test]
fn an_unlocked_chart_is_refused() {
    let mut input = helm_v3(full());
    input.addons[2].digest = None;
    let run = run_installer(input, "", |_| {});
    assert_ne!(run.code, 0);
    assert_eq!(run.helm_upgrades(), ["calico", "cert-manager", "dex"]);
    let s = run.status("metrics-server");
    assert_eq!(s["phase"], "failed");
    assert!(s["message"].as_str().unwrap().contains("not locked"), "{s}");
}

#[test]
fn no_charts_means_no_tiller_and_no_helm() {
    let mut input = full();
    input.addons.clear();
    let run = run_installer(input, "", |_| {});
    assert_eq!(run.code, 0, "{}\n{:#?}", run.stderr, run.log);
    assert!(
        run.position("tiller").is_none() && !run.log.iter().any(|l| l.contains("s3 cp") && l.contains(".tgz")),
        "{:#?}",
        run.log
    );
}

/// The plan after an update: metrics-server's values changed, dex dropped.
fn changed_plan(mut input: RenderInput) -> RenderInput {
    let ms = input
        .addons
        .iter_mut()
        .find(|a| a.release.name == "metrics-server")
        .unwrap();
    ms.values_yaml.push_str("replicas: 3\n");
    input.addons.retain(|a| a.release.name != "dex");
    // dex's plugin is gone with its release: its manifest too.
    input.plugins.cluster.manifests.retain(|m| m.plugin != "dex");
    input
}

#[test]
fn a_new_plan_installs_what_changed_uninstalls_what_was_dropped_and_a_repeat_does_nothing() {
    let mut bed = Bed::new();
    let first = helm_v3(full());
    bed.publish(first.clone(), |_| {});
    let one = bed.run("");
    assert_eq!(one.code, 0, "{}\n{:#?}", one.stderr, one.log);
    assert_full_order(&one.helm_upgrades());
    let installed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            bed.s3()
                .join("kube-aws-test/clusters/full/status/addons/installed.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let names: Vec<&str> = installed["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["calico", "cert-manager", "dex", "metrics-server"]);
    // helm got the bundle's values with the secret filled in; the published bundle keeps the reference.
    let dex = std::fs::read_to_string(one.values.join("dex.yaml")).unwrap();
    assert!(dex.contains(SECRET_VALUE) && !dex.contains(SECRET_REF), "{dex}");

    // The same plan again (the next tick of the timer): nothing.
    let again = bed.run("");
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.helm_upgrades().is_empty() && again.signals().is_empty(),
        "{:#?}",
        again.log
    );

    // A new plan: only metrics-server is installed and signalled; dex is uninstalled.
    bed.publish(changed_plan(first.clone()), |_| {});
    let two = bed.run("");
    assert_eq!(two.code, 0, "{}\n{:#?}", two.stderr, two.log);
    assert_eq!(two.helm_upgrades(), ["metrics-server"]);
    assert_eq!(two.helm("uninstall "), ["dex"]);
    assert!(
        two.position("helm uninstall dex --namespace dex --wait").is_some(),
        "{:#?}",
        two.log
    );
    // The dropped plugin's manifest objects are deleted (issue 24, finding
    // 10: a leftover fail-closed webhook configuration would block pods).
    assert!(
        two.position("kubectl delete --ignore-not-found --wait=false -f")
            .is_some(),
        "{:#?}",
        two.log
    );
    assert!(
        two.stderr.contains("pruned ClusterRoleBinding oidc-admins"),
        "{}",
        two.stderr
    );
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            bed.s3()
                .join("kube-aws-test/clusters/full/status/addons/installed.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(record["manifestObjects"], serde_json::json!([]), "{record}");
    assert!(
        !one.log.iter().any(|l| l.starts_with("kubectl delete")),
        "the first plan prunes nothing: {:#?}",
        one.log
    );
    let signalled: Vec<String> = two.signals().into_iter().map(|(_, wc, _)| wc).collect();
    assert_eq!(signalled, [two.wait_condition("metrics-server")]);
    assert_eq!(
        two.wait_condition("calico"),
        one.wait_condition("calico"),
        "unchanged entries keep their ID"
    );
    assert_ne!(
        two.wait_condition("metrics-server"),
        one.wait_condition("metrics-server")
    );
    // Only the new plan's new wait condition was looked up.
    assert!(!two.log.iter().any(|l| l.contains("describe-stack-resource")
        && format!("{l} ").contains(&format!("--logical-resource-id {} ", one.wait_condition("calico")))));
    let three = bed.run("");
    assert!(three.helm_upgrades().is_empty() && three.helm("uninstall ").is_empty() && three.signals().is_empty());

    // Another controller, whose timer sees the plan once it is installed, does
    // nothing: the record says it is done (no lease taken, no secret decrypted).
    bed.work = "controller-2";
    let o = bed.run("");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.helm_upgrades().is_empty() && o.signals().is_empty(), "{:#?}", o.log);
    assert!(
        !o.log
            .iter()
            .any(|l| l.contains("addons-lease") || l.contains("kms decrypt")),
        "{:#?}",
        o.log
    );
}

#[test]
fn complete_or_dropped_wait_conditions_are_never_signalled() {
    let mut bed = Bed::new();
    bed.publish(helm_v3(full()), |_| {});
    let wcs = bed.wait_conditions.clone();
    assert_eq!(wcs[3].0, "dex");
    let state = bed.s3().join(".wc");
    std::fs::create_dir_all(&state).unwrap();
    // calico's wait condition is already complete; dex's is no longer in the
    // stack, and a newer plan is live by the time it is asked.
    std::fs::write(state.join(&wcs[0].1), "CREATE_COMPLETE").unwrap();
    std::fs::write(state.join(&wcs[3].1), "missing").unwrap();
    for (_, wc) in &wcs[1..3] {
        std::fs::write(state.join(wc), "CREATE_IN_PROGRESS").unwrap();
    }
    let pointer = bed.s3().join(".ssm/kube-aws/full/addon-plan");
    std::fs::write(
        pointer.with_extension("later"),
        r#"{"uri": "s3://kube-aws-test/clusters/full/addons/0/bundle.json", "sha256": "0"}"#,
    )
    .unwrap();
    let run = bed.run("");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let signalled: Vec<String> = run.signals().into_iter().map(|(_, wc, _)| wc).collect();
    assert_eq!(signalled.len(), 2, "{signalled:?}");
    assert!(
        !signalled.contains(&wcs[0].1) && !signalled.contains(&wcs[3].1),
        "{signalled:?}"
    );
    assert!(
        run.stderr.contains(&format!(
            "{} (calico) is CREATE_COMPLETE: nothing waits for its signal",
            wcs[0].1
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "{} (dex) is not in the stack and a newer plan is live: not signalled",
            wcs[3].1
        )),
        "{}",
        run.stderr
    );
    // Each was asked once, not retried for half an hour.
    for wc in [&wcs[0].1, &wcs[3].1] {
        let asked = run
            .log
            .iter()
            .filter(|l| {
                l.contains("describe-stack-resource")
                    && format!("{l} ").contains(&format!("--logical-resource-id {wc} "))
            })
            .count();
        assert_eq!(asked, 1, "{wc}");
    }
}

#[test]
fn independent_releases_install_side_by_side_with_whole_log_lines() {
    let mut bed = Bed::new();
    bed.publish(helm_v3(full()), |_| {});
    // Each install takes 4 s: the two side by side must overlap even when
    // a loaded machine (make test at load 25) takes seconds between starts.
    let run = bed.run_with("", &[("FAKE_HELM_SLEEP", "4")]);
    assert_eq!(run.code, 0, "{}\n{:#?}", run.stderr, run.log);
    let at = |what: &str| {
        run.position(what)
            .unwrap_or_else(|| panic!("no {what}: {:#?}", run.log))
    };
    // metrics-server and dex depend on cert-manager only: both start once it
    // is done, and each starts before the other ends (the plan's concurrency is 4).
    let cm_end = at("helm-end cert-manager");
    let (ms, dex) = (at("helm-start metrics-server"), at("helm-start dex"));
    assert!(cm_end < ms && cm_end < dex, "{:#?}", run.log);
    assert!(
        ms < at("helm-end dex") && dex < at("helm-end metrics-server"),
        "{:#?}",
        run.log
    );
    // The bootstrap addon goes alone, first.
    assert!(at("helm-end calico") < at("helm-start cert-manager"));
    // Every log line is whole and says which release it is about.
    let line = regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ kube-aws-addons: ").unwrap();
    for l in run.stderr.lines() {
        assert!(line.is_match(l), "not a whole log line: {l:?}\n{}", run.stderr);
    }
    for name in ["calico", "cert-manager", "metrics-server", "dex"] {
        assert!(
            run.stderr.contains(&format!("kube-aws-addons: {name}: installing\n"))
                && run.stderr.contains(&format!("kube-aws-addons: {name}: ready\n")),
            "{name}: {}",
            run.stderr
        );
        assert_eq!(run.status(name)["phase"], "ready");
    }
}
