//! Every error of the AWS stage: [`AwsError`], with the rendered-files and
//! secret-bundle problems typed apart ([`RenderedError`], [`BundleError`]);
//! its [`ErrorKind`] is what `cli::exit` turns into an exit code. Also the
//! one translation of an SDK error ([`sdk_error`]).
//!
//! Some variants carry a room's own type (`lifecycle::restore::Refusal`,
//! `wait::recovery::Recovery`, `lifecycle::rolls::TemplateError`): the one
//! circle between the base and the rooms, through data only (src/aws/mod.rs).

use std::path::PathBuf;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use super::wait;

/// What kind of failure an error is; `main` maps each to an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The work tree, the rendered files, or how the command was used.
    WorkTree,
    /// The stack or an addon failed.
    DeployFailed,
    /// AWS could not be reached, refused the credentials, or rejected a call.
    Aws,
    /// The wait's --timeout passed.
    Timeout,
    /// Ctrl-C stopped the wait.
    Interrupted,
}

#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    #[error(
        "no AWS credentials found ({detail}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
         or AWS_PROFILE / --profile naming a profile in ~/.aws/config (run `aws configure` or `aws sso login`)"
    )]
    NoCredentials { detail: String },
    #[error("cannot reach AWS for {operation}: {detail} (check the network, AWS_ENDPOINT_URL and --region)")]
    Network { operation: String, detail: String },
    #[error("AWS kept throttling {operation}: try again in a minute")]
    Throttled { operation: String },
    #[error("AWS {operation} failed: {code}: {message}")]
    Api {
        operation: String,
        code: String,
        message: String,
    },
    #[error("the bucket {bucket:?} does not exist (from s3URI in cluster.yaml): create it first, e.g. `aws s3 mb s3://{bucket}`; kube-aws never creates it")]
    BucketMissing { bucket: String },
    #[error("the stack {stack:?} already exists: run `kube-aws update` to change it")]
    StackExists { stack: String },
    #[error("the stack {stack:?} does not exist: run `kube-aws up` to create it")]
    StackMissing { stack: String },
    #[error("the SSM parameter {parameter:?} holds no AMI ID")]
    NoAmi { parameter: String },
    #[error("the stack {stack:?} exists in ROLLBACK_COMPLETE after a failed create: run `kube-aws destroy` then `kube-aws up` again")]
    RolledBack { stack: String },
    #[error("cluster.yaml: kubernetesVersion: {why}")]
    VersionRefused { why: String },
    #[error("the stack {stack:?} is busy ({status}): wait for it with `kube-aws status --wait`, then update")]
    StackBusy { stack: String, status: String },
    #[error(
        "the stack {stack:?} has no {output} output yet (status {status}): wait for it with `kube-aws status --wait`"
    )]
    NoOutput {
        stack: String,
        output: &'static str,
        status: String,
    },
    #[error("s3URI {uri:?} is not usable: {why}")]
    S3Uri { uri: String, why: String },
    #[error(
        "kmsKeyARN is not set in cluster.yaml: kube-aws encrypts the kubeadm bootstrap token and \
         the cluster CA keys with KMS before uploading them; set kmsKeyARN: arn:aws:kms:REGION:ACCOUNT:key/ID"
    )]
    NoKmsKey,
    #[error("the bucket policy is not JSON ({detail}); fix it in S3 first")]
    BucketPolicy { detail: String },
    #[error(
        "S3 Block Public Access keeps IAM from reading the service-account issuer in the bucket {bucket:?} ({which}), \
         so no pod could assume its IAM role. kube-aws set that bucket's own setting to allow exactly one public \
         statement (s3:GetObject on its two discovery documents); an account-wide setting or your IAM can still refuse it. \
         Allow it (`aws s3control get-public-access-block --account-id ACCOUNT` shows the account's setting), or set \
         issuerURL in cluster.yaml and serve the documents from there"
    )]
    PublicAccessBlocked { bucket: String, which: String },
    #[error(
        "S3 Block Public Access is on for the account {account} ({which}): it overrides every bucket's own setting, \
         so IAM could not read the service-account issuer that kube-aws publishes in the bucket {bucket:?}, and no pod \
         could assume its IAM role. Either turn those two settings off for the account (`aws s3control \
         put-public-access-block --account-id {account} --public-access-block-configuration \
         BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=false,RestrictPublicBuckets=false`; kube-aws \
         makes public only the two discovery documents, in a bucket of their own), or host the documents yourself \
         over HTTPS (e.g. CloudFront with your domain in front of a private bucket) and set issuerURL in cluster.yaml: \
         `up` then leaves them under s3URI/<cluster>/oidc/ for you to copy and creates no public bucket"
    )]
    AccountPublicAccessBlocked {
        account: String,
        bucket: String,
        which: String,
    },
    #[error(
        "the service-account issuer's bucket {bucket:?} cannot be used: {why}. Its name comes from s3URI's bucket and \
         clusterName (bucket names are global); change one of them, or set issuerURL in cluster.yaml and host the \
         issuer yourself"
    )]
    IssuerBucketTaken { bucket: String, why: String },
    #[error("the secret {name:?} is {size} bytes; KMS encrypts at most {limit}: keep secret values small (e.g. a password, not a file)")]
    SecretTooLarge { name: String, size: usize, limit: usize },
    #[error(
        "{kms_key_arn:?} cannot be used by your AWS identity ({detail}); nothing was changed. The published \
         secrets are under {previous:?}: to move them, allow your identity kms:Encrypt on the new key (and keep \
         kms:Decrypt on the old one), or set kmsKeyARN back to {previous:?}"
    )]
    KmsKeyUnusable {
        kms_key_arn: String,
        previous: String,
        detail: String,
    },
    #[error(
        "the KMS key {kms_key_arn:?} is {state}; nothing was published or changed. While it is, {consequence}. \
         To fix it, {fix}"
    )]
    KmsKeyNotUsable {
        kms_key_arn: String,
        state: String,
        consequence: &'static str,
        fix: String,
    },
    #[error(
        "kmsKeyARN {kms_key_arn:?} would retire a {retired}th KMS key within the {days} days etcd snapshots are \
         kept, and the node roles' policies have room for {limit} retired keys (IAM's size limits); nothing was \
         changed. Wait until the oldest, {oldest}, has been retired {days} days, or set kmsKeyARN back to the \
         current key"
    )]
    TooManyRetiredKeys {
        kms_key_arn: String,
        retired: usize,
        limit: usize,
        oldest: String,
        days: u64,
    },
    #[error("two secrets are named {name:?}: rename one of the plugin parameters")]
    DuplicateSecret { name: String },
    #[error("cannot get random bytes from the operating system: {detail}")]
    Random { detail: String },
    /// The rendered files to publish.
    #[error(transparent)]
    Rendered(#[from] RenderedError),
    /// The published secret bundle and the cluster PKI in it.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Pki(#[from] crate::pki::PkiError),
    #[error(transparent)]
    Irsa(#[from] crate::irsa::IrsaError),
    #[error(
        "no node {node:?} in cluster {cluster:?}: {}",
        if known.is_empty() {
            "the cluster has no nodes (is it up? `kube-aws status`)".to_string()
        } else {
            format!("use an instance id or private DNS name from `kube-aws nodes`: {}", known.join(", "))
        }
    )]
    UnknownNode {
        node: String,
        cluster: String,
        known: Vec<String>,
    },
    #[error("{0}")]
    Failed(Box<wait::Failure>),
    #[error(
        "{} resource(s) tagged with the cluster could not be removed: {}; remove them (or what holds them) and run `kube-aws destroy --yes --wait` again",
        left.len(), left.join("; ")
    )]
    SweepIncomplete { left: Vec<String> },
    #[error(
        "gave up waiting after {waited}: still in progress: {}; the stack was left as it is: run `kube-aws status --wait` to keep following it",
        pending.join(", ")
    )]
    TimedOut { waited: String, pending: Vec<String> },
    #[error("lost the AWS endpoint while waiting: {detail}; the stack was left as it is: run `kube-aws status --wait` to resume")]
    EndpointLost { detail: String },
    #[error("stopped waiting; the stack was left as it is: run `kube-aws status --wait` to resume")]
    Interrupted,
    #[error(
        "the stack's new VPC has {recorded} zones (recorded when `up` created it), but this render has {rendered}: \
         changing them would replace subnets and roll every group; run `kube-aws update` without --use-rendered \
         (it renders with the recorded count), or list the zones you want in network.availabilityZones"
    )]
    ZoneCountChanged { recorded: usize, rendered: usize },
    #[error(
        "the stack names its service-account roles {recorded} (recorded when `up` created it), but this render \
         names them {rendered}: renaming would replace every role while running pods keep the old ARNs; run \
         `kube-aws update` without --use-rendered (it renders with the recorded names)"
    )]
    RoleNamesChanged {
        recorded: &'static str,
        rendered: &'static str,
    },
    #[error(
        "stack {stack:?} records its service-account role names as {value:?}, which this kube-aws does not know \
         (a newer kube-aws created it): update kube-aws"
    )]
    UnknownRoleNames { stack: String, value: String },
    #[error("restore refused, nothing was changed: {0}")]
    RestoreRefused(#[from] crate::aws::lifecycle::restore::Refusal),
    #[error(
        "update refused, nothing was published or changed: kubernetesVersion {from} → {to} comes with other \
         changes: {}. A version change is applied alone, so that a failure after the first controller's \
         `kubeadm upgrade apply` is fixed forward (docs/deploy.md, \"Upgrading Kubernetes\"). Either apply the \
         other changes first: set kubernetesVersion: \"{from}\" in cluster.yaml and run `kube-aws update`, then \
         set kubernetesVersion: \"{to}\" and run `kube-aws update`; or the version first: undo the other changes, \
         run `kube-aws update`, then redo them and run `kube-aws update` again",
        other.join(", ")
    )]
    VersionMixed {
        from: String,
        to: String,
        other: Vec<String>,
    },
    #[error(
        "update refused, nothing was published or changed: kubernetesVersion {from} → {to} is applied alone, \
         and kube-aws cannot tell whether anything else changes: {why}"
    )]
    VersionUncheckable { from: String, to: String, why: String },
    #[error(
        "update refused, nothing was published or changed: the stack {stack:?} cannot be updated until its \
         rollback is finished:\n  {}",
        recovery.lines().join("\n  ")
    )]
    RollbackUnfinished {
        stack: String,
        recovery: Box<crate::aws::wait::recovery::Recovery>,
    },
}

