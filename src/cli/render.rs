//! `kube-aws render`: load the work tree, render every artifact, write them to
//! `<dir>/rendered/` (or `--output-dir`) atomically, and print a summary.

use std::path::PathBuf;

use super::{print_json, GlobalOptions, OutputFormat};
use crate::config::load_cluster;
use crate::render::{self, AddonInput, RenderInput};

/// Arguments of `kube-aws render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// Where to write the artifacts (default: <dir>/rendered). The global -o/--output is the format.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
}

/// Builds the render input from cluster.yaml alone: no plugins, and charts not
/// resolved yet (version as written, no digest: the plan marks them not locked).
pub fn input_from_cluster(cluster: &crate::config::Cluster) -> RenderInput {
    let addons = cluster
        .releases
        .iter()
        .map(|r| AddonInput {
            release: r.clone(),
            chart_version: r.version.clone().unwrap_or_default(),
            digest: None,
            chart_url: match &r.source {
                crate::config::ChartSource::Repo(u) | crate::config::ChartSource::Oci(u) => u.clone(),
                crate::config::ChartSource::Path(p) => p.clone(),
            },
            values_yaml: String::new(),
            crds: Vec::new(),
        })
        .collect();
    RenderInput::new(cluster.config.clone(), addons)
}

pub fn run(global: &GlobalOptions, args: RenderArgs) -> anyhow::Result<()> {
    let cluster = load_cluster(&global.dir)?;
    let input = input_from_cluster(&cluster);
    let rendered = render::render(&input)?;
    let dir = args.output_dir.unwrap_or_else(|| global.dir.join("rendered"));
    render::write_rendered(&dir, &rendered)?;
    let unlocked: Vec<&str> = input
        .addons
        .iter()
        .filter(|a| a.digest.is_none())
        .map(|a| a.release.name.as_str())
        .collect();
    match global.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "output": dir,
            "files": rendered.files.keys().collect::<Vec<_>>(),
            "stubs": render::stub_sizes(&rendered),
            "templates": render::template_sizes(&rendered),
            "unlocked": unlocked,
        })),
        OutputFormat::Text => {
            println!("rendered {} file(s) into {}", rendered.files.len(), dir.display());
            for s in render::template_sizes(&rendered)
                .iter()
                .chain(render::stub_sizes(&rendered).iter())
            {
                println!("  {}: {} bytes (limit {})", s.path, s.size, s.limit);
            }
            if !unlocked.is_empty() {
                println!(
                    "warning: {} chart(s) not locked yet ({}): the installer refuses them until `kube-aws charts lock`",
                    unlocked.len(),
                    unlocked.join(", ")
                );
            }
            Ok(())
        }
    }
}
