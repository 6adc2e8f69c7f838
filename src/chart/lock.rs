//! The lock: `charts-index/index.yaml` in the work tree, a valid Helm index
//! listing each release's resolved chart (name, version, urls, digest,
//! created) with annotations naming the release and the source reference.
//! `charts lock` writes it; render, validate and up check it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::Serialize;

use crate::chart::archive::{read_chart_archive, read_chart_dir};
use crate::chart::cache::ChartCache;
use crate::chart::http::{bounded, FetchError, FetchOptions, Http};
use crate::chart::index::{find_chart_version, parse_index, resolve_version, ChartVersion, Index, IndexError};
use crate::chart::oci::OciRef;
use crate::chart::version::{parse_version, version_satisfies, ResolveFailure};
use crate::config::{ChartSource, Release};
use crate::digest::sha256_hex;
use crate::located::{did_you_mean, join_index, join_key, Located, Pos, SourceMap};

mod resolve;
pub use resolve::{lock_charts, write_lock, LockOptions, LockReport};

/// The lock file, relative to the work tree.
pub const LOCK_FILE: &str = "charts-index/index.yaml";
/// Annotation: where the chart came from (`repo:URL`, `oci:REF`, `path:PATH`).
pub const SOURCE_ANNOTATION: &str = "kube-aws.io/source";
/// Annotation: the release the entry was locked for.
pub const RELEASE_ANNOTATION: &str = "kube-aws.io/release";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{}: {source}", file.display())]
    Index { file: PathBuf, source: IndexError },
    #[error("{0}")]
    Input(crate::located::Located),
    #[error("cannot write {}: {source}", file.display())]
    Write { file: PathBuf, source: std::io::Error },
    #[error("{}", .0.join("\n"))]
    Stale(Vec<String>),
    #[error("release {release:?}: {source}")]
    Fetch { release: String, source: Box<FetchError> },
    #[error("release {release:?}: {message}")]
    Resolve { release: String, message: String },
}

/// A loaded lock.
#[derive(Debug, Clone)]
pub struct Lock {
    /// The lock file, as shown in messages.
    pub file: PathBuf,
    pub index: Index,
    /// The text of each layer's file (the work tree's first), to locate an
    /// entry in messages.
    pub texts: Vec<(PathBuf, String)>,
}

/// One release's locked chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockedChart {
    pub release: String,
    pub chart: String,
    pub version: String,
    /// Lowercase hex sha256 of the archive; None for a chart directory.
    pub digest: Option<String>,
    pub urls: Vec<String>,
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_version: Option<String>,
}

/// The source reference written to the lock for a release.
pub fn source_ref(source: &ChartSource) -> String {
    match source {
        ChartSource::Repo(u) => format!("repo:{}", u.trim_end_matches('/')),
        ChartSource::Oci(o) => format!("oci:{o}"),
        ChartSource::Path(p) => format!("path:{p}"),
    }
}

/// The built-in layer: the tool's own `charts-index/index.yaml`, pinning the
/// built-in plugins' charts.
pub const BUILT_IN_LOCK: &str = include_str!("../../charts-index/index.yaml");

/// Loads the work tree's lock layered over the built-in one: a work-tree entry
/// wins over a built-in entry for the same release and source.
pub fn load_lock(dir: &Path) -> Result<Lock, LockError> {
    let built_in = parse_lock(BUILT_IN_LOCK, Path::new("built-in charts-index/index.yaml"))?;
    Ok(load_work_tree_lock(dir)?.layered_over(&built_in))
}

/// Loads `dir/charts-index/index.yaml` alone; an absent file is an empty lock.
pub fn load_work_tree_lock(dir: &Path) -> Result<Lock, LockError> {
    let file = crate::config::display_path(dir, LOCK_FILE);
    let text = match crate::reader::read_text(dir, Path::new(LOCK_FILE), &file, &crate::reader::TEXT_LIMIT) {
        Ok(t) => t,
        Err(crate::reader::ReadError::Missing { .. }) => {
            return Ok(Lock {
                file,
                index: Index {
                    api_version: "v1".into(),
                    ..Index::default()
                },
                texts: Vec::new(),
            })
        }
        Err(crate::reader::ReadError::Refused(l)) => return Err(LockError::Input(l)),
    };
    // Entry URLs in the lock are absolute already.
    parse_lock(&text, &file)
}

