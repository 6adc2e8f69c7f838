//! Bootstrap secrets: the kubeadm bootstrap token and the cluster PKI
//! (src/pki.rs) are generated here, and every secret (the token, the PKI's
//! private keys and the plugin parameters marked `secret: true`) is encrypted
//! with KMS before it leaves the machine. What is published is a bundle of
//! ciphertexts, `secrets/bundle.json`, plus the PKI's public half in plaintext:
//!
//! ```json
//! {"apiVersion": "kube-aws/v1", "kind": "SecretBundle", "kmsKeyARN": "arn:…",
//!  "encryptionContext": {"kube-aws:cluster": "demo"},
//!  "secrets": {"kubeadm/bootstrap-token": "<base64 KMS ciphertext>", "pki/ca.key": "…", …},
//!  "certificates": {"pki/ca.crt": "-----BEGIN CERTIFICATE-----…", "pki/sa.pub": "…", …}}
//! ```
//!
//! Each ciphertext is bound to the encryption context
//! `{"kube-aws:cluster": <cluster>, "kube-aws:secret": <entry name>}`, so a
//! node role's `kms:Decrypt` can be narrowed to the entries it needs (workers:
//! the bootstrap token and their pool's plugin secrets; controllers also the
//! PKI keys). Nodes decrypt with their role in `kube-aws-node secrets`
//! (src/node/kube_aws_node/secrets.py); `kube-aws kubeconfig` decrypts the
//! CA key with the caller's own credentials.
//!
//! Secrets are stable across publishes: the previous bundle is reused for the
//! bootstrap token (a new token would replace every node) and the PKI (which
//! is never regenerated: a PKI that no longer decrypts is an error), and a
//! plugin secret is re-encrypted only when its value changed (checked by
//! decrypting the old one).
//!
//! Key rotation (issue 27 item 5): under a new `kmsKeyARN` every entry whose
//! value stays (the token, the PKI keys, the webhook's certificate, the plugin
//! secrets) is decrypted with the operator's credentials and encrypted again
//! under the new key (decrypt + encrypt rather than kms:ReEncrypt, so the
//! operator needs nothing beyond what a publish needs already). The entry's
//! `origins` record the ciphertext its value was first published under, which
//! the secrets versions hash (src/aws/publish/mod.rs `secrets_versions`), so a
//! re-encryption moves no version and replaces no node. The previous key goes
//! to `retiredKeys` with the time it was retired, and stays there, so the node
//! roles keep `kms:Decrypt` on it (render's `DecryptKmsKeyARNs` parameter),
//! for as long as the etcd snapshots taken under it can exist (the longer of
//! `etcd.backup.retention`'s two tiers, plus a day): the snapshots are
//! SSE-KMS objects, which S3 cannot re-encrypt in place.
//!
//! CA rotation (issue 36, `update --rotate-ca`, asked for explicitly): the
//! PKI (the CAs, the service-account key and the webhook's certificate) is
//! minted anew while the join token and the plugin secrets are kept. The
//! replaced service-account public key goes to `retiredServiceAccountKeys`,
//! which the issuer's JWKS keeps serving ([`retired_service_account_keys`])
//! while a token it signed can still be valid.

use std::collections::BTreeMap;

use aws_sdk_kms::primitives::Blob;
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::aws::{sdk_error, AwsError, BundleError, Clients};

use crate::pki::{self, PrivatePem};
pub use crate::render::secrets::{BOOTSTRAP_TOKEN, CONTEXT_CLUSTER, CONTEXT_SECRET};
use crate::render::security;

mod retired;
pub use retired::{retired_key_lifetime, retired_keys, retired_service_account_keys, SERVICE_ACCOUNT_KEY_RETENTION};

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
pub struct NamedSecret {
    pub name: String,
    pub value: Secret,
}

/// A key a bundle was encrypted under before the current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetiredKey {
    pub arn: String,
    /// RFC 3339: when a publish under another key retired it.
    pub retired_at: String,
}

