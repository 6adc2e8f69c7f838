//! Flags shared by the deploy commands (`up`, `status`, `update`, `destroy`),
//! and the runtime they run their AWS calls on.

use std::time::Duration;

use crate::aws::deploy::{charts_from_plan, rendered_dir, ArtifactsOptions};
use crate::aws::AwsOptions;
use crate::pipeline::DeployPrepareOptions;

/// Where AWS is: the standard chain, with overrides.
#[derive(Debug, Clone, clap::Args)]
pub struct AwsArgs {
    /// A profile from ~/.aws/config (default: AWS_PROFILE, else "default")
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The region (default: cluster.yaml's region)
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
}

impl AwsArgs {
    pub fn options(&self) -> AwsOptions {
        AwsOptions {
            profile: self.profile.clone(),
            region: self.region.clone(),
        }
    }
}

/// Waiting for the stack and the addons.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitArgs {
    /// Follow the stack and the addons until they are done or failed
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this long (the stack is left as it is), e.g. 45m, 1h30m
    #[arg(long, default_value = "45m", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration ({e}); use e.g. 45m, 90s, 1h30m"))
}

/// A runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// What to publish.
#[derive(Debug, Clone, clap::Args)]
pub struct PublishArgs {
    /// Publish <dir>/rendered exactly as it is (e.g. after reviewing it) instead of rendering
    /// again; its charts must be in the cache, and plugin secrets are not re-encrypted
    #[arg(long)]
    pub use_rendered: bool,
}

/// Renders the work tree anew into `<dir>/rendered`, fetches any locked chart
/// missing from the cache, and collects the plugins' secrets: what `up` and
/// `update` publish. With `--use-rendered`, takes `<dir>/rendered` as it is.
/// The render hooks run around that render (not with `--use-rendered`).
pub fn artifacts(
    global: &super::GlobalOptions,
    cluster: &crate::config::Cluster,
    args: &PublishArgs,
) -> anyhow::Result<ArtifactsOptions> {
    use crate::plugin::exec::{Step, When};
    let dir = &global.dir;
    let cache_dir = crate::chart::default_cache_dir();
    if args.use_rendered {
        let rendered_dir = rendered_dir(dir);
        let charts = charts_from_plan(&rendered_dir, &cache_dir)?;
        return Ok(ArtifactsOptions {
            rendered_dir,
            charts,
            secrets: Vec::new(),
        });
    }
    let rendered = rendered_dir(dir);
    super::hooks(global, cluster, Step::Render, When::Pre, &rendered, None)?;
    // The post-render hooks run on the new output before it replaces the old.
    let out = crate::pipeline::prepare_deploy_then(
        &DeployPrepareOptions {
            dir: dir.to_path_buf(),
            cache_dir,
            fetch: crate::chart::FetchOptions::default(),
        },
        &mut |staged| super::hooks(global, cluster, Step::Render, When::Post, staged, None).map_err(Into::into),
    )?;
    Ok(out)
}
