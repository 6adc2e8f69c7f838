//! cluster.yaml loader: any text gives a cluster or a located error, never a
//! panic, within the time and memory limits scripts/fuzz.sh sets.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = kube_aws::config::parse_cluster(Path::new("."), Path::new("cluster.yaml"), text);
});
