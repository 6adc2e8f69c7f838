//! The fuzz corpora replayed in the ordinary test build: every input under
//! fuzz/corpus/<target>/ (the seeds, and every finding kept as a regression
//! case) goes through its target's body (fuzz/bodies.rs, the same code the
//! libFuzzer binaries run) and must return without a panic, within a time
//! limit. This keeps every past finding fixed in `make test` without the
//! sanitizer build, which `make fuzz-short` and `make fuzz` still run (they
//! also look for new inputs and bound memory, which this replay does not).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

#[path = "../../fuzz/bodies.rs"]
mod bodies;

/// A debug build is several times slower than the fuzzers' release build
/// (whose limit is 10 s, scripts/fuzz.sh): an input past this is a hang.
const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn every_corpus_input_runs_through_its_target_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut ran = 0;
    let mut bad = vec![];
    for (target, body) in bodies::TARGETS {
        let dir = root.join(target);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{} has no corpus", dir.display());
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            let start = Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| body(&data)));
            let took = start.elapsed();
            ran += 1;
            if outcome.is_err() {
                bad.push(format!("{target}: {} panicked", input.display()));
            } else if took > LIMIT {
                bad.push(format!("{target}: {} took {took:?}", input.display()));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(ran >= 6, "{ran} inputs");
    eprintln!("fuzz corpus: {ran} inputs replayed");
}

#[test]
fn every_fuzz_target_has_a_body_and_a_corpus() {
    let cargo = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/Cargo.toml")).unwrap();
    let mut declared: Vec<&str> = cargo
        .lines()
        .filter_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
        .filter(|n| *n != "kube-aws-fuzz")
        .collect();
    declared.sort();
    let mut bodies: Vec<&str> = bodies::TARGETS.iter().map(|(n, _)| *n).collect();
    bodies.sort();
    assert_eq!(
        declared, bodies,
        "fuzz/Cargo.toml's targets and fuzz/bodies.rs's TARGETS differ"
    );
}
