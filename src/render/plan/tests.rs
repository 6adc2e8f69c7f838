use super::*;
use crate::plugin::Manifest;

#[test]
fn only_annotated_workloads_are_rolled_out_before_the_releases() {
    let cfg = crate::config::parse_cluster(
        std::path::Path::new("."),
        std::path::Path::new("cluster.yaml"),
        "clusterName: c\nregion: us-west-2\ns3URI: s3://bucket-b\nworker:\n  nodePools: [{name: a, count: 1}]\n",
    )
    .unwrap()
    .config;
    let mut input = RenderInput::new(cfg, vec![]);
    let marked = format!("metadata:\n  annotations:\n    {READY_BEFORE_RELEASES}: \"true\"\n");
    let content = format!(
        "apiVersion: v1\nkind: ConfigMap\n{marked}  name: cm\n---\n\
         apiVersion: apps/v1\nkind: DaemonSet\n{marked}  name: ds\n  namespace: n\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: plain\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: off\n  annotations:\n    {READY_BEFORE_RELEASES}: \"false\"\n---\n\
         apiVersion: apps/v1\nkind: StatefulSet\n{marked}  name: sts\n"
    );
    input.plugins.cluster.manifests.push(Manifest {
        plugin: "p".into(),
        name: "m.yaml".into(),
        content,
    });
    let got: Vec<(String, String, String)> = manifest_rollouts(&input)
        .into_iter()
        .map(|r| {
            assert_eq!(r.manifest, layout::plugin_manifest("p", "m.yaml"));
            assert_eq!(r.timeout_seconds, MANIFEST_ROLLOUT_TIMEOUT_SECONDS);
            (r.kind, r.namespace, r.name)
        })
        .collect();
    assert_eq!(
        got,
        [
            ("DaemonSet".to_string(), "n".to_string(), "ds".to_string()),
            ("StatefulSet".into(), "default".into(), "sts".into())
        ]
    );
}
