//! What an operation fails with: the error of the layer that failed, kept
//! whole, so that `cli::exit` classifies it as it would the layer's own.

/// Why there is no answer to an operation's question.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    #[error("refusing to go on without confirmation: standard input is not a terminal; pass --yes")]
    NoTerminal,
    #[error("cannot read the answer: {source}")]
    Read { source: std::io::Error },
}

/// An operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    TreeLock(#[from] crate::fsutil::TreeLockError),
    #[error(transparent)]
    Hook(#[from] crate::plugin::exec::ExecError),
    #[error(transparent)]
    Prepare(#[from] crate::pipeline::DeployPrepareError),
    #[error(transparent)]
    Aws(#[from] crate::aws::AwsError),
    #[error(transparent)]
    Located(#[from] crate::located::Located),
    #[error(transparent)]
    Confirm(#[from] ConfirmError),
    #[error(transparent)]
    Pki(#[from] crate::pki::PkiError),
    #[error(transparent)]
    Kubeconfig(#[from] crate::kubeconfig::KubeconfigError),
    /// The kubeconfig's write failed; the file is as it was.
    #[error("the kubeconfig was not changed")]
    KubeconfigNotChanged { source: crate::kubeconfig::KubeconfigError },
}

impl OpsError {
    /// The layer's own error (what `cli::exit` classifies).
    pub fn inner(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            OpsError::Config(e) => e,
            OpsError::TreeLock(e) => e,
            OpsError::Hook(e) => e,
            OpsError::Prepare(e) => e,
            OpsError::Aws(e) => e,
            OpsError::Located(e) => e,
            OpsError::Confirm(e) => e,
            OpsError::Pki(e) => e,
            OpsError::Kubeconfig(e) => e,
            OpsError::KubeconfigNotChanged { source } => source,
        }
    }
}
