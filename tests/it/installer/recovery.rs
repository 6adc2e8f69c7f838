//! The reconciler recovering (the fakes and bed of tests/it/installer.rs):
//! a killed installer's lease taken over once it expires, its pending
//! release undone and the plan resumed and signalled; a failed release
//! rolled back and a plan CloudFormation rolls back to applied again; the
//! secrets decrypted again after a reboot with no filled value left on
//! disk; a denied read of the installed record changing nothing.

use super::*;

fn with_values(mut input: RenderInput, releases: &[&str], extra: &str) -> RenderInput {
    for a in input
        .addons
        .iter_mut()
        .filter(|a| releases.contains(&a.release.name.as_str()))
    {
        a.values_yaml.push_str(extra);
    }
    input
}

fn lease_body(bed: &Bed) -> serde_json::Value {
    let p = bed.s3().join("kube-aws-test/clusters/full/bootstrap/addons-lease");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn expired(lease: &serde_json::Value) -> bool {
    let at = humantime::parse_rfc3339(lease["expiresAt"].as_str().unwrap()).unwrap();
    at < std::time::SystemTime::now()
}

/// The killed installer's lease: long enough for the next controller's tick
/// to run while it is live, on a loaded machine too (4 s was not: stop 50's
/// `make test` at load 26 ran that tick after the lease had expired, and
/// it took the plan over).
const LEASE_TTL_SECONDS: u64 = 15;

/// The installer is killed mid-plan (its instance terminated): its lease is
/// left, unreleased; no other controller installs until it expires; then one
/// takes it over, resumes from the record (what the dead one recorded is not
/// installed again) and signals every wait condition, including those the
/// dead one installed but never signalled.
#[test]
fn a_killed_installer_is_taken_over_when_its_lease_expires_and_the_plan_is_finished_and_signalled() {
    let mut bed = Bed::new();
    bed.publish(helm_v3(full()), |_| {});
    // CloudFormation has not created the wait conditions yet: the installer's
    // signals wait for them (a minute apart) when it is killed.
    let state = bed.s3().join(".wc");
    std::fs::create_dir_all(&state).unwrap();
    for (_, wc) in &bed.wait_conditions {
        std::fs::write(state.join(wc), "missing").unwrap();
    }
    let one = bed.run_with(
        "",
        &[
            ("FAKE_HELM_DIE", "cert-manager"),
            ("KUBE_AWS_LEASE_TTL", &LEASE_TTL_SECONDS.to_string()),
            ("KUBE_AWS_SIGNAL_DELAY", "60"),
        ],
    );
    assert_ne!(one.code, 0, "{}", one.stderr);
    assert!(one.position("helm-killed cert-manager").is_some(), "{:#?}", one.log);
    assert!(one.signals().is_empty(), "{:#?}", one.log);
    let lease = lease_body(&bed);
    assert!(!expired(&lease), "the killed installer's lease is live: {lease}");
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&bed.installed()), ["calico"], "recorded as it went");

    // The wait conditions now wait. Another controller's tick, while the dead
    // installer's lease is live: it installs nothing, but signals calico, which
    // the record shows installed at its wait condition.
    for (_, wc) in &bed.wait_conditions {
        std::fs::write(state.join(wc), "CREATE_IN_PROGRESS").unwrap();
    }
    bed.work = "controller-2";
    let early = bed.run("");
    assert_eq!(early.code, 0, "{}", early.stderr);
    assert!(early.helm_upgrades().is_empty(), "{:#?}", early.log);
    assert!(early.stderr.contains("lease is held by"), "{}", early.stderr);
    let signalled: Vec<String> = early.signals().into_iter().map(|(_, wc, _)| wc).collect();
    assert_eq!(signalled, [early.wait_condition("calico")]);
    assert!(
        early.stderr.contains(&format!(
            "{} (calico) signalled SUCCESS: the installed record has it",
            early.wait_condition("calico")
        )),
        "{}",
        early.stderr
    );

    // Past the dead installer's lease (read from the lease itself, so a
    // slow machine does not shorten the wait).
    let until = humantime::parse_rfc3339(lease_body(&bed)["expiresAt"].as_str().unwrap()).unwrap()
        + std::time::Duration::from_millis(500);
    if let Ok(left) = until.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(left);
    }
    let two = bed.run("");
    assert_eq!(two.code, 0, "{}\n{:#?}", two.stderr, two.log);
    assert!(two.stderr.contains("taking it over"), "{}", two.stderr);
    let mut upgraded = two.helm_upgrades();
    upgraded.sort();
    assert_eq!(
        upgraded,
        ["cert-manager", "dex", "metrics-server"],
        "resumed, not restarted"
    );
    // The killed helm left cert-manager pending-install: undone before it is installed.
    let undo = two
        .position("helm uninstall cert-manager")
        .expect("pending install undone");
    assert!(
        undo < two.position("helm upgrade --install cert-manager").unwrap(),
        "{:#?}",
        two.log
    );
    assert!(
        two.stderr
            .contains("cert-manager: left pending-install at revision 1 by a stopped installer"),
        "{}",
        two.stderr
    );
    let mut signalled: Vec<String> = two.signals().into_iter().map(|(_, wc, _)| wc).collect();
    signalled.sort();
    let mut rest: Vec<String> = ["cert-manager", "dex", "metrics-server"]
        .iter()
        .map(|n| two.wait_condition(n))
        .collect();
    rest.sort();
    assert_eq!(signalled, rest, "{:#?}", two.log);
    let installed = bed.installed();
    assert_eq!(names(&installed), ["calico", "cert-manager", "dex", "metrics-server"]);
    assert!(expired(&lease_body(&bed)), "released after the run");

    // Done, from the record: the next tick of either controller does nothing.
    for c in ["controller-1", "controller-2"] {
        bed.work = c;
        let again = bed.run("");
        assert_eq!(again.code, 0, "{}", again.stderr);
        assert!(
            again.helm_upgrades().is_empty() && again.signals().is_empty(),
            "{c}: {:#?}",
            again.log
        );
    }
}

