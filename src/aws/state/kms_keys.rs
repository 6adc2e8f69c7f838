//! The state of the cluster's KMS keys (issue 36 §3): a key that is disabled
//! or pending deletion is said, naming the key and what stops working
//! (`status` warns; `update` refuses before it publishes anything).
//!
//! The keys are the live root stack's `DecryptKmsKeyARNs` (src/aws/publish/mod.rs):
//! the current key first, then the retired ones kept for the etcd snapshots
//! (src/aws/publish/secrets.rs, key rotation). The state is KMS's `KeyState`
//! (kms:DescribeKey). How to recover is in docs/deploy.md ("A disabled KMS key").

use serde::Serialize;

use crate::aws::{sdk_error, AwsError, Clients};
use crate::render::cfn::DECRYPT_KMS_KEYS;

/// What the cluster uses a key for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyUse {
    /// `kmsKeyARN`: the secret bundle, the join token, new etcd snapshots.
    Current,
    /// A key rotated away from, kept for the snapshots taken under it.
    Retired,
}

/// One key as KMS describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyState {
    pub arn: String,
    #[serde(rename = "use")]
    pub key_use: KeyUse,
    /// KMS's `KeyState` (Enabled, Disabled, PendingDeletion, …); empty when
    /// it could not be read.
    pub state: String,
    /// When a key pending deletion is deleted (RFC 3339).
    #[serde(rename = "deletionDate", skip_serializing_if = "Option::is_none")]
    pub deletion_date: Option<String>,
    /// Why the state could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

