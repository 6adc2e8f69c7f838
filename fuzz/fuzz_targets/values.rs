//! Values reader: a values file, layered and merged like Helm's `-f` files.
//! The body is fuzz/bodies.rs's `values`, which the corpus replay in the
//! ordinary tests (tests/it/fuzz_corpus.rs) runs too.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::values(data));
