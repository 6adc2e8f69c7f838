//! Values reader: a values file, layered and merged like Helm's `-f` files.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

use kube_aws::chart::values::{coalesce, merge_layers, to_yaml_document, ValuesLayer};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(layer) = ValuesLayer::from_yaml("fuzz", Path::new("values/fuzz.yaml"), text) {
        let user = merge_layers(std::slice::from_ref(&layer));
        let merged = coalesce(&user, &layer.values);
        let _ = to_yaml_document(&merged);
    }
});
