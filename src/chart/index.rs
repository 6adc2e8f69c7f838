//! Helm repository `index.yaml` (YAML or JSON): the typed model, a fast
//! lookup of one chart, and full parsing (the line pre-scan it relies on is
//! `index_scan.rs`).
//!
//! Big indexes (16 MB) are never loaded as one YAML event stream: for the
//! block layout every Helm version writes, a line pre-scan finds each chart's
//! byte range under `entries:` and only the wanted slice is parsed. Any other
//! layout (flow style, anchors, multiple documents, tabs) falls back to a full
//! parse, which is correct but slower.

use crate::chart::index_scan::{item_version, prescan, split_items};
use crate::chart::version::{parse_version, pick_version, ResolveFailure};
use crate::digest::Sha256Digest;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_yaml::Value;

/// Errors reading an index.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("malformed index {source_name}: {message}")]
    Malformed { source_name: String, message: String },
    #[error("malformed index {source_name}: no apiVersion (is this a Helm repository index.yaml?)")]
    NoApiVersion { source_name: String },
}

/// One chart version in an index. Fields Helm reads when resolving and
/// downloading; the rest of an entry is not kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartVersion {
    pub api_version: String,
    pub name: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_version: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Absolute URLs (relative ones are resolved against the repository URL).
    #[serde(default)]
    pub urls: Vec<String>,
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub annotations: IndexMap<String, String>,
}

impl ChartVersion {
    /// The digest as lowercase hex sha256, when it is one.
    pub fn digest_hex(&self) -> Option<String> {
        self.digest
            .as_deref()
            .and_then(Sha256Digest::parse)
            .map(Sha256Digest::into_hex)
    }
}

/// A whole parsed index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Index {
    pub api_version: String,
    pub entries: IndexMap<String, Vec<ChartVersion>>,
    /// Entries skipped as invalid, one message each (Helm logs and skips them).
    pub warnings: Vec<String>,
}

/// The result of looking up one chart.
#[derive(Debug, Clone, Default)]
pub struct ChartLookup {
    /// The chart's valid versions, in index order; None when the chart is absent.
    pub versions: Option<Vec<ChartVersion>>,
    /// Every chart name in the index (for "did you mean").
    pub names: Vec<String>,
    pub warnings: Vec<String>,
}

/// Resolves an entry URL against the repository URL the way Helm does
/// (the repository path is treated as a directory).
pub fn resolve_url(repo_url: &str, u: &str) -> String {
    if u.contains("://") {
        return u.to_string();
    }
    let base = if repo_url.ends_with('/') {
        repo_url.to_string()
    } else {
        format!("{repo_url}/")
    };
    match url::Url::parse(&base).and_then(|b| b.join(u)) {
        Ok(joined) => joined.to_string(),
        Err(_) => u.to_string(),
    }
}

/// The outcome of `find_chart_version`.
#[derive(Debug, Clone)]
pub struct VersionPick {
    /// None when the chart is absent (see `names`).
    pub chosen: Option<Result<ChartVersion, ResolveFailure>>,
    pub names: Vec<String>,
    pub warnings: Vec<String>,
}

/// Looks up one chart and resolves `wanted` (exact, then newest match) in
/// one go. For a block-style index only the `version:` line of each entry is
/// read, and only the chosen entry is parsed; anything unusual falls back to
/// `find_chart` + `resolve_version`, which give the same answer.
pub fn find_chart_version(
    text: &str,
    name: &str,
    wanted: Option<&str>,
    repo_url: &str,
    source_name: &str,
) -> Result<VersionPick, IndexError> {
    if !is_json(text) {
        if let Some(layout) = prescan(text).filter(|l| l.has_api_version) {
            let names: Vec<String> = layout.charts.iter().map(|c| c.name.clone()).collect();
            let Some(range) = layout.charts.iter().find(|c| c.name == name) else {
                return Ok(VersionPick {
                    chosen: None,
                    names,
                    warnings: Vec::new(),
                });
            };
            if let Some(pick) = pick_by_version_lines(&text[range.start..range.end], name, wanted, repo_url) {
                return Ok(VersionPick {
                    chosen: Some(pick.0),
                    names,
                    warnings: pick.1,
                });
            }
        }
    }
    let lookup = find_chart(text, name, repo_url, source_name)?;
    let chosen = lookup.versions.map(|vs| resolve_version(&vs, wanted).cloned());
    Ok(VersionPick {
        chosen,
        names: lookup.names,
        warnings: lookup.warnings,
    })
}

/// Picks a chart version: `wanted` None means the newest stable version
/// (the rule is [`pick_version`]'s, over the version strings).
pub fn resolve_version<'a>(
    versions: &'a [ChartVersion],
    wanted: Option<&str>,
) -> Result<&'a ChartVersion, ResolveFailure> {
    let strings: Vec<&str> = versions.iter().map(|v| v.version.as_str()).collect();
    let i = pick_version(&strings, wanted)?;
    versions.get(i).ok_or(ResolveFailure::NoMatch { newest: Vec::new() })
}