/// Parses lock text held in memory (the built-in lock embedded in the binary).
pub fn parse_lock(text: &str, file: &Path) -> Result<Lock, LockError> {
    let index = parse_index(text, "", &file.display().to_string())
        .map_err(|e| LockError::Input(locate_index_error(file, text, e)))?;
    Ok(Lock {
        file: file.to_path_buf(),
        index,
        texts: vec![(file.to_path_buf(), text.to_string())],
    })
}

/// A lock that does not parse, at the `file:line:col` of the value to change:
/// the YAML guard's own error, the `apiVersion` (or the top, where it is
/// missing), or the value serde names.
fn locate_index_error(file: &Path, text: &str, e: IndexError) -> Located {
    static AT: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"(?: at)? line (\d+),? column (\d+):?").expect("valid regex"));
    static KEY: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"^([A-Za-z0-9_.\[\]/-]+): ").expect("valid regex"));
    let map = match SourceMap::parse(file, text) {
        Ok(m) => m,
        Err(l) => return l,
    };
    let top = crate::reader::first_content(text);
    match e {
        IndexError::NoApiVersion { .. } => match map.value("apiVersion") {
            Some(p) => Located::new(
                file,
                p,
                "apiVersion",
                "must be a string such as \"v1\" (the lock is a Helm repository index)",
            ),
            None => Located::new(
                file,
                top,
                "",
                "no apiVersion: the lock is a Helm repository index and starts with `apiVersion: v1` \
                 (run `kube-aws charts lock` to write it anew)",
            ),
        },
        IndexError::Malformed { message, .. } => {
            let serde_pos = AT.captures(&message).and_then(|c| {
                Some(Pos {
                    line: c[1].parse().ok()?,
                    col: c[2].parse().ok()?,
                })
            });
            let text_only = AT.replace_all(&message, "").trim().to_string();
            let (key, rest) = match KEY.captures(&text_only) {
                Some(c) if map.value(&c[1]).is_some() || map.key(&c[1]).is_some() => {
                    (c[1].to_string(), text_only[c[0].len()..].to_string())
                }
                _ => (String::new(), text_only.clone()),
            };
            let pos = if key.is_empty() {
                serde_pos.unwrap_or(top)
            } else {
                map.locate(&key)
            };
            Located::new(
                file,
                pos,
                &key,
                format!("malformed lock: {rest} (run `kube-aws charts lock` to write it anew)"),
            )
        }
    }
}

impl Lock {
    /// This lock with `lower`'s entries added after its own: the work tree's
    /// lock over the built-in one. A release finds the work tree's entry first.
    pub fn layered_over(mut self, lower: &Lock) -> Lock {
        for (chart, versions) in &lower.index.entries {
            self.index
                .entries
                .entry(chart.clone())
                .or_default()
                .extend(versions.iter().cloned());
        }
        self.texts.extend(lower.texts.iter().cloned());
        self
    }

    /// Where entry `v` of chart `chart` sits in its lock file, at key `key`
    /// of the entry (`digest`): `file:line:col: entries.CHART[i].KEY`.
    fn locate(&self, chart: &str, v: &ChartVersion, key: &str) -> Located {
        let ann = |item: &serde_yaml::Value, k: &str| {
            item.get("annotations")
                .and_then(|a| a.get(k))
                .and_then(serde_yaml::Value::as_str)
                .map(str::to_string)
        };
        for (file, text) in &self.texts {
            let Ok(raw) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
                continue;
            };
            let Some(items) = raw
                .get("entries")
                .and_then(|e| e.get(chart))
                .and_then(|l| l.as_sequence())
            else {
                continue;
            };
            let found = items.iter().position(|item| {
                ann(item, SOURCE_ANNOTATION) == v.annotations.get(SOURCE_ANNOTATION).cloned()
                    && ann(item, RELEASE_ANNOTATION) == v.annotations.get(RELEASE_ANNOTATION).cloned()
                    && item.get("version").and_then(|x| x.as_str()) == Some(v.version.as_str())
            });
            if let Some(i) = found {
                let entry = join_index(&join_key("entries", chart), i);
                let path = join_key(&entry, key);
                let pos = SourceMap::parse(file, text)
                    .map(|m| m.locate(&path))
                    .unwrap_or_default();
                let shown = if items[i].get(key).is_some() { path } else { entry };
                return Located::new(file, pos, &shown, "");
            }
        }
        Located::new(&self.file, Pos { line: 1, col: 1 }, "", "")
    }
}

