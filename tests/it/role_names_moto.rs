//! Service-account role names carry the region (issue 36 §4): IAM role names
//! are global to an account, so two clusters of one name in two regions of
//! one account used to meet at their first role. On moto server (one account,
//! two regions; moto's IAM refuses a second role of a name with
//! EntityAlreadyExists, as IAM does), both `up`s complete and each cluster's
//! chart values carry its own role's ARN. A stack created before the record
//! keeps its role names on `update` (the pipeline with that record, offline).
//!
//! Not covered: a real IAM; an `update` of a live stack created by an older
//! kube-aws on moto (the record's reading is unit-tested in
//! src/aws/state/role_names.rs; what `update` renders with it is checked here
//! through the pipeline it calls).

use crate::common;

use common::charts::{lock_to_shared_charts, offline_helm, shared_charts};
use common::MotoEnv as Env;
use kube_aws::chart::ChartCache;
use kube_aws::irsa::RoleNames;
use serde_json::{json, Value};

fn cluster_yaml(region: &str, bucket: &str, kms: &str) -> String {
    format!(
        "clusterName: demo\nregion: {region}\ns3URI: s3://{bucket}/clusters\nkmsKeyARN: {kms}\n\
         worker:\n  nodePools:\n    - {{name: general, minSize: 1, maxSize: 3}}\n\
         plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n  \
         cluster-autoscaler: {{enabled: true}}\n"
    )
}

/// The autoscaler's role ARN in the rendered chart values.
fn autoscaler_role_arn(dir: &std::path::Path) -> String {
    let values = std::fs::read_to_string(
        dir.join("rendered")
            .join(kube_aws::render::layout::addon_values("cluster-autoscaler")),
    )
    .unwrap();
    let v: Value = serde_yaml::from_str(&values).unwrap();
    v["rbac"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"]
        .as_str()
        .unwrap_or_else(|| panic!("no role ARN in the values: {values}"))
        .to_string()
}

#[test]
fn one_cluster_name_in_two_regions_of_one_account_both_come_up() {
    let env = Env::new();
    let cache = ChartCache::new(env.home.path().join("cache/kube-aws/charts"));
    let mut arns = Vec::new();
    let trees: Vec<tempfile::TempDir> = ["us-west-2", "eu-west-1"]
        .iter()
        .map(|region| {
            let bucket = format!("kube-aws-{region}");
            let out = env.setup(json!({"region": region, "buckets": [bucket], "createKey": true}));
            let kms = out["keyArn"].as_str().unwrap();
            let tree = tempfile::tempdir().unwrap();
            let yaml = cluster_yaml(region, &bucket, kms) + &offline_helm(&cache);
            std::fs::write(tree.path().join("cluster.yaml"), yaml).unwrap();
            lock_to_shared_charts(tree.path(), &cache, &shared_charts());
            let up = env.kube_aws(tree.path(), &["up", "--wait", "--timeout", "2m"]);
            assert!(up.status.success(), "{region}: {}", common::output_text(&up));
            arns.push(autoscaler_role_arn(tree.path()));
            tree
        })
        .collect();
    assert_eq!(
        arns.iter().map(|a| a.rsplit('/').next().unwrap()).collect::<Vec<_>>(),
        [
            "demo-us-west-2-kube-system-cluster-autoscaler",
            "demo-eu-west-1-kube-system-cluster-autoscaler"
        ]
    );
    // Both roles exist, each trusted by its own region's issuer.
    for (arn, region) in arns.iter().zip(["us-west-2", "eu-west-1"]) {
        let name = arn.rsplit('/').next().unwrap();
        let role = env.aws_json(&["iam", "get-role", "--role-name", name]);
        assert_eq!(role["Role"]["Arn"], json!(arn), "{role}");
        let trust = role["Role"]["AssumeRolePolicyDocument"].to_string();
        assert!(trust.contains(&format!("kube-aws-{region}-oidc-demo")), "{trust}");
    }
    // Each root stack records the scheme its roles were named by.
    for (tree, region) in trees.iter().zip(["us-west-2", "eu-west-1"]) {
        let stacks = env.aws_json(&[
            "cloudformation",
            "describe-stacks",
            "--stack-name",
            "demo",
            "--region",
            region,
        ]);
        let outputs = stacks["Stacks"][0]["Outputs"].as_array().unwrap();
        let recorded = outputs.iter().find(|o| o["OutputKey"] == "RoleNames");
        assert_eq!(
            recorded.map(|o| o["OutputValue"].clone()),
            Some(json!(RoleNames::Regional.as_str())),
            "{outputs:?}"
        );
        assert!(tree.path().join("rendered").is_dir());
    }
}

#[test]
fn a_stack_recorded_before_the_region_keeps_its_role_names_on_update() {
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path().to_path_buf());
    std::fs::write(
        dir.join("cluster.yaml"),
        cluster_yaml("us-west-2", "demo-bucket", "arn:aws:kms:us-west-2:111122223333:key/k") + &offline_helm(&cache),
    )
    .unwrap();
    lock_to_shared_charts(dir, &cache, &shared_charts());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (record, want) in [
        (None, "demo-us-west-2-kube-system-cluster-autoscaler"),
        (Some(RoleNames::Cluster), "demo-kube-system-cluster-autoscaler"),
    ] {
        rt.block_on(kube_aws::pipeline::prepare_deploy(
            &kube_aws::pipeline::DeployPrepareOptions {
                dir: dir.to_path_buf(),
                cache_dir: cache_dir.path().to_path_buf(),
                fetch: kube_aws::chart::FetchOptions::default(),
                recorded: kube_aws::pipeline::Recorded {
                    zone_count: None,
                    role_names: record,
                },
                running_version: None,
            },
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            autoscaler_role_arn(dir).ends_with(&format!("role/{want}")),
            "{record:?}"
        );
        let root: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("rendered/stacks/root.json")).unwrap()).unwrap();
        assert_eq!(
            root["Outputs"]["RoleNames"]["Value"],
            json!(record.unwrap_or_default().as_str())
        );
        let stacks = std::fs::read_dir(dir.join("rendered/stacks"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect::<String>();
        assert!(
            stacks.contains(&format!("\"RoleName\": \"{want}\"")),
            "the role is created under {want}"
        );
    }
}
