//! The AWS stage: the SDK configuration (`config`), publishing artifacts, chart
//! tarballs and KMS-encrypted secrets to S3 (`publish`, `secrets`), the stack
//! operations (`stack`), the pure wait logic (`wait`) and the polling loop that
//! drives it (`watch`), and the progress drawing (`progress_view`, the only
//! place that uses indicatif here).
//!
//! Every error is an [`AwsError`]; its [`ErrorKind`] is what `main` turns into an
//! exit code.

pub mod backups;
pub mod config;
pub mod deploy;
pub mod issuer;
pub mod kubeconfig;
pub mod nodes;
pub mod progress_view;
pub mod publish;
pub mod secrets;
pub mod stack;
pub mod wait;
pub mod watch;

pub use config::{connect, AwsOptions, Clients};

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

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
    #[error("{0}")]
    WorkTree(String),
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
        "gave up waiting after {waited}: still in progress: {}; the stack was left as it is: run `kube-aws status --wait` to keep following it",
        pending.join(", ")
    )]
    TimedOut { waited: String, pending: Vec<String> },
    #[error("lost the AWS endpoint while waiting: {detail}; the stack was left as it is: run `kube-aws status --wait` to resume")]
    EndpointLost { detail: String },
    #[error("stopped waiting; the stack was left as it is: run `kube-aws status --wait` to resume")]
    Interrupted,
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
            | AwsError::WorkTree(_)
            | AwsError::UnknownNode { .. } => ErrorKind::WorkTree,
            AwsError::Failed(_) => ErrorKind::DeployFailed,
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
