//! Values schema check: the input is a values.schema.json, then (after a
//! line `---`) a values file to check against it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

use kube_aws::chart::archive::ChartFiles;
use kube_aws::chart::values::{check_release_values, ValuesLayer};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (schema, values) = text.split_once("\n---\n").unwrap_or((text, "replicas: 1\n"));
    let Ok(schema) = serde_json::from_str::<serde_json::Value>(schema) else { return };
    let Ok(layer) = ValuesLayer::from_yaml("fuzz", Path::new("values/fuzz.yaml"), values) else { return };
    let chart = ChartFiles {
        metadata: serde_yaml_metadata(),
        values: Some("replicas: 1\n".into()),
        schema: Some(schema),
        crds: Vec::new(),
    };
    let _ = check_release_values("fuzz", &chart, &[layer], "1.31");
});

fn serde_yaml_metadata() -> kube_aws::chart::archive::ChartMetadata {
    kube_aws::chart::archive::ChartMetadata {
        api_version: Some("v2".into()),
        name: "fuzz".into(),
        version: "1.0.0".into(),
        app_version: None,
        kube_version: None,
        description: None,
        chart_type: None,
    }
}
