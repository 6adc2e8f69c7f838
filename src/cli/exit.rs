//! The exit code of a failed command, decided in one place from the typed
//! library errors in its chain (`main` only calls [`classify`]). The codes:
//!
//! | code | [`Exit`] | meaning |
//! |---|---|---|
//! | 1 | `WorkTree` | a bad work tree, missing rendered files, a refused confirmation, a stack that exists (use `update`) or is missing (use `up`); any error no rule below claims |
//! | 2 | `Usage` | bad usage (clap exits 2 by itself; an unknown command with no plugin command or `kube-aws-NAME` on PATH) |
//! | 3 | `Failed` | the stack or an addon failed |
//! | 4 | `Remote` | AWS or a chart repository: no credentials, unreachable, lost mid-wait, a missing bucket, a refused call or request (HTTP 4xx/5xx) |
//! | 5 | `Timeout` | the wait's `--timeout` passed |
//! | N | `External(N)` | an external command (`kube-aws NAME`) exited with N |
//! | 130 | `Interrupted` | Ctrl-C while waiting |

use std::error::Error as StdError;

use crate::aws::{AwsError, ErrorKind};
use crate::chart::{ArchiveError, FetchError, IndexError, LockError, PrepareError, ValuesError};
use crate::config::{ConfigError, InitError};
use crate::kubeconfig::KubeconfigError;
use crate::pipeline::{DeployPrepareError, PipelineError};
use crate::pki::PkiError;
use crate::plugin::exec::{ExecError, ExternalExit};
use crate::plugin::PluginError;
use crate::reader::ReadError;
use crate::render::{RenderError, WriteError};

/// What a failed command exits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    WorkTree,
    Usage,
    Failed,
    Remote,
    Timeout,
    Interrupted,
    External(u8),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::WorkTree => 1,
            Exit::Usage => 2,
            Exit::Failed => 3,
            Exit::Remote => 4,
            Exit::Timeout => 5,
            Exit::Interrupted => 130,
            Exit::External(n) => n,
        }
    }

    /// An external command's status is passed on silently (as git and cargo do).
    pub fn is_silent(self) -> bool {
        matches!(self, Exit::External(_))
    }
}

/// The exit of `err`: the first error of its chain (outermost first) that a
/// rule claims decides; an error no rule claims exits 1.
pub fn classify(err: &anyhow::Error) -> Exit {
    err.chain().find_map(of).unwrap_or(Exit::WorkTree)
}

