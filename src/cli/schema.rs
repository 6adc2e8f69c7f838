//! `kube-aws schema`: prints the JSON Schema or the Markdown reference of
//! cluster.yaml or plugin.yaml.

use super::{print_json, GlobalOptions};
use crate::config::{cluster_reference, ClusterConfig};

/// Arguments of `kube-aws schema`.
#[derive(Debug, clap::Args)]
pub struct SchemaArgs {
    /// Which file's schema to print
    #[arg(value_enum)]
    pub kind: SchemaKind,
    /// JSON Schema, or a Markdown reference page
    #[arg(long, value_enum, default_value_t = SchemaFormat::Json)]
    pub format: SchemaFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaFormat {
    Json,
    Markdown,
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
        SchemaKind::Cluster if args.format == SchemaFormat::Markdown => {
            print!("{}", cluster_reference());
            Ok(())
        }
        SchemaKind::Cluster => print_json(&schemars::schema_for!(ClusterConfig)),
        SchemaKind::Plugin if args.format == SchemaFormat::Markdown => {
            print!("{}", crate::plugin::plugin_reference());
            Ok(())
        }
        SchemaKind::Plugin => print_json(&schemars::schema_for!(crate::plugin::PluginManifest)),
    }
}
