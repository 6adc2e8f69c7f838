//! Writing a render to disk, atomically: the whole output directory is
//! built beside the old one and swapped in (renameat2 RENAME_EXCHANGE where
//! the kernel has it), so a failed or interrupted write leaves the previous
//! render whole. Only a directory carrying [`RENDER_MARKER`] is replaced.

use std::path::{Path, PathBuf};

use super::{layout, Rendered};

/// The file every render output directory carries: only a directory holding
/// it may be replaced by a render. Hidden, so `up` does not publish it.
pub const RENDER_MARKER: &str = ".kube-aws-rendered";
const MARKER_TEXT: &str = "This directory is kube-aws render output: each `kube-aws render` replaces it as a whole.\n";

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot write {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("refusing to write the render output to {}: {reason}", path.display())]
    Refused { path: PathBuf, reason: String },
    /// The check run on the complete new output before it replaces the old
    /// one (the post-render hooks) failed: the old output is untouched.
    #[error(transparent)]
    BeforeSwap(Box<dyn std::error::Error + Send + Sync>),
}

/// What runs on the staged output (its path) before the swap.
pub type BeforeSwap<'a> = &'a mut dyn FnMut(&Path) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError {
    let path = path.to_path_buf();
    move |source| WriteError::Io { path, source }
}

/// Writes `r` as the directory `dir` (the output of work tree `work_tree`):
/// everything goes into a fresh sibling directory first, which is then
/// exchanged with `dir` in one step (`renameat2(RENAME_EXCHANGE)` on Linux),
/// so `dir` always holds either the old or the new complete output. `dir` is
/// refused when it is or contains the work tree, or is a non-empty directory
/// without the [`RENDER_MARKER`] of an earlier render. Leftovers of a run
/// that was killed are removed (or put back, when `dir` went missing).
pub fn write_rendered(work_tree: &Path, dir: &Path, r: &Rendered) -> Result<(), WriteError> {
    write_rendered_steps(work_tree, dir, r, &WriteSteps::default())
}

/// [`write_rendered`], running `before_swap` on the complete staged output
/// (the post-render hooks, which may add files there) before it replaces
/// `dir`. If it fails, the staged output is removed and `dir` is untouched.
pub fn write_rendered_then(
    work_tree: &Path,
    dir: &Path,
    r: &Rendered,
    before_swap: BeforeSwap<'_>,
) -> Result<(), WriteError> {
    let how = WriteSteps::default();
    write_steps(work_tree, dir, r, &how, Some(before_swap))
}

/// The steps of [`write_rendered`], named so that a test can stop after one
/// of them the way a kill would (the staging and old directories are kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// The new output is complete in `.NAME.new-*`; `dir` is untouched.
    Staged,
    /// Two-rename path only: `dir` has been moved to `.NAME.old-*`.
    OldMovedAside,
    /// The new output is in `dir`; the old one waits in `.NAME.new-*`
    /// (exchange) or `.NAME.old-*` (two renames) to be removed.
    Swapped,
}

/// How [`write_rendered_steps`] runs: for tests of interrupted writes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteSteps {
    /// Return right after this step, leaving everything as a kill would.
    pub stop_after: Option<WriteStep>,
    /// Use the two-rename fallback even where an atomic exchange exists.
    pub two_renames: bool,
}

#[doc(hidden)]
pub fn write_rendered_steps(work_tree: &Path, dir: &Path, r: &Rendered, how: &WriteSteps) -> Result<(), WriteError> {
    write_steps(work_tree, dir, r, how, None)
}

