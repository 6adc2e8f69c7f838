//! `kube-aws restore` on moto (issue 29 item 4): a 3-controller cluster made
//! by `up`, its zone count recorded in the stack; snapshots in its bucket:
//! a real etcd database (the test bed's etcd writes one, the bbolt file
//! `etcdctl snapshot save` streams), another cluster's, a non-snapshot
//! object under a snapshot key. A key that does not exist, is another
//! cluster's, or cannot be read as an etcd snapshot is refused (exit 1)
//! before anything changes: no request object, no controller touched. The
//! newest snapshot's restore writes the request and terminates the three
//! controllers, and changes no subnet, no worker group and no stack.
//!
//! Not covered here: the replacements' boot (moto runs no instance; the
//! node's decisions, restore lock, requested key and served request are
//! src/node/tests/test_etcd.py with a fake aws CLI; the restore commands
//! themselves run only on the real-node bed), a KMS key the caller may not use (moto's S3 does not call KMS on
//! GetObject), and moto's auto scaling group launching replacements.

use crate::common::{self, testbed, MotoEnv};

use std::process::Command;
use std::time::Duration;

const BUCKET: &str = "kube-aws-restore";

fn text(o: &std::process::Output) -> String {
    common::output_text(o)
}

/// A real etcd database: the test bed's etcd started on a scratch data
/// dir, a key written through its v3 gateway, stopped; its bbolt file.
fn real_etcd_db(bin: &std::path::Path) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (common::free_port(), common::free_port());
    let mut etcd = Command::new(bin.join("etcd"))
        .args(["--name", "m1", "--data-dir"])
        .arg(dir.path().join("data"))
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client}"),
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client}"),
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-cluster",
            &format!("m1=http://127.0.0.1:{peer}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let put = format!("http://127.0.0.1:{client}/v3/kv/put");
    loop {
        let ok = Command::new("curl")
            .args(["-sf", "-X", "POST", &put, "-d", r#"{"key": "Zm9v", "value": "YmFy"}"#])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "etcd did not answer in 60 s");
        std::thread::sleep(Duration::from_millis(300));
    }
    etcd.kill().unwrap();
    etcd.wait().unwrap();
    std::fs::read(dir.path().join("data/member/snap/db")).unwrap()
}

fn objects(env: &MotoEnv) -> Vec<String> {
    let l = env.aws_json(&["s3api", "list-objects-v2", "--bucket", BUCKET]);
    l["Contents"]
        .as_array()
        .map(|a| a.iter().map(|o| o["Key"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn nested(env: &MotoEnv, logical: &str) -> String {
    let r = env.aws_json(&[
        "cloudformation",
        "describe-stack-resource",
        "--stack-name",
        "demo",
        "--logical-resource-id",
        logical,
    ]);
    r["StackResourceDetail"]["PhysicalResourceId"]
        .as_str()
        .unwrap()
        .to_string()
}

fn resources(env: &MotoEnv, stack: &str, kind: &str) -> Vec<String> {
    let r = env.aws_json(&["cloudformation", "list-stack-resources", "--stack-name", stack]);
    let mut out: Vec<String> = r["StackResourceSummaries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ResourceType"] == kind)
        .map(|r| r["PhysicalResourceId"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// Each group's name, instances (id, state) and subnets.
fn groups(env: &MotoEnv) -> serde_json::Value {
    let g = env.aws_json(&["autoscaling", "describe-auto-scaling-groups"]);
    let mut out: Vec<serde_json::Value> = g["AutoScalingGroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let mut ids: Vec<String> = g["Instances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["InstanceId"].as_str().unwrap().to_string())
                .collect();
            ids.sort();
            serde_json::json!({"name": g["AutoScalingGroupName"], "instances": ids,
                               "subnets": g["VPCZoneIdentifier"], "template": g["LaunchTemplate"]})
        })
        .collect();
    out.sort_by_key(|g| g["name"].as_str().unwrap_or_default().to_string());
    serde_json::Value::Array(out)
}

fn state(env: &MotoEnv, id: &str) -> String {
    let d = env.aws_json(&["ec2", "describe-instances", "--instance-ids", id]);
    d["Reservations"][0]["Instances"][0]["State"]["Name"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn restore_refuses_bad_keys_and_replaces_only_the_controllers() {
    let Some(bin) = testbed::bin_dir("restore_refuses_bad_keys_and_replaces_only_the_controllers") else {
        return;
    };
    let env = MotoEnv::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             controller:\n  count: 3\n\
             worker:\n  nodePools:\n    - name: general\n      count: 2\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    // The zone count `up` chose is recorded in the stack.
    let root = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", "demo"]);
    let zone_count = root["Stacks"][0]["Outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["OutputKey"] == "ZoneCount")
        .map(|o| o["OutputValue"].clone());
    assert_eq!(zone_count, Some(serde_json::json!("3")), "{root}");

    // Snapshots: a real etcd database (SSE-KMS, as the backup tick uploads
    // it), another cluster's, and an object that is not a snapshot.
    let scratch = tempfile::tempdir().unwrap();
    let db = scratch.path().join("db");
    std::fs::write(&db, real_etcd_db(&bin)).unwrap();
    let junk = scratch.path().join("junk");
    std::fs::write(&junk, "{\"not\": \"a snapshot\"}").unwrap();
    let good = "clusters/demo/etcd/hourly/20261201T100000Z-ip-10-0-1-5.db";
    // In time order: `backups` (and a restore without --snapshot) take the
    // newest by LastModified, as the backup tick's uploads are.
    for (file, key) in [
        (&junk, "clusters/demo/etcd/daily/20261130T000000Z-ip-10-0-1-5.db"),
        (&db, "clusters/demo/etcd/hourly/20261201T090000Z-ip-10-0-1-5.db"),
        (&db, "clusters/prod/etcd/hourly/20261201T110000Z-ip-10-9-1-5.db"),
        (&db, good),
    ] {
        env.aws(&[
            "s3",
            "cp",
            file.to_str().unwrap(),
            &format!("s3://{BUCKET}/{key}"),
            "--sse",
            "aws:kms",
            "--sse-kms-key-id",
            &kms,
        ]);
    }

    let network = nested(&env, "Network");
    let subnets = resources(&env, &network, "AWS::EC2::Subnet");
    assert_eq!(subnets.len(), 3, "{subnets:?}");
    let before_groups = groups(&env);
    let before_objects = objects(&env);
    let stacks_before = env.aws_json(&["cloudformation", "describe-stacks"]);
    let controllers: Vec<String> = {
        let g = before_groups.as_array().unwrap();
        let cp = g
            .iter()
            .find(|g| {
                g["name"].as_str().unwrap().contains("ControlPlane")
                    || g["name"].as_str().unwrap().contains("Controller")
            })
            .unwrap_or_else(|| panic!("no controller group in {before_groups}"));
        cp["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(controllers.len(), 3, "{before_groups}");

    // Refusals, nothing changed after each.
    for (given, says) in [
        ("hourly/20261201T120000Z-ip-10-0-1-5.db", "does not exist"),
        (
            "clusters/prod/etcd/hourly/20261201T110000Z-ip-10-9-1-5.db",
            "belongs to another cluster",
        ),
        (
            "s3://other-bucket/clusters/demo/etcd/hourly/x.db",
            "belongs to another cluster",
        ),
        ("daily/20261130T000000Z-ip-10-0-1-5.db", "cannot be read"),
        ("hourly/notes.txt", "is not an etcd snapshot key"),
    ] {
        let o = env.kube_aws(dir, &["restore", "--snapshot", given, "--yes"]);
        assert_eq!(o.status.code(), Some(1), "{given}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("restore refused, nothing was changed") && err.contains(says),
            "{given}: {err}"
        );
        assert_eq!(objects(&env), before_objects, "{given} wrote something");
        for c in &controllers {
            assert_eq!(state(&env, c), "running", "{given} touched {c}");
        }
    }
    // Without a terminal and without --yes, nothing either.
    let o = env.kube_aws(dir, &["restore"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(objects(&env), before_objects);

    // The newest snapshot: the request, the controllers terminated.
    let o = env.kube_aws(dir, &["restore", "--yes", "-o", "json"]);
    assert!(o.status.success(), "{}", text(&o));
    let started: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(started["snapshot"]["key"], good, "{started}");
    let mut terminated: Vec<String> = started["terminated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap().to_string())
        .collect();
    terminated.sort();
    assert_eq!(terminated, controllers);
    for c in &controllers {
        assert!(matches!(state(&env, c).as_str(), "shutting-down" | "terminated"), "{c}");
    }
    let req = env.aws(&[
        "s3",
        "cp",
        "s3://kube-aws-restore/clusters/demo/bootstrap/etcd-restore.json",
        "-",
    ]);
    let req: serde_json::Value = serde_json::from_str(&req).unwrap();
    assert_eq!(
        (&req["id"], &req["key"]),
        (&started["request"], &serde_json::json!(good))
    );

    // No subnet, no worker group, no stack changed.
    assert_eq!(resources(&env, &network, "AWS::EC2::Subnet"), subnets);
    let after_groups = groups(&env);
    for (b, a) in before_groups
        .as_array()
        .unwrap()
        .iter()
        .zip(after_groups.as_array().unwrap())
    {
        assert_eq!(
            (&b["name"], &b["subnets"], &b["template"]),
            (&a["name"], &a["subnets"], &a["template"])
        );
        if !b["name"].as_str().unwrap().contains("ControlPlane") && !b["name"].as_str().unwrap().contains("Controller")
        {
            assert_eq!(b["instances"], a["instances"], "a worker group changed");
        }
    }
    let stacks_after = env.aws_json(&["cloudformation", "describe-stacks"]);
    let summary = |s: &serde_json::Value| -> Vec<(String, String, String)> {
        let mut v: Vec<(String, String, String)> = s["Stacks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["StackName"].as_str().unwrap_or_default().to_string(),
                    s["StackStatus"].as_str().unwrap_or_default().to_string(),
                    s["LastUpdatedTime"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(summary(&stacks_before), summary(&stacks_after));
}
