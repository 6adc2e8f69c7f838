//! The previous secret bundle of a publish, and the check that keeps the
//! cluster PKI from being replaced silently (issue 36 §3).
//!
//! Where the previous bundle comes from ([`PreviousBundle`]):
//! - `up` (no stack): the latest bundle, `secrets/bundle.json`, when there is
//!   one (a cluster destroyed without `--purge` comes back with its secrets);
//!   none means a new cluster.
//! - `update` (the stack exists): the bundle the live root stack's
//!   `SecretBundleKey` names, `secrets/<sha256>/bundle.json`: content-addressed,
//!   so immutable, and the one the running nodes read. (A stack from before that
//!   parameter: the latest bundle.) Missing, unreadable, or not the content its
//!   key names: an error that names the key. It never means "start afresh": a
//!   new CA, service-account key and join token would lock out every node and
//!   break every IAM role of a service account.
//! - `update --rotate-ca`: the same bundle when it is there, else the latest
//!   one, for the secrets that are not the PKI and for the service-account
//!   key the issuer's JWKS keeps serving; the PKI is minted anew
//!   (src/aws/publish/secrets.rs `without_pki`). Only then may the root's
//!   `CACertHash` change ([`check_ca`]).
//!
//! The latest bundle is written only once the change is confirmed
//! (src/aws/publish/mod.rs `publish_confirmed`), with the issuer's documents.

use crate::aws::publish::secrets::SecretBundle;
use crate::aws::publish::{content_addressed, SECRET_BUNDLE};
use crate::aws::services::s3::{get_object, Location};
use crate::aws::{AwsError, BundleError, Clients};
use crate::digest::sha256_hex;
use crate::render::cfn::{CA_CERT_HASH, SECRET_BUNDLE_KEY};

/// Where a publish takes the previous secret bundle from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviousBundle {
    /// No stack: the latest bundle when there is one; none is a new cluster.
    Latest,
    /// The stack exists: the bundle at this key (relative to the cluster's
    /// prefix), which must be there and readable.
    Required { key: String },
    /// `update --rotate-ca`: the bundle at this key when it is readable, else
    /// the latest one, else none; its secrets other than the PKI are kept
    /// (and its service-account key stays in the issuer's JWKS); the PKI is new.
    RotateCa { key: String },
}

impl PreviousBundle {
    /// The previous bundle of an update of the stack whose live parameters
    /// are `live_parameters`: the one its `SecretBundleKey` names (the
    /// latest bundle for a stack from before that parameter). Pure.
    pub fn for_update(live_parameters: &[(String, String)], rotate_ca: bool) -> PreviousBundle {
        let key = parameter(live_parameters, SECRET_BUNDLE_KEY)
            .filter(|k| !k.is_empty())
            .unwrap_or(SECRET_BUNDLE)
            .to_string();
        if rotate_ca {
            PreviousBundle::RotateCa { key }
        } else {
            PreviousBundle::Required { key }
        }
    }

    /// True when the PKI is to be minted anew.
    pub fn rotates_ca(&self) -> bool {
        matches!(self, PreviousBundle::RotateCa { .. })
    }
}

fn parameter<'a>(parameters: &'a [(String, String)], name: &str) -> Option<&'a str> {
    parameters.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Why the bytes read at `key` are not a usable previous bundle, if they
/// are not: not JSON of a bundle, or (at a content-addressed key) not the
/// content the key's sha256 names. Pure.
pub fn parse_previous(key: &str, bytes: &[u8]) -> Result<SecretBundle, String> {
    if key != SECRET_BUNDLE {
        let sha = sha256_hex(bytes);
        if content_addressed(SECRET_BUNDLE, &sha) != key {
            return Err(format!(
                "its content has sha256 {sha}, which is not the one its key names"
            ));
        }
    }
    serde_json::from_slice(bytes).map_err(|e| format!("not a secret bundle: {e}"))
}

/// Reads the previous bundle as `which` says (see the module's documentation).
pub async fn load(
    clients: &Clients,
    location: &Location,
    which: &PreviousBundle,
) -> Result<Option<SecretBundle>, AwsError> {
    match which {
        PreviousBundle::Latest => read(clients, location, SECRET_BUNDLE, false).await,
        PreviousBundle::Required { key } => read(clients, location, key, true).await,
        PreviousBundle::RotateCa { key } => {
            // Whatever is readable: a rotation asked for explicitly starts from what is left.
            if let Ok(Some(b)) = read(clients, location, key, false).await {
                return Ok(Some(b));
            }
            Ok(read(clients, location, SECRET_BUNDLE, false).await.ok().flatten())
        }
    }
}