/// Plan 2 changes calico, cert-manager and metrics-server; cert-manager fails
/// (helm --atomic rolls it back), metrics-server, which depends on it, is
/// skipped, calico is upgraded. CloudFormation then rolls the stack back: the
/// pointer names plan 1 again, and plan 1 is applied again (calico back to its
/// plan-1 values) on the same controller.
#[test]
fn a_failed_release_is_rolled_back_and_a_plan_cloudformation_rolls_back_to_is_applied_again() {
    let mut bed = Bed::new();
    let first = helm_v3(full());
    bed.publish(first.clone(), |_| {});
    let one = bed.run("");
    assert_eq!(one.code, 0, "{}", one.stderr);

    bed.publish(
        with_values(
            first.clone(),
            &["calico", "cert-manager", "metrics-server"],
            "plan: 2\n",
        ),
        |_| {},
    );
    let two = bed.run("cert-manager");
    assert_ne!(two.code, 0);
    let cm: Vec<&String> = two
        .log
        .iter()
        .filter(|l| l.starts_with("helm upgrade --install cert-manager "))
        .collect();
    assert!(!cm.is_empty() && cm.iter().all(|l| l.contains(" --atomic ")), "{cm:?}");
    assert_eq!(two.status("metrics-server")["phase"], "skipped");
    assert!(!two.helm_upgrades().contains(&"metrics-server".to_string()));
    // The record: calico at plan 2's wait condition; cert-manager (rolled
    // back by helm) and metrics-server (skipped) still at plan 1's.
    let rec = bed.installed();
    let at = |name: &str| -> String {
        rec["releases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["waitCondition"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(at("calico"), two.wait_condition("calico"));
    assert_eq!(at("cert-manager"), one.wait_condition("cert-manager"));
    assert_eq!(at("metrics-server"), one.wait_condition("metrics-server"));
    assert!(rec["retryAfter"].is_number(), "{rec}");
    // The next tick does not hammer the failing release.
    let later = bed.run("cert-manager");
    assert_eq!(later.code, 0, "{}", later.stderr);
    assert!(later.helm_upgrades().is_empty(), "{:#?}", later.log);

    // CloudFormation rolled back: the pointer names plan 1 again.
    bed.publish(first, |_| {});
    assert_eq!(bed.wait_conditions, one.wait_conditions);
    let three = bed.run("");
    assert_eq!(three.code, 0, "{}\n{:#?}", three.stderr, three.log);
    assert_eq!(three.helm_upgrades(), ["calico"], "{:#?}", three.log);
    let calico = std::fs::read_to_string(three.values.join("calico.yaml")).unwrap();
    assert!(!calico.contains("plan: 2"), "{calico}");
    let rec = bed.installed();
    let entries: Vec<(String, String)> = rec["releases"]
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
    let mut want = one.wait_conditions.clone();
    want.sort();
    assert_eq!(entries, want);
    assert!(rec.get("retryAfter").is_none(), "{rec}");
}

/// After a reboot the secret store (tmpfs) is empty: the reconciler decrypts
/// the plugin secrets again, so the next plan's release gets the real value,
/// and nothing filled in is left outside tmpfs once the run is over.
#[test]
fn after_a_reboot_the_secrets_are_decrypted_again_and_no_filled_value_is_left_on_disk() {
    let mut bed = Bed::new();
    let first = helm_v3(full());
    bed.publish(first.clone(), |_| {});
    assert_eq!(bed.run("").code, 0);
    bed.reboot();
    assert!(!bed.dir.path().join("controller-1/run/kube-aws/secrets").exists());
    bed.publish(with_values(first, &["dex"], "replicas: 2\n"), |_| {});
    let run = bed.run("");
    assert_eq!(run.code, 0, "{}\n{:#?}", run.stderr, run.log);
    assert_eq!(run.helm_upgrades(), ["dex"]);
    assert!(run.position("kms decrypt").is_some(), "{:#?}", run.log);
    let dex = std::fs::read_to_string(run.values.join("dex.yaml")).unwrap();
    assert!(dex.contains(SECRET_VALUE) && !dex.contains(SECRET_REF), "{dex}");
    // helm read the values from tmpfs (/run), and that directory is gone.
    let upgrade = run
        .log
        .iter()
        .find(|l| l.starts_with("helm upgrade --install dex "))
        .unwrap();
    let node = bed.dir.path().join("controller-1");
    assert!(
        upgrade.contains(&format!("-f {}/run/kube-aws/addons/", node.display())),
        "{upgrade}"
    );
    let tmp = node.join("run/kube-aws/addons");
    assert_eq!(
        std::fs::read_dir(&tmp).map(|d| d.count()).unwrap_or(0),
        0,
        "{}",
        tmp.display()
    );
    let store = node.join("run/kube-aws/secrets");
    for e in walkdir(&node) {
        if e.starts_with(&store) {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&e).unwrap()).into_owned();
        assert!(
            !text.contains(SECRET_VALUE),
            "a filled value outside tmpfs: {}",
            e.display()
        );
    }
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else if p.is_file() {
            out.push(p);
        }
    }
    out
}

