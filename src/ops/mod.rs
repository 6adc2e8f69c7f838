//! Lifecycle operations, below the command line (cargo's `ops`, Helm's
//! `pkg/action`): each is an options struct and an async `run` that reports
//! through [`Events`] and returns a typed outcome. A command file in
//! `src/cli/` parses its flags into the options, runs the operation on the
//! CLI's one runtime, and prints the outcome.
//!
//! Invariant: an operation neither prints nor reads the terminal nor builds
//! a runtime; it says what happens through its `Events`, which the CLI
//! implements (stdout, stderr, the progress view, the yes/no question).

mod artifacts;
pub mod backups;
pub mod destroy;
mod error;
pub mod kubeconfig;
#[cfg(feature = "nodes")]
pub mod nodes;
#[cfg(feature = "nodes")]
pub mod restore;
pub mod rotate;
pub mod status;
pub mod up;
pub mod update;
mod work_tree;

pub use artifacts::artifacts;
pub use error::{ConfirmError, OpsError};
pub use work_tree::WorkTree;

use crate::aws::lifecycle::deploy::ProgressSink;
use crate::aws::{AwsError, Clients};

/// What an operation tells its caller while it runs.
pub trait Events {
    /// A line of the operation's report (the CLI prints it on stdout).
    fn say(&mut self, line: &str);
    /// A note beside the report: a warning, what the operation waits for
    /// (the CLI prints it on stderr).
    fn note(&mut self, line: &str);
    /// Whether to go on with `question`; an error when no answer can be had.
    fn confirm(&mut self, question: &str) -> Result<bool, ConfirmError>;
    /// Where `--wait` shows the stack's and the addons' progress.
    fn progress(&mut self) -> &mut dyn ProgressSink;
}

/// Which cluster an operation that needs nothing else acts on: `backups`,
/// `rotate`, `nodes`, `logs`.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The work tree (its cluster.yaml).
    pub dir: std::path::PathBuf,
    pub aws: crate::aws::AwsOptions,
}

/// The root stack's outputs as a JSON object (`KUBE_AWS_OUTPUTS`).
pub async fn stack_outputs(clients: &Clients, name: &str) -> Result<Option<serde_json::Value>, AwsError> {
    let stack = crate::aws::services::stack::describe_stack(clients, name).await?;
    Ok(stack.map(|s| {
        serde_json::Value::Object(
            s.outputs
                .into_iter()
                .map(|o| (o.key, serde_json::Value::String(o.value)))
                .collect(),
        )
    }))
}
