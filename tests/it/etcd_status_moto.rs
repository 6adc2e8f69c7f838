//! etcd's alarms, metrics and `kube-aws status`, on moto and real etcd
//! (issue 29 item 2): `up` on moto creates the control-plane stack's two
//! CloudWatch alarms (database at 70 % of etcd.quotaBackendBytes, backup
//! age over twice etcd.backup.interval); three real etcd members of the test
//! bed at a 16 MiB quota are written to until etcd itself refuses writes and
//! raises NOSPACE; the node program's maintenance pass
//! (`kube-aws-node etcd-maintenance` on the leader's node) writes the
//! status object through the aws CLI to moto and the backup tick's metrics
//! go to moto's CloudWatch (tests/support/etcd_nospace.py); `kube-aws status`
//! and `status -o json` then report the NOSPACE alarm, each member's size
//! against the quota, and the alarms' states. A changed backup interval
//! moves the age alarm's threshold through `update`; `destroy` deletes both.
//!
//! Not covered here: moto does not evaluate alarms on the data put, so the
//! size alarm's ALARM state is set with SetAlarmState (the API CloudWatch
//! documents for testing an alarm's notification path), after the test has
//! checked that the published size crosses the stack's threshold for the
//! quota the members run with; the node role's PutMetricData (IAM enforced,
//! only in the kube-aws/etcd namespace) is tests/it/node_iam_moto.rs, from
//! the call table src/node/iam-calls.json.

use crate::common::{self, testbed, MotoEnv};

use std::path::Path;
use std::process::Command;

const BUCKET: &str = "kube-aws-etcd-status";

fn text(o: &std::process::Output) -> String {
    common::output_text(o)
}

