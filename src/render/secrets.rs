//! Where secret references land. Templates only ever see a reference
//! (`kube-aws-secret.<plugin>.<param>[.<scope>]`); the value reaches a node as a
//! KMS ciphertext in the published bundle, and the node
//! program's `kube-aws-node secrets` (src/node/kube_aws_node/secrets.py)
//! decrypts it with its role and fills it into
//! the files that hold the reference. This module finds those files, tells the
//! node how to fill each one (`yaml`/`json`: inside string values, so the
//! document stays well-formed whatever the value; `text`: verbatim), and names
//! the secrets each role may decrypt, which its IAM policy is narrowed to.
//!
//! The matching rule is shared with the node program and must stay identical
//! (one table of vectors, tests/fixtures/secret-refs.json, checks both):
//! at each occurrence of the prefix, the longest known reference wins, and it
//! must not run on into a name character (`[A-Za-z0-9_-]`).

use std::collections::BTreeSet;

use serde::Serialize;

/// The kubeadm bootstrap token in the bundle (see `aws::secrets`).
pub const BOOTSTRAP_TOKEN: &str = "kubeadm/bootstrap-token";
/// The encryption context keys every ciphertext is bound to.
pub const CONTEXT_CLUSTER: &str = "kube-aws:cluster";
pub const CONTEXT_SECRET: &str = "kube-aws:secret";

const PREFIX: &str = "kube-aws-secret.";

/// How the node fills a reference into a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FillFormat {
    /// Inside YAML string values (every document of the file).
    Yaml,
    /// Inside JSON string values.
    Json,
    /// Verbatim, wherever the reference stands.
    Text,
}

/// One node file holding references.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SecretFile {
    pub path: String,
    pub format: FillFormat,
}

/// What one node role decrypts and fills in: `node.json`'s `secrets`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSecrets {
    /// Bundle entries this role decrypts, sorted.
    pub names: Vec<String>,
    /// Files to fill, in write order.
    pub files: Vec<SecretFile>,
    /// The entries the node's own boot files reference (with the token and
    /// the PKI): what its stack's secrets version covers. A controller also
    /// decrypts the entries only the addon bundle references, which its
    /// releases' own versions cover (src/render/cfn/release_secrets.rs).
    #[serde(skip)]
    pub boot_names: Vec<String>,
    /// Controllers: where the cluster PKI goes (`pki/X` → `<pki.dir>/X`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pki: Option<NodePki>,
}

/// The cluster PKI on a controller: its decrypted keys (entries of `names`,
/// mode 0600) and the bundle's public `certificates` (0644), in kubeadm's
/// certificate directory before `kubeadm init` or `join` (src/pki.rs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct NodePki {
    pub dir: String,
    pub keys: Vec<String>,
    pub certificates: Vec<String>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The known references found in `text`, by the shared matching rule.
/// `known` must be sorted longest first (see [`longest_first`]).
pub fn find_references<'a>(text: &str, known: &[&'a str]) -> BTreeSet<&'a str> {
    let mut found = BTreeSet::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(PREFIX).map(|i| from + i) {
        let rest = &text[at..];
        let hit = known
            .iter()
            .find(|r| rest.starts_with(**r) && !rest[r.len()..].starts_with(is_name_char));
        match hit {
            Some(r) => {
                found.insert(*r);
                from = at + r.len();
            }
            None => from = at + PREFIX.len(),
        }
    }
    found
}

/// Every reference render knows, sorted for [`find_references`]: the plugins'
/// secret parameters and the entries kube-aws generates at publish (the pod
/// identity webhook's serving certificate, src/pki.rs).
pub fn known_references(input: &super::RenderInput) -> Vec<&str> {
    longest_first(
        input
            .plugins
            .secrets
            .iter()
            .map(|s| s.reference.as_str())
            .chain(crate::pki::WEBHOOK_ENTRIES),
    )
}

/// References sorted for [`find_references`]: longest first, then by name.
pub fn longest_first<'a>(refs: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = refs.into_iter().collect();
    v.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    v.dedup();
    v
}

/// The fill format for a node file, by its path.
pub fn fill_format(path: &str) -> FillFormat {
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".yaml") || lower.ends_with(".yml") {
        FillFormat::Yaml
    } else if lower.ends_with(".json") {
        FillFormat::Json
    } else {
        FillFormat::Text
    }
}