type Picked = (Result<ChartVersion, ResolveFailure>, Vec<String>);

fn pick_by_version_lines(slice: &str, name: &str, wanted: Option<&str>, repo_url: &str) -> Option<Picked> {
    let items = split_items(slice)?;
    let mut stubs = Vec::with_capacity(items.len());
    for item in &items {
        let version = item_version(item)?;
        stubs.push(ChartVersion {
            version,
            ..ChartVersion::default()
        });
    }
    let mut alive: Vec<usize> = (0..items.len()).collect();
    let mut warnings = Vec::new();
    loop {
        let candidates: Vec<ChartVersion> = alive.iter().map(|&i| stubs[i].clone()).collect();
        let picked = match resolve_version(&candidates, wanted) {
            Ok(p) => p as *const ChartVersion,
            Err(ResolveFailure::NoMatch { .. }) => {
                // Entries Helm would skip must not show up in "newest": parse them all.
                let mut valid = Vec::new();
                for &i in &alive {
                    let list: Vec<Value> = guarded(items[i]).ok()?;
                    for raw in list {
                        if let Some(v) = validate_one(name, i, raw, repo_url, &mut warnings) {
                            valid.push(v);
                        }
                    }
                }
                return Some((resolve_version(&valid, wanted).cloned(), warnings));
            }
            Err(e) => return Some((Err(e), warnings)),
        };
        let pos = candidates.iter().position(|c| std::ptr::eq(c, picked))?;
        let i = alive[pos];
        let list: Vec<Value> = guarded(items[i]).ok()?;
        let raw = list.into_iter().next()?;
        match validate_one(name, i, raw, repo_url, &mut warnings) {
            Some(v) => return Some((Ok(v), warnings)),
            None => {
                alive.remove(pos);
            }
        }
    }
}

/// Looks up one chart. `repo_url` resolves relative URLs; `source_name` names
/// the index in messages.
pub fn find_chart(text: &str, name: &str, repo_url: &str, source_name: &str) -> Result<ChartLookup, IndexError> {
    if is_json(text) {
        let index = parse_json(text, repo_url, source_name)?;
        return Ok(lookup_in(index, name));
    }
    match prescan(text) {
        Some(layout) => {
            if !layout.has_api_version {
                return Err(IndexError::NoApiVersion {
                    source_name: source_name.into(),
                });
            }
            let names: Vec<String> = layout.charts.iter().map(|c| c.name.clone()).collect();
            let Some(range) = layout.charts.iter().find(|c| c.name == name) else {
                return Ok(ChartLookup {
                    versions: None,
                    names,
                    warnings: Vec::new(),
                });
            };
            let mut warnings = Vec::new();
            match parse_slice(&text[range.start..range.end], name, repo_url, &mut warnings) {
                Ok(versions) => Ok(ChartLookup {
                    versions: Some(versions),
                    names,
                    warnings,
                }),
                // A slice that does not parse alone (an alias to an anchor
                // elsewhere, say): the full parse gives the right answer or error.
                Err(_) => Ok(lookup_in(parse_index_full(text, repo_url, source_name)?, name)),
            }
        }
        None => Ok(lookup_in(parse_index_full(text, repo_url, source_name)?, name)),
    }
}

fn lookup_in(mut index: Index, name: &str) -> ChartLookup {
    let names = index.entries.keys().cloned().collect();
    ChartLookup {
        versions: index.entries.shift_remove(name),
        names,
        warnings: index.warnings,
    }
}

/// Parses a whole index. For block-style YAML each chart is parsed on its own,
/// so memory stays near one chart's worth of events.
pub fn parse_index(text: &str, repo_url: &str, source_name: &str) -> Result<Index, IndexError> {
    if is_json(text) {
        return parse_json(text, repo_url, source_name);
    }
    let Some(layout) = prescan(text) else {
        return parse_index_full(text, repo_url, source_name);
    };
    if !layout.has_api_version {
        return Err(IndexError::NoApiVersion {
            source_name: source_name.into(),
        });
    }
    let mut index = Index {
        api_version: layout.api_version.clone().unwrap_or_else(|| "v1".into()),
        ..Index::default()
    };
    for range in &layout.charts {
        match parse_slice(
            &text[range.start..range.end],
            &range.name,
            repo_url,
            &mut index.warnings,
        ) {
            Ok(versions) => {
                index.entries.insert(range.name.clone(), versions);
            }
            Err(_) => return parse_index_full(text, repo_url, source_name),
        }
    }
    Ok(index)
}

