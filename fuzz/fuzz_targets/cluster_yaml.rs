//! cluster.yaml loader: any text gives a cluster or a located error, never a
//! panic, within the time and memory limits scripts/fuzz.sh sets.
//! The body is fuzz/bodies.rs's `cluster_yaml`, which the corpus replay in the
//! ordinary tests (tests/it/fuzz_corpus.rs) runs too.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::cluster_yaml(data));
