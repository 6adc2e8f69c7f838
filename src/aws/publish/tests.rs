//! Tests of the pure parts of publishing: the rendered files, the content-addressed
//! keys, the addon plan, the chart tarballs and the secrets versions.

use super::*;

fn files(list: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
}

fn refs(list: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
    list.iter()
        .map(|(from, to)| (from.to_string(), to.iter().map(|t| t.to_string()).collect()))
        .collect()
}

const ROOT: &str = r#"{"TemplateURL": {"Fn::Sub": "${ArtifactBaseURL}/stacks/network.json"}}"#;

#[test]
fn stack_references_are_rewritten_leaves_first() {
    let f = files(&[
        ("stacks/root.json", ROOT),
        (
            "stacks/network.json",
            r#"{"UserData": "aws s3 cp ${S3}/userdata/controller.cloud-config -"}"#,
        ),
        ("userdata/controller.cloud-config", "#cloud-config\n"),
    ]);
    let r = refs(&[("stacks/root.json", &["stacks/network.json"])]);
    let plan = plan_artifacts(&f, &r).unwrap();
    let by: BTreeMap<&str, &Artifact> = plan.iter().map(|a| (a.source.as_str(), a)).collect();
    // The cloud-config sits at the key render's stub names.
    let cc = by["userdata/controller.cloud-config"];
    assert_eq!(cc.key, format!("userdata/controller/{}.cloud-config", cc.sha256));
    // Only stacks are references: the network stack's text stays as it is.
    let net = std::str::from_utf8(&by["stacks/network.json"].body).unwrap();
    assert_eq!(
        net,
        r#"{"UserData": "aws s3 cp ${S3}/userdata/controller.cloud-config -"}"#
    );
    let root = std::str::from_utf8(&by["stacks/root.json"].body).unwrap();
    assert_eq!(
        root,
        format!(
            r#"{{"TemplateURL": {{"Fn::Sub": "${{ArtifactBaseURL}}/{}"}}}}"#,
            by["stacks/network.json"].key
        )
    );
    assert_eq!(by["stacks/root.json"].sha256, sha256_hex(root.as_bytes()));

    // A change in a nested stack changes the root that leads to it.
    let mut g = f.clone();
    g.insert("stacks/network.json".into(), b"{}".to_vec());
    let plan2 = plan_artifacts(&g, &r).unwrap();
    let root2 = plan2.iter().find(|a| a.source == "stacks/root.json").unwrap();
    assert_ne!(root2.sha256, by["stacks/root.json"].sha256);
}

#[test]
fn node_paths_in_cloud_configs_are_never_rewritten() {
    let cc = "#cloud-config\nwrite_files:\n  - path: /etc/kube-aws/addons/plan.json\n";
    let f = files(&[("addons/plan.json", "{}"), ("userdata/controller.cloud-config", cc)]);
    let plan = plan_artifacts(&f, &BTreeMap::new()).unwrap();
    let got = plan
        .iter()
        .find(|a| a.source == "userdata/controller.cloud-config")
        .unwrap();
    assert_eq!(got.body, cc.as_bytes());
}

#[test]
fn only_the_whole_template_url_is_rewritten() {
    let text = r#"see stacks/x.json, "${ArtifactBaseURL}/stacks/x.json.bak", "${ArtifactBaseURL}/stacks/x.jsonl" and "${ArtifactBaseURL}/stacks/x.json""#;
    let f = files(&[("stacks/x.json", "{}"), ("stacks/y.json", text)]);
    let plan = plan_artifacts(&f, &refs(&[("stacks/y.json", &["stacks/x.json"])])).unwrap();
    let x = plan.iter().find(|a| a.source == "stacks/x.json").unwrap();
    let y = plan.iter().find(|a| a.source == "stacks/y.json").unwrap();
    assert_eq!(
        std::str::from_utf8(&y.body).unwrap(),
        format!(
            r#"see stacks/x.json, "${{ArtifactBaseURL}}/stacks/x.json.bak", "${{ArtifactBaseURL}}/stacks/x.jsonl" and "${{ArtifactBaseURL}}/{}""#,
            x.key
        )
    );
    // A stack named nowhere in the references is not rewritten, even where its URL stands.
    let plan = plan_artifacts(&f, &BTreeMap::new()).unwrap();
    let y = plan.iter().find(|a| a.source == "stacks/y.json").unwrap();
    assert_eq!(y.body, text.as_bytes());
}

