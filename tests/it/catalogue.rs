//! The built-in plugin catalogue: each plugin resolves with example
//! parameters from an empty work tree (so only the embedded layer is used)
//! and contributes the hooks it promises. Chart versions are checked against
//! the real upstream indexes in ../shared/data when present.
//!
//! Not covered: rendering these hooks into CloudFormation and cloud-config
//! (the render issue), and installing the charts (no cluster here).

use crate::common;

use kube_aws::config::{load_cluster, ChartSource};
use kube_aws::plugin::{resolve_plugins, PluginSource, ResolvedPlugins};
use serde_json::Value;

mod checks;

const CLUSTER: &str = "clusterName: demo
region: us-west-2
s3URI: s3://demo-bucket/kube-aws
kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k
worker:
  nodePools:
    - name: general
      minSize: 1
      maxSize: 10
      plugins:
        cluster-autoscaler: {minSize: 2, maxSize: 10}
    - name: batch
      count: 1
      plugins:
        cluster-autoscaler: {enabled: false}
plugins:
  dex:
    enabled: true
    issuerURL: https://dex.example.com
    exposure: values
    connector: github
    connectorClientID: kube-aws-demo
    connectorClientSecret: connector-secret-hidden
    staticClientSecret: not-in-any-output
    staticClientRedirectURIs: [https://app.example.com/callback]
  cluster-autoscaler: {enabled: true}
  aws-ebs-csi-driver: {enabled: true}
  metrics-server: {enabled: true}
  external-dns: {enabled: true, hostedZoneId: Z0123456789ABC, domainFilter: example.com}
  cluster-dump: {enabled: true, keptRevisions: 5}
  descheduler: {enabled: true}
";

fn resolve(yaml: &str) -> ResolvedPlugins {
    // A work tree outside the repository, so only built-ins are seen.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.yaml"), yaml).unwrap();
    let cluster = load_cluster(dir.path()).unwrap();
    resolve_plugins(&cluster).unwrap_or_else(|e| panic!("{e}"))
}

fn actions(hooks: &kube_aws::plugin::NodeHooks, plugin: &str) -> Vec<String> {
    hooks
        .iter_statements(plugin)
        .flat_map(|s| match &s["Action"] {
            Value::Array(a) => a.iter().filter_map(|x| x.as_str().map(String::from)).collect(),
            Value::String(x) => vec![x.clone()],
            _ => vec![],
        })
        .collect()
}

trait Statements {
    fn iter_statements<'a>(&'a self, plugin: &'a str) -> Box<dyn Iterator<Item = &'a Value> + 'a>;
}

impl Statements for kube_aws::plugin::NodeHooks {
    fn iter_statements<'a>(&'a self, plugin: &'a str) -> Box<dyn Iterator<Item = &'a Value> + 'a> {
        Box::new(
            self.iam_statements
                .iter()
                .filter(move |s| s.plugin == plugin)
                .map(|s| &s.statement),
        )
    }
}

/// The one service-account role a plugin declares: its `namespace/name`, ARN and statements.
fn role_of<'a>(r: &'a ResolvedPlugins, plugin: &str) -> &'a kube_aws::plugin::ServiceAccountRole {
    let mut roles = r.service_accounts.iter().filter(|s| s.plugin == plugin);
    let role = roles
        .next()
        .unwrap_or_else(|| panic!("{plugin} has no service-account role"));
    assert!(roles.next().is_none(), "{plugin} has one role");
    role
}

fn role_actions(r: &ResolvedPlugins, plugin: &str) -> Vec<String> {
    role_of(r, plugin)
        .statements
        .iter()
        .flat_map(|s| match &s["Action"] {
            Value::Array(a) => a.iter().filter_map(|x| x.as_str().map(String::from)).collect(),
            Value::String(x) => vec![x.clone()],
            _ => vec![],
        })
        .collect()
}

/// No node role of any scope holds a statement of `plugin`.
fn on_no_node_role(r: &ResolvedPlugins, plugin: &str) {
    for hooks in std::iter::once(&r.controller).chain(r.pools.values()) {
        assert!(actions(hooks, plugin).is_empty(), "{plugin} on a node role");
    }
}