fn is_json(text: &str) -> bool {
    text.trim_start_matches('\u{feff}').trim_start().starts_with('{')
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawIndex<V> {
    #[serde(default)]
    api_version: Option<V>,
    #[serde(default = "IndexMap::new")]
    entries: IndexMap<String, Option<Vec<V>>>,
}

fn parse_json(text: &str, repo_url: &str, source_name: &str) -> Result<Index, IndexError> {
    // JSON values convert losslessly to YAML values, so one validator serves both.
    let raw: RawIndex<serde_json::Value> = serde_json::from_str(text).map_err(|e| IndexError::Malformed {
        source_name: source_name.into(),
        message: format!("line {} column {}: {e}", e.line(), e.column()),
    })?;
    let api = raw.api_version.and_then(|v| v.as_str().map(str::to_string));
    let Some(api_version) = api.filter(|a| !a.is_empty()) else {
        return Err(IndexError::NoApiVersion {
            source_name: source_name.into(),
        });
    };
    let mut index = Index {
        api_version,
        ..Index::default()
    };
    for (name, list) in raw.entries {
        let list: Vec<Value> = list
            .unwrap_or_default()
            .into_iter()
            .map(|v| serde_yaml::to_value(v).unwrap_or(Value::Null))
            .collect();
        let versions = validate_versions(&name, list, repo_url, &mut index.warnings);
        index.entries.insert(name, versions);
    }
    Ok(index)
}

/// Parses a YAML index in one piece (serde_yaml); the reference the fast
/// path is tested against, and the fallback for layouts the pre-scan skips.
pub fn parse_index_full(text: &str, repo_url: &str, source_name: &str) -> Result<Index, IndexError> {
    let raw: RawIndex<Value> = guarded(text).map_err(|e| IndexError::Malformed {
        source_name: source_name.into(),
        message: e.to_string(),
    })?;
    let Some(api_version) = raw
        .api_version
        .as_ref()
        .and_then(scalar_string)
        .filter(|a| !a.is_empty())
    else {
        return Err(IndexError::NoApiVersion {
            source_name: source_name.into(),
        });
    };
    let mut index = Index {
        api_version,
        ..Index::default()
    };
    for (name, list) in raw.entries {
        let versions = validate_versions(&name, list.unwrap_or_default(), repo_url, &mut index.warnings);
        index.entries.insert(name, versions);
    }
    Ok(index)
}

/// serde_yaml behind the YAML guard (size, depth; src/located.rs), which
/// keeps its quadratic time on deep nesting out of reach.
fn guarded<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_yaml::Error> {
    crate::located::check_yaml(std::path::Path::new("index.yaml"), text, &crate::reader::INDEX_LIMIT).map_err(|e| {
        <serde_yaml::Error as serde::de::Error>::custom(format!(
            "line {} column {}: {}",
            e.pos.line, e.pos.col, e.message
        ))
    })?;
    serde_yaml::from_str(text)
}

/// Parses one chart's text (its key line and its list). Each list item is
/// parsed on its own, so memory stays at one version's worth of YAML events
/// even for a chart with a thousand versions.
fn parse_slice(
    slice: &str,
    name: &str,
    repo_url: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<ChartVersion>, serde_yaml::Error> {
    if let Some(items) = split_items(slice) {
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let list: Vec<Value> = guarded(item)?;
            for raw in list {
                if let Some(v) = validate_one(name, i, raw, repo_url, warnings) {
                    out.push(v);
                }
            }
        }
        return Ok(out);
    }
    let raw: IndexMap<String, Option<Vec<Value>>> = guarded(slice)?;
    Ok(raw
        .into_iter()
        .flat_map(|(n, list)| validate_versions(&n, list.unwrap_or_default(), repo_url, warnings))
        .collect())
}

/// A YAML scalar as Helm's JSON round trip would read it as a string.
fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Turns raw entries into chart versions, skipping (with a warning) the ones
/// Helm's `Metadata.Validate` would reject.
fn validate_versions(chart: &str, list: Vec<Value>, repo_url: &str, warnings: &mut Vec<String>) -> Vec<ChartVersion> {
    list.into_iter()
        .enumerate()
        .filter_map(|(i, raw)| validate_one(chart, i, raw, repo_url, warnings))
        .collect()
}

fn validate_one(chart: &str, i: usize, raw: Value, repo_url: &str, warnings: &mut Vec<String>) -> Option<ChartVersion> {
    match version_from_value(raw, repo_url) {
        Ok(v) => Some(v),
        Err(why) => {
            warnings.push(format!("skipping invalid entry {i} of chart {chart:?}: {why}"));
            None
        }
    }
}

fn version_from_value(raw: Value, repo_url: &str) -> Result<ChartVersion, String> {
    let Value::Mapping(map) = raw else {
        return Err("not a mapping".into());
    };
    let get = |k: &str| map.get(k).and_then(scalar_string);
    let name = get("name").filter(|n| !n.is_empty()).ok_or("no name")?;
    if name.contains('/') || name.contains('\\') || name == "." || name == ".." {
        return Err(format!("chart name {name:?} is not a plain name"));
    }
    let version = get("version").filter(|n| !n.is_empty()).ok_or("no version")?;
    if parse_version(&version).is_none() {
        return Err(format!("version {version:?} is not a valid semantic version"));
    }
    let urls = match map.get("urls") {
        Some(Value::Sequence(seq)) => seq
            .iter()
            .filter_map(scalar_string)
            .map(|u| resolve_url(repo_url, &u))
            .collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(_) => return Err("urls is not a list".into()),
    };
    let annotations = match map.get("annotations") {
        Some(Value::Mapping(m)) => m
            .iter()
            .filter_map(|(k, v)| Some((scalar_string(k)?, scalar_string(v)?)))
            .collect(),
        _ => IndexMap::new(),
    };
    Ok(ChartVersion {
        // Helm defaults a missing apiVersion to v1.
        api_version: get("apiVersion")
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "v1".into()),
        name,
        version,
        app_version: get("appVersion"),
        description: get("description"),
        kube_version: get("kubeVersion"),
        deprecated: matches!(map.get("deprecated"), Some(Value::Bool(true))),
        created: get("created"),
        digest: get("digest"),
        urls,
        annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "apiVersion: v1\nentries:\n  a:\n  - name: a\n    version: 1.0.0\n    urls: [a-1.0.0.tgz]\n    digest: sha256:ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789\n  - name: a\n    version: not-semver\n  b:\n    - name: b\n      version: 2.0.0\n      description: |\n        text\n\n        more\ngenerated: \"2020-01-01T00:00:00Z\"\n";

    #[test]
    fn finds_one_chart_and_resolves_relative_urls() {
        let l = find_chart(SMALL, "a", "https://h/repo", "t").unwrap();
        let v = l.versions.unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].urls, vec!["https://h/repo/a-1.0.0.tgz"]);
        assert_eq!(
            v[0].digest_hex().unwrap(),
            "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
        );
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        assert_eq!(l.names, vec!["a", "b"]);
        let b = find_chart(SMALL, "b", "https://h/repo", "t").unwrap().versions.unwrap();
        assert_eq!(b[0].description.as_deref(), Some("text\n\nmore\n"));
    }

    #[test]
    fn prescan_and_full_parse_agree() {
        let fast = parse_index(SMALL, "https://h/", "t").unwrap();
        let full = parse_index_full(SMALL, "https://h/", "t").unwrap();
        assert_eq!(fast, full);
    }

    #[test]
    fn other_layouts_fall_back_to_a_full_parse() {
        for text in [
            "apiVersion: v1\nentries: {a: [{name: a, version: 1.0.0}]}\n",
            "---\napiVersion: v1\nentries:\n\ta: []\n",
            "apiVersion: v1\nx: &x {name: a, version: 1.0.0}\nentries:\n  a:\n  - *x\n",
            "{\"apiVersion\":\"v1\",\"entries\":{\"a\":[{\"name\":\"a\",\"version\":\"1.0.0\"}]}}",
        ] {
            match find_chart(text, "a", "https://h/", "t") {
                Ok(l) => assert_eq!(l.versions.map(|v| v.len()), Some(1), "{text}"),
                Err(e) => assert!(text.contains('\t'), "{text}: {e}"),
            }
        }
    }

    #[test]
    fn missing_api_version_and_malformed_text_are_errors() {
        assert!(matches!(
            find_chart("entries:\n  a: []\n", "a", "", "t"),
            Err(IndexError::NoApiVersion { .. })
        ));
        let e = find_chart("apiVersion: v1\nentries: [1, 2\n", "a", "", "idx").unwrap_err();
        assert!(e.to_string().contains("idx"), "{e}");
    }

    #[test]
    fn digests() {
        let hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let v = |d: &str| ChartVersion {
            digest: Some(d.into()),
            ..ChartVersion::default()
        };
        assert_eq!(
            v(&format!("SHA256:{}", hex.to_uppercase())).digest_hex().as_deref(),
            Some(hex)
        );
        assert_eq!(v(hex).digest_hex().as_deref(), Some(hex));
        assert_eq!(v("sha256:abc").digest_hex(), None);
    }

    #[test]
    fn relative_urls() {
        assert_eq!(resolve_url("https://h/a", "c.tgz"), "https://h/a/c.tgz");
        assert_eq!(resolve_url("https://h/a/", "/c.tgz"), "https://h/c.tgz");
        assert_eq!(resolve_url("https://h/a", "oci://r/c"), "oci://r/c");
    }
}
