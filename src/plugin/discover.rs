//! Finding plugins: the built-in layer embedded from the repository's
//! top-level `plugins/`, then the work tree's `plugins/<name>/plugin.yaml`,
//! which overrides a built-in of the same name. Also owns reading a plugin's
//! files, refusing any path that escapes the plugin directory.

use std::path::{Component, Path, PathBuf};

use include_dir::{include_dir, Dir};

use super::hooks::PluginSource;
use super::model::{PluginManifest, API_VERSION, KIND, MANIFEST_FILE};
use super::PluginError;
use crate::config::is_dns_label;
use crate::located::{parse_yaml, Diagnostics, Located, Pos, SourceMap};

/// The built-in layer, compiled into the binary.
static BUILT_IN: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/plugins");

/// Where a plugin's files live.
#[derive(Debug, Clone)]
pub enum PluginRoot {
    Embedded(&'static Dir<'static>),
    Disk(PathBuf),
}

/// One discovered plugin, parsed.
#[derive(Debug, Clone)]
pub struct PluginDef {
    pub manifest: PluginManifest,
    pub source: PluginSource,
    /// plugin.yaml as shown in messages.
    pub file: PathBuf,
    /// The plugin directory as shown in messages.
    pub display_dir: PathBuf,
    /// The plugin directory relative to the work tree (work-tree plugins only).
    pub work_tree_dir: Option<PathBuf>,
    pub map: SourceMap,
    pub root: PluginRoot,
}

impl PluginDef {
    pub fn name(&self) -> &str {
        &self.manifest.metadata.name
    }

    /// A located error in this plugin's plugin.yaml at key `path`.
    pub fn err(&self, path: &str, message: impl Into<String>) -> Located {
        Located::new(&self.file, self.map.locate(path), path, message)
    }

    /// Reads `rel` (relative to the plugin directory). `key` is the plugin.yaml
    /// key that names it, for the error's location.
    pub fn read(&self, key: &str, rel: &str) -> Result<String, Located> {
        let clean = safe_relative(rel).map_err(|why| self.err(key, why))?;
        let missing = || self.err(key, format!("{rel:?} does not exist in {}", self.display_dir.display()));
        match &self.root {
            PluginRoot::Embedded(dir) => {
                let path = dir.path().join(&clean);
                let file = dir.get_file(&path).ok_or_else(missing)?;
                file.contents_utf8()
                    .map(str::to_string)
                    .ok_or_else(|| self.err(key, format!("{rel:?} is not UTF-8 text")))
            }
            // The one input reader: regular files only, size capped, symlinks kept inside the plugin.
            PluginRoot::Disk(root) => {
                let shown = self.display_dir.join(&clean);
                crate::reader::read_text(root, &clean, &shown, &crate::reader::TEXT_LIMIT).map_err(|e| match e {
                    crate::reader::ReadError::Missing { .. } => missing(),
                    crate::reader::ReadError::Refused(l) => l,
                })
            }
        }
    }

    /// The file's path as shown in messages.
    pub fn display_file(&self, rel: &str) -> PathBuf {
        self.display_dir.join(rel)
    }
}

/// Checks that `rel` stays inside the plugin directory and normalizes it.
pub fn safe_relative(rel: &str) -> Result<PathBuf, String> {
    let p = Path::new(rel);
    if rel.is_empty() {
        return Err("the path is empty".into());
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(format!(
                        "{rel:?} escapes the plugin directory (use a path inside it, relative to plugin.yaml)"
                    ));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "{rel:?} is absolute (use a path inside the plugin directory, relative to plugin.yaml)"
                ))
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(format!("{rel:?} names the plugin directory itself, not a file"));
    }
    Ok(out)
}

/// Parses and checks one plugin.yaml.
fn parse_manifest(file: &Path, text: &str, dir_name: &str) -> Result<(PluginManifest, SourceMap), Located> {
    let (m, map): (PluginManifest, SourceMap) = parse_yaml(file, text)?;
    let at = |path: &str, msg: String| Located::new(file, map.locate(path), path, msg);
    if m.api_version != API_VERSION {
        return Err(at(
            "apiVersion",
            format!(
                "{:?} is not a supported apiVersion (use {API_VERSION:?})",
                m.api_version
            ),
        ));
    }
    if m.kind != KIND {
        return Err(at(
            "kind",
            format!("{:?} is not a supported kind (use {KIND:?})", m.kind),
        ));
    }
    if !is_dns_label(&m.metadata.name, 53) {
        return Err(at(
            "metadata.name",
            format!(
                "{:?} is not a valid plugin name (use lowercase letters, digits and '-')",
                m.metadata.name
            ),
        ));
    }
    if m.metadata.name != dir_name {
        return Err(at(
            "metadata.name",
            format!(
                "{:?} differs from its directory's name {dir_name:?} (rename one to match)",
                m.metadata.name
            ),
        ));
    }
    Ok((m, map))
}

/// The built-in plugins, parsed once per process (a render asks for them
/// three times: the hooks before and after it, and the resolution). An error
/// here is a bug in this build.
pub fn built_in() -> Result<Vec<PluginDef>, PluginError> {
    static PARSED: std::sync::OnceLock<Vec<PluginDef>> = std::sync::OnceLock::new();
    if let Some(all) = PARSED.get() {
        return Ok(all.clone());
    }
    let all = parse_built_in()?;
    Ok(PARSED.get_or_init(|| all).clone())
}