fn values_of(r: &ResolvedPlugins, release: &str) -> serde_yaml::Value {
    let pr = r.releases.iter().find(|p| p.release.name == release).unwrap();
    serde_yaml::from_str(&pr.values[0].content).unwrap()
}

#[test]
fn all_built_ins_resolve_together() {
    let r = resolve(CLUSTER);
    let mut names: Vec<&str> = r.plugins.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "aws-cloud-controller-manager",
            "aws-ebs-csi-driver",
            "aws-vpc-cni",
            "cluster-autoscaler",
            "cluster-dump",
            "descheduler",
            "dex",
            "external-dns",
            "metrics-server",
            "pod-identity-webhook"
        ]
    );
    assert!(r.plugins.iter().all(|p| p.source == PluginSource::BuiltIn));
}

#[test]
fn dex_sets_the_oidc_flags_and_keeps_the_client_secret_secret() {
    let r = resolve(CLUSTER);
    let f = &r.cluster.api_server_flags;
    assert_eq!(f["oidc-issuer-url"], "https://dex.example.com");
    assert_eq!(f["oidc-client-id"], "kubernetes");
    assert_eq!(f["oidc-username-claim"], "email");
    assert_eq!(f["oidc-groups-claim"], "groups");
    let v = values_of(&r, "dex");
    assert_eq!(v["config"]["issuer"], "https://dex.example.com");
    let client = &v["config"]["staticClients"][0];
    assert_eq!(client["secret"], "kube-aws-secret.dex.staticClientSecret");
    assert_eq!(client["redirectURIs"][0], "https://app.example.com/callback");
    let connector = &v["config"]["connectors"][0];
    assert_eq!(connector["type"], "github");
    assert_eq!(
        connector["config"]["clientSecret"],
        "kube-aws-secret.dex.connectorClientSecret"
    );
    assert_eq!(connector["config"]["redirectURI"], "https://dex.example.com/callback");
    let all = serde_json::to_string(&r).unwrap();
    assert!(!all.contains("not-in-any-output") && !all.contains("connector-secret-hidden"));
    let mut secrets: Vec<&str> = r.secrets.iter().filter_map(|s| s.value.expose().as_str()).collect();
    secrets.sort();
    assert_eq!(secrets, ["connector-secret-hidden", "not-in-any-output"]);
    // No oidcCA: no --oidc-ca-file, the apiserver uses the host's public roots.
    assert!(!f.contains_key("oidc-ca-file"));
}

#[test]
fn dex_without_a_groups_claim_leaves_the_flag_out() {
    let yaml = CLUSTER.replace(
        "issuerURL: https://dex.example.com",
        "issuerURL: https://dex.example.com\n    groupsClaim: ''",
    );
    let r = resolve(&yaml);
    assert!(!r.cluster.api_server_flags.contains_key("oidc-groups-claim"));
}