impl AwsError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            AwsError::NoCredentials { .. }
            | AwsError::Network { .. }
            | AwsError::Throttled { .. }
            | AwsError::Api { .. }
            | AwsError::BucketMissing { .. }
            | AwsError::EndpointLost { .. } => ErrorKind::Aws,
            AwsError::StackExists { .. }
            | AwsError::StackMissing { .. }
            | AwsError::NoAmi { .. }
            | AwsError::RolledBack { .. }
            | AwsError::StackBusy { .. }
            | AwsError::VersionRefused { .. }
            | AwsError::VersionMixed { .. }
            | AwsError::VersionUncheckable { .. }
            | AwsError::NoOutput { .. }
            | AwsError::S3Uri { .. }
            | AwsError::NoKmsKey
            | AwsError::BucketPolicy { .. }
            | AwsError::PublicAccessBlocked { .. }
            | AwsError::AccountPublicAccessBlocked { .. }
            | AwsError::IssuerBucketTaken { .. }
            | AwsError::SecretTooLarge { .. }
            | AwsError::KmsKeyUnusable { .. }
            | AwsError::TooManyRetiredKeys { .. }
            | AwsError::KmsKeyNotUsable { .. }
            | AwsError::DuplicateSecret { .. }
            | AwsError::Random { .. }
            | AwsError::Rendered(_)
            | AwsError::Bundle(_)
            | AwsError::Pki(_)
            | AwsError::Irsa(_)
            | AwsError::UnknownNode { .. }
            | AwsError::ZoneCountChanged { .. }
            | AwsError::RoleNamesChanged { .. }
            | AwsError::UnknownRoleNames { .. }
            | AwsError::RestoreRefused(_) => ErrorKind::WorkTree,
            AwsError::Failed(_) | AwsError::SweepIncomplete { .. } | AwsError::RollbackUnfinished { .. } => {
                ErrorKind::DeployFailed
            }
            AwsError::TimedOut { .. } => ErrorKind::Timeout,
            AwsError::Interrupted => ErrorKind::Interrupted,
        }
    }

    /// Worth retrying later: the network, a 5xx, or throttling.
    pub fn is_transient(&self) -> bool {
        matches!(self, AwsError::Network { .. } | AwsError::Throttled { .. })
    }

    pub fn is_throttling(&self) -> bool {
        matches!(self, AwsError::Throttled { .. })
    }
}

