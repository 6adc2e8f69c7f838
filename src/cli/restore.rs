//! `kube-aws restore [--snapshot KEY]`: restores an etcd snapshot on 1, 3 or
//! 5 controllers (src/aws/restore.rs): checks first (a key that does not
//! exist, is another cluster's or cannot be read is refused before anything
//! changes), then, confirmed, writes the request and replaces every
//! controller; no stack update.

use super::confirm::confirm;
use super::deploy_args::{runtime, AwsArgs};
use super::{print_json, GlobalOptions, OutputFormat};
use crate::aws::{connect, nodes, restore, stack, AwsError};
use crate::config::load_cluster;

/// Arguments of `kube-aws restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The snapshot: its key as `kube-aws backups` lists it (or s3://…, or
    /// relative to the cluster's etcd/ prefix); default: the newest
    #[arg(long)]
    pub snapshot: Option<String>,
    /// Do not ask before replacing the controllers
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub aws: AwsArgs,
}

pub fn run(global: &GlobalOptions, args: RestoreArgs) -> anyhow::Result<()> {
    let cluster = load_cluster(&global.dir)?;
    let cfg = &cluster.config;
    let started = runtime()?.block_on(async {
        let clients = connect(&args.aws.options(), &cfg.region).await?;
        let name = &cfg.cluster_name;
        let live = stack::describe_stack(&clients, name)
            .await?
            .ok_or_else(|| AwsError::StackMissing { stack: name.clone() })?;
        if live.status.ends_with("_IN_PROGRESS") {
            return Err(AwsError::StackBusy {
                stack: name.clone(),
                status: live.status,
            }
            .into());
        }
        let chosen = restore::check(&clients, cfg, args.snapshot.as_deref())
            .await?
            .map_err(AwsError::from)?;
        let controllers: Vec<String> = nodes::list_nodes(&clients, cfg)
            .await?
            .into_iter()
            .filter(|n| n.role == "controller" && matches!(n.state.as_str(), "pending" | "running"))
            .map(|n| n.instance_id)
            .collect();
        let question = format!(
            "restore etcd of cluster {name:?} from s3://{}/{} ({} bytes)? Every controller ({}) is terminated \
             and replaced; writes since the snapshot are lost; workers and subnets are not touched",
            chosen.bucket,
            chosen.key,
            chosen.size,
            if controllers.is_empty() {
                "none running".to_string()
            } else {
                controllers.join(", ")
            }
        );
        if !confirm(&question, args.yes)? {
            anyhow::bail!("not restored");
        }
        Ok::<_, anyhow::Error>(restore::start(&clients, cfg, chosen, controllers).await?)
    })?;
    if global.output == OutputFormat::Json {
        return print_json(&started);
    }
    println!(
        "restore {} of s3://{}/{} requested; terminated {} controller(s): {}",
        started.request,
        started.snapshot.bucket,
        started.snapshot.key,
        started.terminated.len(),
        started.terminated.join(", ")
    );
    println!(
        "the controller group replaces them: the first restores the snapshot, the others join it; \
         follow with `kube-aws nodes`, and `kube-aws status` once the API answers"
    );
    Ok(())
}