fn write_steps(
    work_tree: &Path,
    dir: &Path,
    r: &Rendered,
    how: &WriteSteps,
    before_swap: Option<BeforeSwap<'_>>,
) -> Result<(), WriteError> {
    let stop = |step| how.stop_after == Some(step);
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    check_output_dir(work_tree, dir)?;
    let name = match dir.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => {
            return Err(WriteError::Refused {
                path: dir.to_path_buf(),
                reason: "it names no directory (use a path such as ./rendered)".into(),
            })
        }
    };
    std::fs::create_dir_all(&parent).map_err(io_err(&parent))?;
    clean_leftovers(&parent, &name, dir)?;

    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}.new-"))
        .tempdir_in(&parent)
        .map_err(io_err(&parent))?;
    let marker = staging.path().join(RENDER_MARKER);
    std::fs::write(&marker, MARKER_TEXT).map_err(io_err(&marker))?;
    for (rel, bytes) in &r.files {
        let path = staging.path().join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(io_err(p))?;
        }
        std::fs::write(&path, bytes).map_err(io_err(&path))?;
        if rel.ends_with(".sh") {
            set_executable(&path).map_err(io_err(&path))?;
        }
    }
    if let Some(check) = before_swap {
        // On failure the TempDir drops: the staged output is removed.
        check(staging.path()).map_err(WriteError::BeforeSwap)?;
    }
    let staged = staging.keep();
    if stop(WriteStep::Staged) {
        return Ok(());
    }
    if std::fs::symlink_metadata(dir).is_err() {
        // Nothing to replace: one rename.
        return std::fs::rename(&staged, dir).map_err(|e| {
            let _ = std::fs::remove_dir_all(&staged);
            io_err(dir)(e)
        });
    }
    let exchanged = !how.two_renames && exchange(&staged, dir).map_err(io_err(dir))?;
    let old = if exchanged {
        staged
    } else {
        let old = parent.join(format!(".{name}.old-{}", std::process::id()));
        std::fs::rename(dir, &old).map_err(io_err(dir))?;
        if stop(WriteStep::OldMovedAside) {
            return Ok(());
        }
        if let Err(e) = std::fs::rename(&staged, dir) {
            let _ = std::fs::rename(&old, dir);
            let _ = std::fs::remove_dir_all(&staged);
            return Err(io_err(dir)(e));
        }
        old
    };
    if stop(WriteStep::Swapped) {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Refuses an output directory whose replacement would lose the user's
/// files: the work tree itself or any directory containing it, and any
/// existing non-empty directory (or other file) that is not render output.
fn check_output_dir(work_tree: &Path, dir: &Path) -> Result<(), WriteError> {
    let refuse = |reason: String| WriteError::Refused {
        path: dir.to_path_buf(),
        reason,
    };
    let tree = resolve_lexically(work_tree);
    let out = resolve_lexically(dir);
    if tree.starts_with(&out) {
        return Err(refuse(format!(
            "it {} the work tree {}, whose files a render would delete; choose a directory of its own, \
             such as {}",
            if tree == out { "is" } else { "contains" },
            work_tree.display(),
            layout::rendered_dir(work_tree).display()
        )));
    }
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(_) => return Ok(()),
    };
    if !meta.is_dir() {
        return Err(refuse(
            "it exists and is not a directory (remove it, or choose another --output-dir)".into(),
        ));
    }
    let entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(Result::ok)
        .collect();
    // Only the marker says a directory is render output: a directory holding
    // only directories named like the layout's may still be the user's.
    let marked = std::fs::symlink_metadata(dir.join(RENDER_MARKER)).is_ok_and(|m| m.is_file());
    if !entries.is_empty() && !marked {
        return Err(refuse(format!(
            "it is not empty and holds no {RENDER_MARKER} marker, so it is not the output of an earlier \
             render and replacing it would delete its files; choose an empty or new directory, or remove \
             this one yourself if its content is not needed"
        )));
    }
    Ok(())
}

/// `path` made absolute with symlinks resolved for the part that exists
/// (the rest, not yet created, is appended as written).
fn resolve_lexically(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut existing = abs.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return normalize(&out);
        }
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(n), Some(p)) => {
                rest.push(n);
                existing = p.to_path_buf();
            }
            _ => return normalize(&abs),
        }
    }
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Removes what an interrupted write left beside `dir`: `.NAME.new-*`
/// staging directories, and `.NAME.old-*` ones, except that an old output is
/// put back first when `dir` itself is missing (a two-rename write killed
/// between its renames). Only directories that are empty or carry the
/// marker are touched.
fn clean_leftovers(parent: &Path, name: &str, dir: &Path) -> Result<(), WriteError> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Ok(());
    };
    let (new_prefix, old_prefix) = (format!(".{name}.new-"), format!(".{name}.old-"));
    let mut leftovers: Vec<(bool, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let is_old = n.starts_with(&old_prefix);
            (is_old || n.starts_with(&new_prefix)).then(|| (is_old, e.path()))
        })
        .filter(|(_, p)| {
            std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
                && (p.join(RENDER_MARKER).is_file() || std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none()))
        })
        .collect();
    leftovers.sort();
    if std::fs::symlink_metadata(dir).is_err() {
        if let Some((_, old)) = leftovers
            .iter()
            .rev()
            .find(|(is_old, p)| *is_old && p.join(RENDER_MARKER).is_file())
        {
            std::fs::rename(old, dir).map_err(io_err(dir))?;
        }
    }
    for (_, p) in leftovers {
        if p.exists() {
            std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
        }
    }
    Ok(())
}

/// Swaps two directories in one step. Ok(false) where the system or the file
/// system has no atomic exchange (the caller then renames twice).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both arguments are valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<bool> {
    Ok(false)
}

#[cfg(unix)]
fn set_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> std::io::Result<()> {
    Ok(())
}
