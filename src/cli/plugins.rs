//! `kube-aws plugins list|show`: the plugins a work tree sees, and what one
//! of them declares.

use super::{print_json, GlobalOptions, OutputFormat};
use std::path::Path;

use crate::plugin::exec::{check_commands, path_commands};
use crate::plugin::{discover, PluginDef};

/// Arguments of `kube-aws plugins`.
#[derive(Debug, clap::Args)]
pub struct PluginsArgs {
    #[command(subcommand)]
    pub command: PluginsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum PluginsCommand {
    /// List built-in and work-tree plugins
    List,
    /// Show one plugin's parameters, hooks and charts
    Show {
        /// The plugin's name
        name: String,
    },
}

/// Is each plugin enabled? Without a cluster.yaml, only `enabledByDefault` counts.
fn enabled(global: &GlobalOptions, defs: &[PluginDef]) -> anyhow::Result<Vec<bool>> {
    Ok(crate::plugin::exec::enabled(&global.dir, defs)?)
}

/// The `--help` section listing plugin commands and `kube-aws-*` programs on
/// PATH; None when there are none. Never fails: a broken work tree shows less.
pub(super) fn commands_help(dir: &Path, builtins: &[String]) -> Option<String> {
    let rows = external_commands(dir, builtins);
    if rows.is_empty() {
        return None;
    }
    let w = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut out = String::from("Plugin commands:\n");
    for (name, what) in rows {
        out.push_str(&format!("  {name:<w$}  {what}\n"));
    }
    Some(out)
}

/// The plugin commands of work tree `dir` and the `kube-aws-*` programs on
/// PATH, by name, with what each is; never fails (a broken tree shows less).
pub(super) fn external_commands(dir: &Path, builtins: &[String]) -> Vec<(String, String)> {
    let defs = discover(dir).unwrap_or_default();
    let on = crate::plugin::exec::enabled(dir, &defs)
        .unwrap_or_else(|_| defs.iter().map(|d| d.manifest.enabled_by_default).collect());
    let mut rows: Vec<(String, String)> = Vec::new();
    for (d, on) in defs.iter().zip(&on) {
        for c in &d.manifest.spec.commands {
            if builtins.contains(&c.name) {
                continue;
            }
            let state = if *on { "" } else { ", not enabled" };
            rows.push((
                c.name.clone(),
                format!("{} (plugin {}{state})", c.description, d.name()),
            ));
        }
    }
    for (name, path) in path_commands() {
        if !builtins.contains(&name) && !rows.iter().any(|(n, _)| *n == name) {
            rows.push((name, format!("{} on PATH", path.display())));
        }
    }
    rows
}

pub fn run(global: &GlobalOptions, args: PluginsArgs) -> anyhow::Result<()> {
    let defs = discover(&global.dir)?;
    match args.command {
        PluginsCommand::List => list(global, &defs),
        PluginsCommand::Show { name } => show(global, &defs, &name),
    }
}

fn list(global: &GlobalOptions, defs: &[PluginDef]) -> anyhow::Result<()> {
    let on = enabled(global, defs)?;
    let refused = check_commands(defs, &super::builtin_names());
    if !refused.is_empty() {
        return Err(crate::plugin::exec::ExecError::Invalid(crate::located::Diagnostics::sorted(refused)).into());
    }
    let rows: Vec<serde_json::Value> = defs
        .iter()
        .zip(&on)
        .map(|(d, on)| {
            serde_json::json!({
                "name": d.name(),
                "version": d.manifest.metadata.version,
                "source": d.source,
                "enabled": on,
                "description": d.manifest.metadata.description,
                "commands": d.manifest.spec.commands.iter().map(|c| serde_json::json!({
                    "name": c.name,
                    "description": c.description,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    if global.output == OutputFormat::Json {
        return print_json(&rows);
    }
    let w = defs.iter().map(|d| d.name().len()).max().unwrap_or(4).max(4);
    let vw = defs
        .iter()
        .map(|d| d.manifest.metadata.version.len())
        .max()
        .unwrap_or(7)
        .max(7);
    println!(
        "{:<w$}  {:<vw$}  {:<9}  {:<7}  DESCRIPTION",
        "NAME", "VERSION", "SOURCE", "ENABLED"
    );
    for (d, on) in defs.iter().zip(&on) {
        let source = match d.source {
            crate::plugin::PluginSource::BuiltIn => "built-in",
            crate::plugin::PluginSource::WorkTree => "work-tree",
        };
        println!(
            "{:<w$}  {:<vw$}  {:<9}  {:<7}  {}",
            d.name(),
            d.manifest.metadata.version,
            source,
            if *on { "yes" } else { "no" },
            d.manifest.metadata.description
        );
    }
    let commands: Vec<(&PluginDef, &crate::plugin::model::CommandSpec)> = defs
        .iter()
        .flat_map(|d| d.manifest.spec.commands.iter().map(move |c| (d, c)))
        .collect();
    if !commands.is_empty() {
        let cw = commands.iter().map(|(_, c)| c.name.len()).max().unwrap_or(7).max(7);
        println!("\n{:<cw$}  {:<w$}  DESCRIPTION", "COMMAND", "PLUGIN");
        for (d, c) in commands {
            println!("{:<cw$}  {:<w$}  {}", c.name, d.name(), c.description);
        }
    }
    Ok(())
}

/// The hooks a plugin declares, by plugin.yaml key, for `show`.
fn hooks(d: &PluginDef) -> Vec<String> {
    let s = &d.manifest.spec;
    let k = &s.kubernetes;
    let mut out = Vec::new();
    let mut flags = |what: &str, f: &crate::plugin::model::FlagsSpec| {
        for name in f.flags.keys() {
            out.push(format!("{what} flag --{name}"));
        }
    };
    flags("apiserver", &k.api_server);
    flags("controller-manager", &k.controller_manager);
    flags("scheduler", &k.scheduler);
    flags("controller kubelet", &k.kubelet.controller);
    flags("worker kubelet", &k.kubelet.worker);
    for m in &k.manifests {
        out.push(format!("manifest {m}"));
    }
    for (role, n) in [("controller", &s.nodes.controller), ("worker", &s.nodes.worker)] {
        if !n.iam.statements.is_empty() {
            out.push(format!("{role} IAM: {} statement(s)", n.iam.statements.len()));
        }
        for f in &n.files {
            out.push(format!("{role} file {}", f.path));
        }
        for u in &n.systemd_units {
            out.push(format!("{role} systemd unit {}", u.name));
        }
        for (k, v) in &n.node_labels {
            out.push(format!("{role} node label {k}={v}"));
        }
        for t in &n.taints {
            out.push(format!("{role} taint {}={}:{:?}", t.key, t.value, t.effect));
        }
        for (k, v) in &n.asg_tags {
            out.push(format!("{role} ASG tag {k}={v}"));
        }
    }
    if let Some(c) = &s.cloudformation {
        for (what, f) in [("resources", &c.resources), ("outputs", &c.outputs)] {
            if let Some(f) = f {
                out.push(format!("CloudFormation {what} {f} (stack {})", c.stack));
            }
        }
    }
    for (key, list) in s.hooks.all() {
        for h in list {
            out.push(format!("{key} hook {} (runs on your machine)", h.run));
        }
    }
    for c in &s.commands {
        out.push(format!(
            "command `kube-aws {}` runs {} (on your machine)",
            c.name, c.run
        ));
    }
    out
}

fn show(global: &GlobalOptions, defs: &[PluginDef], name: &str) -> anyhow::Result<()> {
    let Some(d) = defs.iter().find(|d| d.name() == name) else {
        let names: Vec<&str> = defs.iter().map(|d| d.name()).collect();
        let hint = match crate::located::did_you_mean(name, &names) {
            none if none.is_empty() => " (run `kube-aws plugins list`)".to_string(),
            hint => hint,
        };
        anyhow::bail!("there is no plugin {name:?}{hint}");
    };
    let m = &d.manifest;
    if global.output == OutputFormat::Json {
        return print_json(&serde_json::json!({
            "name": m.metadata.name,
            "version": m.metadata.version,
            "description": m.metadata.description,
            "source": d.source,
            "file": d.file,
            "enabledByDefault": m.enabled_by_default,
            "parameters": m.spec.parameters,
            "hooks": hooks(d),
            "charts": m.spec.charts,
            "serviceAccounts": m.spec.service_accounts,
        }));
    }
    println!("{} {} ({})", m.metadata.name, m.metadata.version, d.file.display());
    if !m.metadata.description.is_empty() {
        println!("{}", m.metadata.description);
    }
    if m.enabled_by_default {
        println!("enabled by default");
    }
    println!("\nparameters:");
    if m.spec.parameters.is_empty() {
        println!("  (none)");
    }
    for (p, s) in &m.spec.parameters {
        let mut line = format!("  {p}: {}", s.kind.as_str());
        if s.required {
            line.push_str(", required");
        }
        if let Some(def) = &s.default {
            line.push_str(&format!(", default {def}"));
        }
        if s.secret {
            line.push_str(", secret");
        }
        if let Some(a) = &s.allowed {
            let list: Vec<String> = a.iter().map(|v| v.to_string()).collect();
            line.push_str(&format!(", one of {}", list.join("|")));
        }
        if let Some(pat) = &s.pattern {
            line.push_str(&format!(", pattern {pat:?}"));
        }
        if let Some(min) = s.minimum {
            line.push_str(&format!(", min {min}"));
        }
        if let Some(max) = s.maximum {
            line.push_str(&format!(", max {max}"));
        }
        if !s.description.is_empty() {
            line.push_str(&format!(": {}", s.description));
        }
        println!("{line}");
    }
    println!("\ncharts:");
    if m.spec.charts.is_empty() {
        println!("  (none)");
    }
    for c in &m.spec.charts {
        let from = c
            .repo
            .as_deref()
            .or(c.oci.as_deref())
            .or(c.path.as_deref())
            .unwrap_or("?");
        println!(
            "  {} ({} {} from {from})",
            c.name,
            c.chart.as_deref().unwrap_or(&c.name),
            c.version.as_deref().unwrap_or("newest")
        );
    }
    println!("\nhooks:");
    let h = hooks(d);
    if h.is_empty() {
        println!("  (none)");
    }
    for line in h {
        println!("  {line}");
    }
    println!("\nIAM roles:");
    let roles = iam_roles(d);
    if roles.is_empty() {
        println!("  (none)");
    }
    for line in roles {
        println!("{line}");
    }
    Ok(())
}

/// Each role the plugin adds to, with its statements one per line (as written,
/// templates unrendered): the node roles' statements and each service
/// account's own role.
fn iam_roles(d: &PluginDef) -> Vec<String> {
    let s = &d.manifest.spec;
    let mut out = Vec::new();
    let mut role = |title: String, statements: &[serde_json::Value]| {
        out.push(format!("  {title}: {} statement(s)", statements.len()));
        for st in statements {
            out.push(format!("    {}", serde_json::to_string(st).unwrap_or_default()));
        }
    };
    for (r, n) in [("controller", &s.nodes.controller), ("worker", &s.nodes.worker)] {
        if !n.iam.statements.is_empty() {
            role(format!("{r} node role"), &n.iam.statements);
        }
    }
    for sa in &s.service_accounts {
        role(
            format!(
                "service account {}/{} (role <cluster>-{}-{})",
                sa.namespace, sa.name, sa.namespace, sa.name
            ),
            &sa.iam.statements,
        );
    }
    out
}