#[test]
fn cluster_autoscaler_tags_and_sizes_the_pools_that_enable_it() {
    let r = resolve(CLUSTER);
    let general = &r.pools["general"];
    let batch = &r.pools["batch"];
    assert_eq!(general.asg_tags["k8s.io/cluster-autoscaler/enabled"], "true");
    assert_eq!(general.asg_tags["k8s.io/cluster-autoscaler/demo"], "owned");
    assert_eq!((general.asg_min_size, general.asg_max_size), (Some(2), Some(10)));
    assert!(batch.asg_tags.is_empty());
    assert_eq!((batch.asg_min_size, batch.asg_max_size), (None, None));
    // Its IAM is its own role, on no node role.
    on_no_node_role(&r, "cluster-autoscaler");
    let role = role_of(&r, "cluster-autoscaler");
    assert_eq!(
        (role.namespace.as_str(), role.name.as_str()),
        ("kube-system", "cluster-autoscaler")
    );
    // Writes are limited to this cluster's groups; describes are not.
    let write = role
        .statements
        .iter()
        .find(|s| s["Sid"] == "ClusterAutoscalerWrite")
        .unwrap();
    assert_eq!(
        write["Condition"]["StringEquals"]["aws:ResourceTag/k8s.io/cluster-autoscaler/demo"],
        "owned"
    );
    assert!(write["Action"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a.as_str().unwrap().starts_with("autoscaling:S") || a.as_str().unwrap().starts_with("autoscaling:T")));
    assert!(role_actions(&r, "cluster-autoscaler").contains(&"autoscaling:DescribeAutoScalingGroups".to_string()));
    let v = values_of(&r, "cluster-autoscaler");
    // The chart's service account is the role's, annotated with its ARN.
    assert_eq!(v["rbac"]["serviceAccount"]["name"], "cluster-autoscaler");
    assert_eq!(
        v["rbac"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/demo-us-west-2-kube-system-cluster-autoscaler"
    );
    assert_eq!(v["autoDiscovery"]["clusterName"], "demo");
    assert_eq!(v["awsRegion"], "us-west-2");
}

#[test]
fn ebs_csi_driver_iam_is_its_controllers_role_only_with_tag_conditions() {
    let r = resolve(CLUSTER);
    let a = role_actions(&r, "aws-ebs-csi-driver");
    for needed in [
        "ec2:CreateVolume",
        "ec2:AttachVolume",
        "ec2:CreateSnapshot",
        "ec2:DescribeVolumes",
    ] {
        assert!(a.contains(&needed.to_string()), "{needed} missing: {a:?}");
    }
    // No node role: the node DaemonSet never calls EC2.
    on_no_node_role(&r, "aws-ebs-csi-driver");
    assert_eq!(role_of(&r, "aws-ebs-csi-driver").name, "ebs-csi-controller-sa");
    // Every destructive action carries a tag condition.
    for s in &role_of(&r, "aws-ebs-csi-driver").statements {
        let acts = s["Action"].as_array().unwrap();
        if acts
            .iter()
            .any(|x| x == "ec2:DeleteVolume" || x == "ec2:DeleteSnapshot")
        {
            assert!(s["Condition"]["StringLike"].is_object(), "{s}");
        }
        if acts.iter().any(|x| x == "ec2:CreateVolume") && s["Resource"] == "arn:aws:ec2:*:*:volume/*" {
            let c = &s["Condition"]["StringLike"];
            assert!(
                c["aws:RequestTag/ebs.csi.aws.com/cluster"] == "true" || c["aws:RequestTag/CSIVolumeName"] == "*",
                "{s}"
            );
        }
    }
    let v = values_of(&r, "aws-ebs-csi-driver");
    assert_eq!(v["controller"]["region"], "us-west-2");
    let sa = &v["controller"]["serviceAccount"];
    assert_eq!(sa["name"], "ebs-csi-controller-sa");
    assert_eq!(
        sa["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/demo-us-west-2-kube-system-ebs-csi-controller-sa"
    );
    // Pods cannot reach IMDS (hop limit 1): the node plugin reads the Node object.
    assert_eq!(v["node"]["metadataSources"], "kubernetes");
    assert!(v["controller"].get("nodeSelector").is_none());
    assert_eq!(v["storageClasses"][0]["parameters"]["type"], "gp3");
    assert_eq!(
        v["storageClasses"][0]["annotations"]["storageclass.kubernetes.io/is-default-class"],
        "true"
    );
}

#[test]
fn metrics_server_is_a_chart_only() {
    let r = resolve(CLUSTER);
    let pr = r.releases.iter().find(|p| p.release.name == "metrics-server").unwrap();
    assert_eq!(pr.release.namespace, "kube-system");
    for hooks in [&r.controller, &r.pools["general"]] {
        assert!(actions(hooks, "metrics-server").is_empty());
    }
}

#[test]
fn external_dns_may_change_only_its_hosted_zone() {
    let r = resolve(CLUSTER);
    on_no_node_role(&r, "external-dns");
    let change = role_of(&r, "external-dns")
        .statements
        .iter()
        .find(|s| s["Action"][0] == "route53:ChangeResourceRecordSets")
        .unwrap();
    assert_eq!(change["Resource"], "arn:aws:route53:::hostedzone/Z0123456789ABC");
    let v = values_of(&r, "external-dns");
    assert_eq!(v["extraArgs"][0], "--zone-id-filter=Z0123456789ABC");
    assert_eq!(v["domainFilters"][0], "example.com");
    assert_eq!(v["txtOwnerId"], "demo");
    assert_eq!(v["serviceAccount"]["name"], "external-dns");
    assert_eq!(
        v["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/demo-us-west-2-kube-system-external-dns"
    );
}

#[test]
fn cluster_dump_writes_only_under_its_prefix() {
    let r = resolve(CLUSTER);
    on_no_node_role(&r, "cluster-dump");
    let write = role_of(&r, "cluster-dump")
        .statements
        .iter()
        .find(|s| s["Sid"] == "ClusterDumpWrite")
        .unwrap();
    assert_eq!(write["Resource"], "arn:aws:s3:::demo-bucket/kube-aws/demo/dumps/*");
    let m = r.cluster.manifests.iter().find(|m| m.plugin == "cluster-dump").unwrap();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&m.content)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let sa = docs.iter().find(|d| d["kind"] == "ServiceAccount").unwrap();
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/demo-us-west-2-kube-system-cluster-dump"
    );
    let cron = docs.iter().find(|d| d["kind"] == "CronJob").unwrap();
    assert_eq!(cron["spec"]["schedule"], "0 * * * *");
    let env = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(env[0]["value"], "s3://demo-bucket/kube-aws/demo/dumps");
    assert_eq!(env[1]["value"], "5");
    // Secrets stay out of the dumps unless opted in.
    assert!(env
        .as_sequence()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "INCLUDE_SECRETS" && e["value"] == "false"));
}