/// What is wrong with the rendered files (or the chart tarballs) to publish.
#[derive(Debug, thiserror::Error)]
pub enum RenderedError {
    #[error("{} is missing: run `kube-aws render` first", path.display())]
    Missing { path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{} is outside {}", path.display(), dir.display())]
    Outside { path: PathBuf, dir: PathBuf },
    #[error("{from} names {to}, which is not among the rendered files: run `kube-aws render` again")]
    UnknownReference { from: String, to: String },
    #[error(
        "{from} does not name {to} by its TemplateURL ({text}): was it edited after the render? \
         run `kube-aws render` again (or drop --use-rendered)"
    )]
    ReferenceNotNamed { from: String, to: String, text: String },
    #[error(
        "rendered files refer to each other in a cycle ({}): they cannot be published under content-addressed keys",
        files.join(", ")
    )]
    Cycle { files: Vec<String> },
    #[error("{file} is not a valid addon plan: {detail}: run `kube-aws render` again")]
    BadPlan { file: String, detail: String },
    #[error("{file} is missing: run `kube-aws render`")]
    NoRootTemplate { file: &'static str },
    #[error("{0}: run `kube-aws render` again")]
    BadTemplate(#[from] crate::aws::lifecycle::rolls::TemplateError),
    #[error(
        "the rendered stacks use the secret {name:?}, which is not among the secrets to publish: \
         run `kube-aws render` again (or drop --use-rendered)"
    )]
    SecretNotPublished { name: String },
    #[error(
        "chart tarball sha256:{digest} is not readable at {}: {source} (run `kube-aws charts lock` to fetch it)",
        path.display()
    )]
    ChartUnreadable {
        digest: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "chart tarball {} has sha256:{got}, the lock says sha256:{want}: delete it and run `kube-aws charts lock` to fetch it again",
        path.display()
    )]
    ChartDigest { path: PathBuf, got: String, want: String },
}

