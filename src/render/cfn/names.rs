//! The names the stacks pass to one another (parameters, the plan pointer),
//! and the node roles' decrypt keys built from one: the leaf the stack
//! renderers share, so none imports another for a name.

use serde_json::{json, Value};

/// The control-plane stack's addon plan pointer (an SSM parameter).
pub const PLAN_POINTER: &str = "AddonPlan";

/// The parameter carrying the published secret bundle's content-addressed
/// key (`secrets/<sha256>/bundle.json`), which the publisher passes and the
/// root hands to every node stack's bundle pointer (src/render/layout.rs
/// `secret_bundle_parameter`).
pub const SECRET_BUNDLE_KEY: &str = "SecretBundleKey";

/// The parameter carrying every KMS key the node roles may decrypt with,
/// comma-separated: `kmsKeyARN`, then the keys a rotation retired while an
/// etcd snapshot under them can exist (src/aws/publish/secrets.rs `retired_keys`).
/// The publisher passes it and the root hands it to every node stack, whose
/// roles' `kms:Decrypt` statements name it (src/render/cfn/iam.rs): a new key
/// changes policies, never a launch template.
pub const DECRYPT_KMS_KEYS: &str = "DecryptKmsKeyARNs";

/// The keys a node role may decrypt with (the node stack's
/// `DecryptKmsKeyARNs` parameter, src/render/cfn/root.rs): `kmsKeyARN` and
/// the keys a rotation retired, while snapshots under them are kept. Only
/// `kms:Decrypt` takes this list; what a node encrypts is under `kmsKeyARN`.
pub(super) fn decrypt_keys() -> Value {
    json!({"Fn::Split": [",", {"Ref": DECRYPT_KMS_KEYS}]})
}
