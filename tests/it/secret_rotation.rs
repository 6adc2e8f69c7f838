//! Issue 27, secret rotation: a changed secret value gives its release a new
//! identity and replaces no node. On the full fixture (dex's client secret is
//! referenced by dex's values only): the root template's secrets metadata
//! gives dex its own version (`AddonSecretsDex`), which the control-plane
//! stack puts in the addon plan pointer, and leaves the entry out of the
//! controllers' secrets version; the publisher's hashes (aws::publish
//! `secrets_versions`) over two bundles that differ only in dex's ciphertext
//! move dex's version and no node stack's, so no launch template changes.
//!
//! Not covered here: CloudFormation applying the update (moto ignores wait
//! conditions and lists every change-set resource as "Add"), and the
//! reconciler's upgrade on a real cluster (src/node/tests/test_release_secrets.py
//! checks its decision).

use std::collections::BTreeMap;

use crate::render_fixtures;
use kube_aws::aws::publish::secrets::SecretBundle;
use kube_aws::aws::publish::secrets_versions;

fn bundle(dex: &str, names: &[String]) -> SecretBundle {
    SecretBundle {
        api_version: "kube-aws/v1".into(),
        kind: "SecretBundle".into(),
        kms_key_arn: "arn:aws:kms:eu-west-1:111122223333:key/k".into(),
        encryption_context: BTreeMap::new(),
        secrets: names
            .iter()
            .map(|n| {
                let ct = if n.contains("dex") {
                    dex.to_string()
                } else {
                    format!("ct-{n}")
                };
                (n.clone(), ct)
            })
            .collect(),
        certificates: BTreeMap::new(),
        ..Default::default()
    }
}

#[test]
fn a_rotated_dex_secret_moves_dex_s_version_and_no_node_stack_s() {
    let r = kube_aws::render::render(&render_fixtures::full()).unwrap();
    let root: serde_json::Value = serde_json::from_slice(&r.files["stacks/root.json"]).unwrap();
    let covered = &root["Metadata"]["kube-aws:secretsVersions"];
    let dex_secret = "kube-aws-secret.dex.clientSecret";
    assert_eq!(covered["AddonSecretsDex"], serde_json::json!([dex_secret]), "{covered}");
    let controllers: Vec<&str> = covered["ControlPlaneSecretsVersion"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!controllers.contains(&dex_secret), "{controllers:?}");
    assert!(controllers.contains(&"kubeadm/bootstrap-token"), "{controllers:?}");
    assert_eq!(
        root["Resources"]["ControlPlane"]["Properties"]["Parameters"]["AddonSecretsDex"]["Ref"],
        "AddonSecretsDex"
    );

    // The control-plane stack hands it to the plan pointer.
    let cp: serde_json::Value = serde_json::from_slice(&r.files["stacks/control-plane.json"]).unwrap();
    assert!(cp["Parameters"]["AddonSecretsDex"].is_object());
    let pointer = cp["Resources"]["AddonPlan"]["Properties"]["Value"]["Fn::Sub"]
        .as_str()
        .expect("the pointer is an Fn::Sub with the release hashes");
    assert!(
        pointer.contains("\"secrets\":{\"dex\":\"${AddonSecretsDex}\"}"),
        "{pointer}"
    );

    // What the publisher computes for two bundles differing only in dex's ciphertext.
    let mut names: Vec<String> = covered
        .as_object()
        .unwrap()
        .values()
        .flat_map(|v| v.as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()))
        .collect();
    names.sort();
    names.dedup();
    let before: BTreeMap<String, String> = secrets_versions(&root, &bundle("AAAA", &names))
        .unwrap()
        .into_iter()
        .collect();
    let after: BTreeMap<String, String> = secrets_versions(&root, &bundle("BBBB", &names))
        .unwrap()
        .into_iter()
        .collect();
    let moved: Vec<&String> = before.keys().filter(|k| before[*k] != after[*k]).collect();
    assert_eq!(moved, ["AddonSecretsDex"], "before {before:?} after {after:?}");
}
