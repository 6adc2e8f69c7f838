//! `kube-aws nodes` and `kube-aws logs` against moto server: a real work tree
//! (private subnets, one NAT gateway, a narrowed API) goes `up`, moto's auto scaling groups launch real moto EC2 instances (with
//! the tags the stacks propagate), and the test publishes node bootstrap
//! reports as real S3 objects where nodes put them
//! (`status/nodes/<instance-id>.json`). `nodes` must list exactly the
//! instances EC2 lists, with role, pool, zone, private DNS name, state and
//! the report's status; `logs` must print a report by instance id and by DNS
//! name, say plainly when a node has none, and refuse an unknown node naming
//! the ones that exist.
//!
//! Not covered here: a real node writing its report (tests/it/node_secrets.rs runs
//! the bootstrap script), instances actually booting (moto runs nothing), and
//! SSM sessions (moto has no Session Manager endpoint for `start-session`).

use crate::common;

use std::path::Path;
use std::process::Output;

use common::MotoEnv as Env;
use serde_json::{json, Value};

const BUCKET: &str = "kube-aws-nodes";
const CLUSTER: &str = "demo";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn put_report(env: &Env, dir: &Path, instance: &str, report: &Value) {
    let f = dir.join(format!("{instance}.json"));
    std::fs::write(&f, report.to_string()).unwrap();
    env.aws(&[
        "s3",
        "cp",
        f.to_str().unwrap(),
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/status/nodes/{instance}.json"),
    ]);
}