/// What is wrong with the published secret bundle or the cluster PKI in it.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("s3://{bucket}/{key} is missing: the cluster was not published by `kube-aws up`")]
    NotPublished { bucket: String, key: String },
    #[error("the published secret bundle is not valid: {detail}")]
    Invalid { detail: String },
    #[error("the published secret bundle holds invalid base64: {detail}")]
    Base64 { detail: String },
    #[error("cannot serialize the secret bundle: {detail}")]
    Serialize { detail: String },
    #[error("the secret bundle has no {entry}: run `kube-aws up` with this version to complete the cluster PKI")]
    Incomplete { entry: &'static str },
    #[error("the secret bundle has no cluster CA certificate")]
    NoCaCert,
    #[error("the published cluster CA: {source}")]
    BadCaCert { source: crate::pki::PkiError },
    #[error("the cluster PKI has no {entry}")]
    PkiWithout { entry: &'static str },
    #[error(
        "the published secret bundle has no cluster CA ({entry}): it was published by an older kube-aws; \
         run `kube-aws update` first"
    )]
    NoCa { entry: &'static str },
    #[error(
        "the published secret bundle has {entry:?} and no cluster PKI: this cluster was \
         created before kube-aws held its CAs, and a new CA would lock its nodes out; recreate it \
         (`kube-aws destroy --purge`, then `kube-aws up`)"
    )]
    Legacy { entry: &'static str },
    #[error(
        "the published secret bundle holds only part of the cluster PKI ({}); kube-aws never regenerates \
         a cluster's CAs: restore secrets/bundle.json from a backup (S3 versioning) before publishing again",
        present.join(", ")
    )]
    PartialPki { present: Vec<String> },
    #[error(
        "cannot decrypt the cluster PKI entry {entry:?} ({detail}); kube-aws never regenerates a cluster's CAs: \
         publish with AWS credentials allowed kms:Decrypt on {kms_key_arn}"
    )]
    Undecryptable {
        entry: String,
        detail: String,
        kms_key_arn: String,
    },
    #[error(
        "cannot decrypt the encryption key of the cluster's Secrets {entry:?} ({detail}); kube-aws never \
         replaces it (every Secret in etcd and in the etcd snapshots is encrypted with it): publish with AWS \
         credentials allowed kms:Decrypt on {kms_key_arn}"
    )]
    EncryptionKeyUndecryptable {
        entry: String,
        detail: String,
        kms_key_arn: String,
    },
    #[error(
        "your AWS identity may not decrypt the cluster CA key: kms:Decrypt on {kms_key_arn} (encryption context \
         kube-aws:cluster={cluster}, kube-aws:secret={entry}) was refused: {code}: {message}; \
         that permission is what grants cluster-admin, ask whoever administers the key"
    )]
    CaKeyRefused {
        kms_key_arn: String,
        cluster: String,
        entry: &'static str,
        code: String,
        message: String,
    },
    #[error(
        "the previous secret bundle {uri:?} (the live stack's SecretBundleKey) is missing; nothing was published \
         or changed. kube-aws never starts a running cluster's secrets afresh: a new CA, service-account key and \
         join token would lock out every node and break every service account's IAM role. Restore the object \
         (with S3 versioning: `aws s3api list-object-versions` on that key, then copy the last version back), or, \
         to replace the cluster CA on purpose, run `kube-aws update --rotate-ca` (docs/deploy.md)"
    )]
    PreviousMissing { uri: String },
    #[error(
        "the previous secret bundle {uri:?} cannot be used: {detail}; nothing was published or changed. Restore \
         it from a backup (S3 versioning), or, to replace a running cluster's CA on purpose, run \
         `kube-aws update --rotate-ca` (docs/deploy.md)"
    )]
    PreviousUnreadable { uri: String, detail: String },
    #[error(
        "the update would change the cluster CA (CACertHash {live:?} on the live stack, {new:?} now); nothing was \
         changed. A new CA replaces every node and invalidates every kubeconfig: if that is what you want, run \
         `kube-aws update --rotate-ca`"
    )]
    CaChanged { live: String, new: String },
    #[error("cannot create the cluster PKI: {source}")]
    Generate { source: crate::pki::PkiError },
    #[error("cannot sign the pod identity webhook's certificate: {source}")]
    WebhookCert { source: crate::pki::PkiError },
}