#[test]
fn a_reference_the_template_does_not_hold_is_refused() {
    // The root was edited (--use-rendered, a post-render hook) and no longer
    // names the network stack as the render recorded.
    let f = files(&[
        (
            "stacks/root.json",
            r#"{"TemplateURL": "https://elsewhere/network.json"}"#,
        ),
        ("stacks/network.json", "{}"),
    ]);
    let err = plan_artifacts(&f, &refs(&[("stacks/root.json", &["stacks/network.json"])]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"stacks/root.json does not name stacks/network.json by its TemplateURL ("${ArtifactBaseURL}/stacks/network.json")"#),
        "{err}"
    );
    // A reference to a file the render does not hold.
    let err = plan_artifacts(&f, &refs(&[("stacks/root.json", &["stacks/gone.json"])]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("stacks/root.json names stacks/gone.json, which is not among the rendered files"),
        "{err}"
    );
    // A referring stack itself gone (a post-render hook removed it).
    let err = plan_artifacts(&f, &refs(&[("stacks/gone.json", &["stacks/network.json"])]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("stacks/gone.json is missing: run `kube-aws render` first"),
        "{err}"
    );
}

#[test]
fn reference_cycles_are_refused() {
    let f = files(&[
        ("stacks/x.json", r#""${ArtifactBaseURL}/stacks/y.json""#),
        ("stacks/y.json", r#""${ArtifactBaseURL}/stacks/x.json""#),
    ]);
    let r = refs(&[
        ("stacks/x.json", &["stacks/y.json"]),
        ("stacks/y.json", &["stacks/x.json"]),
    ]);
    let err = plan_artifacts(&f, &r).unwrap_err().to_string();
    assert!(err.contains("cycle (stacks/x.json, stacks/y.json)"), "{err}");
}

#[test]
fn a_rendered_directory_read_back_finds_its_references_by_the_same_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("stacks")).unwrap();
    std::fs::create_dir_all(dir.path().join("userdata")).unwrap();
    std::fs::write(dir.path().join("stacks/root.json"), ROOT).unwrap();
    std::fs::write(dir.path().join("stacks/network.json"), "{}").unwrap();
    // A path outside stacks/ or without the TemplateURL's text names nothing.
    std::fs::write(dir.path().join("stacks/other.json"), "stacks/network.json").unwrap();
    std::fs::write(dir.path().join("userdata/x.cloud-config"), ROOT).unwrap();
    let read = read_rendered(dir.path()).unwrap();
    assert_eq!(read.files.len(), 4);
    assert_eq!(read.stack_refs, refs(&[("stacks/root.json", &["stacks/network.json"])]));
}

#[test]
fn chart_digests_are_verified() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.tgz");
    std::fs::write(&p, b"chart bytes").unwrap();
    let good = sha256_hex(b"chart bytes");
    let a = chart_artifact(&ChartTarball {
        digest: Sha256Digest::parse(&format!("sha256:{good}")).unwrap(),
        path: p.clone(),
    })
    .unwrap();
    assert_eq!(a.key, format!("charts/{good}.tgz"));
    let err = chart_artifact(&ChartTarball {
        digest: Sha256Digest::parse(&"0".repeat(64)).unwrap(),
        path: p,
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains(&format!("has sha256:{good}")), "{err}");
}

#[test]
fn root_parameters_are_those_declared() {
    let loc = Location {
        bucket: "b".into(),
        prefix: "p/demo".into(),
    };
    let t = br#"{"Parameters": {"ArtifactBaseURL": {"Type": "String"}, "Other": {"Type": "String"}}}"#;
    assert_eq!(
        root_parameters(t, "http://x/b/p/demo", &loc, &bundle(&[]), "secrets/0/bundle.json").unwrap(),
        vec![("ArtifactBaseURL".to_string(), "http://x/b/p/demo".to_string())]
    );
}

#[test]
fn the_ca_hash_parameter_comes_from_the_bundles_ca() {
    let loc = Location {
        bucket: "b".into(),
        prefix: "p/demo".into(),
    };
    let t = br#"{"Parameters": {"CACertHash": {"Type": "String"}}}"#;
    let pki = crate::pki::generate("demo", time::OffsetDateTime::now_utc()).unwrap();
    let mut b = bundle(&[]);
    b.certificates = pki.public.clone();
    let params = root_parameters(t, "http://x", &loc, &b, "k").unwrap();
    assert_eq!(params, vec![("CACertHash".to_string(), pki.ca_cert_hash().unwrap())]);
    let err = root_parameters(t, "http://x", &loc, &bundle(&[]), "k")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no cluster CA certificate"), "{err}");
}

fn bundle(entries: &[(&str, &str)]) -> SecretBundle {
    SecretBundle {
        api_version: "kube-aws/v1".into(),
        kind: "SecretBundle".into(),
        kms_key_arn: "arn:aws:kms:us-west-2:111122223333:key/k".into(),
        encryption_context: Default::default(),
        secrets: entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        certificates: Default::default(),
        ..Default::default()
    }
}

/// Key rotation: a value re-encrypted under a new key keeps its secrets
/// version through its origin (no node is replaced for it), while a value
/// that changes moves it.
#[test]
fn a_re_encrypted_entry_keeps_its_version_by_its_origin() {
    let t: serde_json::Value = serde_json::from_str(
        r#"{"Metadata": {"kube-aws:secretsVersions": {"P": ["kubeadm/bootstrap-token", "pki/ca.key"]}}}"#,
    )
    .unwrap();
    let v = |b: &SecretBundle| secrets_versions(&t, b).unwrap()[0].1.clone();
    let before = bundle(&[("kubeadm/bootstrap-token", "OLD1"), ("pki/ca.key", "OLD2")]);
    let mut rotated = bundle(&[("kubeadm/bootstrap-token", "NEW1"), ("pki/ca.key", "NEW2")]);
    rotated.origins = [("kubeadm/bootstrap-token", "OLD1"), ("pki/ca.key", "OLD2")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(v(&before), v(&rotated));
    rotated.origins.remove("pki/ca.key");
    assert_ne!(v(&before), v(&rotated), "a changed value moves the version");
}

#[test]
fn the_decrypt_keys_parameter_lists_the_current_and_the_retired_keys() {
    let loc = Location {
        bucket: "b".into(),
        prefix: "p/demo".into(),
    };
    let t = br#"{"Parameters": {"DecryptKmsKeyARNs": {"Type": "String"}}}"#;
    let mut b = bundle(&[]);
    assert_eq!(
        root_parameters(t, "http://x", &loc, &b, "k").unwrap(),
        vec![("DecryptKmsKeyARNs".to_string(), b.kms_key_arn.clone())]
    );
    b.retired_keys.push(crate::aws::publish::secrets::RetiredKey {
        arn: "arn:aws:kms:us-west-2:111122223333:key/old".into(),
        retired_at: "2026-12-01T00:00:00Z".into(),
    });
    assert_eq!(
        root_parameters(t, "http://x", &loc, &b, "k").unwrap()[0].1,
        "arn:aws:kms:us-west-2:111122223333:key/k,arn:aws:kms:us-west-2:111122223333:key/old"
    );
}

#[test]
fn secrets_versions_change_only_with_their_own_entries() {
    let t: serde_json::Value = serde_json::from_str(
        r#"{"Metadata": {"kube-aws:secretsVersions": {
            "ControlPlaneSecretsVersion": ["kubeadm/bootstrap-token", "kube-aws-secret.dex.pw"],
            "NodePoolGeneralSecretsVersion": ["kubeadm/bootstrap-token"]}}}"#,
    )
    .unwrap();
    let v =
        |b: &SecretBundle| -> Vec<String> { secrets_versions(&t, b).unwrap().into_iter().map(|(_, v)| v).collect() };
    let before = v(&bundle(&[
        ("kubeadm/bootstrap-token", "AAAA"),
        ("kube-aws-secret.dex.pw", "BBBB"),
    ]));
    let after = v(&bundle(&[
        ("kubeadm/bootstrap-token", "AAAA"),
        ("kube-aws-secret.dex.pw", "CCCC"),
    ]));
    assert_eq!(before.len(), 2);
    assert!(before
        .iter()
        .all(|h| h.len() == 16 && h.chars().all(|c| c.is_ascii_hexdigit())));
    assert_ne!(before[0], after[0], "the controller's secret changed");
    assert_eq!(before[1], after[1], "the pool does not use it");
    let err = secrets_versions(&t, &bundle(&[("kubeadm/bootstrap-token", "AAAA")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"kube-aws-secret.dex.pw\"") && err.contains("render"),
        "{err}"
    );
}

#[test]
fn plan_lists_expected_addons() {
    let f = files(&[(
        ADDON_PLAN,
        r#"{"releases": [{"name": "dex", "waitCondition": "AddonDexReady"}, {"name": "cm"}]}"#,
    )]);
    let a = expected_addons(&f).unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0].wait_condition.as_deref(), Some("AddonDexReady"));
    assert_eq!(a[1].release, "cm");
}
