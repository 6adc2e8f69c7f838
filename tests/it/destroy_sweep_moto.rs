//! `destroy --wait` sweeps what the cluster left outside its stacks, on
//! moto: a network load balancer with its listener and target group and a
//! classic ELB with its security group (made as the AWS cloud controller
//! manager makes them for a `type: LoadBalancer` Service), a PVC's volume,
//! a detached VPC CNI ENI, and external-dns's records with their TXT
//! registry (tests/support/sweep_fixture.py makes them with boto3). After
//! destroy nothing tagged with the cluster is left, and what belongs to
//! another cluster, is `shared`, untagged or hand-made is untouched. A
//! tagged volume held by an instance outside the cluster is reported and
//! the command exits 3, with everything else swept.
//!
//! Not covered here: the deletion of Services and PVCs through the
//! Kubernetes API before the stacks go (a running API server); ELBv2's
//! asynchronous release of ENIs in real AWS (moto deletes at once: the
//! retry passes are tested as pure decisions in src/aws/lifecycle/sweep/tests.rs);
//! a stack ending DELETE_FAILED (moto never fails a delete).

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::MotoEnv as Env;

const BUCKET: &str = "kube-aws-sweep";
const CLUSTER: &str = "demo";

fn text(o: &Output) -> String {
    common::output_text(o)
}

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A work tree whose rendered stacks are one nested VPC stack, with
/// external-dns's hosted zone in cluster.yaml.
fn work_tree(dir: &Path, kms: &str, zone: &str) {
    write(
        &dir.join("cluster.yaml"),
        &format!(
            "clusterName: {CLUSTER}\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             worker:\n  nodePools:\n    - name: general\n      count: 1\n\
             plugins:\n  external-dns:\n    hostedZoneId: {zone}\n"
        ),
    );
    let r = dir.join("rendered");
    write(
        &r.join("stacks/root.json"),
        r#"{"AWSTemplateFormatVersion": "2010-09-09",
  "Parameters": {"ArtifactBaseURL": {"Type": "String"}, "ArtifactS3URI": {"Type": "String"}},
  "Resources": {"Network": {"Type": "AWS::CloudFormation::Stack",
                "Properties": {"TemplateURL": {"Fn::Sub": "${ArtifactBaseURL}/stacks/network.json"}}}}}
"#,
    );
    write(
        &r.join("stacks/network.json"),
        r#"{"Resources": {"VPC": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16",
  "Tags": [{"Key": "kubernetes.io/cluster/demo", "Value": "owned"}]}}}}
"#,
    );
    write(&r.join("addons/plan.json"), r#"{"releases": []}"#);
}