#[test]
fn cluster_dump_prefix_cannot_leave_dumps() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = CLUSTER.replace("keptRevisions: 5}", "s3Prefix: etc}");
    std::fs::write(dir.path().join("cluster.yaml"), yaml).unwrap();
    let cluster = load_cluster(dir.path()).unwrap();
    let err = resolve_plugins(&cluster).unwrap_err().to_string();
    assert!(
        err.contains("plugins.cluster-dump.s3Prefix") && err.contains("does not match"),
        "{err}"
    );
}

#[test]
fn descheduler_runs_as_a_cronjob() {
    let r = resolve(CLUSTER);
    let v = values_of(&r, "descheduler");
    assert_eq!(v["kind"], "CronJob");
    assert_eq!(v["schedule"], "*/10 * * * *");
}

/// Issue 36: beside the cluster-autoscaler the descheduler does not balance
/// (LowNodeUtilization would fill the nodes the autoscaler empties); alone,
/// it keeps the chart's own policy.
#[test]
fn descheduler_does_not_balance_against_the_autoscaler() {
    let with = values_of(&resolve(CLUSTER), "descheduler");
    let profile = &with["deschedulerPolicy"]["profiles"][0];
    let text = serde_yaml::to_string(profile).unwrap();
    assert!(!text.contains("LowNodeUtilization"), "{text}");
    assert!(!text.contains("HighNodeUtilization"), "{text}");
    let balance: Vec<&str> = profile["plugins"]["balance"]["enabled"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        balance,
        ["RemoveDuplicates", "RemovePodsViolatingTopologySpreadConstraint"]
    );
    // Each enabled plugin is configured (or takes no arguments) in the profile.
    assert!(text.contains("RemovePodsHavingTooManyRestarts"), "{text}");
    let alone = values_of(
        &resolve(&CLUSTER.replace(
            "cluster-autoscaler: {enabled: true}",
            "cluster-autoscaler: {enabled: false}",
        )),
        "descheduler",
    );
    assert!(alone.get("deschedulerPolicy").is_none(), "{alone:?}");
}

