//! Chart archive reader: any bytes as a `.tgz`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kube_aws::chart::archive::read_chart_archive(data, "fuzz.tgz", None);
});
