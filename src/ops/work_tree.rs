//! The work tree an operation runs on: its lock, and its plugins' hooks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Cluster;
use crate::fsutil::{TreeLockError, WorkTreeLock};
use crate::plugin::exec::{ExecError, HookRun, Step, When};

/// A work tree and how an operation treats it.
#[derive(Debug, Clone)]
pub struct WorkTree {
    /// The directory holding cluster.yaml.
    pub dir: PathBuf,
    /// How long to wait for another render, up or update to release it.
    pub lock_timeout: Duration,
    /// Run the plugins' hooks (`--no-hooks` turns them off).
    pub hooks: bool,
    /// Print each hook before it runs.
    pub verbose: bool,
}

impl WorkTree {
    /// Takes the work tree's lock for `command` for as long as the guard
    /// lives; `note` hears whom it waits for, and that a tree that cannot
    /// be locked goes on unlocked.
    pub fn lock(&self, command: &str, note: &mut dyn FnMut(&str)) -> Result<Option<WorkTreeLock>, TreeLockError> {
        let path = self.dir.join(crate::fsutil::LOCK_FILE);
        let timeout = self.lock_timeout;
        let lock = crate::fsutil::lock_work_tree(&self.dir, &format!("kube-aws {command}"), timeout, |holder| {
            note(&format!(
                "waiting for the work tree's lock {}: it is held by {holder} (up to {}; --lock-timeout changes it)",
                path.display(),
                humantime::format_duration(timeout)
            ))
        })?;
        if lock.is_none() && self.dir.is_dir() {
            note(&format!(
                "warning: cannot lock the work tree ({} is not writable, or its file system has no flock): \
                 another render, up or update of it may run at the same time",
                path.display()
            ));
        }
        Ok(lock)
    }

    /// Runs one step's plugin hooks (src/plugin/exec), unless hooks are off,
    /// and returns how many ran. A hook is a process waited for: an async
    /// operation calls this between its awaits, never while other work of it runs.
    pub fn hooks(
        &self,
        cluster: &Cluster,
        step: Step,
        when: When,
        rendered: &Path,
        outputs: Option<&serde_json::Value>,
    ) -> Result<usize, ExecError> {
        if !self.hooks {
            return Ok(0);
        }
        crate::plugin::exec::run_hooks(&HookRun {
            cluster,
            step,
            when,
            rendered,
            outputs,
            verbose: self.verbose,
        })
    }
}
