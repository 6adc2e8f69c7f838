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
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::discover::{safe_relative, PluginRoot};
use super::model::HookSpec;
use super::{activation, discover, PluginDef, PluginError};
use crate::config::{load_cluster, Cluster, ConfigError, CLUSTER_FILE};
use crate::located::{Diagnostics, Located};

/// A hook's timeout when plugin.yaml gives none.
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

/// A kube-aws step hooks attach to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Render,
    Up,
    Update,
    Destroy,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Render => "render",
            Step::Up => "up",
            Step::Update => "update",
            Step::Destroy => "destroy",
        }
    }
}

/// Before or after the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Pre,
    Post,
}

/// One run of a step's hooks.
pub struct HookRun<'a> {
    pub cluster: &'a Cluster,
    pub step: Step,
    pub when: When,
    /// The rendered directory (`KUBE_AWS_RENDERED`).
    pub rendered: &'a Path,
    /// The stack outputs, after `up` and `update` (`KUBE_AWS_OUTPUTS`).
    pub outputs: Option<&'a serde_json::Value>,
    /// Print each hook before it runs.
    pub verbose: bool,
}

impl HookRun<'_> {
    /// The plugin.yaml key of this run's hooks: `preRender`, `postUp`, ….
    pub fn key(&self) -> String {
        hook_key(self.step, self.when)
    }
}

/// The plugin.yaml key of a step's hooks: `preRender`, `postUp`, ….
pub fn hook_key(step: Step, when: When) -> String {
    let step = step.as_str();
    let when = match when {
        When::Pre => "pre",
        When::Post => "post",
    };
    format!("{when}{}{}", step[..1].to_uppercase(), &step[1..])
}

/// Runs the hooks of `run` for every enabled plugin, in plugin order, from the
/// work tree's directory. Every hook's file is checked before the first one
/// runs. Returns how many ran.
pub fn run_hooks(run: &HookRun<'_>) -> Result<usize, ExecError> {
    let cluster = run.cluster;
    let defs = discover(&cluster.dir)?;
    let key = run.key();
    struct Planned<'d> {
        def: &'d PluginDef,
        label: String,
        spec: &'d HookSpec,
        program: Program,
        timeout: Duration,
    }
    let mut planned = Vec::new();
    let mut errors = Vec::new();
    for def in defs.iter().filter(|d| activation(cluster, d).any()) {
        let hooks = def.manifest.spec.hooks.all();
        let Some((_, list)) = hooks.iter().find(|(k, _)| *k == key) else {
            continue;
        };
        for (i, spec) in list.iter().enumerate() {
            let at = format!("spec.hooks.{key}[{i}]");
            let timeout = hook_timeout(def, &at, spec).map_err(|e| errors.push(e)).ok();
            match program(def, &format!("{at}.run"), &spec.run) {
                Ok(program) => planned.extend(timeout.map(|timeout| Planned {
                    def,
                    label: format!("{key}[{i}]"),
                    spec,
                    program,
                    timeout,
                })),
                Err(ExecError::Invalid(d)) => errors.extend(d.0),
                Err(e) => return Err(e),
            }
        }
    }
    if !errors.is_empty() {
        return Err(ExecError::Invalid(Diagnostics::sorted(errors)));
    }
    if planned.is_empty() {
        return Ok(0);
    }
    let files = tempfile::Builder::new()
        .prefix("kube-aws-hooks-")
        .tempdir()
        .map_err(|source| ExecError::Prepare {
            plugin: planned[0].def.name().to_string(),
            source,
        })?;
    let dir = std::path::absolute(&cluster.dir).unwrap_or_else(|_| cluster.dir.clone());
    let rendered = std::path::absolute(run.rendered).unwrap_or_else(|_| run.rendered.to_path_buf());
    let outputs = match run.outputs {
        Some(v) => {
            let path = files.path().join("outputs.json");
            write_private(&path, v).map_err(|source| ExecError::Prepare {
                plugin: planned[0].def.name().to_string(),
                source,
            })?;
            Some(path)
        }
        None => None,
    };
    for (n, p) in planned.iter().enumerate() {
        let plugin = p.def.name();
        let fail = |why: String| ExecError::Hook {
            plugin: plugin.to_string(),
            hook: p.label.clone(),
            run: p.spec.run.clone(),
            why,
        };
        let params =
            super::resolve::public_params(cluster, p.def).map_err(|e| ExecError::Invalid(Diagnostics::sorted(e)))?;
        let params_file = files.path().join(format!("{n}-{plugin}.params.json"));
        write_private(&params_file, &serde_json::Value::Object(params.into_iter().collect())).map_err(|source| {
            ExecError::Prepare {
                plugin: plugin.to_string(),
                source,
            }
        })?;
        let before = (run.step == Step::Render && run.when == When::Post).then(|| tree_digest(&rendered));
        let mut cmd = Command::new(&p.program.path);
        cmd.args(&p.spec.args)
            .current_dir(&dir)
            .env("KUBE_AWS_DIR", &dir)
            .env("KUBE_AWS_CLUSTER", &cluster.config.cluster_name)
            .env("KUBE_AWS_REGION", &cluster.config.region)
            .env("KUBE_AWS_STEP", run.step.as_str())
            .env("KUBE_AWS_HOOK", &key)
            .env("KUBE_AWS_RENDERED", &rendered)
            .env("KUBE_AWS_PLUGIN", plugin)
            .env("KUBE_AWS_PLUGIN_DIR", &p.program.plugin_dir)
            .env("KUBE_AWS_PARAMS", &params_file);
        match &outputs {
            Some(o) => cmd.env("KUBE_AWS_OUTPUTS", o),
            None => cmd.env_remove("KUBE_AWS_OUTPUTS"),
        };
        if run.verbose {
            let args: Vec<String> = p.spec.args.iter().map(|a| format!("{a:?}")).collect();
            eprintln!(
                "[{plugin}] running hook {} ({}{}{})",
                p.label,
                p.spec.run,
                if args.is_empty() { "" } else { " " },
                args.join(" ")
            );
        }
        let outcome = run_bounded(&mut cmd, plugin, p.timeout).map_err(|source| ExecError::Spawn {
            path: p.program.path.clone(),
            source,
        })?;
        match outcome {
            Outcome::TimedOut => {
                return Err(fail(format!(
                    "timed out after {}; its process group was killed",
                    humantime::format_duration(p.timeout)
                )))
            }
            Outcome::Interrupted => {
                return Err(fail(format!(
                    "was interrupted; its process group was killed and {} stopped",
                    run.step.as_str()
                )))
            }
            Outcome::Exited(s) if !s.success() => {
                let what = match (s.code(), s.signal()) {
                    (Some(c), _) => format!("exited with code {c}"),
                    (None, Some(sig)) => format!("was killed by signal {sig}"),
                    _ => "failed".to_string(),
                };
                let after = match run.when {
                    When::Pre => format!("; {} aborted", run.step.as_str()),
                    When::Post => format!("; {} itself completed", run.step.as_str()),
                };
                return Err(fail(format!("{what}{after}")));
            }
            Outcome::Exited(_) => {}
        }
        if let Some(before) = before {
            let after = tree_digest(&rendered);
            let own = Path::new("plugins").join(plugin);
            let mut touched: Vec<String> = before
                .iter()
                .filter(|(k, v)| after.get(*k) != Some(v))
                .chain(after.iter().filter(|(k, _)| !before.contains_key(*k)))
                .map(|(k, _)| k)
                .filter(|k| !k.starts_with(&own))
                .map(|k| k.display().to_string())
                .collect();
            touched.sort();
            touched.dedup();
            if !touched.is_empty() {
                return Err(fail(format!(
                    "changed {} in the rendered directory; a post-render hook may only add files under {}/ (write there instead)",
                    touched.join(", "),
                    own.display()
                )));
            }
        }
    }
    Ok(planned.len())
}