#[test]
fn aws_vpc_cni_is_on_by_default_as_a_bootstrap_addon() {
    let r = resolve("clusterName: demo\nregion: us-west-2\ns3URI: s3://demo-bucket/x\nworker:\n  nodePools: [{name: a, count: 1}]\n");
    let mut on: Vec<&str> = r.plugins.iter().map(|p| p.name.as_str()).collect();
    on.sort();
    assert_eq!(
        on,
        ["aws-cloud-controller-manager", "aws-vpc-cni", "pod-identity-webhook"]
    );
    let pr = r.releases.iter().find(|p| p.release.name == "aws-vpc-cni").unwrap();
    assert_eq!(pr.release.name, "aws-vpc-cni");
    assert!(pr.release.bootstrap);
    assert_eq!(
        pr.release.source,
        ChartSource::Repo("https://aws.github.io/eks-charts".into())
    );
    for hooks in [&r.controller, &r.pools["a"]] {
        let a = actions(hooks, "aws-vpc-cni");
        assert!(a.contains(&"ec2:AssignPrivateIpAddresses".to_string()), "{a:?}");
        assert!(a.contains(&"ec2:CreateNetworkInterface".to_string()), "{a:?}");
        // Issue 27: nothing changes a network interface or an instance that is
        // not the cluster's, and every new interface carries the cluster tag.
        for s in hooks.iter_statements("aws-vpc-cni") {
            let acts: Vec<&str> = s["Action"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            let resources: Vec<&str> = match &s["Resource"] {
                Value::Array(a) => a.iter().map(|x| x.as_str().unwrap()).collect(),
                v => vec![v.as_str().unwrap()],
            };
            let changes = acts
                .iter()
                .any(|a| !a.starts_with("ec2:Describe") && *a != "ec2:CreateTags");
            if changes && resources.iter().any(|r| r.contains(":network-interface/")) {
                let c = &s["Condition"]["StringEquals"];
                assert!(
                    c["aws:ResourceTag/cluster.k8s.amazonaws.com/name"] == "demo"
                        || c["aws:RequestTag/cluster.k8s.amazonaws.com/name"] == "demo",
                    "{s}"
                );
            }
            if resources.iter().any(|r| r.contains(":instance/")) {
                assert_eq!(
                    s["Condition"]["StringEquals"]["aws:ResourceTag/kubernetes.io/cluster/demo"], "owned",
                    "{s}"
                );
            }
            assert!(!(changes && resources.contains(&"*")), "{s}");
        }
    }
    let off = resolve(
        "clusterName: demo\nregion: us-west-2\ns3URI: s3://demo-bucket/x\nplugins:\n  aws-vpc-cni: {enabled: false}\n  aws-cloud-controller-manager: {enabled: false}\n  pod-identity-webhook: {enabled: false}\n",
    );
    assert!(off.plugins.is_empty());
}

#[test]
fn aws_cloud_controller_manager_is_on_by_default_on_the_controllers() {
    let r = resolve("clusterName: demo\nregion: us-west-2\ns3URI: s3://demo-bucket/x\nworker:\n  nodePools: [{name: a, count: 1}]\n");
    let pr = r
        .releases
        .iter()
        .find(|p| p.release.name == "aws-cloud-controller-manager")
        .unwrap();
    assert!(pr.release.bootstrap);
    let a = actions(&r.controller, "aws-cloud-controller-manager");
    for needed in [
        "ec2:DescribeInstances",
        "elasticloadbalancing:CreateLoadBalancer",
        "kms:DescribeKey",
    ] {
        assert!(a.contains(&needed.to_string()), "{needed}: {a:?}");
    }
    assert!(actions(&r.pools["a"], "aws-cloud-controller-manager").is_empty());
    // Issue 27: none of the in-tree volume plugin's actions, no route actions
    // (the route controller is off), and every delete only on what the
    // controller tagged as this cluster's.
    for gone in [
        "ec2:CreateVolume",
        "ec2:AttachVolume",
        "ec2:DetachVolume",
        "ec2:DeleteVolume",
        "ec2:ModifyVolume",
        "ec2:CreateRoute",
        "ec2:DeleteRoute",
    ] {
        assert!(!a.contains(&gone.to_string()), "{gone}: {a:?}");
    }
    let statements: Vec<&Value> = r.controller.iter_statements("aws-cloud-controller-manager").collect();
    let mut deletes = 0;
    for s in &statements {
        let acts = s["Action"].as_array().unwrap();
        if acts.iter().any(|x| x.as_str().unwrap().contains(":Delete")) {
            deletes += acts.len();
            assert_eq!(
                s["Condition"]["StringEquals"]["aws:ResourceTag/kubernetes.io/cluster/demo"], "owned",
                "{s}"
            );
        }
    }
    assert_eq!(deletes, 5, "{statements:?}");
    let v: serde_yaml::Value = serde_yaml::from_str(&pr.values[0].content).unwrap();
    assert_eq!(v["image"]["tag"], "v1.35.3");
    assert_eq!(v["hostNetworking"], true);
    assert_eq!(v["args"][2], "--cluster-name=demo");
}

#[test]
fn cilium_replaces_aws_vpc_cni_and_both_conflict() {
    let base = "clusterName: demo\nregion: us-west-2\ns3URI: s3://demo-bucket/x\nworker:\n  nodePools: [{name: a, count: 1}]\n";
    let r = resolve(&format!(
        "{base}plugins:\n  aws-vpc-cni: {{enabled: false}}\n  cilium: {{enabled: true}}\n"
    ));
    let mut names: Vec<&str> = r.plugins.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["aws-cloud-controller-manager", "cilium", "pod-identity-webhook"]
    );
    let cilium = r.releases.iter().find(|p| p.release.name == "cilium").unwrap();
    assert!(cilium.release.bootstrap);
    let v: serde_yaml::Value = serde_yaml::from_str(&cilium.values[0].content).unwrap();
    assert_eq!(v["ipam"]["operator"]["clusterPoolIPv4PodCIDRList"][0], "10.244.0.0/16");
    assert_eq!(r.pools["a"].files[0].content, "cilium\n");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        format!("{base}plugins:\n  cilium: {{enabled: true}}\n"),
    )
    .unwrap();
    let cluster = load_cluster(dir.path()).unwrap();
    let err = resolve_plugins(&cluster).unwrap_err().to_string();
    assert!(
        err.contains("/etc/kube-aws/cni-plugin") && err.contains("\"cilium\"") && err.contains("\"aws-vpc-cni\""),
        "{err}"
    );
}