fn parse_built_in() -> Result<Vec<PluginDef>, PluginError> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut dirs: Vec<&'static Dir<'static>> = BUILT_IN.dirs().collect();
    dirs.sort_by_key(|d| d.path().to_path_buf());
    for d in dirs {
        let dir_name = d
            .path()
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let display_dir = Path::new("<built-in>/plugins").join(&dir_name);
        let file = display_dir.join(MANIFEST_FILE);
        let Some(text) = d.get_file(d.path().join(MANIFEST_FILE)).and_then(|f| f.contents_utf8()) else {
            continue;
        };
        match parse_manifest(&file, text, &dir_name) {
            Ok((manifest, map)) => out.push(PluginDef {
                manifest,
                source: PluginSource::BuiltIn,
                file,
                display_dir,
                work_tree_dir: None,
                map,
                root: PluginRoot::Embedded(d),
            }),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(PluginError::Invalid(Diagnostics::sorted(errors)))
    }
}

/// The work tree's plugins (`dir/plugins/<name>/plugin.yaml`), parsed.
pub fn work_tree(dir: &Path) -> Result<Vec<PluginDef>, PluginError> {
    let plugins_dir = dir.join("plugins");
    if !plugins_dir.is_dir() {
        return Ok(Vec::new());
    }
    // A symlinked plugins/ or plugin directory must stay inside the work tree,
    // like every file read from it (the one rule in reader.rs).
    let shown_plugins = crate::config::display_path(dir, "plugins");
    crate::reader::check_dir_inside(dir, &plugins_dir, &shown_plugins)
        .map_err(|l| PluginError::Invalid(Diagnostics::sorted(vec![l])))?;
    let entries = std::fs::read_dir(&plugins_dir).map_err(|source| PluginError::Read {
        path: plugins_dir.clone(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for d in dirs {
        let dir_name = d.file_name().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        if dir_name.starts_with('.') {
            continue;
        }
        let display_dir = shown_plugins.join(&dir_name);
        if let Err(l) = crate::reader::check_dir_inside(dir, &d, &display_dir) {
            errors.push(l);
            continue;
        }
        let file = display_dir.join(MANIFEST_FILE);
        let text = match crate::reader::read_text(&d, Path::new(MANIFEST_FILE), &file, &crate::reader::TEXT_LIMIT) {
            Ok(t) => t,
            Err(crate::reader::ReadError::Missing { .. }) => {
                errors.push(Located::new(
                    &display_dir,
                    Pos { line: 1, col: 1 },
                    "",
                    format!("plugin directory {dir_name:?} has no {MANIFEST_FILE} (add one, or move the directory out of plugins/)"),
                ));
                continue;
            }
            Err(crate::reader::ReadError::Refused(l)) => {
                errors.push(l);
                continue;
            }
        };
        match parse_manifest(&file, &text, &dir_name) {
            Ok((manifest, map)) => out.push(PluginDef {
                manifest,
                source: PluginSource::WorkTree,
                file,
                display_dir,
                work_tree_dir: Some(Path::new("plugins").join(&dir_name)),
                map,
                root: PluginRoot::Disk(d),
            }),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(PluginError::Invalid(Diagnostics::sorted(errors)))
    }
}

/// Every plugin visible from work tree `dir`, sorted by name: built-ins,
/// each replaced by a work-tree plugin of the same name.
pub fn discover(dir: &Path) -> Result<Vec<PluginDef>, PluginError> {
    let mut all = built_in()?;
    for p in work_tree(dir)? {
        match all.iter_mut().find(|b| b.name() == p.name()) {
            Some(slot) => *slot = p,
            None => all.push(p),
        }
    }
    all.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_stay_inside() {
        assert_eq!(safe_relative("a/./b.tera").unwrap(), PathBuf::from("a/b.tera"));
        assert_eq!(safe_relative("a/../b").unwrap(), PathBuf::from("b"));
        assert!(safe_relative("../x").unwrap_err().contains("escapes"));
        assert!(safe_relative("a/../../x").unwrap_err().contains("escapes"));
        assert!(safe_relative("/etc/passwd").unwrap_err().contains("absolute"));
        assert!(safe_relative(".").is_err());
        assert!(safe_relative("").is_err());
    }

    #[test]
    fn built_ins_parse() {
        let all = built_in().unwrap();
        assert!(all.iter().any(|p| p.name() == "metrics-server"));
        for p in &all {
            assert_eq!(p.source, PluginSource::BuiltIn);
        }
    }

    #[test]
    fn name_must_match_directory() {
        let text = "apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {name: a, version: 0.1.0}\n";
        let err = parse_manifest(Path::new("p.yaml"), text, "b").unwrap_err();
        assert!(err.message.contains("differs from its directory"), "{err}");
        assert_eq!(err.pos.line, 3);
    }

    #[test]
    fn wrong_api_version_and_kind() {
        let text = "apiVersion: v1\nkind: Plugin\nmetadata: {name: a, version: 0.1.0}\n";
        let err = parse_manifest(Path::new("p.yaml"), text, "a").unwrap_err();
        assert!(err.message.contains("apiVersion"), "{err}");
        let text = "apiVersion: kube-aws/v1\nkind: Plug\nmetadata: {name: a, version: 0.1.0}\n";
        let err = parse_manifest(Path::new("p.yaml"), text, "a").unwrap_err();
        assert_eq!(err.pos.line, 2, "{err}");
    }

    #[test]
    fn unknown_keys_are_located() {
        let text = "apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {name: a, version: 0.1.0}\nspec:\n  chart: []\n";
        let err = parse_manifest(Path::new("p.yaml"), text, "a").unwrap_err();
        assert_eq!(err.pos.line, 5, "{err}");
        assert!(err.message.contains("did you mean \"charts\""), "{err}");
    }
}
