//! The one reader of user-controlled input files.
//!
//! Invariant: every file kube-aws reads from a work tree or a plugin or chart
//! directory (cluster.yaml, plugin.yaml and plugin files, values files, the
//! chart lock, local charts) comes through [`read_bytes`] or [`read_text`],
//! which guarantee, in this order:
//!
//! 1. only a regular file is read: FIFOs, sockets and devices (also behind a
//!    symlink, e.g. to `/dev/zero`) are refused from their metadata and never
//!    opened for a blocking read (the open is `O_NONBLOCK`, and the opened
//!    handle is checked again);
//! 2. the path, symlinks resolved, stays inside the given root (the work tree,
//!    or the plugin or chart directory); a directory used as a root is itself
//!    checked by the same rule against the work tree ([`check_dir_inside`]),
//!    so a symlinked plugin or chart directory cannot lead out of the tree
//!    (the built-in layer is embedded in the binary, never read from disk);
//! 3. the size is capped before reading: at most `limit + 1` bytes are read;
//! 4. text is UTF-8 without NUL bytes; otherwise the error names the first bad
//!    byte as `file:line:col` (and a UTF-16 or UTF-32 byte-order mark by name).
//!
//! The limits are listed in docs/limits.md.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::located::{Located, Pos};

pub use crate::limits::{too_large, Limit, ARCHIVE_LIMIT, INDEX_LIMIT, TEXT_LIMIT};

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Nothing at the path (not even a dangling symlink).
    #[error("{}: does not exist", file.display())]
    Missing { file: PathBuf },
    /// The file exists but is refused or unreadable; located.
    #[error("{0}")]
    Refused(Located),
}

impl ReadError {
    pub fn is_missing(&self) -> bool {
        matches!(self, ReadError::Missing { .. })
    }

    /// The located error (a missing file is reported at its top).
    pub fn into_located(self) -> Located {
        match self {
            ReadError::Missing { file } => Located::new(&file, TOP, "", "does not exist"),
            ReadError::Refused(l) => l,
        }
    }
}

const TOP: Pos = Pos { line: 1, col: 1 };

/// A kubeconfig that `kube-aws kubeconfig` merges into; kubectl users keep
/// many clusters in one.
pub const KUBECONFIG_LIMIT: Limit = Limit {
    bytes: 16 * 1024 * 1024,
    what: "kubeconfig files",
    fix: "write this cluster's context to a file of its own with --file PATH",
};

/// Reads `root/rel` as bytes. `display` names the file in messages.
pub fn read_bytes(root: &Path, rel: &Path, display: &Path, limit: &Limit) -> Result<Vec<u8>, ReadError> {
    read_checked(&root.join(rel), Some(root), display, limit)
}

/// Reads a file the user names outside any work tree (the kubeconfig) as
/// UTF-8 text: guarantees 1, 3 and 4, but not 2, as there is no tree to
/// stay in (a `~/.kube/config` symlinked into a dotfiles repository is
/// common).
pub fn read_user_text(path: &Path, limit: &Limit) -> Result<String, ReadError> {
    let bytes = read_checked(path, None, path, limit)?;
    decode_utf8(path, bytes).map_err(ReadError::Refused)
}

fn read_checked(full: &Path, root: Option<&Path>, display: &Path, limit: &Limit) -> Result<Vec<u8>, ReadError> {
    let refuse = |message: String| ReadError::Refused(Located::new(display, TOP, "", message));
    if let Err(e) = std::fs::symlink_metadata(full) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Err(ReadError::Missing {
                file: display.to_path_buf(),
            });
        }
        return Err(refuse(format!("cannot read: {e}")));
    }
    // Follows symlinks; never opens the file.
    let meta = std::fs::metadata(full).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => refuse("is a symlink to nothing (a dangling symlink)".into()),
        _ => refuse(format!("cannot read: {e}")),
    })?;
    if !meta.is_file() {
        return Err(refuse(format!(
            "is {}, not a regular file: kube-aws reads regular files only",
            file_kind(&meta)
        )));
    }
    if let Some(root) = root {
        check_inside(root, full).map_err(refuse)?;
    }
    if meta.len() > limit.bytes {
        return Err(refuse(too_large(meta.len(), limit)));
    }
    let file = open_nonblocking(full).map_err(|e| refuse(format!("cannot read: {e}")))?;
    // The path may have been swapped between the checks and the open.
    match file.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(m) => {
            return Err(refuse(format!(
                "is {}, not a regular file: kube-aws reads regular files only",
                file_kind(&m)
            )))
        }
        Err(e) => return Err(refuse(format!("cannot read: {e}"))),
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > limit.bytes {
        return Err(refuse(too_large(bytes.len() as u64, limit)));
    }
    Ok(bytes)
}

/// Reads `root/rel` as UTF-8 text. `display` names the file in messages.
pub fn read_text(root: &Path, rel: &Path, display: &Path, limit: &Limit) -> Result<String, ReadError> {
    let bytes = read_bytes(root, rel, display, limit)?;
    decode_utf8(display, bytes).map_err(ReadError::Refused)
}

/// Checks that `path`, symlinks resolved, lies inside `root` (also resolved).
/// The one rule for "a symlink must not lead out of the tree", for files and
/// (through [`check_dir_inside`]) for the directories files are read from.
pub fn check_inside(root: &Path, path: &Path) -> Result<(), String> {
    resolve_inside(
        root,
        path,
        "a symlink must not lead out of it; copy the file in instead",
    )
}

