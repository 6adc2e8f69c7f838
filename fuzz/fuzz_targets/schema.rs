//! Values schema check: the input is a values.schema.json, then (after a
//! line `---`) a values file to check against it.
//! The body is fuzz/bodies.rs's `schema`, which the corpus replay in the
//! ordinary tests (tests/it/fuzz_corpus.rs) runs too.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::schema(data));
