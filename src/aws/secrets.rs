//! Bootstrap secrets: the kubeadm bootstrap token and certificate key are
//! generated here, and every secret (those two and the plugin parameters marked
//! `secret: true`) is encrypted with KMS before it leaves the machine. What is
//! published is a bundle of ciphertexts, `secrets/bundle.json`:
//!
//! ```json
//! {"apiVersion": "kube-aws/v1", "kind": "SecretBundle", "kmsKeyARN": "arn:…",
//!  "encryptionContext": {"kube-aws:cluster": "demo"},
//!  "secrets": {"kubeadm/bootstrap-token": "<base64 KMS ciphertext>", "kubeadm/certificate-key": "…"}}
//! ```
//!
//! Each ciphertext is bound to the encryption context
//! `{"kube-aws:cluster": <cluster>, "kube-aws:secret": <entry name>}`, so a
//! node role's `kms:Decrypt` can be narrowed to the entries it needs (workers:
//! the bootstrap token and their pool's plugin secrets). Nodes decrypt with
//! their role in `kube-aws-node-secrets` (src/render/templates/node-secrets.py).
//!
//! Secrets are stable across publishes: the previous bundle is reused for the
//! kubeadm secrets (a new token would replace every node), and a plugin secret
//! is re-encrypted only when its value changed (checked by decrypting the old one).

use std::collections::BTreeMap;

use aws_sdk_kms::primitives::Blob;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::{sdk_error, AwsError, Clients};

pub use crate::render::secrets::{BOOTSTRAP_TOKEN, CERTIFICATE_KEY, CONTEXT_CLUSTER, CONTEXT_SECRET};

/// A plaintext secret. Its Debug never shows the value, so it cannot leak into
/// logs or error messages by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }
    /// The plaintext; call only to hand it to KMS or to compare.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A named secret to publish, e.g. a plugin parameter marked `secret: true`
/// (name: the reference the templates saw).
#[derive(Debug, Clone)]
pub struct SecretValue {
    pub name: String,
    pub value: Secret,
}

/// The published bundle: ciphertexts only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretBundle {
    pub api_version: String,
    pub kind: String,
    #[serde(rename = "kmsKeyARN")]
    pub kms_key_arn: String,
    pub encryption_context: BTreeMap<String, String>,
    /// name → base64 of the KMS ciphertext blob.
    pub secrets: BTreeMap<String, String>,
}

/// Random bytes from the operating system.
fn random_bytes(n: usize) -> Result<Vec<u8>, AwsError> {
    let mut buf = vec![0u8; n];
    getrandom::getrandom(&mut buf)
        .map_err(|e| AwsError::WorkTree(format!("cannot get random bytes from the operating system: {e}")))?;
    Ok(buf)
}

/// `[a-z0-9]{n}` without modulo bias.
fn random_token_chars(n: usize) -> Result<String, AwsError> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(n);
    while out.len() < n {
        for b in random_bytes(n * 2)? {
            // 252 = 7 * 36: reject the tail so every character is equally likely.
            if b < 252 && out.len() < n {
                out.push(ALPHABET[usize::from(b) % ALPHABET.len()] as char);
            }
        }
    }
    Ok(out)
}

/// A kubeadm bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`.
pub fn generate_bootstrap_token() -> Result<Secret, AwsError> {
    Ok(Secret(format!(
        "{}.{}",
        random_token_chars(6)?,
        random_token_chars(16)?
    )))
}

/// A kubeadm certificate key: 32 random bytes, hex (what `kubeadm certs certificate-key` prints).
pub fn generate_certificate_key() -> Result<Secret, AwsError> {
    Ok(Secret(hex::encode(random_bytes(32)?)))
}

/// KMS encrypts at most 4096 bytes; larger secrets are refused, naming them.
const KMS_LIMIT: usize = 4096;

async fn encrypt(clients: &Clients, key: &str, cluster: &str, name: &str, value: &Secret) -> Result<String, AwsError> {
    if value.expose().len() > KMS_LIMIT {
        return Err(AwsError::WorkTree(format!(
            "the secret {name:?} is {} bytes; KMS encrypts at most {KMS_LIMIT}: keep secret values small (e.g. a password, not a file)",
            value.expose().len()
        )));
    }
    let out = clients
        .kms
        .encrypt()
        .key_id(key)
        .plaintext(Blob::new(value.expose().as_bytes()))
        .encryption_context(CONTEXT_CLUSTER, cluster)
        .encryption_context(CONTEXT_SECRET, name)
        .send()
        .await
        .map_err(|e| sdk_error("kms:Encrypt", e))?;
    let blob = out.ciphertext_blob().ok_or_else(|| AwsError::Api {
        operation: "kms:Encrypt".into(),
        code: "EmptyResponse".into(),
        message: format!("KMS returned no ciphertext for the secret {name:?}"),
    })?;
    Ok(base64::engine::general_purpose::STANDARD.encode(blob.as_ref()))
}