/// The bundle at `key`: None when it is missing and not `required`.
async fn read(
    clients: &Clients,
    location: &Location,
    key: &str,
    required: bool,
) -> Result<Option<SecretBundle>, AwsError> {
    let uri = format!("s3://{}/{}", location.bucket, location.key(key));
    let Some(bytes) = get_object(clients, &location.bucket, &location.key(key)).await? else {
        return if required {
            Err(BundleError::PreviousMissing { uri }.into())
        } else {
            Ok(None)
        };
    };
    parse_previous(key, &bytes)
        .map(Some)
        .map_err(|detail| BundleError::PreviousUnreadable { uri, detail }.into())
}

/// An update's new root parameters against the live ones: the cluster CA
/// (`CACertHash`) stays unless a CA rotation was asked for. A stack or a
/// render without the parameter has nothing to compare. Pure.
pub fn check_ca(
    live_parameters: &[(String, String)],
    new_parameters: &[(String, String)],
    rotate_ca: bool,
) -> Result<(), BundleError> {
    match (
        parameter(live_parameters, CA_CERT_HASH),
        parameter(new_parameters, CA_CERT_HASH),
    ) {
        (Some(live), Some(new)) if live != new && !rotate_ca => Err(BundleError::CaChanged {
            live: live.to_string(),
            new: new.to_string(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn an_update_reads_the_bundle_the_live_stack_names() {
        let live = params(&[
            ("SecretBundleKey", "secrets/abc/bundle.json"),
            ("CACertHash", "sha256:1"),
        ]);
        assert_eq!(
            PreviousBundle::for_update(&live, false),
            PreviousBundle::Required {
                key: "secrets/abc/bundle.json".into()
            }
        );
        assert_eq!(
            PreviousBundle::for_update(&live, true),
            PreviousBundle::RotateCa {
                key: "secrets/abc/bundle.json".into()
            }
        );
        assert!(PreviousBundle::for_update(&live, true).rotates_ca());
        // A stack from before the parameter: the latest bundle, still required.
        assert_eq!(
            PreviousBundle::for_update(&params(&[("CACertHash", "x")]), false),
            PreviousBundle::Required {
                key: SECRET_BUNDLE.into()
            }
        );
        assert_eq!(
            PreviousBundle::for_update(&params(&[("SecretBundleKey", "")]), false),
            PreviousBundle::Required {
                key: SECRET_BUNDLE.into()
            }
        );
    }

    #[test]
    fn a_previous_bundle_must_be_the_content_its_key_names() {
        let body = br#"{"apiVersion": "kube-aws/v1", "kind": "SecretBundle", "kmsKeyARN": "k", "encryptionContext": {}, "secrets": {}}"#;
        let key = content_addressed(SECRET_BUNDLE, &sha256_hex(body));
        assert_eq!(parse_previous(&key, body).unwrap().kms_key_arn, "k");
        // The latest object has no hash in its key.
        assert!(parse_previous(SECRET_BUNDLE, body).is_ok());
        let other = content_addressed(SECRET_BUNDLE, &"0".repeat(64));
        let why = parse_previous(&other, body).unwrap_err();
        assert!(why.contains("not the one its key names"), "{why}");
        assert!(parse_previous(SECRET_BUNDLE, b"{")
            .unwrap_err()
            .starts_with("not a secret bundle"));
    }

    #[test]
    fn a_new_ca_is_refused_unless_asked_for() {
        let live = params(&[("CACertHash", "sha256:aaa")]);
        assert!(check_ca(&live, &params(&[("CACertHash", "sha256:aaa")]), false).is_ok());
        let err = check_ca(&live, &params(&[("CACertHash", "sha256:bbb")]), false).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("\"sha256:aaa\"") && text.contains("\"sha256:bbb\"") && text.contains("--rotate-ca"),
            "{text}"
        );
        assert!(check_ca(&live, &params(&[("CACertHash", "sha256:bbb")]), true).is_ok());
        // Nothing to compare.
        assert!(check_ca(&params(&[]), &params(&[("CACertHash", "sha256:bbb")]), false).is_ok());
        assert!(check_ca(&live, &params(&[]), false).is_ok());
    }
}