/// Whether a lock entry's digest is what its source needs: every archive
/// (from a repository, a registry or a local `.tgz`) is pinned by its
/// sha256; only a local chart directory has none. None when it is fine,
/// else the problem.
fn digest_problem(v: &ChartVersion, source: &str) -> Option<String> {
    match (&v.digest, v.digest_hex()) {
        (Some(_), Some(_)) => None,
        (Some(d), None) => Some(format!(
            "the digest {d:?} is not a sha256 (64 hex digits, optionally after `sha256:`)"
        )),
        (None, _) if source.starts_with("path:") => None,
        (None, _) => Some("there is no digest (the sha256 that pins the chart archive)".into()),
    }
}

fn entry_for<'a>(lock: &'a Lock, release: &Release) -> Option<&'a ChartVersion> {
    let source = source_ref(&release.source);
    let list = lock.index.entries.get(&release.chart)?;
    let same_source = |v: &&ChartVersion| v.annotations.get(SOURCE_ANNOTATION) == Some(&source);
    list.iter()
        .filter(same_source)
        .find(|v| v.annotations.get(RELEASE_ANNOTATION) == Some(&release.name))
        .or_else(|| list.iter().find(same_source))
}

fn locked_chart(release: &Release, v: &ChartVersion) -> LockedChart {
    LockedChart {
        release: release.name.clone(),
        chart: release.chart.clone(),
        version: v.version.clone(),
        digest: v.digest_hex(),
        urls: v.urls.clone(),
        source: source_ref(&release.source),
        kube_version: v.kube_version.clone(),
    }
}

/// Checks that every release has a lock entry from its source that still
/// satisfies its version constraint. Every problem is listed, each naming
/// the command that fixes it.
pub fn check_lock(lock: &Lock, releases: &[Release]) -> Result<Vec<LockedChart>, LockError> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for r in releases {
        let source = source_ref(&r.source);
        match entry_for(lock, r) {
            None => problems.push(at_declaration(
                r,
                false,
                format!(
                    "release {:?}: chart {:?} from {source} is not locked in {}: run `kube-aws charts lock`",
                    r.name,
                    r.chart,
                    lock.file.display()
                ),
                &lock.file,
            )),
            Some(v) if digest_problem(v, &source).is_some() => {
                let why = digest_problem(v, &source).unwrap_or_default();
                let mut at = lock.locate(&r.chart, v, "digest");
                at.message = format!(
                    "release {:?}: chart {:?} {} from {source}: {why}: run `kube-aws charts lock`",
                    r.name, r.chart, v.version
                );
                problems.push(at.to_string());
            }
            Some(v) => {
                let wanted = r.version.as_deref().filter(|w| !w.trim().is_empty());
                let ok = match wanted {
                    None => true,
                    Some(w) => version_satisfies(&v.version, w).unwrap_or(false),
                };
                if !ok {
                    problems.push(at_declaration(
                        r,
                        true,
                        format!(
                            "release {:?}: version {:?} does not match the locked version {} of chart {:?} in {}: \
                             run `kube-aws charts lock` (or set the version back)",
                            r.name,
                            wanted.unwrap_or_default(),
                            v.version,
                            r.chart,
                            lock.file.display()
                        ),
                        &lock.file,
                    ));
                } else {
                    out.push(locked_chart(r, v));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(LockError::Stale(problems))
    }
}

/// `message` at the release's declaration (its chart entry, or its
/// `version` value when `at_version`), where the user fixes it; at the lock
/// file when the release was made in code.
fn at_declaration(r: &Release, at_version: bool, message: String, lock_file: &Path) -> String {
    match &r.declared {
        Some(d) => {
            let (pos, key) = match d.version.filter(|_| at_version) {
                Some(p) => (p, format!("{}.version", d.path)),
                None => (d.entry, d.path.clone()),
            };
            Located::new(&d.file, pos, &key, message).to_string()
        }
        None => format!("{}: {message}", lock_file.display()),
    }
}
