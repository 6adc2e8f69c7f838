//! The AWS stage: the SDK configuration (`config`), publishing artifacts, chart
//! tarballs and KMS-encrypted secrets to S3 (`publish`, `secrets`), the stack
//! operations (`stack`), the pure wait logic (`wait`) and the polling loop that
//! drives it (`watch`); the deploy commands as library calls (`deploy`),
//! which report progress to a sink the CLI draws: no terminal code here.
//!
//! Every error is an [`AwsError`] (`error`); its [`ErrorKind`] is what
//! `cli::exit` turns into an exit code.

pub mod ami;
pub mod autoscaler;
pub mod backups;
pub mod cloudwatch;
pub mod config;
pub mod control_plane_status;
pub mod deploy;
pub mod destroy;
pub mod destroy_api;
pub mod error;
pub mod etcd_status;
pub mod expiry;
pub mod issuer;
pub mod join_token;
pub mod kms_keys;
pub mod kubeconfig;
pub mod nodes;
pub mod nth_tags;
pub mod previous;
pub mod publish;
pub mod recovery;
pub mod restore;
pub mod retention;
pub mod role_names;
pub mod rollback_scope;
pub mod rolls;
pub mod secrets;
pub mod stack;
pub mod sweep;
pub mod update_order;
pub mod version_change;
pub mod wait;
pub mod watch;
pub mod zones;

pub use config::{connect, AwsOptions, Clients};

pub(crate) use error::{error_code, error_message, sdk_error};
pub use error::{AwsError, BundleError, ErrorKind, RenderedError};
