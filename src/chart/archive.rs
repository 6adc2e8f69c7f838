//! Safe reading of a chart archive (`.tgz`) in memory, or of a chart
//! directory: Chart.yaml, values.yaml, values.schema.json and the crds/ list.
//! Hostile archives are refused, naming the entry: absolute paths, `..`,
//! links, device files, oversized files, a top-level directory that is not
//! the chart's name.

use std::io::Read;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

/// Most bytes one archive may decompress to: its files, headers and
/// extension headers (a gzip bomb stops here).
pub const MAX_TOTAL: u64 = crate::limits::MAX_ARCHIVE_TOTAL;
/// Most bytes one file in an archive may hold.
pub const MAX_FILE: u64 = 5 * 1024 * 1024;
/// Most bytes of one extension header (PAX `x`/`g`, GNU long name `L` or
/// long link `K`): the tar crate reads each into memory whole.
pub const MAX_EXTENSION: u64 = 64 * 1024;
/// Most entries (of any kind, extension headers included) in one archive.
pub const MAX_ENTRIES: usize = 100_000;

/// Counts the decompressed bytes and stops at [`MAX_TOTAL`].
struct Counted<R> {
    inner: R,
    read: u64,
    over: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = (MAX_TOTAL + 1).saturating_sub(self.read);
        if room == 0 {
            self.over.set(true);
            return Err(std::io::Error::other(TOO_BIG));
        }
        let want = buf.len().min(room.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        self.read += n as u64;
        if self.read > MAX_TOTAL {
            self.over.set(true);
            return Err(std::io::Error::other(TOO_BIG));
        }
        Ok(n)
    }
}

const TOO_BIG: &str = "the archive decompresses to more than 100 MiB (the limit for one chart)";

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("chart archive {archive}: entry {entry:?}: {reason}")]
    Refused {
        archive: String,
        entry: String,
        reason: String,
    },
    #[error("chart archive {archive}: {reason}")]
    Invalid { archive: String, reason: String },
}

/// The parts of Chart.yaml kube-aws reads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChartMetadata {
    #[serde(default)]
    pub api_version: Option<String>,
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub app_version: Option<serde_yaml::Value>,
    #[serde(default)]
    pub kube_version: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default, rename = "type")]
    pub chart_type: Option<String>,
}

/// What kube-aws needs from a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartFiles {
    pub metadata: ChartMetadata,
    /// values.yaml text, when present.
    pub values: Option<String>,
    /// values.schema.json, parsed, when present.
    pub schema: Option<serde_json::Value>,
    /// Files under crds/, relative to the chart root, sorted.
    pub crds: Vec<String>,
}

