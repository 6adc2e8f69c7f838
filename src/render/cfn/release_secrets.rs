//! A release's secrets in its identity (issue 27): a changed secret value
//! must reach its release, and replace no node.
//!
//! Each release whose values reference plugin secrets gets a root parameter
//! `AddonSecrets<Release>` that the publisher fills with a hash of those
//! entries' ciphertexts (the root metadata `kube-aws:secretsVersions`, as for
//! the node stacks' secrets versions: src/aws/publish/mod.rs `secrets_versions`;
//! an unchanged secret keeps its ciphertext). The control-plane stack puts
//! the hashes in the addon plan pointer (`secrets`: release → hash), so a
//! rotation changes the pointer, and the reconciler
//! (src/node/kube_aws_node/reconcile.py) upgrades exactly the releases whose
//! hash moved, with the values it decrypts again from the current secret
//! bundle. The controllers' own secrets version covers only the entries their
//! boot uses (kubeadm.json, plugin files), so no launch template changes.

use serde_json::{json, Map, Value};

use super::super::plan::camel;
use super::super::secrets::{find_references, known_references};
use super::super::RenderInput;

/// One release's secrets: its parameter and the bundle entries it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseSecrets {
    pub release: String,
    pub parameter: String,
    pub names: Vec<String>,
}

/// The releases whose values reference plugin secrets, in addon order.
pub fn release_secrets(input: &RenderInput) -> Vec<ReleaseSecrets> {
    let known = known_references(input);
    input
        .addons
        .iter()
        .filter_map(|a| {
            let names: Vec<String> = find_references(&a.values_yaml, &known)
                .into_iter()
                .map(str::to_string)
                .collect();
            (!names.is_empty()).then(|| ReleaseSecrets {
                release: a.release.name.clone(),
                parameter: format!("AddonSecrets{}", camel(&a.release.name)),
                names,
            })
        })
        .collect()
}

/// The addon plan pointer's value: `{"uri", "sha256"}` as a plain string, or,
/// with release secrets, an `Fn::Sub` adding `"secrets": {release: hash}`
/// from the stack's `AddonSecrets*` parameters.
pub fn pointer_value(uri: &str, sha256: &str, releases: &[ReleaseSecrets]) -> Value {
    if releases.is_empty() {
        return Value::String(json!({"uri": uri, "sha256": sha256}).to_string());
    }
    // Fn::Sub: the other `${` of the text (none in an S3 URI or a hex digest) are escaped anyway.
    let secrets: Map<String, Value> = releases
        .iter()
        .map(|r| (r.release.clone(), json!(format!("@@{}@@", r.parameter))))
        .collect();
    let text = json!({"uri": uri, "sha256": sha256, "secrets": secrets})
        .to_string()
        .replace("${", "${!");
    let text = releases.iter().fold(text, |t, r| {
        t.replace(&format!("@@{}@@", r.parameter), &format!("${{{}}}", r.parameter))
    });
    json!({ "Fn::Sub": text })
}

/// The control-plane stack's parameter declaration of one release's hash.
pub fn parameter() -> Value {
    json!({"Type": "String", "Default": "",
        "Description": "hash of the ciphertexts of one release's secrets, set by kube-aws (a change upgrades the release)"})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pointer_substitutes_each_release_hash() {
        let r = vec![ReleaseSecrets {
            release: "dex".into(),
            parameter: "AddonSecretsDex".into(),
            names: vec!["kube-aws-secret.dex.clientSecret".into()],
        }];
        assert_eq!(
            pointer_value("s3://b/p/addons/x/bundle.json", "ab", &r),
            json!({"Fn::Sub": "{\"uri\":\"s3://b/p/addons/x/bundle.json\",\"sha256\":\"ab\",\"secrets\":{\"dex\":\"${AddonSecretsDex}\"}}"})
        );
        assert_eq!(
            pointer_value("s3://b/u", "ab", &[]),
            json!("{\"uri\":\"s3://b/u\",\"sha256\":\"ab\"}")
        );
    }
}
