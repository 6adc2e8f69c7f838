//! Render fixtures shared by the render tests, the installer test and the
//! benchmark: a minimal cluster, one with every hook filled by hand (per-pool
//! overrides, Helm v2 mode), and a generated large cluster.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use indexmap::IndexMap;
use kube_aws::config::{parse_cluster, Cluster, Origin, Release, Taint, TaintEffect};
use kube_aws::plugin::*;
use kube_aws::render::{AddonInput, RenderInput};
use serde_json::json;
use sha2::{Digest, Sha256};

pub fn load(yaml: &str) -> Cluster {
    parse_cluster(Path::new("."), Path::new("cluster.yaml"), yaml).unwrap_or_else(|e| panic!("fixture: {e}"))
}

pub fn fake_digest(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// An addon for a cluster.yaml release, locked, with its layered values.
pub fn addon(r: &Release, version: &str, values: &str, crds: &[&str]) -> AddonInput {
    AddonInput {
        release: r.clone(),
        chart_version: version.into(),
        digest: Some(fake_digest(&format!("{}-{version}", r.chart))),
        chart_url: format!("https://charts.example.com/{}-{version}.tgz", r.chart),
        values_yaml: values.into(),
        crds: crds.iter().map(|s| s.to_string()).collect(),
    }
}

pub const MINIMAL_YAML: &str = r#"
clusterName: mini
region: us-west-2
s3URI: s3://kube-aws-test
worker:
  nodePools:
    - name: general
      count: 2
"#;

pub fn minimal() -> RenderInput {
    let c = load(MINIMAL_YAML);
    RenderInput::new(c.config, vec![])
}

pub const FULL_YAML: &str = r#"
clusterName: full
region: eu-west-1
s3URI: s3://kube-aws-test/clusters
kmsKeyARN: arn:aws:kms:eu-west-1:111122223333:key/00000000-0000-0000-0000-000000000000
kubernetesVersion: "1.35"
network:
  vpcCIDR: 10.20.0.0/16
  availabilityZones: [eu-west-1a, eu-west-1b, eu-west-1c]
controller:
  count: 3
  instanceType: m6i.xlarge
  rootVolumeSize: 50
worker:
  nodePools:
    - name: general
      count: 3
      instanceType: m6i.large
      labels: {team: web}
      maxInstanceLifetimeDays: 30
    - name: spot-arm
      minSize: 1
      maxSize: 10
      instanceType: m7g.large
      labels: {workload: batch}
      taints: [{key: dedicated, value: batch, effect: NoSchedule}]
helm:
  version: 2
  tiller: {historyMax: 5}
charts:
  - name: calico
    repo: https://docs.tigera.io/calico/charts
    chart: tigera-operator
    version: 3.28.2
    namespace: tigera-operator
    bootstrap: true
  - name: cert-manager
    repo: https://charts.jetstack.io
    version: v1.15.3
    namespace: cert-manager
    set: {crds: {enabled: true}}
    timeout: 10m
  - name: metrics-server
    repo: https://kubernetes-sigs.github.io/metrics-server/
    version: "~3.12"
    namespace: kube-system
    dependsOn: [cert-manager]
    set: {replicas: 2}
"#;

fn file(plugin: &str, path: &str, content: &str) -> NodeFile {
    NodeFile {
        plugin: plugin.into(),
        path: path.into(),
        content: content.into(),
        permissions: "0644".into(),
        owner: "root:root".into(),
    }
}

fn unit(plugin: &str, name: &str, enable: bool) -> SystemdUnit {
    SystemdUnit {
        plugin: plugin.into(),
        name: name.into(),
        content: format!(
            "[Unit]\nDescription={plugin} helper\n\n[Service]\nType=oneshot\nExecStart=/usr/bin/true\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
        enable,
    }
}

fn statement(plugin: &str, action: &str, resource: &str) -> IamStatement {
    IamStatement {
        plugin: plugin.into(),
        statement: json!({"Effect": "Allow", "Action": [action], "Resource": resource}),
    }
}

pub fn dex_release() -> Release {
    Release {
        name: "dex".into(),
        chart: "dex".into(),
        source: kube_aws::config::ChartSource::Repo("https://charts.dexidp.io".into()),
        version: Some("0.19.1".into()),
        namespace: "dex".into(),
        values_files: vec![],
        set: Default::default(),
        depends_on: vec!["cert-manager".into()],
        timeout: Duration::from_secs(600),
        create_namespace: true,
        bootstrap: false,
        replicas_value: None,
        origin: Origin::Plugin {
            plugin: "dex".into(),
            index: 0,
        },
        declared: None,
    }
}

/// Every hook of `ResolvedPlugins` filled in, by hand.
pub fn all_hooks() -> ResolvedPlugins {
    let mut pools = IndexMap::new();
    pools.insert(
        "general".to_string(),
        NodeHooks {
            asg_min_size: None,
            asg_max_size: None,
            asg_size_plugin: None,
            kubelet_flags: [("max-pods".to_string(), "58".to_string())].into(),
            iam_statements: vec![statement(
                "cluster-autoscaler",
                "autoscaling:DescribeAutoScalingGroups",
                "*",
            )],
            files: vec![file(
                "cluster-autoscaler",
                "/etc/cluster-autoscaler/pool.conf",
                "pool=general\n",
            )],
            systemd_units: vec![unit("cluster-autoscaler", "ca-warmup.service", true)],
            node_labels: [("autoscaler.kube-aws.io/pool".to_string(), "general".to_string())].into(),
            taints: vec![],
            asg_tags: [
                ("k8s.io/cluster-autoscaler/enabled".to_string(), "true".to_string()),
                ("k8s.io/cluster-autoscaler/full".to_string(), "owned".to_string()),
            ]
            .into(),
        },
    );
    pools.insert(
        "spot-arm".to_string(),
        NodeHooks {
            asg_min_size: None,
            asg_max_size: None,
            asg_size_plugin: None,
            kubelet_flags: [("max-pods".to_string(), "29".to_string())].into(),
            iam_statements: vec![],
            files: vec![],
            systemd_units: vec![unit("spot-handler", "spot-drain.timer", false)],
            node_labels: [("node.kubernetes.io/lifecycle".to_string(), "spot".to_string())].into(),
            taints: vec![Taint {
                key: "spot".into(),
                value: "true".into(),
                effect: TaintEffect::PreferNoSchedule,
            }],
            asg_tags: [("k8s.io/cluster-autoscaler/enabled".to_string(), "true".to_string())].into(),
        },
    );
    ResolvedPlugins {
        plugins: vec![
            ActivePlugin {
                name: "dex".into(),
                version: "0.1.0".into(),
                description: "OIDC identity provider".into(),
                source: PluginSource::BuiltIn,
            },
            ActivePlugin {
                name: "cluster-autoscaler".into(),
                version: "0.2.0".into(),
                description: "scales node pools".into(),
                source: PluginSource::WorkTree,
            },
        ],
        cluster: ClusterHooks {
            api_server_flags: [
                ("oidc-issuer-url".to_string(), "https://dex.example.com".to_string()),
                ("oidc-client-id".to_string(), "kubernetes".to_string()),
                ("oidc-groups-claim".to_string(), "groups".to_string()),
            ]
            .into(),
            controller_manager_flags: [("terminated-pod-gc-threshold".to_string(), "100".to_string())].into(),
            scheduler_flags: [("profiling".to_string(), "false".to_string())].into(),
            manifests: vec![Manifest {
                plugin: "dex".into(),
                name: "rbac.yaml".into(),
                content: "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: oidc-admins\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n  - apiGroup: rbac.authorization.k8s.io\n    kind: Group\n    name: admins\n".into(),
            }],
            cloudformation: vec![
                CfnContribution {
                    plugin: "dex".into(),
                    stack: "control-plane".into(),
                    resources: json!({"DexIssuerParameter": {"Type": "AWS::SSM::Parameter", "Properties": {
                        "Type": "String", "Value": "https://dex.example.com"}}})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                    outputs: json!({"DexIssuerParameterName": {"Value": {"Ref": "DexIssuerParameter"}}})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                },
                CfnContribution {
                    plugin: "cluster-autoscaler".into(),
                    stack: "root".into(),
                    resources: json!({"ScalingEvents": {"Type": "AWS::SNS::Topic", "Properties": {}}})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    outputs: json!({"ScalingEventsTopic": {"Value": {"Ref": "ScalingEvents"}}})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                },
                CfnContribution {
                    plugin: "spot-handler".into(),
                    stack: "node-pool-spot-arm".into(),
                    resources: json!({"InterruptionQueue": {"Type": "AWS::SQS::Queue", "Properties": {
                        "MessageRetentionPeriod": 300}}})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                    outputs: serde_json::Map::new(),
                },
            ],
        },
        controller: NodeHooks {
            asg_min_size: None,
            asg_max_size: None,
            asg_size_plugin: None,
            kubelet_flags: [("max-pods".to_string(), "110".to_string())].into(),
            iam_statements: vec![statement(
                "dex",
                "ssm:GetParameter",
                "arn:aws:ssm:eu-west-1:111122223333:parameter/dex/*",
            )],
            files: vec![file("dex", "/etc/dex/issuer", "https://dex.example.com\n")],
            systemd_units: vec![unit("dex", "dex-sync.service", true)],
            node_labels: [("kube-aws.io/oidc".to_string(), "enabled".to_string())].into(),
            taints: vec![],
            asg_tags: [("kube-aws.io/role".to_string(), "controller".to_string())].into(),
        },
        pools,
        releases: vec![PluginRelease {
            release: dex_release(),
            values: vec![PluginValues {
                plugin: "dex".into(),
                file: "values.yaml.tera".into(),
                content: "config:\n  issuer: https://dex.example.com\n".into(),
            }],
        }],
        secrets: vec![SecretRef {
            plugin: "dex".into(),
            param: "clientSecret".into(),
            reference: "kube-aws-secret.dex.clientSecret".into(),
            scope: "cluster".into(),
            value: kube_aws::plugin::SecretParamValue(serde_json::json!("not-in-any-artifact")),
        }],
        service_accounts: vec![kube_aws::plugin::ServiceAccountRole {
            plugin: "cluster-autoscaler".into(),
            namespace: "kube-system".into(),
            name: "cluster-autoscaler".into(),
            role_name: "full-kube-system-cluster-autoscaler".into(),
            role_arn: "arn:aws:iam::111122223333:role/full-kube-system-cluster-autoscaler".into(),
            statements: vec![json!({"Sid": "ClusterAutoscalerWrite", "Effect": "Allow",
                "Action": ["autoscaling:SetDesiredCapacity"], "Resource": "*",
                "Condition": {"StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/full": "owned"}}})],
        }],
        vpc_cni_prefix_delegation: false,
    }
}

pub fn full() -> RenderInput {
    let c = load(FULL_YAML);
    let r = &c.releases;
    let addons = vec![
        addon(
            &r[0],
            "3.28.2",
            "installation:\n  kubernetesProvider: \"\"\n",
            &["operator.tigera.io_installations.yaml"],
        ),
        addon(
            &r[1],
            "v1.15.3",
            "crds:\n  enabled: true\n",
            &["crd-certificates.yaml", "crd-issuers.yaml"],
        ),
        addon(&r[2], "3.12.2", "replicas: 2\n", &[]),
        addon(
            &dex_release(),
            "0.19.1",
            "config:\n  issuer: https://dex.example.com\n  staticClients:\n    - id: kubernetes\n      secret: kube-aws-secret.dex.clientSecret\n",
            &[],
        ),
    ];
    let mut input = RenderInput::new(c.config, addons);
    input.plugins = all_hooks();
    input
}

/// A generated cluster: `charts` releases (two of every three depending on the
/// one before) and `pools` node pools, each with the `general` pool's hooks.
pub fn generated(charts: usize, pools: usize) -> RenderInput {
    let mut yaml =
        String::from("clusterName: big\nregion: us-east-1\ns3URI: s3://kube-aws-bench/c\nworker:\n  nodePools:\n");
    for p in 0..pools {
        yaml.push_str(&format!(
            "    - {{name: pool-{p}, minSize: 1, maxSize: 5, labels: {{pool: p{p}}}}}\n"
        ));
    }
    yaml.push_str("charts:\n");
    for i in 0..charts {
        yaml.push_str(&format!(
            "  - {{name: chart-{i}, repo: https://charts.example.com, version: 1.0.{i}, namespace: ns-{ns}{deps}}}\n",
            ns = i % 7,
            deps = if i > 0 && i % 3 != 0 {
                format!(", dependsOn: [chart-{}]", i - 1)
            } else {
                String::new()
            }
        ));
    }
    let c = load(&yaml);
    let addons = c
        .releases
        .iter()
        .enumerate()
        .map(|(i, r)| {
            addon(
                r,
                &format!("1.0.{i}"),
                &format!("replicaCount: {}\nimage:\n  tag: v{i}\n", i % 3 + 1),
                &[],
            )
        })
        .collect();
    let mut input = RenderInput::new(c.config, addons);
    let mut hooks = all_hooks();
    hooks.pools = (0..pools)
        .map(|p| {
            let mut h = hooks.pools["general"].clone();
            h.files[0].content = format!("pool=pool-{p}\n");
            (format!("pool-{p}"), h)
        })
        .collect();
    hooks.cluster.cloudformation.retain(|c| c.stack != "node-pool-spot-arm");
    input.plugins = hooks;
    input
}