/// Reads a gzipped chart archive held in memory. `label` names it in errors;
/// `expected_name`, when given, must be the chart's name.
pub fn read_chart_archive(bytes: &[u8], label: &str, expected_name: Option<&str>) -> Result<ChartFiles, ArchiveError> {
    let refuse = |entry: &str, reason: String| ArchiveError::Refused {
        archive: label.to_string(),
        entry: entry.to_string(),
        reason,
    };
    let invalid = |reason: String| ArchiveError::Invalid {
        archive: label.to_string(),
        reason,
    };
    let over = std::rc::Rc::new(std::cell::Cell::new(false));
    let counted = Counted {
        inner: flate2::read::GzDecoder::new(bytes),
        read: 0,
        over: over.clone(),
    };
    let mut tar = tar::Archive::new(counted);
    let broken = |e: std::io::Error| {
        if over.get() {
            invalid(TOO_BIG.into())
        } else {
            invalid(format!("not a gzipped tar: {e}"))
        }
    };
    // Raw: extension headers come to this loop instead of being read into
    // memory by the tar crate, so their size is checked before any is read.
    let entries = tar.entries().map_err(broken)?.raw(true);
    let mut top: Option<String> = None;
    let mut chart_yaml = None;
    let mut values = None;
    let mut schema = None;
    let mut crds = Vec::new();
    // What the extension headers before the next entry said.
    let mut long_name: Option<Vec<u8>> = None;
    let mut pax_path: Option<Vec<u8>> = None;
    let mut pax_size: Option<u64> = None;
    let mut pax_seen = false;
    for (count, entry) in entries.enumerate() {
        let mut entry = entry.map_err(broken)?;
        let kind = entry.header().entry_type();
        let header_path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if count >= MAX_ENTRIES {
            return Err(refuse(
                &header_path,
                format!("more than {MAX_ENTRIES} entries (the limit for one chart archive)"),
            ));
        }
        let extension = kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
            || kind.is_gnu_longname()
            || kind.is_gnu_longlink();
        if extension {
            let size = entry.header().entry_size().unwrap_or(u64::MAX);
            if size > MAX_EXTENSION {
                return Err(refuse(
                    &header_path,
                    format!(
                        "extension header ({}) of {size} bytes is more than the {} KiB limit",
                        extension_name(kind),
                        MAX_EXTENSION / 1024
                    ),
                ));
            }
            let mut data = Vec::new();
            (&mut entry)
                .take(MAX_EXTENSION)
                .read_to_end(&mut data)
                .map_err(broken)?;
            if kind.is_gnu_longname() {
                if long_name.is_some() {
                    return Err(refuse(&header_path, "two long names for one entry".into()));
                }
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                data.truncate(end);
                long_name = Some(data);
            } else if kind.is_pax_local_extensions() {
                if pax_seen {
                    return Err(refuse(&header_path, "two PAX headers for one entry".into()));
                }
                pax_seen = true;
                for ext in tar::PaxExtensions::new(&data) {
                    let ext = ext.map_err(|e| refuse(&header_path, format!("malformed PAX header: {e}")))?;
                    match ext.key_bytes() {
                        b"path" => pax_path = Some(ext.value_bytes().to_vec()),
                        b"size" => {
                            let v = ext.value().ok().and_then(|v| v.parse::<u64>().ok());
                            pax_size = Some(v.ok_or_else(|| refuse(&header_path, "malformed PAX size".into()))?);
                        }
                        _ => {}
                    }
                }
            }
            // PAX global headers and GNU long links change nothing kube-aws reads.
            continue;
        }
        pax_seen = false;
        let raw_path = match pax_path.take().or(long_name.take()) {
            Some(p) => String::from_utf8_lossy(&p).into_owned(),
            None => header_path,
        };
        if let Some(size) = pax_size.take() {
            // In raw mode the tar crate reads the header's size; Helm (Go's
            // archive/tar) reads the PAX size. Both must agree.
            if entry.header().entry_size().ok() != Some(size) {
                return Err(refuse(&raw_path, "the PAX size differs from the header's size".into()));
            }
        }
        if kind.is_symlink() {
            return Err(refuse(&raw_path, "symbolic links are not allowed in a chart".into()));
        }
        if kind.is_hard_link() {
            return Err(refuse(&raw_path, "hard links are not allowed in a chart".into()));
        }
        if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
            return Err(refuse(
                &raw_path,
                "device files and pipes are not allowed in a chart".into(),
            ));
        }
        let path = Path::new(&raw_path);
        let mut parts = Vec::new();
        for c in path.components() {
            match c {
                Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => {
                    return Err(refuse(&raw_path, "absolute paths are not allowed".into()))
                }
                Component::ParentDir => return Err(refuse(&raw_path, "`..` is not allowed in a path".into())),
            }
        }
        if raw_path.starts_with('/') {
            return Err(refuse(&raw_path, "absolute paths are not allowed".into()));
        }
        let Some(first) = parts.first().cloned() else { continue };
        match &top {
            None => top = Some(first.clone()),
            Some(t) if *t != first => {
                return Err(refuse(
                    &raw_path,
                    format!("all files must be under one top-level directory, {t:?}"),
                ))
            }
            _ => {}
        }
        if !kind.is_file() && !kind.is_dir() && kind != tar::EntryType::Continuous {
            return Err(refuse(&raw_path, format!("unsupported entry type {kind:?}")));
        }
        if kind.is_dir() {
            continue;
        }
        let size = entry.header().size().unwrap_or(u64::MAX);
        if size > MAX_FILE {
            return Err(refuse(
                &raw_path,
                format!("{size} bytes is more than the 5 MiB limit for one file"),
            ));
        }
        // Read through a limit: the header's size is not to be trusted.
        let mut buf = Vec::new();
        (&mut entry).take(MAX_FILE + 1).read_to_end(&mut buf).map_err(|e| {
            if over.get() {
                invalid(TOO_BIG.into())
            } else {
                invalid(format!("reading {raw_path:?}: {e}"))
            }
        })?;
        if buf.len() as u64 > MAX_FILE {
            return Err(refuse(&raw_path, "more than the 5 MiB limit for one file".into()));
        }
        let rel = parts[1..].join("/");
        match rel.as_str() {
            "Chart.yaml" => chart_yaml = Some(buf),
            "values.yaml" => values = Some(buf),
            "values.schema.json" => schema = Some(buf),
            r if r.starts_with("crds/") => crds.push(rel.clone()),
            _ => {}
        }
    }
    let top = top.ok_or_else(|| invalid("the archive is empty".into()))?;
    let chart_yaml = chart_yaml.ok_or_else(|| invalid(format!("no {top}/Chart.yaml")))?;
    let files = chart_files(label, chart_yaml, values, schema, crds)?;
    if files.metadata.name != top {
        return Err(refuse(
            &top,
            format!(
                "the top-level directory is not the chart's name {:?}",
                files.metadata.name
            ),
        ));
    }
    if let Some(expected) = expected_name {
        if files.metadata.name != expected {
            return Err(invalid(format!(
                "it holds chart {:?}, not {expected:?}",
                files.metadata.name
            )));
        }
    }
    Ok(files)
}

