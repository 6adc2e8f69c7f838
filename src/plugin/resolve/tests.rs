//! Tests of plugin resolution: activation per scope, templating context,
//! merge conflicts, checks and service accounts.

use std::path::Path;

use super::*;
use crate::config::parse_cluster;

/// A cluster with two pools and one work-tree plugin `p` from `plugin_yaml`.
fn setup(cluster_yaml: &str, plugin_yaml: &str) -> (tempfile::TempDir, Cluster) {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("plugins/p");
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::write(
        pdir.join("plugin.yaml"),
        format!("apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {{name: p, version: 0.1.0}}\n{plugin_yaml}"),
    )
    .unwrap();
    let text = format!(
            "clusterName: c1\nregion: us-west-2\ns3URI: s3://bucket-1/pre/fix\nworker:\n  nodePools:\n    - {{name: a, count: 1}}\n    - name: b\n      count: 1\n{cluster_yaml}"
        );
    let cluster = parse_cluster(dir.path(), Path::new("cluster.yaml"), &text).unwrap();
    (dir, cluster)
}

fn resolve(cluster: &Cluster) -> Result<ResolvedPlugins, String> {
    resolve_plugins(cluster).map_err(|e| e.to_string())
}

#[test]
fn a_pool_can_opt_in_alone() {
    let (_d, c) = setup(
        "      plugins: {p: {enabled: true}}\n",
        "spec:\n  nodes:\n    worker:\n      nodeLabels: {p: 'on'}\n    controller:\n      nodeLabels: {p: 'on'}\n",
    );
    let r = resolve(&c).unwrap();
    assert!(r.pools["a"].node_labels.is_empty());
    assert_eq!(r.pools["b"].node_labels["p"], "on");
    assert!(r.controller.node_labels.is_empty());
    assert!(r.plugins.iter().any(|p| p.name == "p"));
}

#[test]
fn a_pool_can_opt_out() {
    let (_d, c) = setup(
        "      plugins: {p: {enabled: false}}\nplugins:\n  p: {enabled: true}\n",
        "spec:\n  nodes:\n    worker:\n      asgTags: {t: '{{ scope.pool }}'}\n",
    );
    let r = resolve(&c).unwrap();
    assert_eq!(r.pools["a"].asg_tags["t"], "a");
    assert!(r.pools["b"].asg_tags.is_empty());
}

#[test]
fn enabled_by_default_and_turned_off() {
    let yaml = "enabledByDefault: true\nspec:\n  kubernetes:\n    apiServer:\n      flags: {x: '1'}\n";
    let (_d, c) = setup("", yaml);
    assert_eq!(resolve(&c).unwrap().cluster.api_server_flags["x"], "1");
    let (_d, c) = setup("plugins:\n  p: {enabled: false}\n", yaml);
    assert!(resolve(&c).unwrap().cluster.api_server_flags.is_empty());
}

