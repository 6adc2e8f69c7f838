//! `kube-aws render`: run the offline pipeline, render every artifact, write
//! them to `<dir>/rendered/` (or `--output-dir`) atomically, print a summary.

use std::path::PathBuf;

use super::{hooks, print_json, GlobalOptions, OutputFormat};
use crate::pipeline::{prepare, PrepareOptions};
use crate::plugin::exec::{Step, When};
use crate::render;

/// Arguments of `kube-aws render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// Where to write the artifacts (default: <dir>/rendered). The global -o/--output is the format.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Chart cache directory (default: $XDG_CACHE_HOME/kube-aws/charts)
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

pub fn run(global: &GlobalOptions, args: RenderArgs) -> anyhow::Result<()> {
    let _lock = super::lock_work_tree(global, "render")?;
    let dir = args.output_dir.unwrap_or_else(|| global.dir.join("rendered"));
    let cluster = crate::config::load_cluster(&global.dir)?;
    hooks(global, &cluster, Step::Render, When::Pre, &dir, None)?;
    let p = prepare(&PrepareOptions {
        dir: global.dir.clone(),
        cache_dir: args.cache_dir.unwrap_or_else(crate::chart::default_cache_dir),
        require_charts: false,
    })?;
    let rendered = render::render(&p.input)?;
    // The post-render hooks run on the new output before it replaces the old.
    render::write_rendered_then(&global.dir, &dir, &rendered, &mut |staged| {
        hooks(global, &cluster, Step::Render, When::Post, staged, None).map_err(Into::into)
    })?;
    let summary = render::summarize(&rendered);
    match global.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "output": dir,
            "files": rendered.files.keys().collect::<Vec<_>>(),
            "summary": summary,
            "notFetched": p.not_fetched,
        })),
        OutputFormat::Text => {
            println!("rendered {} file(s) into {}", rendered.files.len(), dir.display());
            print!("{summary}");
            for w in render::cfn::render_warnings(&p.input) {
                eprintln!("warning: {w}");
            }
            if !p.not_fetched.is_empty() {
                println!(
                    "note: chart(s) not fetched yet, so their CRDs and values schemas were not read: {} (run `kube-aws charts fetch`)",
                    p.not_fetched.join(", ")
                );
            }
            Ok(())
        }
    }
}
