//! `kube-aws validate`: every check `render` makes (and the plugins'
//! programs), writing nothing; prints a summary or JSON.

use super::{print_json, GlobalOptions, OutputFormat};
use crate::pipeline::{prepare, PrepareOptions};
use crate::render;

/// Arguments of `kube-aws validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Chart cache directory (default: $XDG_CACHE_HOME/kube-aws/charts)
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<std::path::PathBuf>,
    /// Also check kubernetesVersion against the version the live stack
    /// records (reads the stack: no skipped minor, no downgrade, a known patch)
    #[arg(long)]
    pub stack: bool,
    #[command(flatten)]
    pub aws: super::deploy_args::AwsArgs,
}

pub fn run(global: &GlobalOptions, args: ValidateArgs) -> anyhow::Result<()> {
    let p = prepare(&PrepareOptions {
        dir: global.dir.clone(),
        cache_dir: args.cache_dir.unwrap_or_else(crate::chart::default_cache_dir),
        require_charts: false,
    })?;
    // Everything render checks, without writing anything.
    let rendered = render::render(&p.input)?;
    // Plugin commands and hooks: checked, never run.
    let defs = crate::plugin::discover(&global.dir)?;
    let on = crate::plugin::exec::enabled(&global.dir, &defs)?;
    let refused = crate::plugin::exec::check_programs(&defs, &on, &super::builtin_names());
    if !refused.is_empty() {
        return Err(crate::plugin::exec::ExecError::Invalid(crate::located::Diagnostics::sorted(refused)).into());
    }
    let version = if args.stack {
        Some(stack_version(cfg_of(&p), &args.aws)?)
    } else {
        None
    };
    let warnings = render::cfn::render_warnings(&p.input);
    let stubs = render::stub_sizes(&rendered);
    let templates = render::template_sizes(&rendered);
    let cluster = &p.releases.cluster;
    let cfg = &cluster.config;
    match global.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "valid": true,
            "clusterName": cfg.cluster_name,
            "controllers": cfg.controller.count,
            "nodePools": cluster.pool_names(),
            "releases": cluster.releases,
            "plugins": p.releases.plugins.plugins.iter().map(|p| &p.name).collect::<Vec<_>>(),
            "pluginReleases": p.releases.plugins.releases.iter().map(|r| &r.release).collect::<Vec<_>>(),
            "notFetched": p.not_fetched,
            "stubs": stubs,
            "templates": templates,
            "stackVersion": version,
            "warnings": warnings,
        })),
        OutputFormat::Text => {
            println!(
                "{}: valid (cluster {:?}: {} controller(s), {} node pool(s), {} chart(s))",
                cluster.file.display(),
                cfg.cluster_name,
                cfg.controller.count,
                cfg.worker.node_pools.len(),
                cluster.releases.len(),
            );
            let plugins = &p.releases.plugins;
            if !plugins.plugins.is_empty() {
                let names: Vec<&str> = plugins.plugins.iter().map(|p| p.name.as_str()).collect();
                println!(
                    "plugins: {} ({} release(s) from plugins)",
                    names.join(", "),
                    plugins.releases.len()
                );
            }
            println!(
                "charts: {} locked, {} checked against their chart",
                p.prepared.len(),
                p.prepared.len() - p.not_fetched.len()
            );
            if !p.not_fetched.is_empty() {
                println!(
                    "not checked (chart not fetched yet; run `kube-aws charts fetch`): {}",
                    p.not_fetched.join(", ")
                );
            }
            if let Some(v) = &version {
                println!("{v}");
            }
            for s in stubs.iter().chain(templates.iter()) {
                println!("{}: {} bytes (limit {})", s.path, s.size, s.limit);
            }
            for w in &warnings {
                eprintln!("warning: {w}");
            }
            Ok(())
        }
    }
}

fn cfg_of(p: &crate::pipeline::Prepared) -> &crate::config::ClusterConfig {
    &p.releases.cluster.config
}

/// `--stack`: the live stack's version record against cluster.yaml, in words.
fn stack_version(cfg: &crate::config::ClusterConfig, aws: &super::deploy_args::AwsArgs) -> anyhow::Result<String> {
    use crate::aws::lifecycle::update_order::{check_against_stack, StackVersion};
    let found = super::deploy_args::runtime()?.block_on(async {
        let clients = crate::aws::connect(&aws.options(), &cfg.region).await?;
        check_against_stack(&clients, cfg).await
    })?;
    Ok(match found {
        StackVersion::NoStack => format!("stack {:?}: none yet (nothing to upgrade)", cfg.cluster_name),
        StackVersion::NotRecorded => format!(
            "stack {:?} records no Kubernetes version (rendered by an older kube-aws): not checked",
            cfg.cluster_name
        ),
        StackVersion::Move(m) => match m.describe() {
            Some(line) => format!("stack {:?}: {line} is allowed", cfg.cluster_name),
            None => format!("stack {:?}: runs Kubernetes {} (unchanged)", cfg.cluster_name, m.from),
        },
    })
}