fn extension_name(kind: tar::EntryType) -> &'static str {
    if kind.is_pax_global_extensions() {
        "PAX global, type g"
    } else if kind.is_pax_local_extensions() {
        "PAX, type x"
    } else if kind.is_gnu_longname() {
        "GNU long name, type L"
    } else {
        "GNU long link, type K"
    }
}

/// Reads the unpacked chart directory `rel` of work tree `tree`: the
/// directory (symlinks resolved) must lie inside the tree, its files and
/// `crds/` inside the directory.
pub fn read_chart_dir(tree: &Path, rel: &Path) -> Result<ChartFiles, ArchiveError> {
    let dir = &tree.join(rel);
    let label = dir.display().to_string();
    let invalid = |l: crate::located::Located| ArchiveError::Invalid {
        archive: label.clone(),
        reason: l.message,
    };
    crate::reader::check_dir_inside(tree, dir, dir).map_err(invalid)?;
    let crds_dir = dir.join("crds");
    if crds_dir.exists() {
        crate::reader::check_dir_inside(dir, &crds_dir, &crds_dir).map_err(invalid)?;
    }
    // The one input reader: regular files only, capped, symlinks kept inside the chart.
    let read =
        |name: &str| match crate::reader::read_bytes(dir, Path::new(name), &dir.join(name), &crate::reader::TEXT_LIMIT)
        {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.is_missing() => Ok(None),
            Err(e) => Err(ArchiveError::Invalid {
                archive: label.clone(),
                reason: e.to_string(),
            }),
        };
    let chart_yaml = read("Chart.yaml")?.ok_or_else(|| ArchiveError::Invalid {
        archive: label.clone(),
        reason: "no Chart.yaml in the chart directory".into(),
    })?;
    let mut crds = Vec::new();
    if let Ok(list) = std::fs::read_dir(dir.join("crds")) {
        for e in list.flatten() {
            crds.push(format!("crds/{}", e.file_name().to_string_lossy()));
        }
    }
    chart_files(
        &label,
        chart_yaml,
        read("values.yaml")?,
        read("values.schema.json")?,
        crds,
    )
}

fn chart_files(
    label: &str,
    chart_yaml: Vec<u8>,
    values: Option<Vec<u8>>,
    schema: Option<Vec<u8>>,
    mut crds: Vec<String>,
) -> Result<ChartFiles, ArchiveError> {
    let invalid = |reason: String| ArchiveError::Invalid {
        archive: label.to_string(),
        reason,
    };
    // The YAML guard (size, depth) before serde_yaml, which is quadratic on deep nesting.
    let chart_yaml_text = std::str::from_utf8(&chart_yaml).map_err(|_| invalid("Chart.yaml is not UTF-8".into()))?;
    crate::located::check_yaml(Path::new("Chart.yaml"), chart_yaml_text, &crate::reader::TEXT_LIMIT)
        .map_err(|e| invalid(e.to_string()))?;
    let metadata: ChartMetadata =
        serde_yaml::from_slice(&chart_yaml).map_err(|e| invalid(format!("Chart.yaml: {e}")))?;
    let values = values
        .map(String::from_utf8)
        .transpose()
        .map_err(|_| invalid("values.yaml is not UTF-8".into()))?;
    let schema = schema
        .map(|s| serde_json::from_slice(&s))
        .transpose()
        .map_err(|e| invalid(format!("values.schema.json: {e}")))?;
    crds.sort();
    Ok(ChartFiles {
        metadata,
        values,
        schema,
        crds,
    })
}
