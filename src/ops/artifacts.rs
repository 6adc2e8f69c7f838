//! What `up` and `update` publish: the work tree rendered anew into
//! `<dir>/rendered` (the render hooks around it) and kept in memory for the
//! publish, every locked chart missing from the cache fetched, and the
//! plugins' secrets collected; or, with `use_rendered`, `<dir>/rendered` as
//! it is, read back. A post-render hook may change the output before it
//! replaces the old one: then what it left is read back and published.

use super::{OpsError, WorkTree};
use crate::aws::lifecycle::deploy::{charts_from_plan, rendered_dir, ArtifactsOptions, LiveRecord};
use crate::config::Cluster;
use crate::pipeline::DeployPrepareOptions;
use crate::plugin::exec::{Step, When};

/// The artifacts to publish. `recorded`: the live stack's record, which
/// `update` renders with (`up`: the default, nothing recorded).
pub async fn artifacts(
    tree: &WorkTree,
    cluster: &Cluster,
    use_rendered: bool,
    recorded: &LiveRecord,
) -> Result<ArtifactsOptions, OpsError> {
    let dir = &tree.dir;
    let cache_dir = crate::chart::default_cache_dir();
    let rendered = rendered_dir(dir);
    if use_rendered {
        let read = crate::aws::publish::read_rendered(&rendered)?;
        let charts = charts_from_plan(&read, &cache_dir)?;
        return Ok(ArtifactsOptions {
            rendered_dir: rendered,
            rendered: read,
            charts,
            secrets: Vec::new(),
            baseline: None,
        });
    }
    tree.hooks(cluster, Step::Render, When::Pre, &rendered, None)?;
    // The post-render hooks run on the new output before it replaces the old.
    let mut hooks_ran = 0;
    let mut out = crate::pipeline::prepare_deploy_then(
        &DeployPrepareOptions {
            dir: dir.to_path_buf(),
            cache_dir,
            fetch: crate::chart::FetchOptions::default(),
            recorded: crate::pipeline::Recorded {
                zone_count: recorded.zone_count,
                role_names: recorded.role_names,
            },
            running_version: recorded.kubernetes_version.clone(),
        },
        &mut |staged| {
            hooks_ran = tree.hooks(cluster, Step::Render, When::Post, staged, None)?;
            Ok(())
        },
    )
    .await?;
    if hooks_ran > 0 {
        // What the hooks left is what `rendered/` holds now; the render's
        // own references must still stand in it (the publish checks them).
        let read = crate::aws::publish::read_rendered(&out.rendered_dir)?;
        out.rendered = crate::render::Rendered {
            files: read.files,
            ..out.rendered
        };
    }
    Ok(out)
}
