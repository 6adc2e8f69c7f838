//! The AWS stage, in rooms. Each room imports only the rooms below it:
//!
//! ```text
//! lifecycle ─▶ publish ─▶ wait ─▶ state ─▶ services
//!     └──────────┴─────────┴───────┴──────────▶ config, error (the base)
//! ```
//!
//! - `services`: the service wrappers: CloudFormation stacks and change
//!   sets, S3 objects (`s3`: where a cluster's objects live and how they
//!   are read and written), CloudWatch alarms, S3 lifecycle rules.
//! - `state`: the cluster-state readers that `status` composes (backups,
//!   etcd alarms, the control plane's records, certificate expiry, KMS
//!   keys, instances and their bootstrap reports, join tokens, the stack's
//!   recorded role names and zones).
//! - `wait`: the pure wait decisions (`wait`, `recovery`) and the loop that
//!   drives them (`watch`).
//! - `publish`: artifacts, chart tarballs, the KMS-encrypted secret bundle
//!   (`secrets`, `previous`), the issuer documents and the pinned AMIs.
//! - `lifecycle`: the lifecycle steps' AWS halves below `crate::ops`:
//!   deploy, destroy and its sweep, restore, kubeconfig, and the update's
//!   decisions (rolls, rollback scope, version order, the autoscaler's
//!   pause, the termination handler's tags).
//!
//! The base, `config` (the SDK clients) and `error` (every error of the
//! stage, [`AwsError`]; its [`ErrorKind`] is what `cli::exit` turns into an
//! exit code), is used by every room, and names a few rooms' types in turn:
//! the CloudWatch client in `Clients`, and the typed detail some errors
//! carry (a restore's refusal, a stopped update's recovery, a template the
//! rolls could not read). That circle is through data types only, and
//! keeps one error type for the stage. No terminal code here.

pub mod config;
pub mod error;
pub mod lifecycle;
pub mod publish;
pub mod services;
pub mod state;
pub mod wait;

pub use config::{connect, AwsOptions, Clients};

pub(crate) use error::{error_code, error_message, sdk_error};
pub use error::{AwsError, BundleError, ErrorKind, RenderedError};