/// Writes `v` as JSON, readable only by the user.
fn write_private(path: &Path, v: &serde_json::Value) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(serde_json::to_string_pretty(v).unwrap_or_default().as_bytes())
}

/// Spawns `cmd` in a process group of its own, streams its output to stderr
/// with every line prefixed `[plugin] `, and waits at most `timeout`. Returns
/// how it ended. The group is killed either way once the hook is done.
fn run_bounded(cmd: &mut Command, plugin: &str, timeout: Duration) -> std::io::Result<Outcome> {
    // The hook has a process group of its own, so Ctrl-C at the terminal does
    // not reach it: kube-aws notes the signal and kills the group itself.
    let _guard = SignalGuard::new(&[libc::SIGINT, libc::SIGTERM]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let pgid = child.id() as libc::pid_t;
    let prefix = format!("[{plugin}] ");
    let pumps: Vec<_> = [
        child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
        child.stderr.take().map(|e| Box::new(e) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|from| {
        let prefix = prefix.clone();
        std::thread::spawn(move || pump(from, &prefix))
    })
    .collect();
    let deadline = Instant::now() + timeout;
    let outcome = loop {
        if let Some(s) = child.try_wait()? {
            break Outcome::Exited(s);
        }
        let interrupted = INTERRUPTED.load(Ordering::SeqCst);
        if interrupted || Instant::now() >= deadline {
            // SAFETY: killpg has no memory effects; pgid is our child's own group.
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
            child.wait()?;
            break if interrupted {
                Outcome::Interrupted
            } else {
                Outcome::TimedOut
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Children the hook left behind would hold its pipes open: none outlives it.
    // SAFETY: as above.
    unsafe { libc::killpg(pgid, libc::SIGKILL) };
    for p in pumps {
        let _ = p.join();
    }
    Ok(outcome)
}

/// How a hook ended.
enum Outcome {
    Exited(ExitStatus),
    TimedOut,
    Interrupted,
}

/// Copies `from` to stderr chunk by chunk (never a whole line in memory),
/// starting every line with `prefix`.
fn pump(mut from: Box<dyn Read + Send>, prefix: &str) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut at_start = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut out = Vec::with_capacity(n + prefix.len() * 4);
        for &b in &buf[..n] {
            if at_start {
                out.extend_from_slice(prefix.as_bytes());
                at_start = false;
            }
            out.push(b);
            if b == b'\n' {
                at_start = true;
            }
        }
        if std::io::stderr().lock().write_all(&out).is_err() {
            break;
        }
    }
}

/// Every file under `root` (relative path → content digest; a symlink by its target).
fn tree_digest(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_symlink() {
                let target = std::fs::read_link(&path).unwrap_or_default();
                out.insert(rel, target.as_os_str().as_encoded_bytes().to_vec());
            } else {
                let digest = std::fs::read(&path)
                    .map(|b| Sha256::digest(&b).to_vec())
                    .unwrap_or_default();
                out.insert(rel, digest);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_keys_are_the_plugin_yaml_keys() {
        let keys: Vec<&str> = crate::plugin::model::LifecycleHooks::default()
            .all()
            .map(|(k, _)| k)
            .to_vec();
        for step in [Step::Render, Step::Up, Step::Update, Step::Destroy] {
            for when in [When::Pre, When::Post] {
                assert!(
                    keys.contains(&hook_key(step, when).as_str()),
                    "{}",
                    hook_key(step, when)
                );
            }
        }
    }

    #[test]
    fn exit_status_follows_shells() {
        assert_eq!(exit_status(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_status(ExitStatus::from_raw(libc::SIGKILL)), 128 + 9);
    }
}
