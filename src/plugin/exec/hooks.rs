//! Plugin lifecycle hooks: `preRender`, `postUp`, … of every enabled
//! plugin, checked before the first runs, each in a process group of its own
//! with its output prefixed and its time bounded; a post-render hook may only
//! add files under its own directory of the rendered tree.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::{hook_timeout, program, ExecError, Program, SignalGuard, INTERRUPTED};
use crate::config::Cluster;
use crate::located::Diagnostics;
use crate::plugin::model::HookSpec;
use crate::plugin::{activation, discover, PluginDef};

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
        let params = crate::plugin::resolve::public_params(cluster, p.def)
            .map_err(|e| ExecError::Invalid(Diagnostics::sorted(e)))?;
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
}
