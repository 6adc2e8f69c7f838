use super::{print_json, GlobalOptions, OutputFormat};
use crate::config::load_cluster;
use crate::plugin::resolve_plugins;

/// Arguments of `kube-aws validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {}

pub fn run(global: &GlobalOptions, _args: ValidateArgs) -> anyhow::Result<()> {
    let cluster = load_cluster(&global.dir)?;
    let plugins = resolve_plugins(&cluster)?;
    let cfg = &cluster.config;
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