const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "SlowDown",
    "RequestThrottled",
];

const CREDENTIAL_CODES: &[&str] = &[
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
];

/// Turns an SDK error into an [`AwsError`], telling the network, throttling
/// and refused credentials apart from an API's own answer.
pub(crate) fn sdk_error<E>(operation: &str, err: SdkError<E, HttpResponse>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let operation = operation.to_string();
    match &err {
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("").to_string();
            let message = se.err().message().unwrap_or("").to_string();
            let status = se.raw().status().as_u16();
            if THROTTLING_CODES.contains(&code.as_str()) || status == 429 {
                AwsError::Throttled { operation }
            } else if CREDENTIAL_CODES.contains(&code.as_str()) {
                AwsError::NoCredentials {
                    detail: format!("{operation} was refused: {code}: {message}"),
                }
            } else if status >= 500 {
                AwsError::Network {
                    operation,
                    detail: format!("HTTP {status} {code} {message}").trim().to_string(),
                }
            } else {
                AwsError::Api {
                    operation,
                    code: if code.is_empty() {
                        format!("HTTP {status}")
                    } else {
                        code
                    },
                    message,
                }
            }
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            let detail = DisplayErrorContext(&err).to_string();
            if detail.contains("credentials") || detail.contains("identity") {
                AwsError::NoCredentials { detail }
            } else {
                AwsError::Network { operation, detail }
            }
        }
        _ => AwsError::Api {
            operation,
            code: "error".into(),
            message: DisplayErrorContext(&err).to_string(),
        },
    }
}