/// [`check_inside`] for a directory kube-aws reads files from (a plugin
/// directory, `plugins/`, a local chart directory): `dir`, symlinks
/// resolved, lies inside the work tree `root`. `display` names the
/// directory in the error.
pub fn check_dir_inside(root: &Path, dir: &Path, display: &Path) -> Result<(), Located> {
    resolve_inside(
        root,
        dir,
        "a symlinked directory must not lead out of it; copy the directory in instead",
    )
    .map_err(|why| Located::new(display, TOP, "", format!("the directory {why}")))
}

fn resolve_inside(root: &Path, path: &Path, fix: &str) -> Result<(), String> {
    let real_root = root
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", root.display()))?;
    let real = path
        .canonicalize()
        .map_err(|e| format!("cannot resolve the path: {e}"))?;
    if real.starts_with(&real_root) {
        Ok(())
    } else {
        Err(format!(
            "resolves to {}, outside {} ({fix})",
            real.display(),
            root.display()
        ))
    }
}

/// Where a YAML document's top-level value starts: the first line that is
/// not blank, a comment, a directive or `---` (an error about the whole
/// document, such as "the top level is a list", points there).
pub fn first_content(text: &str) -> Pos {
    let (i, line) = text
        .lines()
        .enumerate()
        .find(|(_, l)| {
            let t = l.trim();
            !(t.is_empty() || t.starts_with('#') || t.starts_with('%') || t == "---")
        })
        .unwrap_or((0, ""));
    Pos {
        line: i + 1,
        col: line.len() - line.trim_start().len() + 1,
    }
}

/// Decodes UTF-8 text; a bad byte, a NUL or a UTF-16/32 byte-order mark is
/// reported at its `file:line:col`.
pub fn decode_utf8(file: &Path, bytes: Vec<u8>) -> Result<String, Located> {
    if let Some(bom) = utf16_or_32_bom(&bytes) {
        return Err(Located::new(
            file,
            TOP,
            "",
            format!("the file starts with a {bom} byte-order mark, but kube-aws reads UTF-8 text: save it as UTF-8"),
        ));
    }
    let nul = bytes.iter().position(|&b| b == 0);
    let (bad, what) = match std::str::from_utf8(&bytes) {
        Ok(_) if nul.is_none() => return Ok(String::from_utf8(bytes).unwrap_or_default()),
        Ok(_) => (nul.unwrap_or(0), "a NUL byte".to_string()),
        Err(e) => {
            let at = e.valid_up_to();
            match nul.filter(|&n| n < at) {
                Some(n) => (n, "a NUL byte".to_string()),
                None => (at, format!("byte 0x{:02X}, which is not valid UTF-8", bytes[at])),
            }
        }
    };
    let hint = if what.starts_with("a NUL") {
        " (NUL bytes every other character mean UTF-16: save the file as UTF-8)"
    } else {
        " (save the file as UTF-8)"
    };
    Err(Located::new(
        file,
        pos_of(&bytes, bad),
        "",
        format!("{what}: kube-aws reads text files as UTF-8{hint}"),
    ))
}

/// The 1-based line and column (in characters) of byte `offset`; the bytes
/// before it are valid UTF-8.
fn pos_of(bytes: &[u8], offset: usize) -> Pos {
    let before = &bytes[..offset];
    let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let col = std::str::from_utf8(&before[line_start..]).map_or(offset - line_start, |s| s.chars().count());
    Pos {
        line: before.iter().filter(|&&b| b == b'\n').count() + 1,
        col: col + 1,
    }
}

fn utf16_or_32_bom(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0xFF, 0xFE, 0, 0, ..] => Some("UTF-32 little-endian"),
        [0, 0, 0xFE, 0xFF, ..] => Some("UTF-32 big-endian"),
        [0xFF, 0xFE, ..] => Some("UTF-16 little-endian"),
        [0xFE, 0xFF, ..] => Some("UTF-16 big-endian"),
        _ => None,
    }
}

fn file_kind(m: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    if m.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters() {
        let err = decode_utf8(Path::new("f"), b"a: 1\nb: \xc3\xa9\xff\n".to_vec()).unwrap_err();
        assert_eq!(err.pos, Pos { line: 2, col: 5 });
        assert!(err.message.contains("0xFF"), "{err}");
        let err = decode_utf8(Path::new("f"), b"\xff\xfea\0".to_vec()).unwrap_err();
        assert!(err.message.contains("UTF-16 little-endian"), "{err}");
        let err = decode_utf8(Path::new("f"), b"x\ny\0z".to_vec()).unwrap_err();
        assert_eq!(err.pos, Pos { line: 2, col: 2 });
    }

    #[test]
    fn caps_size_and_reads_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "hello").unwrap();
        let small = Limit { bytes: 4, ..TEXT_LIMIT };
        let err = read_text(dir.path(), Path::new("a"), Path::new("a"), &small).unwrap_err();
        assert!(err.to_string().contains("over the 4-byte limit"), "{err}");
        assert_eq!(
            read_text(dir.path(), Path::new("a"), Path::new("a"), &TEXT_LIMIT).unwrap(),
            "hello"
        );
        assert!(read_text(dir.path(), Path::new("b"), Path::new("b"), &TEXT_LIMIT)
            .unwrap_err()
            .is_missing());
        let err = read_text(dir.path(), Path::new("."), Path::new("."), &TEXT_LIMIT).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
    }
}
