//! Kubeconfig files: one context for a cluster, merged into the user's file.
//! Pure except [`write_merged`], which replaces the file atomically.
//!
//! Rules: the context, cluster and user entries named after the cluster are
//! replaced (or added), `current-context` points at it, and every other entry
//! and key is kept. A file that is not a YAML mapping is refused and never
//! overwritten. The result is written to a temporary file in the same
//! directory at mode 0600 and renamed over the target.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_yaml::{Mapping, Value};

#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("{path}: is not a kubeconfig ({detail}); it was left as it is: fix it, or write elsewhere with --file PATH (or --file - for stdout)")]
    NotKubeconfig { path: String, detail: String },
    #[error("{path}: cannot {action}: {detail}")]
    Io {
        path: String,
        action: &'static str,
        detail: String,
    },
    /// Refused by the guard every input reader and YAML reader runs
    /// (regular file, size, UTF-8, nesting depth), located.
    #[error("{0}; it was left as it is: fix it, or write elsewhere with --file PATH (or --file - for stdout)")]
    Refused(crate::located::Located),
    #[error("no kubeconfig path: set KUBECONFIG or HOME, or pass --file PATH")]
    NoPath,
}

/// One cluster's entry: a context of the same name over a cluster and a user.
#[derive(Clone)]
pub struct Entry {
    pub context: String,
    pub cluster: String,
    pub user: String,
    /// `https://host:6443`
    pub server: String,
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("context", &self.context)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

fn b64(s: &str) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(s.as_bytes()))
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(Value::String(k.into()), v);
    }
    Value::Mapping(m)
}

fn named(name: &str, key: &str, body: Value) -> Value {
    map(vec![("name", Value::String(name.into())), (key, body)])
}

/// Replaces the item named `name` in the list at `key`, or appends it.
fn upsert(doc: &mut Mapping, key: &str, name: &str, item: Value) -> Result<(), String> {
    let list = doc
        .entry(Value::String(key.into()))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if list.is_null() {
        *list = Value::Sequence(Vec::new());
    }
    let Value::Sequence(items) = list else {
        return Err(format!("{key} is not a list"));
    };
    match items
        .iter_mut()
        .find(|i| i.get("name").and_then(Value::as_str) == Some(name))
    {
        Some(slot) => *slot = item,
        None => items.push(item),
    }
    Ok(())
}

fn yaml_kind(v: &Value) -> &'static str {
    match v {
        Value::Sequence(_) => "a list",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Tagged(_) => "a tagged value",
        Value::Null | Value::Mapping(_) => "a mapping",
    }
}

/// Merges `entry` into the kubeconfig text `existing` (None or blank: a new file).
/// `path` only names the file in errors.
pub fn merge(path: &str, existing: Option<&str>, entry: &Entry) -> Result<String, KubeconfigError> {
    let not = |detail: String| KubeconfigError::NotKubeconfig {
        path: path.to_string(),
        detail,
    };
    let mut doc = match existing.filter(|t| !t.trim().is_empty()) {
        None => Mapping::new(),
        Some(text) => match crate::located::check_yaml(Path::new(path), text, &crate::reader::KUBECONFIG_LIMIT)
            .map_err(KubeconfigError::Refused)
            .and_then(|()| serde_yaml::from_str::<Value>(text).map_err(|e| not(format!("not YAML: {e}"))))?
        {
            Value::Mapping(m) => m,
            Value::Null => Mapping::new(),
            other => {
                return Err(KubeconfigError::Refused(crate::located::Located::new(
                    Path::new(path),
                    crate::reader::first_content(text),
                    "",
                    format!(
                        "is not a kubeconfig: its top level is {}, not a mapping (of clusters, users and contexts)",
                        yaml_kind(&other)
                    ),
                )))
            }
        },
    };
    if let Some(kind) = doc.get("kind").and_then(Value::as_str) {
        if kind != "Config" {
            return Err(not(format!("kind is {kind:?}, not Config")));
        }
    }
    doc.insert("apiVersion".into(), "v1".into());
    doc.insert("kind".into(), "Config".into());
    let cluster = named(
        &entry.cluster,
        "cluster",
        map(vec![
            ("server", Value::String(entry.server.clone())),
            ("certificate-authority-data", b64(&entry.ca_pem)),
        ]),
    );
    let user = named(
        &entry.user,
        "user",
        map(vec![
            ("client-certificate-data", b64(&entry.cert_pem)),
            ("client-key-data", b64(&entry.key_pem)),
        ]),
    );
    let context = named(
        &entry.context,
        "context",
        map(vec![
            ("cluster", Value::String(entry.cluster.clone())),
            ("user", Value::String(entry.user.clone())),
        ]),
    );
    upsert(&mut doc, "clusters", &entry.cluster, cluster).map_err(not)?;
    upsert(&mut doc, "users", &entry.user, user).map_err(not)?;
    upsert(&mut doc, "contexts", &entry.context, context).map_err(not)?;
    doc.insert("current-context".into(), Value::String(entry.context.clone()));
    serde_yaml::to_string(&Value::Mapping(doc)).map_err(|e| not(e.to_string()))
}