/// The pod identity webhook: on by default, its manifests name the serving
/// certificate only by reference, and its Fail-closed entry covers exactly the
/// plugins' service accounts.
#[test]
fn pod_identity_webhook_mutates_the_plugins_service_accounts_fail_closed() {
    let r = resolve(CLUSTER);
    let m = r
        .cluster
        .manifests
        .iter()
        .find(|m| m.plugin == "pod-identity-webhook")
        .unwrap();
    assert!(!m.content.contains("PRIVATE KEY") && !m.content.contains("BEGIN CERTIFICATE"));
    for reference in kube_aws::pki::WEBHOOK_ENTRIES {
        assert!(m.content.contains(reference), "{reference}");
    }
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&m.content)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let cfg = docs
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .unwrap();
    let hooks = cfg["webhooks"].as_sequence().unwrap();
    assert_eq!(hooks.len(), 2);
    assert_eq!(
        (hooks[0]["failurePolicy"].as_str(), hooks[1]["failurePolicy"].as_str()),
        (Some("Fail"), Some("Ignore"))
    );
    let mut roles: Vec<String> = r
        .service_accounts
        .iter()
        .map(|s| format!("{}/{}", s.namespace, s.name))
        .collect();
    roles.sort();
    assert_eq!(
        roles,
        [
            "kube-system/cluster-autoscaler",
            "kube-system/cluster-dump",
            "kube-system/ebs-csi-controller-sa",
            "kube-system/external-dns"
        ]
    );
    for h in hooks {
        let expr = h["matchConditions"][0]["expression"].as_str().unwrap();
        for role in &roles {
            assert!(expr.contains(&format!("\"{role}\"")), "{role} in {expr}");
        }
    }
    assert!(hooks[1]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .starts_with("!("));
    let deploy = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let labels = &deploy["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["eks.amazonaws.com/skip-pod-identity-webhook"], "true");
}