/// The published bundle: ciphertexts only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretBundle {
    pub api_version: String,
    pub kind: String,
    #[serde(rename = "kmsKeyARN")]
    pub kms_key_arn: String,
    pub encryption_context: BTreeMap<String, String>,
    /// name → base64 of the KMS ciphertext blob.
    pub secrets: BTreeMap<String, String>,
    /// The cluster PKI's public half: entry name → PEM (never a private key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub certificates: BTreeMap<String, String>,
    /// Entries re-encrypted under a new key: name → the ciphertext the value
    /// was first published under (what its secrets version hashes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub origins: BTreeMap<String, String>,
    /// The keys earlier bundles (and the etcd snapshots) were encrypted under,
    /// kept while a snapshot under them can exist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_keys: Vec<RetiredKey>,
    /// Service-account public keys a CA rotation replaced, kept in the
    /// issuer's JWKS while tokens they signed can be valid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_service_account_keys: Vec<RetiredPublicKey>,
}

/// A service-account public key (PEM) a CA rotation replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetiredPublicKey {
    pub public_key: String,
    /// RFC 3339: when the rotation was published.
    pub retired_at: String,
}

impl SecretBundle {
    /// Every key a node may need to decrypt with: the current one, then the
    /// retired ones still kept.
    pub fn decrypt_keys(&self) -> Vec<String> {
        let mut keys = vec![self.kms_key_arn.clone()];
        for k in &self.retired_keys {
            if !keys.contains(&k.arn) {
                keys.push(k.arn.clone());
            }
        }
        keys
    }
}

/// The bundle without its PKI (the CAs, the service-account key, the
/// webhook's serving certificate): what a CA rotation builds from, so that
/// those are minted anew and everything else is kept. Pure.
pub fn without_pki(bundle: &SecretBundle) -> SecretBundle {
    let mut out = bundle.clone();
    for name in pki::KEY_ENTRIES.iter().chain(&pki::WEBHOOK_ENTRIES) {
        out.secrets.remove(*name);
        out.origins.remove(*name);
    }
    for name in pki::PUBLIC_ENTRIES {
        out.certificates.remove(name);
    }
    out
}

/// A new EncryptionConfiguration: one 32-byte secretbox key (named by the
/// day it was made, so that a later rotation can add a second).
fn new_encryption_configuration() -> Result<Secret, AwsError> {
    let key = base64::engine::general_purpose::STANDARD.encode(random_bytes(32)?);
    let today = time::OffsetDateTime::now_utc().date();
    let name = format!(
        "key-{:04}{:02}{:02}",
        today.year(),
        u8::from(today.month()),
        today.day()
    );
    Ok(Secret::new(security::encryption_configuration(&[(name, key)])))
}

