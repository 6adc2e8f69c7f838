//! plugin.yaml loader with templates: the input is a plugin.yaml, then
//! (after a line `#---template---`) the text of its `values.yaml.tera`. Both
//! go into a copy of tests/fixtures/every-hook, whose cluster.yaml enables
//! the plugin, and every plugin is resolved (parameters, every template).
//! The body is fuzz/bodies.rs's `plugin_yaml`, which the corpus replay in the
//! ordinary tests (tests/it/fuzz_corpus.rs) runs too.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::plugin_yaml(data));
