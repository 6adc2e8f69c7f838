//! A table of bad plugin inputs, through `kube-aws validate`: each must exit 1
//! with an error located at the offending cluster.yaml or plugin file key,
//! naming the plugin(s), and never panic. The exact text is snapshotted.

const BASE: &str = "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/kube-aws\n";
const POOLS: &str = "worker:\n  nodePools:\n    - name: general\n      count: 1\n    - name: gpu\n      count: 1\n";

/// A plugin with typed parameters of every constraint.
const DEMO: &str = "apiVersion: kube-aws/v1
kind: Plugin
metadata: {name: demo, version: 0.1.0}
spec:
  parameters:
    url: {type: string, required: true, pattern: '^https://'}
    size: {type: integer, default: 1, minimum: 1, maximum: 5}
    mode: {type: string, default: a, enum: [a, b]}
    password: {type: string, secret: true, pattern: '^[a-z]+$'}
";

use crate::common::validate_work_tree as validate;

macro_rules! bad {
    ($name:ident, $located_in:expr, $yaml:expr, $files:expr) => {
        #[test]
        fn $name() {
            let yaml: String = $yaml.into();
            let (code, stderr) = validate(&yaml, $files);
            assert_eq!(code, 1, "stderr: {stderr}");
            let prefix = format!("error: {}:", $located_in);
            assert!(
                stderr.starts_with(&prefix),
                "not located in {}: {stderr}",
                $located_in
            );
            insta::assert_snapshot!(stderr);
        }
    };
}

fn with_demo(extra: &str) -> Vec<(&'static str, String)> {
    vec![("plugins/demo/plugin.yaml", format!("{DEMO}{extra}"))]
}

fn files<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    v.iter().map(|(n, b)| (*n, b.as_str())).collect()
}

// ---- cluster.yaml values ----

bad!(
    unknown_plugin,
    "cluster.yaml",
    format!("{BASE}plugins:\n  dmeo: {{enabled: true}}\n"),
    &files(&with_demo(""))
);
bad!(
    unknown_plugin_in_pool,
    "cluster.yaml",
    format!("{BASE}{POOLS}      plugins:\n        metrics-servr: {{enabled: true}}\n"),
    &[]
);
bad!(
    unknown_parameter,
    "cluster.yaml",
    format!("{BASE}plugins:\n  demo: {{enabled: true, url: 'https://x', sise: 2}}\n"),
    &files(&with_demo(""))
);
bad!(
    wrong_type,
    "cluster.yaml",
    format!("{BASE}plugins:\n  demo:\n    enabled: true\n    url: https://x\n    size: two\n"),
    &files(&with_demo(""))
);
bad!(
    missing_required,
    "cluster.yaml",
    format!("{BASE}plugins:\n  demo:\n    enabled: true\n"),
    &files(&with_demo(""))
);
bad!(
    out_of_pattern,
    "cluster.yaml",
    format!("{BASE}plugins:\n  demo:\n    enabled: true\n    url: http://insecure.example.com\n"),
    &files(&with_demo(""))
);
bad!(
    out_of_enum,
    "cluster.yaml",
    format!("{BASE}plugins:\n  demo:\n    enabled: true\n    url: https://x\n    mode: c\n"),
    &files(&with_demo(""))
);
bad!(
    below_minimum,
    "cluster.yaml",
    format!("{BASE}plugins:\n  demo:\n    enabled: true\n    url: https://x\n    size: 0\n"),
    &files(&with_demo(""))
);
bad!(
    above_maximum_in_pool_override,
    "cluster.yaml",
    format!("{BASE}{POOLS}      plugins:\n        demo: {{size: 9}}\nplugins:\n  demo: {{enabled: true, url: 'https://x'}}\n"),
    &files(&with_demo(""))
);
bad!(
    controller_override_wrong_type,
    "cluster.yaml",
    format!("{BASE}controller:\n  plugins:\n    demo: {{mode: [a]}}\nplugins:\n  demo: {{enabled: true, url: 'https://x'}}\n"),
    &files(&with_demo(""))
);

#[test]
fn secret_values_are_never_quoted() {
    let yaml = format!("{BASE}plugins:\n  demo: {{enabled: true, url: 'https://x', password: Hunter2}}\n");
    let (code, stderr) = validate(&yaml, &files(&with_demo("")));
    assert_eq!(code, 1);
    assert!(stderr.contains("plugins.demo.password"), "{stderr}");
    assert!(!stderr.contains("Hunter2"), "{stderr}");
    insta::assert_snapshot!(stderr);
}

// ---- plugin files ----

const ENABLE: &str = "plugins:\n  demo: {enabled: true, url: 'https://x'}\n";