/// Does one of `rules` (a ClusterRole's) grant `verb` on `resource` of `group`?
/// RBAC's matching: "*" matches any group, resource or verb; a resource
/// name matches exactly, so `pods` never covers `pods/exec`.
fn rbac_allows(rules: &serde_yaml::Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |list: &serde_yaml::Value, want: &str| {
        list.as_sequence()
            .is_some_and(|l| l.iter().any(|x| x.as_str() == Some("*") || x.as_str() == Some(want)))
    };
    rules
        .as_sequence()
        .unwrap()
        .iter()
        .any(|r| has(&r["apiGroups"], group) && has(&r["resources"], resource) && has(&r["verbs"], verb))
}

fn cluster_dump_docs(r: &ResolvedPlugins) -> Vec<serde_yaml::Value> {
    let m = r.cluster.manifests.iter().find(|m| m.plugin == "cluster-dump").unwrap();
    serde_yaml::Deserializer::from_str(&m.content)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

/// Issue 24, finding 10: cluster-dump's service account cannot read Secrets
/// (nor reach a node or a pod through a subresource) unless `includeSecrets`
/// is on; it still reads what a dump is for.
#[test]
fn cluster_dump_reads_secrets_only_when_included() {
    for include in [false, true] {
        let yaml = CLUSTER.replace(
            "cluster-dump: {enabled: true, keptRevisions: 5}",
            &format!("cluster-dump: {{enabled: true, keptRevisions: 5, includeSecrets: {include}}}"),
        );
        let docs = cluster_dump_docs(&resolve(&yaml));
        let role = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
        let rules = &role["rules"];
        for verb in ["get", "list", "watch"] {
            assert_eq!(
                rbac_allows(rules, "", "secrets", verb),
                include && verb != "watch",
                "{verb}: {rules:?}"
            );
        }
        for (group, resource, verb) in [
            ("", "nodes/proxy", "get"),
            ("", "pods/exec", "get"),
            ("", "pods/exec", "create"),
            ("", "serviceaccounts/token", "create"),
            ("dex.coreos.com", "signingkeies", "list"),
            ("", "pods", "delete"),
            ("apps", "deployments", "update"),
        ] {
            assert!(
                !rbac_allows(rules, group, resource, verb),
                "{group}/{resource} {verb}: {rules:?}"
            );
        }
        for (group, resource) in [
            ("", "pods"),
            ("", "configmaps"),
            ("", "nodes"),
            ("", "namespaces"),
            ("apps", "deployments"),
            ("batch", "cronjobs"),
            ("rbac.authorization.k8s.io", "clusterroles"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            ("networking.k8s.aws", "policyendpoints"),
        ] {
            assert!(
                rbac_allows(rules, group, resource, "list"),
                "{group}/{resource}: {rules:?}"
            );
        }
        assert!(
            role["rules"]
                .as_sequence()
                .unwrap()
                .iter()
                .all(|r| r.get("nonResourceURLs").is_none()),
            "{rules:?}"
        );
    }
}

/// Issue 24, finding 10: dumps are SSE-KMS with the cluster's key. The job
/// uploads with it, and the role may put an object only so (the conditions
/// S3 evaluates on PutObject), and use the key only through S3 for dumps.
#[test]
fn cluster_dump_writes_sse_kms_with_the_cluster_key() {
    let key = "arn:aws:kms:us-west-2:111122223333:key/k";
    let r = resolve(CLUSTER);
    let role = role_of(&r, "cluster-dump");
    let sid = |s: &str| {
        role.statements
            .iter()
            .find(|x| x["Sid"] == s)
            .unwrap_or_else(|| panic!("{s}"))
    };
    let put = sid("ClusterDumpWrite");
    assert_eq!(put["Action"], serde_json::json!(["s3:PutObject"]));
    let c = &put["Condition"];
    assert_eq!(c["StringEquals"]["s3:x-amz-server-side-encryption"], "aws:kms", "{c}");
    assert_eq!(
        c["StringEqualsIfExists"]["s3:x-amz-server-side-encryption-aws-kms-key-id"], key,
        "{c}"
    );
    assert_eq!(
        c["Null"]["s3:x-amz-server-side-encryption-aws-kms-key-id"], "false",
        "{c}"
    );
    let kms = sid("ClusterDumpEncrypt");
    assert_eq!(kms["Resource"], key);
    assert_eq!(
        kms["Condition"]["StringEquals"]["kms:ViaService"],
        "s3.us-west-2.amazonaws.com"
    );
    assert_eq!(
        kms["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"][0],
        "arn:aws:s3:::demo-bucket/kube-aws/demo/dumps/*"
    );
    // No statement lets the role put an object another way.
    for s in &role.statements {
        let actions = s["Action"].to_string();
        if actions.contains("s3:PutObject") {
            assert_eq!(s["Sid"], "ClusterDumpWrite");
        }
    }
    let docs = cluster_dump_docs(&r);
    let cron = docs.iter().find(|d| d["kind"] == "CronJob").unwrap();
    let c = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    let env = c["env"].as_sequence().unwrap();
    assert!(
        env.iter().any(|e| e["name"] == "SSE_KMS_KEY" && e["value"] == key),
        "{env:?}"
    );
    let script = c["args"][0].as_str().unwrap();
    assert!(
        script.contains("--sse aws:kms --sse-kms-key-id \"$SSE_KMS_KEY\"") && script.contains("aws s3 cp \"$@\""),
        "{script}"
    );

    // Without kmsKeyARN (an offline render): SSE-KMS with the aws/s3 key,
    // named by no header, which the conditions then require.
    let r = resolve(&CLUSTER.replace("kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n", ""));
    let role = role_of(&r, "cluster-dump");
    let put = role.statements.iter().find(|x| x["Sid"] == "ClusterDumpWrite").unwrap();
    assert_eq!(
        put["Condition"]["StringEquals"]["s3:x-amz-server-side-encryption"],
        "aws:kms"
    );
    assert_eq!(
        put["Condition"]["Null"]["s3:x-amz-server-side-encryption-aws-kms-key-id"],
        "true"
    );
}

/// Issue 27: with the VPC CNI (the example's default), every launch template
/// tags the primary network interface with the tag the CNI's scoped
/// statements require, so the CNI may still assign its addresses.
#[test]
fn with_the_vpc_cni_primary_network_interfaces_carry_the_cluster_tag() {
    let tmp = tempfile::tempdir().unwrap();
    let kube_aws = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-aws"))
            .current_dir(tmp.path())
            .env("NO_COLOR", "1")
            .env("XDG_CACHE_HOME", tmp.path().join("cache"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kube-aws {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kube_aws(&["init", "--example", "example"]);
    kube_aws(&["--dir", "example", "render", "--output-dir", "out"]);
    let out = ["example/out/stacks", "out/stacks"]
        .iter()
        .map(|d| tmp.path().join(d))
        .find(|d| d.is_dir())
        .unwrap();
    let mut templates = 0;
    for e in std::fs::read_dir(&out).unwrap() {
        let t: Value = serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap();
        for (_, r) in t["Resources"].as_object().unwrap() {
            if r["Type"] != "AWS::EC2::LaunchTemplate" {
                continue;
            }
            templates += 1;
            let specs = r["Properties"]["LaunchTemplateData"]["TagSpecifications"]
                .as_array()
                .unwrap();
            let eni = specs
                .iter()
                .find(|s| s["ResourceType"] == "network-interface")
                .unwrap_or_else(|| panic!("{specs:?}"));
            assert!(
                eni["Tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t["Key"] == "cluster.k8s.amazonaws.com/name"
                        && t["Value"].as_str().is_some_and(|v| !v.is_empty())),
                "{eni}"
            );
        }
    }
    assert!(templates >= 2, "controllers and a pool");
}