/// The fixture script against this moto: its JSON output.
fn fixture(env: &Env, args: &[&str]) -> serde_json::Value {
    let mut cmd = Command::new(common::tool("python"));
    env.apply(&mut cmd);
    let out = cmd
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/sweep_fixture.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "sweep_fixture.py {args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// moto's zone ID for example.com, made before the work tree names it.
fn zone(env: &Env) -> String {
    let id = env.aws(&[
        "route53",
        "create-hosted-zone",
        "--name",
        "example.com",
        "--caller-reference",
        "zone",
        "--query",
        "HostedZone.Id",
        "--output",
        "text",
    ]);
    id.trim().rsplit('/').next().unwrap().to_string()
}

/// The cluster up on moto, and the fixture's resources (its records in the
/// zone cluster.yaml gives external-dns).
fn up_with_leftovers(env: &Env, dir: &Path, extra: &[&str]) -> serde_json::Value {
    let kms = env.bucket_and_key(&[BUCKET]);
    let zone = zone(env);
    work_tree(dir, &kms, &zone);
    let up = env.kube_aws(dir, &["up", "--use-rendered", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    let mut args = vec![CLUSTER, zone.as_str()];
    args.extend(extra);
    fixture(env, &args)
}

#[test]
fn destroy_sweeps_everything_tagged_with_the_cluster_and_nothing_else() {
    let env = Env::new();
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path();
    let made = up_with_leftovers(&env, dir, &[]);
    let before = fixture(&env, &["--left", CLUSTER]);
    assert_eq!(strs(&before["tagged"]).len(), 6, "{before}");

    let d = env.kube_aws(
        dir,
        &["destroy", "--yes", "--wait", "--timeout", "2m", "--sweep-timeout", "5s"],
    );
    let out = text(&d);
    assert!(d.status.success(), "{out}");
    for what in [
        format!("removed load balancer {}", made["nlb"].as_str().unwrap()),
        format!("removed target group {}", made["tg"].as_str().unwrap()),
        "removed classic load balancer a4d5e6".into(),
        format!("removed volume {} (pvc-1)", made["volume"].as_str().unwrap()),
        format!("removed network interface {}", made["eni"].as_str().unwrap()),
        format!(
            "removed security group {} (k8s-elb-a1b2c3)",
            made["sg"].as_str().unwrap()
        ),
        "(CNAME web.example.com.)".into(),
        "(TXT cname-web.example.com.)".into(),
    ] {
        assert!(out.contains(&what), "{what:?} not in:\n{out}");
    }
    assert!(out.contains("stack \"demo\" is deleted"), "{out}");

    let after = fixture(&env, &["--left", CLUSTER]);
    assert!(strs(&after["tagged"]).is_empty(), "left tagged: {after}");
    // Another cluster's, the shared and the untagged volume, the other
    // cluster's load balancer, and the records external-dns does not own here.
    let volumes = strs(&after["volumes"]);
    for v in ["other_volume", "shared_volume", "untagged_volume"] {
        assert!(
            volumes.contains(&made[v].as_str().unwrap().to_string()),
            "{v} gone: {after}"
        );
    }
    assert_eq!(strs(&after["load_balancers"]), [made["other_nlb"].as_str().unwrap()]);
    let records: Vec<String> = after["records"].as_object().unwrap().values().flat_map(strs).collect();
    assert!(!records.iter().any(|r| r.contains("web.example.com.")), "{records:?}");
    for kept in ["A db.example.com.", "TXT a-db.example.com.", "A manual.example.com."] {
        assert!(records.contains(&kept.to_string()), "{kept} gone: {records:?}");
    }
}

#[test]
fn a_tagged_resource_held_from_outside_is_reported_and_destroy_exits_non_zero() {
    let env = Env::new();
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path();
    let made = up_with_leftovers(&env, dir, &["--in-use"]);
    let held = made["held_volume"].as_str().unwrap();

    let d = env.kube_aws(
        dir,
        &["destroy", "--yes", "--wait", "--timeout", "2m", "--sweep-timeout", "2s"],
    );
    let out = text(&d);
    assert_eq!(d.status.code(), Some(3), "{out}");
    assert!(
        out.contains(&format!("could not remove volume {held}: VolumeInUse")),
        "{out}"
    );
    assert!(
        out.contains("1 resource(s) tagged with the cluster could not be removed"),
        "{out}"
    );
    // Everything else was swept; the held volume and its instance are as they were.
    let after = fixture(&env, &["--left", CLUSTER]);
    assert_eq!(strs(&after["tagged"]), [held], "{after}");
    let attached = env.aws(&[
        "ec2",
        "describe-volumes",
        "--volume-ids",
        held,
        "--query",
        "Volumes[0].Attachments[0].InstanceId",
        "--output",
        "text",
    ]);
    assert_eq!(attached.trim(), made["instance"].as_str().unwrap());

    // Once the holder lets go, destroy again (the stack is gone) sweeps it.
    env.aws(&[
        "ec2",
        "detach-volume",
        "--volume-id",
        held,
        "--instance-id",
        made["instance"].as_str().unwrap(),
    ]);
    let again = env.kube_aws(dir, &["destroy", "--yes", "--wait", "--sweep-timeout", "2s"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("no stack \"demo\""), "{}", text(&again));
    assert!(strs(&fixture(&env, &["--left", CLUSTER])["tagged"]).is_empty());
}