/// The controller may not read the installed record (a 403): the run fails
/// and installs, uninstalls and signals nothing, where taking the 403 for
/// "nothing installed" would upgrade every release and never uninstall dex.
#[test]
fn a_denied_read_of_the_installed_record_fails_the_run_and_changes_nothing() {
    let mut bed = Bed::new();
    let first = helm_v3(full());
    bed.publish(first.clone(), |_| {});
    assert_eq!(bed.run("").code, 0);
    bed.publish(changed_plan(first), |_| {});
    let denied = bed.run_with("", &[("FAKE_DENY", "status/addons/installed.json")]);
    assert_ne!(denied.code, 0);
    assert!(
        denied.helm_upgrades().is_empty() && denied.helm("uninstall ").is_empty() && denied.signals().is_empty(),
        "{:#?}",
        denied.log
    );
    assert!(
        denied.stderr.contains("cannot read the installed record") && denied.stderr.contains("AccessDenied"),
        "{}",
        denied.stderr
    );
    assert!(!denied.log.iter().any(|l| l.contains("addons-lease")), "no lease taken");
    // Once it may read it, the same plan goes ahead.
    let ok = bed.run("");
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert_eq!(ok.helm_upgrades(), ["metrics-server"]);
    assert_eq!(ok.helm("uninstall "), ["dex"]);
}
