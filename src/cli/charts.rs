//! `kube-aws charts lock|fetch|resolve`: pin chart versions and digests in
//! charts-index/index.yaml, fill the chart cache, or resolve one chart.

use std::path::PathBuf;
use std::time::Instant;

use super::deploy_args::runtime;
use super::{print_json, GlobalOptions, OutputFormat};
use crate::chart::{self, FetchOptions};
use crate::pipeline::{load_releases, PrepareOptions};

/// Arguments of `kube-aws charts`.
#[derive(Debug, clap::Args)]
pub struct ChartsArgs {
    #[command(subcommand)]
    pub command: ChartsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ChartsCommand {
    /// Resolve every chart's version and write charts-index/index.yaml (digests pinned)
    Lock(LockArgs),
    /// Download the locked charts into the cache, verifying their digests
    Fetch(FetchArgs),
    /// Print a release's layered user values (what the node passes to helm -f), after checking them
    Values(ValuesArgs),
    /// Resolve one chart from a repository or an index file (for scripts and benchmarks)
    #[command(hide = true, disable_version_flag = true)]
    Resolve(ResolveArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct NetArgs {
    /// Downloads at the same time
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub concurrency: usize,
    /// Chart cache directory (default: $XDG_CACHE_HOME/kube-aws/charts)
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

impl NetArgs {
    fn fetch_options(&self, global: &GlobalOptions) -> FetchOptions {
        FetchOptions {
            concurrency: self.concurrency.max(1),
            progress: global.output == OutputFormat::Text,
            ..FetchOptions::default()
        }
    }
    fn cache_dir(&self) -> PathBuf {
        self.cache_dir.clone().unwrap_or_else(chart::default_cache_dir)
    }
}

#[derive(Debug, clap::Args)]
pub struct LockArgs {
    /// Re-resolve every chart, also those whose locked version still matches
    #[arg(long)]
    pub update: bool,
    #[command(flatten)]
    pub net: NetArgs,
}

#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    #[command(flatten)]
    pub net: NetArgs,
}

#[derive(Debug, clap::Args)]
pub struct ValuesArgs {
    /// The release (default: every release, one YAML document each)
    pub release: Option<String>,
    /// Chart cache directory (default: $XDG_CACHE_HOME/kube-aws/charts)
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct ResolveArgs {
    /// Chart name
    pub chart: String,
    /// Exact version or constraint (default: newest stable)
    #[arg(long)]
    pub version: Option<String>,
    /// Repository URL (its index.yaml is fetched)
    #[arg(long, conflicts_with = "repo_index", required_unless_present = "repo_index")]
    pub repo: Option<String>,
    /// A local index file
    #[arg(long, value_name = "FILE")]
    pub repo_index: Option<PathBuf>,
}

pub fn run(global: &GlobalOptions, args: ChartsArgs) -> anyhow::Result<()> {
    match args.command {
        ChartsCommand::Lock(a) => lock(global, a),
        ChartsCommand::Fetch(a) => fetch(global, a),
        ChartsCommand::Values(a) => values(global, a),
        ChartsCommand::Resolve(a) => resolve(global, a),
    }
}

fn values(global: &GlobalOptions, args: ValuesArgs) -> anyhow::Result<()> {
    let all = load_releases(&global.dir)?;
    let releases: Vec<_> = match &args.release {
        None => all.releases.clone(),
        Some(name) => {
            let Some(r) = all.releases.iter().find(|r| &r.name == name) else {
                let names: Vec<&str> = all.releases.iter().map(|r| r.name.as_str()).collect();
                let hint = crate::located::did_you_mean(name, &names);
                anyhow::bail!("no release {name:?} in {}{hint}", all.cluster.file.display());
            };
            vec![r.clone()]
        }
    };
    let prepared = chart::prepare_releases(&chart::PrepareReleasesOptions {
        releases,
        ..all.chart_options(&PrepareOptions {
            dir: global.dir.clone(),
            cache_dir: args.cache_dir.unwrap_or_else(chart::default_cache_dir),
            require_charts: false,
        })
    })?;
    if global.output == OutputFormat::Json {
        let map: serde_json::Map<String, serde_json::Value> = prepared
            .iter()
            .map(|p| (p.locked.release.clone(), p.values.user.clone()))
            .collect();
        return print_json(&map);
    }
    for (i, p) in prepared.iter().enumerate() {
        if i > 0 {
            println!("---");
        }
        println!(
            "# release {}: chart {} {}",
            p.locked.release, p.locked.chart, p.locked.version
        );
        print!("{}", p.values_yaml);
    }
    Ok(())
}

fn lock(global: &GlobalOptions, args: LockArgs) -> anyhow::Result<()> {
    let all = load_releases(&global.dir)?;
    let report = runtime()?.block_on(chart::lock_charts(chart::LockOptions {
        dir: global.dir.clone(),
        releases: all.releases.clone(),
        update: args.update,
        fetch: args.net.fetch_options(global),
        cache_dir: args.net.cache_dir(),
    }))?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    match global.output {
        OutputFormat::Json => print_json(&report),
        OutputFormat::Text => {
            for c in &report.charts {
                let kept = if report.kept.contains(&c.release) {
                    " (unchanged)"
                } else {
                    ""
                };
                println!("{}: {} {} from {}{kept}", c.release, c.chart, c.version, c.source);
            }
            println!("wrote {} ({} chart(s))", report.file.display(), report.charts.len());
            Ok(())
        }
    }
}

fn fetch(global: &GlobalOptions, args: FetchArgs) -> anyhow::Result<()> {
    let all = load_releases(&global.dir)?;
    let lock = chart::load_lock(&global.dir)?;
    let charts = chart::check_lock(&lock, &all.releases)?;
    let report = runtime()?.block_on(chart::fetch_charts(chart::FetchChartsOptions {
        dir: global.dir.clone(),
        charts,
        fetch: args.net.fetch_options(global),
        cache_dir: args.net.cache_dir(),
    }))?;
    match global.output {
        OutputFormat::Json => print_json(&report),
        OutputFormat::Text => {
            println!(
                "{} downloaded, {} already cached, {} local ({} request(s))",
                report.downloaded.len(),
                report.cached.len(),
                report.local.len(),
                report.requests
            );
            Ok(())
        }
    }
}

fn resolve(global: &GlobalOptions, args: ResolveArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let (text, repo, label) = match (&args.repo_index, &args.repo) {
        (Some(file), _) => {
            let (root, name) = match (file.parent(), file.file_name()) {
                (Some(p), Some(n)) => (
                    if p.as_os_str().is_empty() {
                        std::path::Path::new(".")
                    } else {
                        p
                    },
                    n,
                ),
                _ => anyhow::bail!("--repo-index {} names no file", file.display()),
            };
            let text = crate::reader::read_text(root, std::path::Path::new(name), file, &crate::reader::INDEX_LIMIT)?;
            (text, String::new(), file.display().to_string())
        }
        (None, Some(repo)) => {
            let http = chart::fetch::Http::new(FetchOptions::default())?;
            let text = runtime()?.block_on(http.get_index(repo))?;
            (text, repo.clone(), format!("{}/index.yaml", repo.trim_end_matches('/')))
        }
        (None, None) => anyhow::bail!("give --repo URL or --repo-index FILE"),
    };
    let lookup = chart::index::find_chart_version(&text, &args.chart, args.version.as_deref(), &repo, &label)?;
    for w in &lookup.warnings {
        eprintln!("warning: {w}");
    }
    let Some(chosen) = lookup.chosen else {
        let hint = crate::located::did_you_mean(&args.chart, &lookup.names);
        anyhow::bail!("chart {:?} is not in {label}{hint}", args.chart);
    };
    let v = chosen.map_err(|f| match f {
        chart::ResolveFailure::BadConstraint(e) => anyhow::anyhow!("bad version constraint {e}"),
        chart::ResolveFailure::NoMatch { newest } => anyhow::anyhow!(
            "no version of chart {:?} matches {:?}; newest: {}",
            args.chart,
            args.version.as_deref().unwrap_or("(newest stable)"),
            newest.join(", ")
        ),
    })?;
    match global.output {
        OutputFormat::Json => print_json(&serde_json::json!({
            "chart": v,
            "seconds": start.elapsed().as_secs_f64(),
        })),
        OutputFormat::Text => {
            println!(
                "{} {} {}",
                v.name,
                v.version,
                v.urls.first().map(String::as_str).unwrap_or("")
            );
            Ok(())
        }
    }
}