/// The rule for one error of a chain, None for an error that is not a
/// library error (an `io::Error`, a context message): the chain goes on.
fn of(e: &(dyn StdError + 'static)) -> Option<Exit> {
    // An operation's error is its layer's, classified as that one is.
    if let Some(e) = e.downcast_ref::<crate::ops::OpsError>() {
        return of(e.inner());
    }
    if let Some(e) = e.downcast_ref::<ExternalExit>() {
        return Some(Exit::External(e.0));
    }
    if let Some(e) = e.downcast_ref::<AwsError>() {
        return Some(aws(e));
    }
    if let Some(e) = e.downcast_ref::<ExecError>() {
        return Some(exec(e));
    }
    if let Some(e) = e.downcast_ref::<DeployPrepareError>() {
        return of_deploy_prepare(e);
    }
    if let Some(e) = e.downcast_ref::<PipelineError>() {
        return Some(pipeline(e));
    }
    if let Some(e) = e.downcast_ref::<PrepareError>() {
        return Some(prepare(e));
    }
    if let Some(e) = e.downcast_ref::<LockError>() {
        return Some(lock(e));
    }
    if let Some(e) = e.downcast_ref::<FetchError>() {
        return Some(fetch(e));
    }
    if let Some(e) = e.downcast_ref::<Box<FetchError>>() {
        return Some(fetch(e));
    }
    if let Some(e) = e.downcast_ref::<WriteError>() {
        return write(e);
    }
    // The work tree's own errors, and the inputs it names (values, chart
    // archives, indexes, keys, kubeconfig files): exit 1.
    let work_tree = e.is::<ConfigError>()
        || e.is::<InitError>()
        || e.is::<PluginError>()
        || e.is::<ReadError>()
        || e.is::<RenderError>()
        || e.is::<ValuesError>()
        || e.is::<ArchiveError>()
        || e.is::<IndexError>()
        || e.is::<KubeconfigError>()
        || e.is::<PkiError>()
        || e.is::<crate::irsa::IrsaError>()
        || e.is::<crate::ops::ConfirmError>();
    work_tree.then_some(Exit::WorkTree)
}

fn aws(e: &AwsError) -> Exit {
    match e.kind() {
        ErrorKind::WorkTree => Exit::WorkTree,
        ErrorKind::DeployFailed => Exit::Failed,
        ErrorKind::Aws => Exit::Remote,
        ErrorKind::Timeout => Exit::Timeout,
        ErrorKind::Interrupted => Exit::Interrupted,
    }
}

fn exec(e: &ExecError) -> Exit {
    if e.is_usage() {
        Exit::Usage
    } else {
        Exit::WorkTree
    }
}

fn of_deploy_prepare(e: &DeployPrepareError) -> Option<Exit> {
    Some(match e {
        DeployPrepareError::Pipeline(e) => pipeline(e),
        DeployPrepareError::Lock(e) => lock(e),
        DeployPrepareError::Fetch(e) => fetch(e),
        DeployPrepareError::Render(_) | DeployPrepareError::HelmBinary(_) => Exit::WorkTree,
        DeployPrepareError::Write(e) => return write(e),
        DeployPrepareError::Aws(e) => aws(e),
    })
}

fn pipeline(e: &PipelineError) -> Exit {
    match e {
        PipelineError::Chart(e) => prepare(e),
        PipelineError::Config(_) | PipelineError::Plugin(_) | PipelineError::Values(_) => Exit::WorkTree,
    }
}

fn prepare(e: &PrepareError) -> Exit {
    match e {
        PrepareError::Lock(e) => lock(e),
        PrepareError::NotFetched { .. }
        | PrepareError::Cache { .. }
        | PrepareError::Archive { .. }
        | PrepareError::Values(_)
        | PrepareError::NeedsHelm3(_) => Exit::WorkTree,
    }
}

fn lock(e: &LockError) -> Exit {
    match e {
        LockError::Fetch { source, .. } => fetch(source),
        LockError::Index { .. }
        | LockError::Input(_)
        | LockError::Write { .. }
        | LockError::Stale(_)
        | LockError::Resolve { .. } => Exit::WorkTree,
    }
}

/// A chart repository that cannot be reached or refuses the request is the
/// remote side, like AWS (4); what it serves being wrong (a digest mismatch,
/// a malformed answer) and the local cache are not (1).
fn fetch(e: &FetchError) -> Exit {
    match e {
        FetchError::Unreachable { .. } => Exit::Remote,
        FetchError::Status { status, .. } if *status >= 400 => Exit::Remote,
        FetchError::Status { .. }
        | FetchError::DigestMismatch { .. }
        | FetchError::Oci { .. }
        | FetchError::Cache { .. } => Exit::WorkTree,
    }
}

/// A post-render check's own error decides (e.g. a failed hook).
fn write(e: &WriteError) -> Option<Exit> {
    match e {
        WriteError::BeforeSwap(inner) => Some(of(inner.as_ref()).unwrap_or(Exit::WorkTree)),
        WriteError::Io { .. } | WriteError::Refused { .. } => Some(Exit::WorkTree),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::wait::Failure;

    fn exit(e: impl Into<anyhow::Error>) -> u8 {
        classify(&e.into()).code()
    }

    fn unreachable() -> FetchError {
        FetchError::Unreachable {
            url: "http://127.0.0.1:9/index.yaml".into(),
            reason: "connection refused".into(),
        }
    }

    #[test]
    fn one_case_per_code() {
        // 1: the work tree, and any error no rule claims.
        let missing = ConfigError::Missing {
            path: "cluster.yaml".into(),
        };
        assert_eq!(exit(missing), 1);
        assert_eq!(exit(anyhow::anyhow!("no command given")), 1);
        assert_eq!(exit(AwsError::StackMissing { stack: "demo".into() }), 1);
        // 2: an unknown command.
        let unknown = ExecError::UnknownCommand {
            name: "nope".into(),
            hint: String::new(),
        };
        assert_eq!(exit(unknown), 2);
        // 3: the stack or an addon failed.
        let failed = Failure {
            stack: "root".into(),
            resource: "ControlPlane".into(),
            resource_type: "AWS::CloudFormation::Stack".into(),
            status: "CREATE_FAILED".into(),
            reason: "boom".into(),
            addon: None,
            addon_message: None,
            nodes: vec![],
            upgrade: None,
            recovery: None,
        };
        assert_eq!(exit(AwsError::Failed(Box::new(failed))), 3);
        // 3 too: an update refused because the last one's rollback failed.
        let rollback = crate::aws::wait::recovery::recovery("demo", "us-west-2", "UPDATE_ROLLBACK_FAILED", &[], &[])
            .expect("a stopped state");
        let refused = AwsError::RollbackUnfinished {
            stack: "demo".into(),
            recovery: Box::new(rollback),
        };
        assert!(
            refused
                .to_string()
                .contains("aws cloudformation continue-update-rollback"),
            "{refused}"
        );
        assert_eq!(exit(refused), 3);
        // 4: AWS, and a chart repository that is unreachable or refuses,
        // however deep in the chain and however wrapped.
        let network = AwsError::Network {
            operation: "s3:PutObject".into(),
            detail: "connection refused".into(),
        };
        assert_eq!(exit(network), 4);
        let locking = LockError::Fetch {
            release: "a".into(),
            source: Box::new(unreachable()),
        };
        assert_eq!(exit(anyhow::Error::new(locking).context("charts lock")), 4);
        assert_eq!(exit(DeployPrepareError::Fetch(Box::new(unreachable()))), 4);
        let not_found = FetchError::Status {
            url: "http://r/app-0.1.0.tgz".into(),
            status: 404,
            hint: String::new(),
        };
        let not_fetched = PipelineError::Chart(PrepareError::Lock(LockError::Fetch {
            release: "a".into(),
            source: Box::new(not_found),
        }));
        assert_eq!(exit(not_fetched), 4);
        // ... but what a repository serves being wrong is not the remote side.
        let mismatch = FetchError::DigestMismatch {
            chart: "db".into(),
            version: "2.0.0".into(),
            url: "http://r/db-2.0.0.tgz".into(),
            expected: "0".repeat(64),
            actual: "1".repeat(64),
        };
        assert_eq!(exit(mismatch), 1);
        // 5: the wait's --timeout.
        let timed_out = AwsError::TimedOut {
            waited: "30m".into(),
            pending: vec!["ControlPlane".into()],
        };
        assert_eq!(exit(timed_out), 5);
        // N: an external command's status, silently.
        let external = classify(&ExternalExit(42).into());
        assert_eq!((external.code(), external.is_silent()), (42, true));
        // 130: Ctrl-C.
        assert_eq!(exit(AwsError::Interrupted), 130);
    }

    #[test]
    fn an_operations_error_exits_as_its_layers_own() {
        use crate::ops::{ConfirmError, OpsError};
        let timed_out = AwsError::TimedOut {
            waited: "30m".into(),
            pending: vec!["ControlPlane".into()],
        };
        assert_eq!(exit(OpsError::Aws(timed_out)), 5);
        let failed = OpsError::Prepare(DeployPrepareError::Fetch(Box::new(unreachable())));
        assert_eq!(exit(failed), 4);
        assert_eq!(exit(OpsError::Aws(AwsError::Interrupted)), 130);
        assert_eq!(exit(OpsError::Confirm(ConfirmError::NoTerminal)), 1);
        let unknown = ExecError::UnknownCommand {
            name: "nope".into(),
            hint: String::new(),
        };
        assert_eq!(exit(OpsError::Hook(unknown)), 2);
    }
}
