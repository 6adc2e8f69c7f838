use super::{print_json, GlobalOptions, OutputFormat};
use crate::config::load_cluster;

/// Arguments of `kube-aws validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {}

pub fn run(global: &GlobalOptions, _args: ValidateArgs) -> anyhow::Result<()> {
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    match global.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "valid": true,
            "clusterName": cfg.cluster_name,
            "controllers": cfg.controller.count,
            "nodePools": cluster.pool_names(),
            "releases": cluster.releases,
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
            Ok(())
        }
    }
}
