//! The plugin stage: plugin.yaml model, discovery (built-in and work tree),
//! typed parameters, templating, and hook contributions merged per scope.
//!
//! Entry points: [`discover`] lists the plugins a work tree sees, and
//! [`resolve_plugins`] turns a loaded cluster into [`ResolvedPlugins`].

mod checks;
mod collector;
pub mod discover;
pub mod exec;
pub mod grow;
pub mod guard;
pub mod hooks;
pub mod instrument;
mod merge;
pub mod model;
pub mod params;
mod releases;
pub mod resolve;
pub mod scope;
pub mod template;

use std::path::PathBuf;

pub use discover::{discover, PluginDef};
pub use hooks::*;
pub use model::PluginManifest;
pub use resolve::{activation, resolve_plugins, resolve_with, secret_reference, Activation};

use crate::located::Diagnostics;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Invalid(Diagnostics),
}

/// The plugin.yaml reference page, generated from its JSON Schema.
pub fn plugin_reference() -> String {
    let schema = serde_json::to_value(schemars::schema_for!(PluginManifest)).unwrap_or_default();
    crate::config::schema_markdown(
        "plugin.yaml reference",
        "Every key of a plugin's `plugin.yaml`. Unknown keys are errors. Get the JSON Schema with \
         `kube-aws schema plugin`; the guide is [plugin-authoring.md](plugin-authoring.md).",
        &schema,
    )
}
