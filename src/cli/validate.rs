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
            for s in stubs.iter().chain(templates.iter()) {
                println!("{}: {} bytes (limit {})", s.path, s.size, s.limit);
            }
            Ok(())
        }
    }
}