#[test]
fn nospace_on_real_etcd_and_the_alarms_are_reported_by_status() {
    let Some(bin) = testbed::bin_dir("nospace_on_real_etcd_and_the_alarms_are_reported_by_status") else {
        return;
    };
    let env = MotoEnv::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             etcd:\n  quotaBackendBytes: 268435456\n  backup: {{interval: 2h}}\n\
             worker:\n  nodePools:\n    - name: general\n      count: 1\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));

    // The stack's alarms, as CloudFormation created them in moto.
    let alarms = env.aws_json(&[
        "cloudwatch",
        "describe-alarms",
        "--alarm-name-prefix",
        "kube-aws-demo-etcd-",
    ]);
    let by_name = |n: &str| {
        alarms["MetricAlarms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["AlarmName"] == n)
            .unwrap_or_else(|| panic!("no alarm {n}: {alarms}"))
            .clone()
    };
    let size = by_name("kube-aws-demo-etcd-db-size");
    assert_eq!(size["Namespace"], "kube-aws/etcd");
    assert_eq!(size["MetricName"], "DbSizeBytes");
    assert_eq!(size["Threshold"].as_f64(), Some((268435456u64 * 7 / 10) as f64));
    let age = by_name("kube-aws-demo-etcd-backup-age");
    assert_eq!(age["MetricName"], "BackupAgeSeconds");
    assert_eq!(age["Threshold"].as_f64(), Some(4.0 * 3600.0));

    // Before any maintenance pass: the alarms, no etcd alarm, no warning.
    let st = env.kube_aws(dir, &["status"]);
    assert!(st.status.success(), "{}", text(&st));
    let t = String::from_utf8_lossy(&st.stdout).to_string();
    assert!(t.contains("\netcd:\n  alarm kube-aws-demo-etcd-backup-age: "), "{t}");
    assert!(!t.contains("NOSPACE"), "{t}");

    // Real etcd at a 16 MiB quota, filled until it raises NOSPACE; the
    // node program's maintenance pass and metrics, against moto.
    let root = tempfile::tempdir().unwrap();
    let cc = std::fs::read_to_string(dir.join("rendered/userdata/controller.cloud-config")).unwrap();
    common::write_cloud_config_files(&cc, root.path());
    // runtime.json is the stub's (CloudFormation substitutes it): the part the
    // etcd tools read.
    std::fs::write(
        root.path().join("etc/kube-aws/runtime.json"),
        serde_json::json!({"cluster": "demo", "region": "us-west-2", "bucket": BUCKET, "keyPrefix": "clusters/demo"})
            .to_string(),
    )
    .unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(common::tool("python"));
    env.apply(&mut cmd);
    cmd.env("KUBE_AWS_ROOT", root.path())
        .env("KUBE_AWS_TESTBED_BIN", &bin)
        .arg(repo.join("tests/support/etcd_nospace.py"))
        .arg(repo);
    let started = std::time::Instant::now();
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    eprintln!("real etcd filled to NOSPACE and maintained in {:?}", started.elapsed());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let saw: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    let quota = 16.0 * 1024.0 * 1024.0;
    assert!(saw["puts"].as_u64().unwrap() > 0, "{saw}");
    // The v3 gateway answers etcd's "mvcc: database space exceeded"
    // (gRPC ResourceExhausted) with HTTP 429; the alarm below says which.
    assert!(
        saw["refused"].as_str().unwrap_or("").contains("429"),
        "etcd did not refuse a write: {saw}"
    );
    assert_eq!(saw["raised"][0]["alarm"], "NOSPACE", "{saw}");
    // The pass exits 1 while an alarm is raised (systemd shows it failed).
    assert_eq!(saw["maintenanceExit"], 1, "{saw}");
    let leader = saw["leader"].as_str().unwrap().to_string();

    // The leader's size went to CloudWatch, over 70 % of the members' quota.
    let stats = env.aws_json(&[
        "cloudwatch",
        "get-metric-statistics",
        "--namespace",
        "kube-aws/etcd",
        "--metric-name",
        "DbSizeBytes",
        "--dimensions",
        "Name=ClusterName,Value=demo",
        "--statistics",
        "Maximum",
        "--period",
        "300",
        "--start-time",
        "2000-01-01T00:00:00Z",
        "--end-time",
        "2100-01-01T00:00:00Z",
    ]);
    let published = stats["Datapoints"][0]["Maximum"].as_f64().unwrap_or(0.0);
    assert!(published >= 0.7 * quota, "published {published}: {stats}");
    assert_eq!(published, saw["dbSize"].as_f64().unwrap(), "{stats} {saw}");
    env.aws(&[
        "cloudwatch",
        "set-alarm-state",
        "--alarm-name",
        "kube-aws-demo-etcd-db-size",
        "--state-value",
        "ALARM",
        "--state-reason",
        &format!("Threshold Crossed: 1 datapoint [{published}] was greater than or equal to the threshold"),
    ]);

    // status: etcd's own alarm on the member that raised it, the sizes, the
    // CloudWatch alarm, and the warnings.
    let st = env.kube_aws(dir, &["status"]);
    assert!(st.status.success(), "{}", text(&st));
    let t = String::from_utf8_lossy(&st.stdout).to_string();
    assert!(t.contains("  etcd alarm NOSPACE raised on member https://"), "{t}");
    assert!(t.contains(&format!("  member {leader} (leader): database ")), "{t}");
    assert!(t.contains("% of the 16.0 MiB quota)"), "{t}");
    assert!(t.contains("  alarm kube-aws-demo-etcd-db-size: ALARM since "), "{t}");
    assert!(
        t.contains("warning: CloudWatch alarm kube-aws-demo-etcd-db-size is in ALARM"),
        "{t}"
    );
    assert!(t.contains("warning: etcd raised NOSPACE"), "{t}");

    let stj = env.kube_aws(dir, &["status", "-o", "json"]);
    assert!(stj.status.success(), "{}", text(&stj));
    let j: serde_json::Value = serde_json::from_slice(&stj.stdout).unwrap();
    let m = &j["etcd"]["maintenance"];
    assert_eq!(m["quotaBackendBytes"], 16 * 1024 * 1024, "{j}");
    assert_eq!(m["alarms"][0]["alarm"], "NOSPACE", "{j}");
    assert_eq!(m["members"].as_array().unwrap().len(), 3, "{j}");
    let states: Vec<(String, String)> = j["etcd"]["alarms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap().into(), a["state"].as_str().unwrap().into()))
        .collect();
    assert_eq!(states[1], ("kube-aws-demo-etcd-db-size".into(), "ALARM".into()), "{j}");
    assert_eq!(states[0].0, "kube-aws-demo-etcd-backup-age", "{j}");

    // The alarms follow the stack: a new backup interval moves the age
    // alarm's threshold (an update of the alarm in place), and destroy
    // deletes both (moto_server.py patch 10's update and delete).
    let yaml = std::fs::read_to_string(dir.join("cluster.yaml")).unwrap();
    std::fs::write(dir.join("cluster.yaml"), yaml.replace("interval: 2h", "interval: 3h")).unwrap();
    let upd = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "2m"]);
    assert!(upd.status.success(), "{}", text(&upd));
    let after = env.aws_json(&[
        "cloudwatch",
        "describe-alarms",
        "--alarm-names",
        "kube-aws-demo-etcd-backup-age",
    ]);
    assert_eq!(
        after["MetricAlarms"][0]["Threshold"].as_f64(),
        Some(6.0 * 3600.0),
        "{after}"
    );
    let d = env.kube_aws(dir, &["destroy", "--yes", "--wait", "--timeout", "2m"]);
    assert!(d.status.success(), "{}", text(&d));
    let gone = env.aws_json(&[
        "cloudwatch",
        "describe-alarms",
        "--alarm-name-prefix",
        "kube-aws-demo-etcd-",
    ]);
    assert_eq!(gone["MetricAlarms"], serde_json::json!([]), "{gone}");
}
