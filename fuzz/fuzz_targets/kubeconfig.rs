//! Kubeconfig merge: any text as the file `kubeconfig` merges into. The
//! body is fuzz/bodies.rs's `kubeconfig`, which the corpus replay in the
//! ordinary tests (tests/it/fuzz_corpus.rs) runs too.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../bodies.rs"]
#[allow(dead_code)]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::kubeconfig(data));
