use super::{print_json, GlobalOptions};
use crate::config::ClusterConfig;

/// Arguments of `kube-aws schema`.
#[derive(Debug, clap::Args)]
pub struct SchemaArgs {
    /// Which file's schema to print
    #[arg(value_enum)]
    pub kind: SchemaKind,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaKind {
    /// cluster.yaml
    Cluster,
    /// plugin.yaml
    Plugin,
}

pub fn run(_global: &GlobalOptions, args: SchemaArgs) -> anyhow::Result<()> {
    match args.kind {
        SchemaKind::Cluster => print_json(&schemars::schema_for!(ClusterConfig)),
        SchemaKind::Plugin => print_json(&schemars::schema_for!(crate::plugin::PluginManifest)),
    }
}