/// Random bytes from the operating system.
fn random_bytes(n: usize) -> Result<Vec<u8>, AwsError> {
    let mut buf = vec![0u8; n];
    getrandom::getrandom(&mut buf).map_err(|e| AwsError::Random { detail: e.to_string() })?;
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

/// KMS encrypts at most 4096 bytes; larger secrets are refused, naming them.
const KMS_LIMIT: usize = 4096;

async fn encrypt(clients: &Clients, key: &str, cluster: &str, name: &str, value: &Secret) -> Result<String, AwsError> {
    if value.expose().len() > KMS_LIMIT {
        return Err(AwsError::SecretTooLarge {
            name: name.to_string(),
            size: value.expose().len(),
            limit: KMS_LIMIT,
        });
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
        .map_err(|e| BundleError::Base64 { detail: e.to_string() })?;
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
/// decrypt under this cluster's context (or generates them), re-encrypts a
/// plugin secret only when its value changed, and under a new key
/// re-encrypts every value it keeps (see the module's documentation).
/// `keep_retired`: how long a retired key stays ([`retired_key_lifetime`]).
/// `new_pki`: a CA rotation asked for explicitly ([`without_pki`]).
pub async fn build_bundle(
    clients: &Clients,
    kms_key_arn: &str,
    cluster: &str,
    previous: Option<&SecretBundle>,
    plugin_secrets: &[NamedSecret],
    keep_retired: std::time::Duration,
    new_pki: bool,
) -> Result<SecretBundle, AwsError> {
    let ours = previous.filter(|p| p.encryption_context.get(CONTEXT_CLUSTER).map(String::as_str) == Some(cluster));
    // The node roles' policies have room for so many retired keys
    // (src/render/cfn/iam_size.rs): refused before anything is encrypted.
    let now = std::time::SystemTime::now();
    let retired = retired_keys(ours, kms_key_arn, now, keep_retired);
    if retired.len() > crate::render::cfn::iam_size::MAX_RETIRED_KEYS {
        return Err(AwsError::TooManyRetiredKeys {
            kms_key_arn: kms_key_arn.to_string(),
            retired: retired.len(),
            limit: crate::render::cfn::iam_size::MAX_RETIRED_KEYS,
            oldest: retired
                .first()
                .map(|k| format!("{} (retired {})", k.arn, k.retired_at))
                .unwrap_or_default(),
            days: keep_retired.as_secs() / 86_400,
        });
    }
    let stripped = ours.filter(|_| new_pki).map(without_pki);
    let pki_from = if new_pki { stripped.as_ref() } else { ours };
    let mut origins = BTreeMap::new();
    let (mut secrets, certificates, ca_key) = bundle_pki(clients, kms_key_arn, cluster, pki_from, &mut origins).await?;
    webhook_serving(
        clients,
        kms_key_arn,
        cluster,
        pki_from,
        &certificates,
        &ca_key,
        (&mut secrets, &mut origins),
    )
    .await?;
    {
        let name = BOOTSTRAP_TOKEN;
        let old = match ours.filter(|p| p.secrets.contains_key(name)) {
            Some(p) => decrypt(clients, cluster, name, &p.secrets[name])
                .await
                .ok()
                .map(|v| (p, v)),
            None => None,
        };
        let ct = match old {
            Some((p, value)) => keep(clients, kms_key_arn, cluster, p, name, &value, &mut origins).await?,
            None => encrypt(clients, kms_key_arn, cluster, name, &generate_bootstrap_token()?).await?,
        };
        secrets.insert(name.to_string(), ct);
    }
    {
        // The key of the Secrets in etcd (src/render/security.rs): kept as
        // long as the cluster lives, whatever else rotates; one that no
        // longer decrypts is an error, never a new key.
        let name = security::ENCRYPTION_ENTRY;
        let ct = match ours.filter(|p| p.secrets.contains_key(name)) {
            Some(p) => {
                let plain = decrypt(clients, cluster, name, &p.secrets[name]).await.map_err(|e| {
                    BundleError::EncryptionKeyUndecryptable {
                        entry: name.to_string(),
                        detail: e.to_string(),
                        kms_key_arn: p.kms_key_arn.clone(),
                    }
                })?;
                keep(clients, kms_key_arn, cluster, p, name, &plain, &mut origins).await?
            }
            None => encrypt(clients, kms_key_arn, cluster, name, &new_encryption_configuration()?).await?,
        };
        secrets.insert(name.to_string(), ct);
    }
    for s in plugin_secrets {
        if secrets.contains_key(&s.name) {
            return Err(AwsError::DuplicateSecret { name: s.name.clone() });
        }
        let same = match ours.filter(|p| p.secrets.contains_key(&s.name)) {
            Some(p) => decrypt(clients, cluster, &s.name, &p.secrets[&s.name])
                .await
                .is_ok_and(|old| old == s.value)
                .then_some(p),
            None => None,
        };
        let ct = match same {
            Some(p) => keep(clients, kms_key_arn, cluster, p, &s.name, &s.value, &mut origins).await?,
            None => encrypt(clients, kms_key_arn, cluster, &s.name, &s.value).await?,
        };
        secrets.insert(s.name.clone(), ct);
    }
    let sa_pub = certificates.get(pki::SA_PUB).map(String::as_str).unwrap_or_default();
    let retired_service_account_keys = retired_service_account_keys(ours, sa_pub, now, SERVICE_ACCOUNT_KEY_RETENTION);
    Ok(SecretBundle {
        api_version: "kube-aws/v1".into(),
        kind: "SecretBundle".into(),
        kms_key_arn: kms_key_arn.to_string(),
        encryption_context: BTreeMap::from([(CONTEXT_CLUSTER.to_string(), cluster.to_string())]),
        secrets,
        certificates,
        origins,
        retired_keys: retired,
        retired_service_account_keys,
    })
}

/// The ciphertext of an entry of `prev` whose value (`plain`) stays: the old
/// one under the same key, else `plain` encrypted under the new key, with
/// the entry's origin (the first ciphertext of this value) recorded in
/// `origins` so its secrets version does not move.
async fn keep(
    clients: &Clients,
    kms_key_arn: &str,
    cluster: &str,
    prev: &SecretBundle,
    name: &str,
    plain: &Secret,
    origins: &mut BTreeMap<String, String>,
) -> Result<String, AwsError> {
    let old = &prev.secrets[name];
    let origin = prev.origins.get(name);
    if prev.kms_key_arn == kms_key_arn {
        if let Some(o) = origin {
            origins.insert(name.to_string(), o.clone());
        }
        return Ok(old.clone());
    }
    let ct = encrypt(clients, kms_key_arn, cluster, name, plain).await?;
    origins.insert(name.to_string(), origin.unwrap_or(old).clone());
    Ok(ct)
}

/// Before an update under a `kmsKeyARN` other than the published bundle's:
/// the caller's identity must be able to encrypt under the new key (a probe
/// bound to this cluster's context, whose ciphertext is thrown away).
/// Returns the previous key when it changes; nothing is written.
pub async fn check_key_change(
    clients: &Clients,
    kms_key_arn: &str,
    cluster: &str,
    previous: Option<&SecretBundle>,
) -> Result<Option<String>, AwsError> {
    let Some(prev) = previous.filter(|p| p.kms_key_arn != kms_key_arn) else {
        return Ok(None);
    };
    let probe = Secret::new("kube-aws key check");
    encrypt(clients, kms_key_arn, cluster, KEY_CHECK, &probe)
        .await
        .map_err(|e| AwsError::KmsKeyUnusable {
            kms_key_arn: kms_key_arn.to_string(),
            previous: prev.kms_key_arn.clone(),
            detail: e.to_string(),
        })?;
    Ok(Some(prev.kms_key_arn.clone()))
}

/// The encryption context entry of [`check_key_change`]'s probe (no node may decrypt it).
const KEY_CHECK: &str = "kube-aws/key-check";

/// The entry of the scheme before the cluster PKI (kubeadm's `--certificate-key`).
const LEGACY_CERTIFICATE_KEY: &str = "kubeadm/certificate-key";

/// The PKI entries of the bundle: `(key entry → ciphertext, public entry → PEM)`.
/// Generated only when `previous` (this cluster's last bundle) has none; kept
/// as they are under the same KMS key (after checking they still decrypt), and
/// re-encrypted under a new one. A partial or undecryptable PKI is an error:
/// regenerating the CAs would lock every node and user out.
async fn bundle_pki(
    clients: &Clients,
    kms_key_arn: &str,
    cluster: &str,
    previous: Option<&SecretBundle>,
    origins: &mut BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, BTreeMap<String, String>, PrivatePem), AwsError> {
    let present: Vec<&str> = pki::KEY_ENTRIES
        .iter()
        .copied()
        .filter(|k| previous.is_some_and(|p| p.secrets.contains_key(*k)))
        .chain(
            pki::PUBLIC_ENTRIES
                .iter()
                .copied()
                .filter(|k| previous.is_some_and(|p| p.certificates.contains_key(*k))),
        )
        .collect();
    let mut cts = BTreeMap::new();
    // A bundle of the scheme before the PKI (kubeadm's own CAs on the first
    // controller, joined with a certificate key): a new CA would not be the one
    // its nodes trust, so replaced nodes could never join.
    if present.is_empty() && previous.is_some_and(|p| p.secrets.contains_key(LEGACY_CERTIFICATE_KEY)) {
        return Err(BundleError::Legacy {
            entry: LEGACY_CERTIFICATE_KEY,
        }
        .into());
    }
    let Some(prev) = previous.filter(|_| !present.is_empty()) else {
        let fresh = pki::generate(cluster, time::OffsetDateTime::now_utc())
            .map_err(|source| BundleError::Generate { source })?;
        for (name, key) in &fresh.keys {
            let ct = encrypt(clients, kms_key_arn, cluster, name, &Secret::new(key.expose())).await?;
            cts.insert(name.clone(), ct);
        }
        let ca_key = fresh.keys[pki::CA_KEY].clone();
        return Ok((cts, fresh.public, ca_key));
    };
    if present.len() != pki::KEY_ENTRIES.len() + pki::PUBLIC_ENTRIES.len() {
        return Err(BundleError::PartialPki {
            present: present.iter().map(|p| p.to_string()).collect(),
        }
        .into());
    }
    let mut ca_key = PrivatePem::new("");
    for name in pki::KEY_ENTRIES {
        let old = &prev.secrets[name];
        let plain = decrypt(clients, cluster, name, old)
            .await
            .map_err(|e| BundleError::Undecryptable {
                entry: name.to_string(),
                detail: e.to_string(),
                kms_key_arn: prev.kms_key_arn.clone(),
            })?;
        let ct = keep(clients, kms_key_arn, cluster, prev, name, &plain, origins).await?;
        cts.insert(name.to_string(), ct);
        if name == pki::CA_KEY {
            ca_key = PrivatePem::new(plain.expose());
        }
    }
    let public = pki::PUBLIC_ENTRIES
        .iter()
        .map(|k| (k.to_string(), prev.certificates[*k].clone()))
        .collect();
    Ok((cts, public, ca_key))
}

/// The pod identity webhook's serving certificate, key and CA bundle
/// (src/pki.rs `webhook_entries`): kept from `previous` (re-encrypted under a new key) while
/// the certificate decrypts, is the cluster CA's and has more than
/// `SERVING_RENEW_BEFORE` left, so a publish changes nothing (no node is
/// replaced for it); otherwise signed anew with the cluster CA.
async fn webhook_serving(
    clients: &Clients,
    kms_key_arn: &str,
    cluster: &str,
    previous: Option<&SecretBundle>,
    certificates: &BTreeMap<String, String>,
    ca_key: &PrivatePem,
    (secrets, origins): (&mut BTreeMap<String, String>, &mut BTreeMap<String, String>),
) -> Result<(), AwsError> {
    let ca_cert = certificates
        .get(pki::CA_CERT)
        .ok_or(BundleError::PkiWithout { entry: pki::CA_CERT })?;
    let now = time::OffsetDateTime::now_utc();
    if let Some(prev) = previous {
        if let Some(old) = pki::WEBHOOK_ENTRIES
            .iter()
            .map(|e| prev.secrets.get(*e))
            .collect::<Option<Vec<_>>>()
        {
            let current = match decrypt(clients, cluster, pki::WEBHOOK_CERT, old[0]).await {
                Ok(cert) => pki::webhook_cert_current(cert.expose(), ca_cert, now),
                Err(_) => false,
            };
            if current {
                for (name, old) in pki::WEBHOOK_ENTRIES.iter().zip(old) {
                    let ct = if prev.kms_key_arn == kms_key_arn {
                        // Same key: `keep` takes the old ciphertext and never reads the value.
                        keep(clients, kms_key_arn, cluster, prev, name, &Secret::new(""), origins).await?
                    } else {
                        let plain = decrypt(clients, cluster, name, old).await?;
                        keep(clients, kms_key_arn, cluster, prev, name, &plain, origins).await?
                    };
                    secrets.insert(name.to_string(), ct);
                }
                return Ok(());
            }
        }
    }
    let entries = pki::webhook_entries(ca_cert, ca_key, now).map_err(|source| BundleError::WebhookCert { source })?;
    for (name, value) in entries {
        let ct = encrypt(clients, kms_key_arn, cluster, name, &Secret::new(value.expose())).await?;
        secrets.insert(name.to_string(), ct);
    }
    Ok(())
}

/// The cluster CA as `kube-aws kubeconfig` needs it: the certificate (from the
/// bundle, public) and its key, decrypted with the caller's own credentials.
pub async fn cluster_ca(
    clients: &Clients,
    cluster: &str,
    bundle: &SecretBundle,
) -> Result<(String, PrivatePem), AwsError> {
    let (Some(cert), Some(ct)) = (bundle.certificates.get(pki::CA_CERT), bundle.secrets.get(pki::CA_KEY)) else {
        return Err(BundleError::NoCa { entry: pki::CA_KEY }.into());
    };
    let key = decrypt(clients, cluster, pki::CA_KEY, ct).await?;
    Ok((cert.clone(), PrivatePem::new(key.expose())))
}

#[cfg(test)]
mod tests;
