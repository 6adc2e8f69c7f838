//! The content-addressed chart cache:
//! `$XDG_CACHE_HOME/kube-aws/charts/sha256/<hex>.tgz` (else `~/.cache/…`).
//! Files enter it only by rename after their hash was checked, so a file
//! under a digest's name always holds that digest's bytes.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The cache root (`…/kube-aws/charts`).
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| std::env::temp_dir().join("kube-aws-cache"));
    base.join("kube-aws").join("charts")
}

/// A content-addressed store of chart archives.
#[derive(Debug, Clone)]
pub struct ChartCache {
    root: PathBuf,
}

impl ChartCache {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ChartCache { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the archive with this (lowercase hex) sha256 lives.
    pub fn path_for(&self, hex: &str) -> PathBuf {
        self.root.join("sha256").join(format!("{hex}.tgz"))
    }

    pub fn contains(&self, hex: &str) -> bool {
        self.path_for(hex).is_file()
    }

    /// Reads a cached archive, checking its hash again (a damaged cache file is
    /// reported, not used).
    pub fn read(&self, hex: &str) -> std::io::Result<Option<Vec<u8>>> {
        let p = self.path_for(hex);
        match std::fs::read(&p) {
            Ok(bytes) => {
                if sha256_hex(&bytes) != hex {
                    return Err(std::io::Error::other(format!(
                        "cached chart {} is damaged (its sha256 differs); delete it and run `kube-aws charts fetch`",
                        p.display()
                    )));
                }
                Ok(Some(bytes))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A temporary file inside the cache (same filesystem, so the final
    /// rename is atomic).
    pub fn temp_file(&self) -> std::io::Result<tempfile::NamedTempFile> {
        let dir = self.root.join("tmp");
        std::fs::create_dir_all(&dir)?;
        tempfile::NamedTempFile::new_in(dir)
    }

    /// Moves a verified temporary file under its digest's name.
    pub fn commit(&self, mut tmp: tempfile::NamedTempFile, hex: &str) -> std::io::Result<PathBuf> {
        tmp.flush()?;
        let dest = self.path_for(hex);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        tmp.persist(&dest).map_err(|e| e.error)?;
        Ok(dest)
    }

    /// Stores bytes whose digest the caller has checked.
    pub fn store(&self, bytes: &[u8]) -> std::io::Result<(String, PathBuf)> {
        let hex = sha256_hex(bytes);
        let mut tmp = self.temp_file()?;
        tmp.write_all(bytes)?;
        let p = self.commit(tmp, &hex)?;
        Ok((hex, p))
    }
}

pub use crate::digest::sha256_hex;