/// The service error's code, if it is one (e.g. "AlreadyExistsException").
pub(crate) fn error_code<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    match err {
        SdkError::ServiceError(se) => se.err().code(),
        _ => None,
    }
}

/// The service error's message, if it is one.
pub(crate) fn error_message<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    match err {
        SdkError::ServiceError(se) => se.err().message(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_work_tree_errors_keep_their_messages_and_exit_as_the_work_tree() {
        let cases: Vec<(AwsError, &str)> = vec![
            (
                AwsError::StackBusy {
                    stack: "demo".into(),
                    status: "UPDATE_IN_PROGRESS".into(),
                },
                "the stack \"demo\" is busy (UPDATE_IN_PROGRESS): wait for it with `kube-aws status --wait`, then update",
            ),
            (
                RenderedError::Cycle {
                    files: vec!["a.json".into(), "b.json".into()],
                }
                .into(),
                "rendered files refer to each other in a cycle (a.json, b.json): they cannot be published under content-addressed keys",
            ),
            (
                BundleError::PartialPki {
                    present: vec!["pki/ca.key".into()],
                }
                .into(),
                "the published secret bundle holds only part of the cluster PKI (pki/ca.key); kube-aws never regenerates \
                 a cluster's CAs: restore secrets/bundle.json from a backup (S3 versioning) before publishing again",
            ),
        ];
        for (err, message) in cases {
            assert_eq!(err.to_string(), message);
            assert_eq!(err.kind(), ErrorKind::WorkTree);
        }
        // The bucket is quoted (the text before the typed variant showed a literal `{bucket:?}`).
        let blocked = AwsError::PublicAccessBlocked {
            bucket: "b".into(),
            which: "BlockPublicPolicy".into(),
        }
        .to_string();
        assert!(
            blocked.starts_with(
                "S3 Block Public Access keeps IAM from reading the service-account issuer in the bucket \"b\""
            ) && blocked.contains("issuerURL"),
            "{blocked}"
        );
        let account = AwsError::AccountPublicAccessBlocked {
            account: "111122223333".into(),
            bucket: "b-oidc-demo".into(),
            which: "BlockPublicPolicy, RestrictPublicBuckets".into(),
        }
        .to_string();
        assert!(
            account.starts_with(
                "S3 Block Public Access is on for the account 111122223333 (BlockPublicPolicy, RestrictPublicBuckets)"
            ) && account.contains("--account-id 111122223333")
                && account.contains("issuerURL"),
            "{account}"
        );
    }
}