/// The file to merge into: `--file`, else the first path of `KUBECONFIG`
/// (kubectl writes new entries there too), else `~/.kube/config`.
pub fn target_path(
    file: Option<&Path>,
    kubeconfig_env: Option<&std::ffi::OsStr>,
    home: Option<&Path>,
) -> Result<PathBuf, KubeconfigError> {
    if let Some(f) = file {
        return Ok(f.to_path_buf());
    }
    if let Some(first) = kubeconfig_env.and_then(|v| std::env::split_paths(v).find(|p| !p.as_os_str().is_empty())) {
        return Ok(first);
    }
    home.map(|h| h.join(".kube").join("config"))
        .ok_or(KubeconfigError::NoPath)
}

/// Reads `path` (absent: a new file) and checks it would merge: called before
/// any AWS call, so a refused file costs nothing. Read through the one input
/// reader: a regular file only (a FIFO or `/dev/zero` is refused, never
/// opened for a blocking read), at most [`crate::reader::KUBECONFIG_LIMIT`],
/// UTF-8.
pub fn read_existing(path: &Path) -> Result<Option<String>, KubeconfigError> {
    match crate::reader::read_user_text(path, &crate::reader::KUBECONFIG_LIMIT) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.is_missing() => Ok(None),
        Err(e) => Err(KubeconfigError::Refused(e.into_located())),
    }
}

/// Merges `entry` into the file at `path` and replaces it atomically, mode 0600.
pub fn write_merged(path: &Path, entry: &Entry) -> Result<(), KubeconfigError> {
    let existing = read_existing(path)?;
    let text = merge(&path.display().to_string(), existing.as_deref(), entry)?;
    crate::fsutil::write_atomic_private(path, text.as_bytes()).map_err(|e| KubeconfigError::Io {
        path: path.display().to_string(),
        action: "write it",
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> Entry {
        Entry {
            context: name.into(),
            cluster: name.into(),
            user: format!("{name}-admin"),
            server: format!("https://{name}.example:6443"),
            ca_pem: "CA".into(),
            cert_pem: "CERT".into(),
            key_pem: "KEY".into(),
        }
    }

    #[test]
    fn merging_keeps_other_entries_and_replaces_its_own() {
        let existing = "apiVersion: v1\nkind: Config\npreferences: {colors: true}\n\
            clusters:\n- name: other\n  cluster: {server: 'https://o:443'}\n\
            users:\n- name: other-user\n  user: {token: t}\n\
            contexts:\n- name: other\n  context: {cluster: other, user: other-user}\n\
            current-context: other\n";
        let once = merge("k", Some(existing), &entry("demo")).unwrap();
        let twice = merge("k", Some(&once), &entry("demo")).unwrap();
        assert_eq!(once, twice, "merging again replaces, never duplicates");
        let v: Value = serde_yaml::from_str(&twice).unwrap();
        let names = |k: &str| -> Vec<String> {
            v[k].as_sequence()
                .unwrap()
                .iter()
                .map(|i| i["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names("clusters"), vec!["other", "demo"]);
        assert_eq!(names("users"), vec!["other-user", "demo-admin"]);
        assert_eq!(names("contexts"), vec!["other", "demo"]);
        assert_eq!(v["current-context"], "demo");
        assert_eq!(v["preferences"]["colors"], true);
        assert_eq!(v["clusters"][1]["cluster"]["certificate-authority-data"], "Q0E=");
    }

    #[test]
    fn what_is_not_a_kubeconfig_is_refused() {
        for bad in ["{not: [yaml", "- a\n- b\n", "kind: Pod\n", "clusters: 3\n"] {
            let e = merge("/home/u/.kube/config", Some(bad), &entry("demo")).unwrap_err();
            assert!(e.to_string().starts_with("/home/u/.kube/config:"), "{e}");
            assert!(e.to_string().contains("left as it is"), "{e}");
        }
        // The YAML guard, located: nesting deeper than every other reader allows.
        let deep = format!("kind: Config\nx: {}1{}\n", "[".repeat(80), "]".repeat(80));
        let e = merge("k", Some(&deep), &entry("demo")).unwrap_err();
        assert!(e.to_string().starts_with("k:2:"), "{e}");
        assert!(e.to_string().contains("nest deeper"), "{e}");
        assert!(merge("k", Some("  \n"), &entry("demo")).is_ok());
    }

    #[test]
    fn the_target_is_file_then_first_kubeconfig_path_then_home() {
        let home = Path::new("/home/u");
        assert_eq!(
            target_path(Some(Path::new("x")), Some("/a:/b".as_ref()), Some(home)).unwrap(),
            Path::new("x")
        );
        assert_eq!(
            target_path(None, Some(":/a:/b".as_ref()), Some(home)).unwrap(),
            Path::new("/a")
        );
        assert_eq!(
            target_path(None, None, Some(home)).unwrap(),
            Path::new("/home/u/.kube/config")
        );
        assert!(target_path(None, None, None).is_err());
    }
}
