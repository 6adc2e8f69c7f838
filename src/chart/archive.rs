//! Safe reading of a chart archive (`.tgz`) in memory, or of a chart
//! directory: Chart.yaml, values.yaml, values.schema.json and the crds/ list.
//! Hostile archives are refused, naming the entry: absolute paths, `..`,
//! links, device files, oversized files, a top-level directory that is not
//! the chart's name.

use std::io::Read;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

/// Most bytes one archive may decompress to.
pub const MAX_TOTAL: u64 = 100 * 1024 * 1024;
/// Most bytes one file in an archive may hold.
pub const MAX_FILE: u64 = 5 * 1024 * 1024;

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
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let entries = tar.entries().map_err(|e| invalid(format!("not a gzipped tar: {e}")))?;
    let mut total: u64 = 0;
    let mut top: Option<String> = None;
    let mut chart_yaml = None;
    let mut values = None;
    let mut schema = None;
    let mut crds = Vec::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| invalid(format!("not a gzipped tar: {e}")))?;
        let raw_path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
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
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() || kind.is_gnu_longname() {
            continue;
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
        (&mut entry)
            .take(MAX_FILE + 1)
            .read_to_end(&mut buf)
            .map_err(|e| invalid(format!("reading {raw_path:?}: {e}")))?;
        if buf.len() as u64 > MAX_FILE {
            return Err(refuse(&raw_path, "more than the 5 MiB limit for one file".into()));
        }
        total += buf.len() as u64;
        if total > MAX_TOTAL {
            return Err(refuse(
                &raw_path,
                "the archive decompresses to more than 100 MiB".into(),
            ));
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

/// Reads an unpacked chart directory.
pub fn read_chart_dir(dir: &Path) -> Result<ChartFiles, ArchiveError> {
    let label = dir.display().to_string();
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