/// The secrets of one node role: on controllers the init token and the
/// cluster PKI's keys, plus every plugin secret referenced in `files` (path,
/// content), and which files to fill. Workers never get a PKI key.
pub fn node_secrets<'a>(
    controller: bool,
    known: &[&str],
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> NodeSecrets {
    let mut names: BTreeSet<String> = BTreeSet::new();
    if controller {
        // The init token: workers join with the short-lived tokens the
        // controllers mint (src/node/kube_aws_node/join_token.py).
        names.insert(BOOTSTRAP_TOKEN.to_string());
        names.extend(crate::pki::KEY_ENTRIES.iter().map(|k| k.to_string()));
        // The API server's EncryptionConfiguration (src/render/security.rs).
        names.insert(super::security::ENCRYPTION_ENTRY.to_string());
    }
    let mut out = Vec::new();
    for (path, content) in files {
        let refs = find_references(content, known);
        if !refs.is_empty() {
            names.extend(refs.into_iter().map(str::to_string));
            out.push(SecretFile {
                path: path.to_string(),
                format: fill_format(path),
            });
        }
    }
    NodeSecrets {
        boot_names: names.iter().cloned().collect(),
        names: names.into_iter().collect(),
        files: out,
        pki: controller.then(|| NodePki {
            dir: crate::pki::NODE_PKI_DIR.to_string(),
            keys: crate::pki::KEY_ENTRIES
                .iter()
                .chain(&[super::security::ENCRYPTION_ENTRY])
                .map(|k| k.to_string())
                .collect(),
            certificates: crate::pki::PUBLIC_ENTRIES.iter().map(|k| k.to_string()).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "kube-aws-secret.dex.pw";
    const A_CTRL: &str = "kube-aws-secret.dex.pw.controller";
    const B: &str = "kube-aws-secret.dex.pw2";

    fn known() -> Vec<&'static str> {
        longest_first([A, A_CTRL, B])
    }

    /// The rule against the table the node program's tests check too
    /// (tests/fixtures/secret-refs.json; src/node/tests/test_secrets.py).
    #[test]
    fn the_shared_reference_vectors() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/secret-refs.json");
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let known: Vec<&str> = doc["known"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(
            known.iter().copied().collect::<BTreeSet<_>>(),
            BTreeSet::from([A, A_CTRL, B])
        );
        let k = longest_first(known);
        let vectors = doc["vectors"].as_array().unwrap();
        assert!(vectors.len() >= 10);
        for v in vectors {
            let want: BTreeSet<&str> = v["found"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            assert_eq!(find_references(v["text"].as_str().unwrap(), &k), want, "{}", v["name"]);
        }
    }

    #[test]
    fn workers_get_no_token_and_controllers_the_init_token_and_the_pki_keys() {
        let k = known();
        let w = node_secrets(false, &k, [("/etc/a.yaml", "a: 1")]);
        assert!(w.names.is_empty(), "{:?}", w.names);
        assert!(w.files.is_empty());
        assert!(w.pki.is_none(), "workers get no PKI");
        let c = node_secrets(
            true,
            &k,
            [
                (
                    "/etc/kube-aws/addons/values/dex.yaml",
                    "secret: kube-aws-secret.dex.pw\n",
                ),
                ("/etc/kube-aws/kubeadm.json", "{\"x\": \"kube-aws-secret.dex.pw2\"}"),
                ("/etc/dex.env", "PW=kube-aws-secret.dex.pw.controller\n"),
                ("/etc/plain", "nothing"),
            ],
        );
        let mut want = vec![A, A_CTRL, B, BOOTSTRAP_TOKEN, super::super::security::ENCRYPTION_ENTRY];
        want.extend(crate::pki::KEY_ENTRIES);
        want.sort();
        assert_eq!(c.names, want);
        let pki = c.pki.as_ref().expect("controllers get the PKI");
        assert_eq!(pki.dir, "/etc/kubernetes/pki");
        assert!(pki.keys.iter().all(|k| c.names.contains(k)));
        assert!(pki.certificates.iter().all(|k| !k.ends_with(".key")));
        let formats: Vec<_> = c.files.iter().map(|f| (f.path.as_str(), f.format)).collect();
        assert_eq!(
            formats,
            vec![
                ("/etc/kube-aws/addons/values/dex.yaml", FillFormat::Yaml),
                ("/etc/kube-aws/kubeadm.json", FillFormat::Json),
                ("/etc/dex.env", FillFormat::Text),
            ]
        );
    }
}