#[test]
fn templates_never_see_plugin_settings_of_the_cluster() {
    let ctx_yaml = "spec:\n  parameters:\n    pw: {type: string, secret: true}\n  kubernetes:\n    manifests: []\n    apiServer:\n      flags: {x: '{{ cluster.plugins.p.pw }}'}\n";
    let (_d, c) = setup("plugins:\n  p: {enabled: true, pw: hunter2}\n", ctx_yaml);
    let err = resolve(&c).unwrap_err();
    assert!(err.contains("cluster.plugins.p.pw"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn s3_bucket_and_prefix_are_in_the_context() {
    let (_d, c) = setup(
            "plugins:\n  p: {enabled: true}\n",
            "spec:\n  kubernetes:\n    apiServer:\n      flags: {x: '{{ cluster.s3Bucket }}|{{ cluster.s3Prefix }}|{{ scope.role }}'}\n",
        );
    assert_eq!(
        resolve(&c).unwrap().cluster.api_server_flags["x"],
        "bucket-1|pre/fix|cluster"
    );
}

#[test]
fn a_flag_name_with_dashes_is_refused() {
    let (_d, c) = setup(
        "plugins:\n  p: {enabled: true}\n",
        "spec:\n  kubernetes:\n    scheduler:\n      flags: {--v: '2'}\n",
    );
    let err = resolve(&c).unwrap_err();
    assert!(err.contains("without leading dashes, e.g. \"v\""), "{err}");
}

#[test]
fn same_label_from_two_scopes_is_not_a_conflict() {
    // Each pool is its own scope: the same file path in two pools is fine.
    let (_d, c) = setup(
        "plugins:\n  p: {enabled: true}\n",
        "spec:\n  nodes:\n    worker:\n      files: [{path: /etc/p, content: x}]\n",
    );
    let r = resolve(&c).unwrap();
    for pool in ["a", "b"] {
        assert_eq!(r.pools[pool].files.iter().filter(|f| f.plugin == "p").count(), 1);
    }
}

#[test]
fn one_plugin_cannot_write_a_file_twice() {
    let (_d, c) = setup(
        "plugins:\n  p: {enabled: true}\n",
        "spec:\n  nodes:\n    controller:\n      files: [{path: /etc/p, content: x}, {path: /etc/p, content: y}]\n",
    );
    let err = resolve(&c).unwrap_err();
    assert!(
        err.contains("file \"/etc/p\" in the controller comes from plugin \"p\" and from plugin \"p\""),
        "{err}"
    );
}

#[test]
fn content_and_template_are_exclusive() {
    let (_d, c) = setup(
        "plugins:\n  p: {enabled: true}\n",
        "spec:\n  nodes:\n    controller:\n      systemdUnits: [{name: a.service}]\n",
    );
    assert!(resolve(&c)
        .unwrap_err()
        .contains("set exactly one of content and template"));
}

#[test]
fn unknown_stack_is_refused() {
    let (_d, c) = setup(
        "plugins:\n  p: {enabled: true}\n",
        "spec:\n  cloudformation: {stack: node-pool-zzz}\n",
    );
    let err = resolve(&c).unwrap_err();
    assert!(err.contains("node-pool-a, node-pool-b"), "{err}");
}

#[test]
fn plugin_depends_on_unknown_release() {
    let (_d, c) = setup(
        "plugins:\n  p: {enabled: true}\n",
        "spec:\n  charts:\n    - {name: x, repo: 'https://c.example.com', dependsOn: [cert-manager]}\n",
    );
    let err = resolve(&c).unwrap_err();
    assert!(
        err.contains("depends on \"cert-manager\", which no chart or enabled plugin declares"),
        "{err}"
    );
}

#[test]
fn missing_files_are_found_even_in_unused_scopes() {
    // No pool enables p's worker hooks here (the pools opt out), yet the typo is reported.
    let (_d, c) = setup(
        "      plugins: {p: {enabled: false}}\nplugins:\n  p: {enabled: true}\n",
        "spec:\n  nodes:\n    worker:\n      files: [{path: /etc/p, template: nope.tera}]\n",
    );
    let mut c = c;
    c.config.worker.node_pools[0].plugins = c.config.worker.node_pools[1].plugins.clone();
    let err = resolve(&c).unwrap_err();
    assert!(err.contains("\"nope.tera\" does not exist"), "{err}");
}
const KMS: &str = "kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\nplugins:\n  p: {enabled: true}\n";
const SA: &str = "spec:\n  serviceAccounts:\n    - namespace: kube-system\n      name: dns\n      iam:\n        statements:\n          - {Sid: Change, Effect: Allow, Action: [route53:ChangeResourceRecordSets], Resource: 'arn:aws:route53:::hostedzone/{{ cluster.clusterName }}'}\n";

#[test]
fn a_service_account_gets_its_role_and_templates_its_arn() {
    let yaml =
        format!("{SA}  kubernetes:\n    apiServer:\n      flags: {{x: '{{{{ serviceAccounts.dns.roleArn }}}}'}}\n");
    let (_d, c) = setup(KMS, &yaml);
    let r = resolve(&c).unwrap();
    assert_eq!(
        r.cluster.api_server_flags["x"],
        "arn:aws:iam::111122223333:role/c1-us-west-2-kube-system-dns"
    );
    let sa = &r.service_accounts[0];
    assert_eq!(
        (sa.plugin.as_str(), sa.namespace.as_str(), sa.name.as_str()),
        ("p", "kube-system", "dns")
    );
    assert_eq!(sa.role_name, "c1-us-west-2-kube-system-dns");
    assert_eq!(sa.statements[0]["Resource"], "arn:aws:route53:::hostedzone/c1");
    // Nothing of it lands on a node role.
    let on_nodes = r.controller.iam_statements.iter().chain(&r.pools["a"].iam_statements);
    assert!(
        on_nodes.clone().all(|st| st.plugin != "p"),
        "{:?}",
        on_nodes.collect::<Vec<_>>()
    );
}

#[test]
fn two_plugins_claiming_one_service_account_are_named_both() {
    let (d, c) = setup(&format!("{KMS}  q: {{enabled: true}}\n"), SA);
    let qdir = d.path().join("plugins/q");
    std::fs::create_dir_all(&qdir).unwrap();
    std::fs::write(
        qdir.join("plugin.yaml"),
        format!("apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {{name: q, version: 0.1.0}}\n{SA}"),
    )
    .unwrap();
    let err = resolve(&c).unwrap_err();
    assert!(
        err.contains("service account \"kube-system/dns\"")
            && err.contains("plugin \"q\"")
            && err.contains("plugin \"p\""),
        "{err}"
    );
    assert!(err.contains("plugins/q/plugin.yaml:"), "{err}");
}

#[test]
fn two_service_accounts_with_one_role_name_are_named_both() {
    // c1-us-west-2-a-b-c either way: kube-system/x-y and kube-system-x/y would meet too.
    let two = "spec:\n  serviceAccounts:\n    - {namespace: a-b, name: c, iam: {statements: [{Effect: Allow, Action: [s3:GetObject], Resource: '*'}]}}\n    - {namespace: a, name: b-c, iam: {statements: [{Effect: Allow, Action: [s3:GetObject], Resource: '*'}]}}\n";
    let (_d, c) = setup(KMS, two);
    let err = resolve(&c).unwrap_err();
    assert!(
        err.contains("IAM role name \"c1-us-west-2-a-b-c\"") && err.contains("spec.serviceAccounts[1].name"),
        "{err}"
    );
}

#[test]
fn bad_service_accounts_are_located() {
    let bad_ns = SA.replace("kube-system", "Kube_System");
    let (_d, c) = setup(KMS, &bad_ns);
    let err = resolve(&c).unwrap_err();
    assert!(
        err.contains("spec.serviceAccounts[0].namespace") && err.contains("\"Kube_System\" is not a valid namespace"),
        "{err}"
    );
    let star = SA.replace("[route53:ChangeResourceRecordSets]", "['*']");
    let (_d, c) = setup(KMS, &star);
    let err = resolve(&c).unwrap_err();
    assert!(
        err.contains("spec.serviceAccounts[0].iam.statements[0]") && err.contains("Action \"*\""),
        "{err}"
    );
    // Before kmsKeyARN is set (render only: up requires it), a placeholder account.
    let (_d, c) = setup("plugins:\n  p: {enabled: true}\n", SA);
    assert_eq!(
        resolve(&c).unwrap().service_accounts[0].role_arn,
        "arn:aws:iam::000000000000:role/c1-us-west-2-kube-system-dns"
    );
}

#[test]
fn the_issuer_flags_are_kube_aws_own() {
    let (_d, c) = setup(
        "plugins:\n  p: {enabled: true}\n",
        "spec:\n  kubernetes:\n    apiServer:\n      flags: {service-account-issuer: 'https://x'}\n",
    );
    let err = resolve(&c).unwrap_err();
    assert!(
        err.contains("\"service-account-issuer\" is set by kube-aws") && err.contains("issuerURL"),
        "{err}"
    );
}

#[test]
fn a_node_statement_with_every_action_is_refused() {
    let (_d, c) = setup(
        "plugins:\n  p: {enabled: true}\n",
        "spec:\n  nodes:\n    worker:\n      iam:\n        statements: [{Effect: Allow, Action: '*', Resource: '*'}]\n",
    );
    let err = resolve(&c).unwrap_err();
    assert!(
        err.contains("spec.nodes.worker.iam.statements[0]") && err.contains("every action"),
        "{err}"
    );
}
