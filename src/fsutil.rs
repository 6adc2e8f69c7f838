//! File writing that never leaves half-written files: write to a temporary file
//! in the same directory, flush, then rename over the target. And the work
//! tree's advisory lock ([`lock_work_tree`]), which keeps two commands that
//! write the tree (`render`, `up`, `update`) from interleaving.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Writes `bytes` to `path` atomically, creating parent directories.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent)?;
    let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// [`write_atomic`] for a file holding credentials: the temporary file (and so
/// the result) is mode 0600 before any byte is written.
pub fn write_atomic_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent)?;
    let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The lock file, inside the work tree.
pub const LOCK_FILE: &str = ".kube-aws.lock";

/// The work tree's lock, held until dropped: the drop removes the lock file
/// while still holding it, then closes it (closing releases the `flock`, also
/// when the process dies and leaves the file behind).
#[derive(Debug)]
pub struct WorkTreeLock {
    file: std::fs::File,
    path: PathBuf,
}

impl Drop for WorkTreeLock {
    fn drop(&mut self) {
        // Only our own file: a waiter that finds the path gone or replaced
        // opens it anew (see `lock_work_tree`), so two never hold it at once.
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Why the work tree's lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum TreeLockError {
    #[error(
        "gave up after {}s waiting for the work tree's lock {}: it is held by {holder} \
         (wait for that command to finish or stop it, or wait longer with --lock-timeout)",
        waited.as_secs(), path.display()
    )]
    TimedOut {
        path: PathBuf,
        holder: String,
        waited: Duration,
    },
    #[error("cannot take the work tree's lock {}: {reason}", path.display())]
    Refused { path: PathBuf, reason: String },
}

/// Takes the advisory lock on `dir/.kube-aws.lock` (`flock(2)`, exclusive)
/// for `command` (e.g. `"kube-aws render"`), waiting up to `timeout`.
/// While it waits, `waiting` is called once with the holder ("pid N
/// (kube-aws up), since T", as the holder wrote it into the file).
///
/// Ok(None) when the lock cannot be taken for a reason that is not another
/// holder (a read-only work tree, a file system without `flock`): the caller
/// goes on unlocked. The lock file must be a regular file, not a symlink
/// (`O_NOFOLLOW`), so a hostile work tree cannot point it at a FIFO or a
/// device. The holder removes the file when done; a lock taken on a file
/// that was meanwhile removed or replaced is retaken on the new one.
pub fn lock_work_tree(
    dir: &Path,
    command: &str,
    timeout: Duration,
    mut waiting: impl FnMut(&str),
) -> Result<Option<WorkTreeLock>, TreeLockError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let path = dir.join(LOCK_FILE);
    let refused = |reason: String| TreeLockError::Refused {
        path: path.clone(),
        reason,
    };
    if !dir.is_dir() {
        return Ok(None);
    }
    let start = Instant::now();
    let mut told = false;
    loop {
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(refused("it is a symlink (remove it: kube-aws creates it)".into()))
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM)
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(refused(e.to_string())),
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(refused(
                "it is not a regular file (remove it: kube-aws creates it)".into(),
            ));
        }
        // SAFETY: `file` is an open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            if !same_file(&file, &path) {
                continue; // the holder removed it as we opened it: take the new one
            }
            let since = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
            let line = format!("pid {} ({command}), since {since}\n", std::process::id());
            // The holder line is for the next waiter's message only; failing to write it is not fatal.
            let _ = file.set_len(0).and_then(|()| file.write_all_at(line.as_bytes(), 0));
            return Ok(Some(WorkTreeLock { file, path }));
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EWOULDBLOCK) {
            // ENOLCK, EINVAL: no flock on this file system.
            return Ok(None);
        }
        let mut buf = [0u8; 256];
        let n = file.read_at(&mut buf, 0).unwrap_or(0);
        let holder = String::from_utf8_lossy(&buf[..n])
            .lines()
            .next()
            .map(|l| l.chars().filter(|c| !c.is_control()).collect::<String>())
            .filter(|l| !l.trim().is_empty())
            .unwrap_or_else(|| "another kube-aws process (it has not written its pid yet)".into());
        if start.elapsed() >= timeout {
            return Err(TreeLockError::TimedOut {
                path,
                holder,
                waited: timeout,
            });
        }
        if !told {
            waiting(&holder);
            told = true;
        }
        drop(file);
        std::thread::sleep(Duration::from_millis(100).min(timeout.saturating_sub(start.elapsed())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_waits_names_the_holder_and_gives_up() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock_work_tree(dir.path(), "kube-aws up", Duration::ZERO, |_| {})
            .unwrap()
            .unwrap();
        let mut seen = String::new();
        let err = lock_work_tree(dir.path(), "kube-aws render", Duration::from_millis(300), |h| {
            seen = h.to_string()
        })
        .unwrap_err();
        let me = format!("pid {} (kube-aws up)", std::process::id());
        assert!(seen.starts_with(&me), "{seen}");
        assert!(err.to_string().contains(&me), "{err}");
        drop(held);
        assert!(!dir.path().join(LOCK_FILE).exists(), "the holder removes the file");
        assert!(lock_work_tree(dir.path(), "kube-aws render", Duration::ZERO, |_| {})
            .unwrap()
            .is_some());
    }

    #[test]
    fn a_symlinked_lock_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join(LOCK_FILE)).unwrap();
        let err = lock_work_tree(dir.path(), "kube-aws render", Duration::ZERO, |_| {}).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
    }

    #[test]
    fn replaces_whole_file_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.txt");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        let entries: Vec<_> = std::fs::read_dir(dir.path().join("a")).unwrap().collect();
        assert_eq!(entries.len(), 1);
    }
}
