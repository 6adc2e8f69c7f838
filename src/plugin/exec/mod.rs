//! Running programs on the operator's machine: plugin commands (`kube-aws
//! NAME`), `kube-aws-NAME` programs on `PATH`, and plugin lifecycle hooks.
//!
//! Invariant: a plugin program runs only while its plugin is enabled, only
//! from a file inside its plugin directory (the one path-escape rule,
//! [`safe_relative`], plus [`crate::reader::check_inside`] for symlinks) that
//! is executable; arguments are passed as they are (no shell, no lossy
//! conversion); the environment kube-aws adds carries no secret parameter;
//! and no process of a hook outlives it (its process group is killed at the
//! timeout and when it exits).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::discover::{safe_relative, PluginRoot};
use super::model::HookSpec;
use super::{activation, discover, PluginDef, PluginError};
use crate::config::{load_cluster, ConfigError, CLUSTER_FILE};
use crate::located::{Diagnostics, Located};

/// A hook's timeout when plugin.yaml gives none.
mod hooks;

pub use hooks::{hook_key, run_hooks, HookRun, Step, When};

pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{0}")]
    Invalid(Diagnostics),
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{name:?} is not a kube-aws command, and no kube-aws-{name} is on PATH{hint} (see `kube-aws --help`)")]
    UnknownCommand { name: String, hint: String },
    #[error("cannot run {}: {source}", path.display())]
    Spawn { path: PathBuf, source: std::io::Error },
    #[error("cannot prepare the files of plugin {plugin:?}: {source}")]
    Prepare { plugin: String, source: std::io::Error },
    #[error("plugin {plugin:?}: hook {hook} ({run}) {why}")]
    Hook {
        plugin: String,
        hook: String,
        run: String,
        why: String,
    },
}

impl ExecError {
    /// Bad usage (an unknown command): exit code 2, like clap's own usage errors.
    pub fn is_usage(&self) -> bool {
        matches!(self, ExecError::UnknownCommand { .. })
    }
}

/// The status an external command exited with; `main` exits with it, silently.
#[derive(Debug, thiserror::Error)]
#[error("the command exited with status {0}")]
pub struct ExternalExit(pub u8);

/// Is each of `defs` enabled in the work tree `dir`? Without a cluster.yaml,
/// only `enabledByDefault` counts.
pub fn enabled(dir: &Path, defs: &[PluginDef]) -> Result<Vec<bool>, ConfigError> {
    if !dir.join(CLUSTER_FILE).is_file() {
        return Ok(defs.iter().map(|d| d.manifest.enabled_by_default).collect());
    }
    let cluster = load_cluster(dir)?;
    Ok(defs.iter().map(|d| activation(&cluster, d).any()).collect())
}

/// The plugin commands that break the rules: a name that is not a DNS label,
/// a built-in command's name (`builtins`), or one declared twice.
pub fn check_commands(defs: &[PluginDef], builtins: &[String]) -> Vec<Located> {
    let mut errors = Vec::new();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for d in defs {
        for (i, c) in d.manifest.spec.commands.iter().enumerate() {
            let key = format!("spec.commands[{i}].name");
            if !crate::config::is_dns_label(&c.name, 63) {
                errors.push(d.err(
                    &key,
                    format!(
                        "{:?} is not a valid command name (use lowercase letters, digits and '-')",
                        c.name
                    ),
                ));
            } else if builtins.iter().any(|b| b == &c.name) {
                errors.push(d.err(
                    &key,
                    format!(
                        "{:?} is a built-in kube-aws command and cannot be shadowed (rename the plugin's command)",
                        c.name
                    ),
                ));
            } else if let Some(other) = seen.insert(&c.name, d.name()) {
                errors.push(d.err(
                    &key,
                    format!(
                        "command {:?} is also declared by plugin {other:?} (rename one of them)",
                        c.name
                    ),
                ));
            }
        }
    }
    errors
}