bad!(
    plugin_yaml_unknown_key,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo("  chart: []\n"))
);
bad!(
    plugin_name_differs_from_directory,
    "plugins/other/plugin.yaml",
    format!("{BASE}"),
    &[("plugins/other/plugin.yaml", DEMO)]
);
bad!(
    broken_template_file,
    "plugins/demo/manifests/cm.yaml.tera",
    format!("{BASE}{ENABLE}"),
    &[
        (
            "plugins/demo/plugin.yaml",
            &format!("{DEMO}  kubernetes:\n    manifests: [manifests/cm.yaml.tera]\n")
        ),
        (
            "plugins/demo/manifests/cm.yaml.tera",
            "apiVersion: v1\nkind: ConfigMap\ndata:\n  url: {{ params.url \n"
        ),
    ]
);
bad!(
    missing_variable_in_file,
    "plugins/demo/values.yaml.tera",
    format!("{BASE}{ENABLE}"),
    &[
        (
            "plugins/demo/plugin.yaml",
            &format!(
                "{DEMO}  charts:\n    - {{name: demo, repo: 'https://c.example.com', values: [values.yaml.tera]}}\n"
            )
        ),
        (
            "plugins/demo/values.yaml.tera",
            "url: {{ params.url }}\nsize: {{ params.sizes }}\n"
        ),
    ]
);
bad!(
    missing_variable_in_field,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo(
        "  kubernetes:\n    apiServer:\n      flags: {oidc-issuer-url: '{{ cluster.issuer }}'}\n"
    ))
);
// The one chart check (src/config/chart_spec.rs): a plugin's chart entry
// meets the rules and wording of a cluster.yaml one.
bad!(
    chart_repo_is_an_oci_reference,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo(
        "  charts:\n    - {name: demo, repo: 'oci://r.example.com/charts/demo', timeout: 0s}\n"
    ))
);
bad!(
    chart_oci_pins_a_manifest_digest,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo(
        "  charts:\n    - {name: Demo, oci: 'oci://r.example.com/charts/demo@sha256:0123', timeout: soon}\n"
    ))
);
bad!(
    path_escapes_plugin_directory,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo("  kubernetes:\n    manifests: [../../cluster.yaml]\n"))
);
bad!(
    absolute_path_refused,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{POOLS}{ENABLE}"),
    &files(&with_demo(
        "  nodes:\n    worker:\n      files:\n        - {path: /etc/x, template: /etc/passwd}\n"
    ))
);
bad!(
    bad_iam_statement,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{POOLS}{ENABLE}"),
    &files(&with_demo("  nodes:\n    worker:\n      iam:\n        statements:\n          - {Effect: Allow, Action: 's3:*', Resources: '*'}\n"))
);
bad!(
    bad_default_in_plugin,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo("    replicas: {type: integer, default: many}\n"))
);
bad!(
    cloudformation_not_json,
    "plugins/demo/cfn.json.tera",
    format!("{BASE}{ENABLE}"),
    &[
        (
            "plugins/demo/plugin.yaml",
            &format!("{DEMO}  cloudformation: {{resources: cfn.json.tera}}\n")
        ),
        (
            "plugins/demo/cfn.json.tera",
            "{\"Thing\": {\"Type\": \"AWS::SNS::Topic\", \"Properties\": {\"TopicName\": {{ params.url }}}}}\n"
        ),
    ]
);

// ---- conflicts between plugins ----

fn two(a_extra: &str, b_extra: &str) -> Vec<(&'static str, String)> {
    let head =
        |n: &str| format!("apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {{name: {n}, version: 0.1.0}}\nspec:\n");
    vec![
        ("plugins/alpha/plugin.yaml", format!("{}{a_extra}", head("alpha"))),
        ("plugins/beta/plugin.yaml", format!("{}{b_extra}", head("beta"))),
    ]
}
const BOTH: &str = "plugins:\n  alpha: {enabled: true}\n  beta: {enabled: true}\n";

bad!(
    flag_conflict,
    "plugins/beta/plugin.yaml",
    format!("{BASE}{BOTH}"),
    &files(&two(
        "  kubernetes:\n    apiServer:\n      flags: {oidc-client-id: alpha}\n",
        "  kubernetes:\n    apiServer:\n      flags: {oidc-client-id: beta}\n"
    ))
);
bad!(
    file_conflict,
    "plugins/beta/plugin.yaml",
    format!("{BASE}{POOLS}{BOTH}"),
    &files(&two(
        "  nodes:\n    worker:\n      files: [{path: /etc/shared.conf, content: a}]\n",
        "  nodes:\n    worker:\n      files: [{path: /etc/shared.conf, content: b}]\n"
    ))
);
bad!(
    unit_conflict,
    "plugins/beta/plugin.yaml",
    format!("{BASE}{BOTH}"),
    &files(&two(
        "  nodes:\n    controller:\n      systemdUnits: [{name: x.service, content: a}]\n",
        "  nodes:\n    controller:\n      systemdUnits: [{name: x.service, content: b}]\n"
    ))
);
bad!(
    cloudformation_logical_id_conflict,
    "plugins/beta/r.json",
    format!("{BASE}{BOTH}"),
    &[
        ("plugins/alpha/plugin.yaml", "apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {name: alpha, version: 0.1.0}\nspec:\n  cloudformation: {resources: r.json}\n"),
        ("plugins/alpha/r.json", "{\"Topic\": {\"Type\": \"AWS::SNS::Topic\"}}\n"),
        ("plugins/beta/plugin.yaml", "apiVersion: kube-aws/v1\nkind: Plugin\nmetadata: {name: beta, version: 0.1.0}\nspec:\n  cloudformation: {resources: r.json}\n"),
        ("plugins/beta/r.json", "{\n  \"Topic\": {\"Type\": \"AWS::SNS::Topic\"}\n}\n"),
    ]
);
bad!(
    release_collides_with_cluster_chart,
    "plugins/alpha/plugin.yaml",
    format!("{BASE}charts:\n  - name: web\n    repo: https://c.example.com\n{BOTH}"),
    &files(&two(
        "  charts:\n    - {name: web, repo: 'https://other.example.com'}\n",
        ""
    ))
);

