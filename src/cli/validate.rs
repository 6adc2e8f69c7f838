use super::{print_json, GlobalOptions, OutputFormat};
use crate::chart;
use crate::config::load_cluster;
use crate::plugin::resolve_plugins;

/// Arguments of `kube-aws validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {}

pub fn run(global: &GlobalOptions, _args: ValidateArgs) -> anyhow::Result<()> {
    let cluster = load_cluster(&global.dir)?;
    let plugins = resolve_plugins(&cluster)?;
    let cfg = &cluster.config;
    // Charts: the lock must cover every release, and each release's values
    // must pass its chart's schema and kubeVersion (charts read from the cache).
    if !cluster.releases.is_empty() {
        chart::prepare_releases(&chart::PrepareOptions {
            dir: global.dir.clone(),
            releases: cluster.releases.clone(),
            kubernetes_version: cfg.kubernetes_version.clone(),
            plugin_values: Default::default(),
            cache_dir: chart::default_cache_dir(),
        })?;
    }
    match global.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "valid": true,
            "clusterName": cfg.cluster_name,
            "controllers": cfg.controller.count,
            "nodePools": cluster.pool_names(),
            "releases": cluster.releases,
            "plugins": plugins.plugins.iter().map(|p| &p.name).collect::<Vec<_>>(),
            "pluginReleases": plugins.releases.iter().map(|r| &r.release).collect::<Vec<_>>(),
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
            if !plugins.plugins.is_empty() {
                let names: Vec<&str> = plugins.plugins.iter().map(|p| p.name.as_str()).collect();
                println!(
                    "plugins: {} ({} release(s) from plugins)",
                    names.join(", "),
                    plugins.releases.len()
                );
            }
            Ok(())
        }
    }
}