/// A plugin file ready to execute. A built-in plugin's files are copied to a
/// private temporary directory first (removed when this is dropped).
#[derive(Debug)]
pub struct Program {
    pub path: PathBuf,
    /// The plugin directory the program sees (`KUBE_AWS_PLUGIN_DIR`).
    pub plugin_dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

/// A plugin file that passed the checks.
enum Checked {
    Embedded(&'static include_dir::Dir<'static>, &'static include_dir::File<'static>),
    Disk { root: PathBuf, path: PathBuf },
}

/// Checks the plugin file `rel` (named at plugin.yaml key `key`): inside the
/// plugin directory (symlinks resolved), a regular file, executable.
fn check(def: &PluginDef, key: &str, rel: &str) -> Result<Checked, Located> {
    let clean = safe_relative(rel).map_err(|why| def.err(key, why))?;
    let missing = || def.err(key, format!("{rel:?} does not exist in {}", def.display_dir.display()));
    match &def.root {
        PluginRoot::Embedded(dir) => {
            let file = dir.get_file(dir.path().join(&clean)).ok_or_else(missing)?;
            Ok(Checked::Embedded(dir, file))
        }
        PluginRoot::Disk(root) => {
            let root = std::path::absolute(root).unwrap_or_else(|_| root.clone());
            let path = root.join(&clean);
            let shown = def.display_file(&clean.to_string_lossy());
            let meta = std::fs::metadata(&path).map_err(|_| missing())?;
            crate::reader::check_inside(&root, &path)
                .map_err(|why| def.err(key, format!("{} {why}", shown.display())))?;
            if !meta.is_file() {
                return Err(def.err(key, format!("{} is not a regular file", shown.display())));
            }
            if meta.permissions().mode() & 0o111 == 0 {
                return Err(def.err(key, format!("{} is not executable (chmod +x it)", shown.display())));
            }
            Ok(Checked::Disk { root, path })
        }
    }
}

/// Checks the plugin file `rel` (named at plugin.yaml key `key`) and makes it
/// ready to run.
pub fn program(def: &PluginDef, key: &str, rel: &str) -> Result<Program, ExecError> {
    match check(def, key, rel).map_err(invalid)? {
        Checked::Embedded(dir, file) => {
            let prepare = |source| ExecError::Prepare {
                plugin: def.name().to_string(),
                source,
            };
            let temp = tempfile::Builder::new()
                .prefix("kube-aws-plugin-")
                .tempdir()
                .map_err(prepare)?;
            dir.extract(temp.path()).map_err(prepare)?;
            let path = temp.path().join(file.path());
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).map_err(prepare)?;
            Ok(Program {
                path,
                plugin_dir: temp.path().join(dir.path()),
                _temp: Some(temp),
            })
        }
        Checked::Disk { root, path } => Ok(Program {
            path,
            plugin_dir: root,
            _temp: None,
        }),
    }
}

/// A hook's timeout, checked (`spec.hooks.<key>[i]` is `at`).
fn hook_timeout(def: &PluginDef, at: &str, spec: &HookSpec) -> Result<Duration, Located> {
    match spec.timeout.as_deref().map(|t| humantime::parse_duration(t.trim())) {
        None => Ok(DEFAULT_HOOK_TIMEOUT),
        Some(Ok(d)) if !d.is_zero() => Ok(d),
        Some(_) => Err(def.err(
            &format!("{at}.timeout"),
            format!(
                "{:?} is not a duration above zero (use e.g. \"30s\" or \"5m\")",
                spec.timeout.as_deref().unwrap_or_default()
            ),
        )),
    }
}

/// Every command and hook of the enabled plugins (`on[i]` for `defs[i]`),
/// checked without running or copying anything: for `validate`.
pub fn check_programs(defs: &[PluginDef], on: &[bool], builtins: &[String]) -> Vec<Located> {
    let mut errors = check_commands(defs, builtins);
    for (def, _) in defs.iter().zip(on).filter(|(_, on)| **on) {
        for (i, c) in def.manifest.spec.commands.iter().enumerate() {
            errors.extend(check(def, &format!("spec.commands[{i}].run"), &c.run).err());
        }
        for (key, list) in def.manifest.spec.hooks.all() {
            for (i, spec) in list.iter().enumerate() {
                let at = format!("spec.hooks.{key}[{i}]");
                errors.extend(hook_timeout(def, &at, spec).err());
                errors.extend(check(def, &format!("{at}.run"), &spec.run).err());
            }
        }
    }
    errors
}

fn invalid(l: Located) -> ExecError {
    ExecError::Invalid(Diagnostics::sorted(vec![l]))
}

/// What `kube-aws NAME` runs.
#[derive(Debug)]
pub enum Target {
    /// A command of an enabled plugin.
    Plugin { plugin: String, program: Program },
    /// `kube-aws-NAME` found on `PATH`.
    OnPath(PathBuf),
}

