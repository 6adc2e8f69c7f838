//! The plugin stage: plugin.yaml model, discovery (built-in and work tree),
//! typed parameters, templating, and hook contributions merged per scope.

pub mod hooks;

pub use hooks::*;