/// Decrypts the bundle entry `name` (used to tell whether a secret changed or
/// still decrypts under this cluster's context).
pub async fn decrypt(clients: &Clients, cluster: &str, name: &str, ciphertext_b64: &str) -> Result<Secret, AwsError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(ciphertext_b64)
        .map_err(|e| AwsError::WorkTree(format!("the published secret bundle holds invalid base64: {e}")))?;
    let out = clients
        .kms
        .decrypt()
        .ciphertext_blob(Blob::new(bytes))
        .encryption_context(CONTEXT_CLUSTER, cluster)
        .encryption_context(CONTEXT_SECRET, name)
        .send()
        .await
        .map_err(|e| sdk_error("kms:Decrypt", e))?;
    let plain = out.plaintext().map(|b| b.as_ref().to_vec()).unwrap_or_default();
    // Not UTF-8 means not ours; treat as changed rather than echoing bytes anywhere.
    Ok(Secret(String::from_utf8(plain).unwrap_or_default()))
}

/// Builds the bundle: reuses the previous kubeadm secrets while they still
/// decrypt under this cluster's context (or generates them), and re-encrypts a
/// plugin secret only when its value changed.
pub async fn build_bundle(
    clients: &Clients,
    kms_key_arn: &str,
    cluster: &str,
    previous: Option<&SecretBundle>,
    plugin_secrets: &[SecretValue],
) -> Result<SecretBundle, AwsError> {
    let previous = previous.filter(|p| {
        p.kms_key_arn == kms_key_arn && p.encryption_context.get(CONTEXT_CLUSTER).map(String::as_str) == Some(cluster)
    });
    let mut secrets = BTreeMap::new();
    for (name, generate) in [
        (
            BOOTSTRAP_TOKEN,
            generate_bootstrap_token as fn() -> Result<Secret, AwsError>,
        ),
        (CERTIFICATE_KEY, generate_certificate_key),
    ] {
        let reuse = match previous.and_then(|p| p.secrets.get(name)) {
            Some(old) => decrypt(clients, cluster, name, old).await.is_ok().then(|| old.clone()),
            None => None,
        };
        let ct = match reuse {
            Some(ct) => ct,
            None => encrypt(clients, kms_key_arn, cluster, name, &generate()?).await?,
        };
        secrets.insert(name.to_string(), ct);
    }
    for s in plugin_secrets {
        if secrets.contains_key(&s.name) {
            return Err(AwsError::WorkTree(format!(
                "two secrets are named {:?}: rename one of the plugin parameters",
                s.name
            )));
        }
        let reuse = match previous.and_then(|p| p.secrets.get(&s.name)) {
            Some(old) => {
                let same = decrypt(clients, cluster, &s.name, old)
                    .await
                    .map(|p| p == s.value)
                    .unwrap_or(false);
                same.then(|| old.clone())
            }
            None => None,
        };
        let ct = match reuse {
            Some(ct) => ct,
            None => encrypt(clients, kms_key_arn, cluster, &s.name, &s.value).await?,
        };
        secrets.insert(s.name.clone(), ct);
    }
    Ok(SecretBundle {
        api_version: "kube-aws/v1".into(),
        kind: "SecretBundle".into(),
        kms_key_arn: kms_key_arn.to_string(),
        encryption_context: BTreeMap::from([(CONTEXT_CLUSTER.to_string(), cluster.to_string())]),
        secrets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_tokens_have_kubeadm_shape_and_differ() {
        let re = regex::Regex::new(r"^[a-z0-9]{6}\.[a-z0-9]{16}$").unwrap();
        let a = generate_bootstrap_token().unwrap();
        let b = generate_bootstrap_token().unwrap();
        assert!(re.is_match(a.expose()), "{}", a.expose());
        assert_ne!(a, b);
    }

    #[test]
    fn certificate_keys_are_64_hex() {
        let k = generate_certificate_key().unwrap();
        assert_eq!(k.expose().len(), 64);
        assert!(k.expose().chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("hunter2-plaintext");
        let v = SecretValue {
            name: "dex/clientSecret".into(),
            value: s.clone(),
        };
        assert!(!format!("{s:?} {v:?}").contains("hunter2"));
    }
}
