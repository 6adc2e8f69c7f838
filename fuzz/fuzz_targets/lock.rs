//! Index and lock parser: a Helm index read as a repository index (fast and
//! full paths) and as the work tree's lock, checked against a release.
//! The body is fuzz/bodies.rs's `lock`, which the corpus replay in the
//! ordinary tests (tests/it/fuzz_corpus.rs) runs too.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::lock(data));