/// The keys of a live stack: its `DecryptKmsKeyARNs`, the first the current
/// one; `fallback` (cluster.yaml's `kmsKeyARN`) for a stack without the
/// parameter. Pure.
pub fn keys_of_stack(live_parameters: &[(String, String)], fallback: Option<&str>) -> Vec<(String, KeyUse)> {
    let listed: Vec<String> = live_parameters
        .iter()
        .find(|(k, _)| k == DECRYPT_KMS_KEYS)
        .map(|(_, v)| {
            v.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let listed = if listed.is_empty() {
        fallback.map(|k| vec![k.to_string()]).unwrap_or_default()
    } else {
        listed
    };
    listed
        .into_iter()
        .enumerate()
        .map(|(i, k)| (k, if i == 0 { KeyUse::Current } else { KeyUse::Retired }))
        .collect()
}

/// True for a state in which KMS neither encrypts nor decrypts.
pub fn unusable(state: &str) -> bool {
    matches!(
        state,
        "Disabled" | "PendingDeletion" | "PendingReplicaDeletion" | "Unavailable" | "PendingImport"
    )
}

/// What stops working while a key of this use cannot be used. Pure.
pub fn consequence(key_use: KeyUse) -> &'static str {
    match key_use {
        KeyUse::Current => {
            "no node can decrypt its bootstrap secrets, so a new or replaced node cannot join; the controllers \
             cannot mint the join token or write etcd snapshots; `kube-aws update` and `kube-aws kubeconfig` \
             cannot decrypt the cluster CA key"
        }
        KeyUse::Retired => "the etcd snapshots taken under it cannot be read back by `kube-aws restore`",
    }
}

/// How to get a key of this state back. Pure.
pub fn recovery(arn: &str, state: &str) -> String {
    match state {
        "PendingDeletion" | "PendingReplicaDeletion" => format!(
            "cancel the deletion, then enable it: `aws kms cancel-key-deletion --key-id {arn}` and \
             `aws kms enable-key --key-id {arn}` (docs/deploy.md, \"A disabled KMS key\")"
        ),
        "Disabled" => {
            format!("enable it: `aws kms enable-key --key-id {arn}` (docs/deploy.md, \"A disabled KMS key\")")
        }
        _ => "see docs/deploy.md, \"A disabled KMS key\"".to_string(),
    }
}

/// The warning for a key, when there is one. Pure.
pub fn warning(k: &KeyState) -> Option<String> {
    if let Some(why) = &k.unreadable {
        return Some(format!("cannot read the state of the KMS key {:?}: {why}", k.arn));
    }
    if !unusable(&k.state) {
        return None;
    }
    let when = k
        .deletion_date
        .as_deref()
        .map(|d| format!(", to be deleted on {d}"))
        .unwrap_or_default();
    let role = match k.key_use {
        KeyUse::Current => "the cluster's KMS key (kmsKeyARN)",
        KeyUse::Retired => "a retired KMS key of the cluster",
    };
    Some(format!(
        "{role} {:?} is {}{when}: {}; {}",
        k.arn,
        k.state,
        consequence(k.key_use),
        recovery(&k.arn, &k.state)
    ))
}

/// The state of one key (kms:DescribeKey); an error of the call is kept in
/// `unreadable`, not returned.
pub async fn describe(clients: &Clients, arn: &str, key_use: KeyUse) -> KeyState {
    let mut out = KeyState {
        arn: arn.to_string(),
        key_use,
        state: String::new(),
        deletion_date: None,
        unreadable: None,
    };
    match clients.kms.describe_key().key_id(arn).send().await {
        Ok(o) => {
            if let Some(m) = o.key_metadata() {
                out.state = m.key_state().map(|s| s.as_str().to_string()).unwrap_or_default();
                out.deletion_date = m
                    .deletion_date()
                    .and_then(|d| d.fmt(aws_smithy_types::date_time::Format::DateTime).ok());
            }
        }
        Err(e) => out.unreadable = Some(sdk_error("kms:DescribeKey", e).to_string()),
    }
    out
}

/// The state of each key.
pub async fn describe_all(clients: &Clients, keys: &[(String, KeyUse)]) -> Vec<KeyState> {
    let mut out = Vec::new();
    for (arn, key_use) in keys {
        out.push(describe(clients, arn, *key_use).await);
    }
    out
}

/// Before an update publishes anything: each key it encrypts or decrypts
/// with (cluster.yaml's `kmsKeyARN`, and the live bundle's key when it is
/// another) must be usable. A state that cannot be read is not a refusal
/// (the caller may lack kms:DescribeKey); the KMS calls of the publish tell.
pub async fn refuse_unusable(clients: &Clients, keys: &[String]) -> Result<(), AwsError> {
    let mut seen = Vec::new();
    for arn in keys.iter().filter(|k| !k.is_empty()) {
        if seen.contains(arn) {
            continue;
        }
        seen.push(arn.clone());
        let k = describe(clients, arn, KeyUse::Current).await;
        if unusable(&k.state) {
            return Err(AwsError::KmsKeyNotUsable {
                kms_key_arn: k.arn.clone(),
                state: k.state.clone(),
                consequence: consequence(KeyUse::Current),
                fix: recovery(&k.arn, &k.state),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_stacks_keys_are_its_decrypt_list_current_first() {
        let p = params(&[("DecryptKmsKeyARNs", "arn:k2, arn:k1")]);
        assert_eq!(
            keys_of_stack(&p, Some("arn:yaml")),
            [
                ("arn:k2".to_string(), KeyUse::Current),
                ("arn:k1".to_string(), KeyUse::Retired)
            ]
        );
        assert_eq!(
            keys_of_stack(&params(&[]), Some("arn:yaml")),
            [("arn:yaml".to_string(), KeyUse::Current)]
        );
        assert!(keys_of_stack(&params(&[("DecryptKmsKeyARNs", "")]), None).is_empty());
    }

    fn state(s: &str, key_use: KeyUse, deletion: Option<&str>) -> KeyState {
        KeyState {
            arn: "arn:aws:kms:us-west-2:111122223333:key/k".into(),
            key_use,
            state: s.into(),
            deletion_date: deletion.map(str::to_string),
            unreadable: None,
        }
    }

    #[test]
    fn a_disabled_or_deleted_key_is_warned_about_with_what_stops_and_the_fix() {
        assert_eq!(warning(&state("Enabled", KeyUse::Current, None)), None);
        let w = warning(&state("Disabled", KeyUse::Current, None)).unwrap();
        assert!(
            w.starts_with(
                "the cluster's KMS key (kmsKeyARN) \"arn:aws:kms:us-west-2:111122223333:key/k\" is Disabled: no node can decrypt"
            ),
            "{w}"
        );
        assert!(
            w.contains("`aws kms enable-key --key-id arn:aws:kms:us-west-2:111122223333:key/k`"),
            "{w}"
        );
        let w = warning(&state("PendingDeletion", KeyUse::Retired, Some("2026-12-09T00:00:00Z"))).unwrap();
        assert!(
            w.contains("a retired KMS key of the cluster")
                && w.contains("is PendingDeletion, to be deleted on 2026-12-09T00:00:00Z")
                && w.contains("kube-aws restore")
                && w.contains("aws kms cancel-key-deletion"),
            "{w}"
        );
        let mut u = state("", KeyUse::Current, None);
        u.unreadable = Some("AccessDenied".into());
        assert!(warning(&u).unwrap().starts_with("cannot read the state of the KMS key"));
        assert!(unusable("Disabled") && unusable("PendingDeletion") && !unusable("Enabled") && !unusable(""));
    }
}
