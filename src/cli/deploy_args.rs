//! Flags shared by the deploy commands (`up`, `status`, `update`, `destroy`),
//! and the runtime they run their AWS calls on.

use std::path::PathBuf;
use std::time::Duration;

use crate::aws::deploy::{chart_cache_dir, charts_from_plan, rendered_dir, ArtifactsOptions};
use crate::aws::{AwsError, AwsOptions};

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

/// The rendered directory and the chart tarballs it names. For now `up` and
/// `update` take `<dir>/rendered` as it is (the lead wires "render, or reuse an
/// up-to-date render"); plugin secrets are wired there too.
pub fn artifacts(dir: &std::path::Path) -> Result<ArtifactsOptions, AwsError> {
    let rendered: PathBuf = rendered_dir(dir);
    let charts = charts_from_plan(&rendered, &chart_cache_dir())?;
    Ok(ArtifactsOptions {
        rendered_dir: rendered,
        charts,
        secrets: Vec::new(),
    })
}