#[test]
fn same_flag_same_value_is_fine() {
    let f = two(
        "  kubernetes:\n    apiServer:\n      flags: {oidc-client-id: same}\n",
        "  kubernetes:\n    apiServer:\n      flags: {oidc-client-id: same}\n",
    );
    let (code, stderr) = validate(&format!("{BASE}{BOTH}"), &files(&f));
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_disabled_plugin_is_not_checked() {
    // beta would conflict with alpha, but it is off.
    let f = two(
        "  kubernetes:\n    apiServer:\n      flags: {oidc-client-id: alpha}\n",
        "  kubernetes:\n    apiServer:\n      flags: {oidc-client-id: beta}\n",
    );
    let yaml = format!("{BASE}plugins:\n  alpha: {{enabled: true}}\n  beta: {{enabled: false}}\n");
    let (code, stderr) = validate(&yaml, &files(&f));
    assert_eq!(code, 0, "{stderr}");
}

// ---- issue 12 class 7: injection into node configuration ----

bad!(
    kubelet_flag_value_adds_flags,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{POOLS}{ENABLE}"),
    &files(&with_demo(
        "  kubernetes:\n    kubelet:\n      worker:\n        flags:\n          max-pods: '110 --anonymous-auth=true --authorization-mode=AlwaysAllow'\n"
    ))
);
bad!(
    apiserver_flag_value_with_newline,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo(
        "  kubernetes:\n    apiServer:\n      flags: {oidc-issuer-url: \"https://x\\n--anonymous-auth=true\"}\n"
    ))
);
bad!(
    kubelet_flag_owned_by_kube_aws,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo(
        "  kubernetes:\n    kubelet:\n      controller:\n        flags: {node-labels: 'a=b'}\n"
    ))
);
bad!(
    plugin_label_value_smuggles_a_label,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo(
        "  nodes:\n    controller:\n      nodeLabels: {team: 'a,evil=1'}\n"
    ))
);
bad!(
    plugin_taint_value_with_comma,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo(
        "  nodes:\n    controller:\n      taints: [{key: k, value: 'a,b', effect: NoSchedule}]\n"
    ))
);
bad!(
    unit_name_read_as_an_option,
    "plugins/demo/plugin.yaml",
    format!("{BASE}{ENABLE}"),
    &files(&with_demo(
        "  nodes:\n    controller:\n      systemdUnits: [{name: --now.service, content: x}]\n"
    ))
);

// ---- issue 11 finding 2: cluster-autoscaler's minor equals the cluster's ----

bad!(
    autoscaler_image_of_another_minor,
    "values/cluster-autoscaler.yaml",
    format!("{BASE}kubernetesVersion: '1.35'\nplugins:\n  cluster-autoscaler: {{enabled: true}}\n"),
    &[("values/cluster-autoscaler.yaml", "image:\n  tag: v1.34.1\n")]
);

// ---- issue 24, finding 10: max-pods follows the plugin's prefix delegation,
// so a values file may not switch it behind the parameter's back ----

bad!(
    vpc_cni_prefix_delegation_set_in_values,
    "values/aws-vpc-cni.yaml",
    format!("{BASE}plugins:\n  aws-vpc-cni: {{enabled: true}}\n"),
    &[(
        "values/aws-vpc-cni.yaml",
        "env:\n  ENABLE_PREFIX_DELEGATION: \"true\"\n"
    )]
);
bad!(
    vpc_cni_prefix_delegation_unset_in_init_values,
    "values/aws-vpc-cni.yaml",
    format!("{BASE}plugins:\n  aws-vpc-cni: {{enabled: true, enablePrefixDelegation: true}}\n"),
    &[(
        "values/aws-vpc-cni.yaml",
        "init:\n  env:\n    ENABLE_PREFIX_DELEGATION: \"false\"\n"
    )]
);
