//! The built-in values layer: the repository's top-level `values/`, embedded
//! in the binary like `plugins/` and `charts-index/` (build.rs reruns when it
//! changes). `values/<release>.yaml` holds defaults every cluster wants for a
//! release a plugin brings; it layers over the plugin's values and under the
//! work tree's own `values/<release>.yaml`. A chart cluster.yaml lists itself
//! never gets it: that chart, and its version, are the user's choice.

use std::path::PathBuf;

use include_dir::{include_dir, Dir};

static BUILT_IN: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/values");

/// The built-in `values/<release>.yaml`, when the tool ships one.
pub fn values_text(release: &str) -> Option<&'static str> {
    BUILT_IN
        .get_file(format!("{release}.yaml"))
        .and_then(|f| f.contents_utf8())
}

/// How messages name the built-in values file of `release`.
pub fn label(release: &str) -> PathBuf {
    PathBuf::from(format!("built-in values/{release}.yaml"))
}

/// The releases the built-in layer has values for, sorted.
pub fn releases() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = BUILT_IN
        .files()
        .filter_map(|f| f.path().to_str()?.strip_suffix(".yaml"))
        .collect();
    names.sort_unstable();
    names
}