/// Finds what an unknown subcommand `name` runs: an enabled plugin's command,
/// else `kube-aws-NAME` on `PATH`. `builtins` are the built-in command names
/// (a plugin declaring one is refused). cluster.yaml is read only when some
/// plugin declares `name`.
pub fn find_command(dir: &Path, name: &OsStr, builtins: &[String]) -> Result<Target, ExecError> {
    let defs = discover(dir)?;
    let errors = check_commands(&defs, builtins);
    if !errors.is_empty() {
        return Err(ExecError::Invalid(Diagnostics::sorted(errors)));
    }
    let text = name.to_str();
    let declaring: Vec<(usize, usize)> = defs
        .iter()
        .enumerate()
        .flat_map(|(d, def)| {
            def.manifest
                .spec
                .commands
                .iter()
                .enumerate()
                .filter(|(_, c)| Some(c.name.as_str()) == text)
                .map(move |(c, _)| (d, c))
        })
        .collect();
    let mut hint = String::new();
    if let Some(&(d, c)) = declaring.first() {
        let def = &defs[d];
        if enabled(dir, std::slice::from_ref(def))?[0] {
            let spec = &def.manifest.spec.commands[c];
            let program = program(def, &format!("spec.commands[{c}].run"), &spec.run)?;
            return Ok(Target::Plugin {
                plugin: def.name().to_string(),
                program,
            });
        }
        hint = format!(
            " (plugin {:?} declares it: enable the plugin with `plugins.{}.enabled: true` in cluster.yaml)",
            def.name(),
            def.name()
        );
    }
    let mut file = OsString::from("kube-aws-");
    file.push(name);
    if let Some(path) = on_path(&file) {
        return Ok(Target::OnPath(path));
    }
    Err(ExecError::UnknownCommand {
        name: name.to_string_lossy().into_owned(),
        hint,
    })
}

/// The first executable regular file `file` in a `PATH` directory.
fn on_path(file: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(file))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// The `kube-aws-*` programs on `PATH`, by command name (first one wins), for `--help`.
pub fn path_commands() -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let Some(path) = std::env::var_os("PATH") else {
        return out;
    };
    for d in std::env::split_paths(&path) {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(cmd) = name.to_str().and_then(|n| n.strip_prefix("kube-aws-")) else {
                continue;
            };
            if cmd.is_empty() || out.contains_key(cmd) {
                continue;
            }
            if std::fs::metadata(e.path()).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) {
                out.insert(cmd.to_string(), e.path());
            }
        }
    }
    out
}

/// Runs `target` with `args` exactly as given, from the current directory,
/// with `KUBE_AWS_DIR` (and `KUBE_AWS_PLUGIN_DIR` for a plugin's command) set;
/// returns the exit status to pass on (128 + the signal when killed by one, as shells do).
pub fn run_command(target: &Target, dir: &Path, args: &[OsString]) -> Result<u8, ExecError> {
    let (path, plugin_dir) = match target {
        Target::Plugin { program, .. } => (&program.path, Some(&program.plugin_dir)),
        Target::OnPath(p) => (p, None),
    };
    let mut cmd = Command::new(path);
    cmd.args(args).env(
        "KUBE_AWS_DIR",
        std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
    );
    match plugin_dir {
        Some(p) => cmd.env("KUBE_AWS_PLUGIN_DIR", p),
        None => cmd.env_remove("KUBE_AWS_PLUGIN_DIR"),
    };
    // Ctrl-C reaches the command (same process group); kube-aws waits for it
    // and passes its status on, as cargo does.
    let _guard = SignalGuard::new(&[libc::SIGINT]);
    let status = cmd.status().map_err(|source| ExecError::Spawn {
        path: path.clone(),
        source,
    })?;
    Ok(exit_status(status))
}

/// Set by SIGINT or SIGTERM while a [`SignalGuard`] is installed.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Notes `signals` instead of dying of them until dropped, then restores the
/// previous dispositions. A handler (unlike SIG_IGN) is reset to the default
/// in a program we start, so the program still gets the signal's usual effect.
struct SignalGuard {
    old: Vec<(libc::c_int, libc::sighandler_t)>,
}

impl SignalGuard {
    fn new(signals: &[libc::c_int]) -> SignalGuard {
        INTERRUPTED.store(false, Ordering::SeqCst);
        let handler = note_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let old = signals
            .iter()
            .map(|&s| (s, unsafe { libc::signal(s, handler) }))
            .collect();
        SignalGuard { old }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for &(s, h) in &self.old {
            // SAFETY: restores the disposition saved in `new`.
            unsafe { libc::signal(s, h) };
        }
    }
}

fn exit_status(s: ExitStatus) -> u8 {
    match (s.code(), s.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_follows_shells() {
        assert_eq!(exit_status(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_status(ExitStatus::from_raw(libc::SIGKILL)), 128 + 9);
    }
}