/// (instance id, private DNS name, zone, Name tag) of every instance EC2 lists
/// with the cluster tag, as the aws CLI sees it.
fn ec2_instances(env: &Env) -> Vec<(String, String, String, String)> {
    let r = env.aws_json(&[
        "ec2",
        "describe-instances",
        "--filters",
        &format!("Name=tag:kubernetes.io/cluster/{CLUSTER},Values=owned"),
    ]);
    let mut out: Vec<_> = r["Reservations"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["Instances"].as_array().unwrap().iter())
        .map(|i| {
            let name = i["Tags"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["Key"] == "Name")
                .map(|t| t["Value"].as_str().unwrap().to_string())
                .unwrap_or_default();
            (
                i["InstanceId"].as_str().unwrap().to_string(),
                i["PrivateDnsName"].as_str().unwrap().to_string(),
                i["Placement"]["AvailabilityZone"].as_str().unwrap().to_string(),
                name,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn nodes_and_logs_read_moto_instances_and_s3_reports() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    // aws-vpc-cni's chart is on the internet, out of reach here.
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: {CLUSTER}\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             network:\n  privateSubnets: true\n  natGateways: single\n\
             apiEndpoint:\n  allowedCIDRs: [203.0.113.0/24]\n\
             worker:\n  nodePools:\n    - name: general\n      count: 2\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();

    // Before `up`: no instances, and `logs` says the cluster has none.
    let none = env.kube_aws(dir, &["logs", "i-0123456789abcdef0"]);
    assert_eq!(none.status.code(), Some(1), "{}", text(&none));
    assert!(text(&none).contains("the cluster has no nodes"), "{}", text(&none));

    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));

    // The private layout moto created: one shared NAT gateway, the S3 endpoint.
    let nat = env.aws_json(&["ec2", "describe-nat-gateways"]);
    assert_eq!(nat["NatGateways"].as_array().unwrap().len(), 1, "{nat}");
    let endpoints = env.aws_json(&["ec2", "describe-vpc-endpoints"]);
    assert!(
        endpoints["VpcEndpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["ServiceName"] == "com.amazonaws.us-west-2.s3" && e["VpcEndpointType"] == "Gateway"),
        "{endpoints}"
    );

    let ec2 = ec2_instances(&env);
    assert_eq!(ec2.len(), 3, "one controller and two workers: {ec2:?}");
    let controller = ec2.iter().find(|i| i.3 == "demo-controller").expect("a controller");
    let workers: Vec<_> = ec2.iter().filter(|i| i.3 == "demo-worker-general").collect();
    assert_eq!(workers.len(), 2, "{ec2:?}");

    // nodes -o json: exactly EC2's instances, nothing reported yet.
    let out = env.kube_aws(dir, &["nodes", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut ids: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["instance_id"].as_str().unwrap().to_string(),
                r["private_dns_name"].as_str().unwrap().to_string(),
                r["zone"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    ids.sort();
    let want: Vec<_> = ec2.iter().map(|i| (i.0.clone(), i.1.clone(), i.2.clone())).collect();
    assert_eq!(ids, want);
    for r in &rows {
        assert_eq!(r["state"], "running", "{r}");
        assert_eq!(r["bootstrap"], "no failure reported", "{r}");
        // (moto places ASG instances in its default region's zones, whatever
        // the subnets say: the zone is compared with EC2's above.)
        assert!(!r["zone"].as_str().unwrap().is_empty(), "{r}");
        if r["instance_id"] == controller.0.as_str() {
            assert_eq!(r["role"], "controller");
            assert!(r.get("pool").is_none(), "{r}");
        } else {
            assert_eq!(r["role"], "worker");
            assert_eq!(r["pool"], "general");
        }
    }

    // A failed worker's report, and one of an instance the rollback terminated.
    let failed = workers[0];
    let reports = tempfile::tempdir().unwrap();
    let report = json!({
        "instanceId": failed.0, "nodeName": failed.1, "role": "worker-general",
        "stack": "demo-NodePoolGeneral-1", "asgLogicalId": "WorkerGroup",
        "step": "kubeadm-join", "exitCode": 1,
        "command": "kubeadm join --token <blanked>",
        "log": "fetching the bundle\njoining demo\nerror: unable to reach the API", "timestamp": 1764547200,
    });
    put_report(&env, reports.path(), &failed.0, &report);
    let gone = json!({
        "instanceId": "i-0aaaaaaaaaaaaaaaa", "nodeName": "ip-10-0-9-9.us-west-2.compute.internal",
        "role": "worker-general", "step": "fetch-config", "exitCode": 0, "log": "no route to s3", "timestamp": 1,
    });
    put_report(&env, reports.path(), "i-0aaaaaaaaaaaaaaaa", &gone);

    let out = env.kube_aws(dir, &["nodes"]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("INSTANCE") && lines[0].contains("BOOTSTRAP"),
        "{table}"
    );
    assert_eq!(lines.len(), 5, "header, three instances, one gone: {table}");
    let line_of = |id: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id}: {table}"))
    };
    let l = line_of(&failed.0);
    assert!(
        l.contains("worker") && l.contains("general") && l.contains(&failed.1) && l.contains(&failed.2),
        "{l}"
    );
    assert!(l.ends_with("failed at kubeadm-join (exit 1)"), "{l}");
    assert!(line_of(&controller.0).ends_with("no failure reported"));
    let g = line_of("i-0aaaaaaaaaaaaaaaa");
    assert!(g.contains(" gone ") && g.ends_with("failed at fetch-config"), "{g}");
    assert_eq!(lines[4], g, "gone nodes come last");

    // logs by instance id and by DNS name: the report, its whole log.
    for name in [&failed.0, &failed.1] {
        let out = env.kube_aws(dir, &["logs", name]);
        assert!(out.status.success(), "{}", text(&out));
        let t = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            t.starts_with(&format!(
                "node {} ({}, worker-general) failed at step kubeadm-join (exit 1): kubeadm join --token <blanked>\n",
                failed.1, failed.0
            )),
            "{t}"
        );
        assert!(t.contains("reported at 2025-12-01T00:00:00Z"), "{t}");
        for l in [
            "  | fetching the bundle",
            "  | joining demo",
            "  | error: unable to reach the API",
        ] {
            assert!(t.contains(l), "{l}: {t}");
        }
    }
    let out = env.kube_aws(dir, &["logs", &failed.0, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j, report);
    // The terminated one is still readable: that is what the report is for.
    let out = env.kube_aws(dir, &["logs", "i-0aaaaaaaaaaaaaaaa"]);
    assert!(
        out.status.success() && text(&out).contains("no route to s3"),
        "{}",
        text(&out)
    );

    // A node with no report: said plainly, with the way onto it.
    let out = env.kube_aws(dir, &["logs", &controller.1]);
    assert!(out.status.success(), "{}", text(&out));
    let t = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(t.contains("has published no bootstrap report"), "{t}");
    assert!(
        t.contains(&format!("aws ssm start-session --target {}", controller.0)),
        "{t}"
    );

    // An unknown node: exit 1, naming every node there is.
    let out = env.kube_aws(dir, &["logs", "ip-10-9-9-9.ec2.internal"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("no node \"ip-10-9-9-9.ec2.internal\" in cluster \"demo\""),
        "{err}"
    );
    for i in &ec2 {
        assert!(err.contains(&format!("{} ({})", i.0, i.1)), "{}: {err}", i.0);
    }
    assert!(out.stdout.is_empty(), "nothing on stdout for an error");
}
