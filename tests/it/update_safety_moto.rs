//! Updating safely, against moto server: a real work tree with 3 controllers
//! goes `up`; the control plane's live template has the rolling update that
//! keeps etcd's quorum and the termination lifecycle hook, and moto's
//! controller group spans three subnets in three zones. `kube-aws backups` lists the snapshots a
//! controller wrote (real S3 objects, SSE-KMS, where the node writes them:
//! the hourly and the daily tier) newest first, in text and JSON, with the
//! last run's status; `up` set the bucket's lifecycle rules that expire each
//! tier, and kept the bucket's other rule. An explicit
//! `ami:` in cluster.yaml replaces the pinned AMI, and the preview says which
//! groups roll (src/aws/lifecycle/rolls.rs) and why; a changed backup interval changes the settings
//! parameter only.
//!
//! Issue 36 §3: with `secrets/bundle.json` deleted, `update` reads the live
//! stack's `SecretBundleKey` and keeps `CACertHash`, the join token and the
//! issuer's JWKS; with that bundle deleted too it refuses, naming it, and
//! leaves the stack, the bucket and the issuer bucket as they were;
//! `update --rotate-ca` publishes neither the latest bundle nor the issuer's
//! documents before it is confirmed, and then keeps the old key ID in the
//! JWKS. A disabled (or pending-deletion) KMS key: `status` warns, naming it
//! and what stops working; `update` refuses before it writes anything.
//! (moto's DisableKey and ScheduleKeyDeletion take a key ID, not an ARN.)
//!
//! Not covered here: moto has no CloudFormation model for
//! AWS::AutoScaling::LifecycleHook (it skips the resource), so the hook is
//! checked in the live template, not as a moto lifecycle hook; moto puts
//! every instance of a group in its first subnet, so the spread of the
//! instances themselves is AWS's zone balancing, not shown here; instances do
//! not boot, so no node writes a snapshot (the test puts the objects where
//! `kube-aws-node etcd-backup` puts them; src/node/tests/test_etcd.py covers
//! the node side); moto's change sets name only the nested stacks (the
//! groups that roll are kube-aws's reading of the templates; every kind of
//! change: tests/it/update_rolls_moto.rs).

use crate::common;

use std::path::Path;

use common::output_text as text;
use common::MotoEnv as Env;
use serde_json::Value;

const BUCKET: &str = "kube-aws-safety";
const CLUSTER: &str = "demo";

fn cluster_yaml(kms: &str, extra: &str) -> String {
    // aws-vpc-cni's chart is on the internet, out of reach here.
    format!(
        "clusterName: {CLUSTER}\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
         controller:\n  count: 3\n\
         worker:\n  nodePools:\n    - name: general\n      count: 1\n\
         plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n{extra}"
    )
}

fn nested(env: &Env, logical: &str) -> String {
    let r = env.aws_json(&["cloudformation", "describe-stack-resources", "--stack-name", CLUSTER]);
    r["StackResources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["LogicalResourceId"] == logical)
        .and_then(|x| x["PhysicalResourceId"].as_str())
        .unwrap_or_else(|| panic!("no {logical}: {r}"))
        .to_string()
}

fn put(env: &Env, dir: &Path, key: &str, body: &[u8], kms: &str) {
    let f = dir.join("object");
    std::fs::write(&f, body).unwrap();
    env.aws(&[
        "s3",
        "cp",
        f.to_str().unwrap(),
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/{key}"),
        "--sse",
        "aws:kms",
        "--sse-kms-key-id",
        kms,
    ]);
}

#[test]
fn three_controllers_spread_roll_and_back_up() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    // A rule of the bucket's own, which `up` must keep.
    env.aws(&[
        "s3api",
        "put-bucket-lifecycle-configuration",
        "--bucket",
        BUCKET,
        "--lifecycle-configuration",
        r#"{"Rules": [{"ID": "logs", "Filter": {"Prefix": "logs/"}, "Status": "Enabled", "Expiration": {"Days": 30}}]}"#,
    ]);
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(&kms, "")).unwrap();

    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "3m"]);
    assert!(up.status.success(), "{}", text(&up));

    // The live control-plane template: one at a time, quorum kept, the hook.
    let cp = nested(&env, "ControlPlane");
    let t = env.aws_json(&["cloudformation", "get-template", "--stack-name", &cp]);
    let body: Value = match &t["TemplateBody"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    };
    let g = &body["Resources"]["ControllerGroup"];
    let policy = &g["UpdatePolicy"]["AutoScalingRollingUpdate"];
    assert_eq!(policy["MaxBatchSize"], "1");
    // Launch before terminate: three in service, MaxSize four.
    assert_eq!(policy["MinInstancesInService"], "3");
    assert_eq!(g["Properties"]["MaxSize"], "4");
    assert_eq!(policy["WaitOnResourceSignals"], true);
    let hook = &body["Resources"]["ControllerTerminationHook"]["Properties"];
    assert_eq!(hook["LifecycleTransition"], "autoscaling:EC2_INSTANCE_TERMINATING");
    assert_eq!(hook["DefaultResult"], "CONTINUE");

    // moto's group: three subnets in three zones, and its three instances one per zone.
    let groups = env.aws_json(&["autoscaling", "describe-auto-scaling-groups"]);
    let controller = groups["AutoScalingGroups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["DesiredCapacity"] == 3 && g["MaxSize"] == 4)
        .unwrap_or_else(|| panic!("no group of 3 (MaxSize 4, the roll's room): {groups}"));
    let subnets: Vec<&str> = controller["VPCZoneIdentifier"].as_str().unwrap().split(',').collect();
    assert_eq!(subnets.len(), 3, "{controller}");
    let mut args = vec!["ec2", "describe-subnets", "--subnet-ids"];
    args.extend(subnets.iter().copied());
    let s = env.aws_json(&args);
    let mut zones: Vec<&str> = s["Subnets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["AvailabilityZone"].as_str().unwrap())
        .collect();
    zones.sort();
    zones.dedup();
    assert_eq!(zones.len(), 3, "{s}");
    assert_eq!(controller["Instances"].as_array().unwrap().len(), 3, "{controller}");
    // (moto launches every instance into the first subnet; EC2 Auto Scaling
    // balances a group's instances over the zones of its subnets, "Auto
    // Scaling group Availability Zone distribution", so AWS places them 1+1+1.)

    // backups: none yet, said plainly.
    let none = env.kube_aws(dir, &["backups"]);
    assert!(none.status.success(), "{}", text(&none));
    assert!(
        text(&none).starts_with(&format!("no etcd snapshots in s3://{BUCKET}/clusters/{CLUSTER}/etcd/")),
        "{}",
        text(&none)
    );
    // The snapshots' retention: one lifecycle rule per tier, the default days.
    let rules = env.aws_json(&["s3api", "get-bucket-lifecycle-configuration", "--bucket", BUCKET]);
    let rules: Vec<(String, String, i64)> = rules["Rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["ID"].as_str().unwrap().to_string(),
                r["Filter"]["Prefix"].as_str().unwrap_or_default().to_string(),
                r["Expiration"]["Days"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("logs".to_string(), "logs/".to_string(), 30),
            (
                "kube-aws-demo-etcd-hourly".to_string(),
                format!("clusters/{CLUSTER}/etcd/hourly/"),
                7
            ),
            (
                "kube-aws-demo-etcd-daily".to_string(),
                format!("clusters/{CLUSTER}/etcd/daily/"),
                90
            )
        ]
    );
    // Snapshots of both tiers where the node writes them, and its status object.
    put(
        &env,
        dir,
        "etcd/hourly/20261201T000000Z-ip-10-0-0-5.db",
        &[0u8; 2048],
        &kms,
    );
    put(
        &env,
        dir,
        "etcd/daily/20261201T000000Z-ip-10-0-0-5.db",
        &[0u8; 2048],
        &kms,
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    put(
        &env,
        dir,
        "etcd/hourly/20261201T010000Z-ip-10-0-0-5.db",
        &[0u8; 4096],
        &kms,
    );
    put(
        &env,
        dir,
        "status/etcd/backup.json",
        br#"{"phase": "failed", "message": "An error occurred (SlowDown)", "updatedAt": 1}"#,
        &kms,
    );
    let out = env.kube_aws(dir, &["backups", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut listed: Vec<(&str, &str, i64)> = j["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["tier"].as_str().unwrap(),
                s["key"].as_str().unwrap(),
                s["size"].as_i64().unwrap(),
            )
        })
        .collect();
    // The two older ones were written within a second: their order is S3's time's.
    listed[1..].sort();
    assert_eq!(
        listed,
        [
            (
                "hourly",
                "clusters/demo/etcd/hourly/20261201T010000Z-ip-10-0-0-5.db",
                4096
            ),
            (
                "daily",
                "clusters/demo/etcd/daily/20261201T000000Z-ip-10-0-0-5.db",
                2048
            ),
            (
                "hourly",
                "clusters/demo/etcd/hourly/20261201T000000Z-ip-10-0-0-5.db",
                2048
            ),
        ]
    );
    assert!(j["snapshots"][0]["time"].as_str().unwrap().ends_with('Z'), "{j}");
    assert_eq!(j["last_run"]["phase"], "failed");
    let t = env.kube_aws(dir, &["backups"]);
    assert!(text(&t).contains("4.0 KiB"), "{}", text(&t));
    assert!(text(&t).contains("  daily   clusters/demo/etcd/daily/"), "{}", text(&t));
    assert!(
        text(&t).contains("last backup run: failed: An error occurred (SlowDown)"),
        "{}",
        text(&t)
    );

    // A changed backup interval: only the control plane's settings change.
    std::fs::write(
        dir.join("cluster.yaml"),
        cluster_yaml(&kms, "etcd:\n  backup:\n    interval: 30m\n"),
    )
    .unwrap();
    let upd = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "3m"]);
    assert!(upd.status.success(), "{}", text(&upd));
    let out = String::from_utf8_lossy(&upd.stdout).to_string();
    assert!(
        out.contains("modified (1):\n  ~ ControlPlane (AWS::CloudFormation::Stack)\n"),
        "{out}"
    );
    assert!(!out.contains("instances replaced"), "{out}");
    assert!(
        out.contains("rolls: nothing: no instance is replaced, launched or terminated\n"),
        "{out}"
    );
    let p = env.aws_json(&["ssm", "get-parameter", "--name", "/kube-aws/demo/etcd"]);
    let settings: Value = serde_json::from_str(p["Parameter"]["Value"].as_str().unwrap()).unwrap();
    assert_eq!(settings["intervalSeconds"].as_i64(), Some(1800));

    // An explicit AMI: every group rolls, and the preview says why.
    let pinned = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]);
    let before = pinned["Stacks"][0]["Parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ParameterKey"] == "ImageIdX86")
        .map(|p| p["ParameterValue"].as_str().unwrap().to_string())
        .unwrap();
    let explicit = "ami-0123456789abcdef0";
    std::fs::write(
        dir.join("cluster.yaml"),
        cluster_yaml(&kms, &format!("etcd:\n  backup:\n    interval: 30m\nami: {explicit}\n")),
    )
    .unwrap();
    let upd = env.kube_aws(dir, &["update", "--yes", "--refresh-ami"]);
    assert!(upd.status.success(), "{}", text(&upd));
    let out = String::from_utf8_lossy(&upd.stdout).to_string();
    assert!(
        out.contains(&format!(
            "AMI ImageIdX86: {before} → {explicit} (set in cluster.yaml ami)\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(
            "rolls: ControlPlane/ControllerGroup: 3 instances replaced, one at a time (launch template (ImageId)); \
             then NodePoolGeneral/WorkerGroup: 1 instance replaced, one at a time (launch template (ImageId))\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("ImageIdX86 is set in cluster.yaml (ami): not refreshed"),
        "{out}"
    );
    assert!(out.contains("parameters changed: ImageIdX86"), "{out}");
}

// Issue 36 §3: secrets and the PKI are never replaced silently.

/// The root stack's parameter `name`.
fn root_parameter(env: &Env, name: &str) -> String {
    let s = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]);
    s["Stacks"][0]["Parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ParameterKey"] == name)
        .and_then(|p| p["ParameterValue"].as_str())
        .unwrap_or_else(|| panic!("no parameter {name}: {s}"))
        .to_string()
}

/// Every object of a bucket with its ETag and time: what a refused command must leave as it was.
fn bucket_state(env: &Env, bucket: &str) -> Vec<(String, String, String)> {
    let v = env.aws_json(&["s3api", "list-objects-v2", "--bucket", bucket]);
    v["Contents"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| {
                    (
                        o["Key"].as_str().unwrap().to_string(),
                        o["ETag"].as_str().unwrap().to_string(),
                        o["LastModified"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn object(env: &Env, bucket: &str, key: &str) -> Value {
    serde_json::from_str(&env.aws(&["s3", "cp", &format!("s3://{bucket}/{key}"), "-"])).unwrap()
}

fn kids(keys: &Value) -> Vec<String> {
    keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_string())
        .collect()
}

const ISSUER_BUCKET: &str = "kube-aws-safety-oidc-demo";
const LATEST: &str = "clusters/demo/secrets/bundle.json";

/// cluster.yaml with one controller (and `extra`).
fn one_controller_yaml(kms: &str, extra: &str) -> String {
    cluster_yaml(kms, extra).replace("count: 3", "count: 1")
}

/// A one-controller cluster `up` on moto: its work tree.
fn up_one_controller(env: &Env) -> common::MotoTree {
    let wt = env.work_tree(&[BUCKET]);
    std::fs::write(wt.path().join("cluster.yaml"), one_controller_yaml(&wt.kms, "")).unwrap();
    let up = env.kube_aws(wt.path(), &["up", "--wait", "--timeout", "3m"]);
    assert!(up.status.success(), "{}", text(&up));
    wt
}

#[test]
fn update_without_the_latest_bundle_keeps_the_ca_and_a_missing_live_bundle_is_refused() {
    let env = Env::new();
    let wt = up_one_controller(&env);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    let one = |extra: &str| one_controller_yaml(&kms, extra);
    let ca = root_parameter(&env, "CACertHash");
    let bundle = object(&env, BUCKET, LATEST);
    let jwks = object(&env, ISSUER_BUCKET, "keys.json");
    assert_eq!(kids(&jwks).len(), 1, "{jwks}");

    // The mutable latest object is gone: the update reads the live stack's
    // bundle and keeps the CA, the service-account key and the token.
    env.aws(&["s3", "rm", &format!("s3://{BUCKET}/{LATEST}")]);
    std::fs::write(dir.join("cluster.yaml"), one("etcd:\n  backup:\n    interval: 30m\n")).unwrap();
    let t0 = std::time::Instant::now();
    let upd = env.kube_aws(dir, &["update", "--yes"]);
    eprintln!("update without the latest bundle: {:.1}s", t0.elapsed().as_secs_f64());
    assert!(upd.status.success(), "{}", text(&upd));
    assert_eq!(
        root_parameter(&env, "CACertHash"),
        ca,
        "the CA changed:\n{}",
        text(&upd)
    );
    let after = object(&env, BUCKET, LATEST);
    assert_eq!(after["certificates"], bundle["certificates"]);
    assert_eq!(
        after["secrets"]["kubeadm/bootstrap-token"], bundle["secrets"]["kubeadm/bootstrap-token"],
        "the join token was minted anew"
    );
    assert_eq!(object(&env, ISSUER_BUCKET, "keys.json"), jwks, "the JWKS changed");

    // The live bundle itself is gone: refused, naming it and the fix; the
    // stack, the bucket and the issuer are as they were.
    let live_rel = root_parameter(&env, "SecretBundleKey");
    let live_key = format!("clusters/{CLUSTER}/{live_rel}");
    assert!(
        live_key.ends_with("/bundle.json") && live_key.contains("/secrets/"),
        "{live_key}"
    );
    env.aws(&["s3", "rm", &format!("s3://{BUCKET}/{live_key}")]);
    std::fs::write(dir.join("cluster.yaml"), one("etcd:\n  backup:\n    interval: 20m\n")).unwrap();
    let (objects, issuer) = (bucket_state(&env, BUCKET), bucket_state(&env, ISSUER_BUCKET));
    let params = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER])["Stacks"][0]
        ["Parameters"]
        .clone();
    let refused = env.kube_aws(dir, &["update", "--yes"]);
    let out = text(&refused);
    assert!(!refused.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "the previous secret bundle \"s3://{BUCKET}/{live_key}\" (the live stack's SecretBundleKey) is missing"
        )) && out.contains("nothing was published or changed")
            && out.contains("kube-aws update --rotate-ca"),
        "{out}"
    );
    assert!(!out.contains("changes to stack"), "{out}");
    assert_eq!(
        bucket_state(&env, BUCKET),
        objects,
        "a refused update wrote to the bucket"
    );
    assert_eq!(
        bucket_state(&env, ISSUER_BUCKET),
        issuer,
        "a refused update wrote the issuer"
    );
    assert_eq!(
        env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER])["Stacks"][0]["Parameters"],
        params
    );

    // --rotate-ca, not confirmed (no terminal, no --yes): neither the latest
    // bundle nor the issuer's documents change, nor the stack.
    let declined = env.kube_aws(dir, &["update", "--rotate-ca"]);
    assert!(!declined.status.success(), "{}", text(&declined));
    assert!(
        text(&declined).contains("rotate-ca: a new cluster CA"),
        "{}",
        text(&declined)
    );
    assert_eq!(
        object(&env, ISSUER_BUCKET, "keys.json"),
        jwks,
        "published before it was confirmed"
    );
    assert_eq!(object(&env, BUCKET, LATEST), after, "published before it was confirmed");
    assert_eq!(root_parameter(&env, "CACertHash"), ca);

    // --rotate-ca, confirmed: a new CA, and the JWKS keeps the old key ID.
    let rotated = env.kube_aws(dir, &["update", "--rotate-ca", "--yes"]);
    assert!(rotated.status.success(), "{}", text(&rotated));
    assert_ne!(root_parameter(&env, "CACertHash"), ca);
    assert_ne!(root_parameter(&env, "SecretBundleKey"), live_rel);
    let new_jwks = object(&env, ISSUER_BUCKET, "keys.json");
    let k = kids(&new_jwks);
    assert_eq!(k.len(), 2, "{new_jwks}");
    assert_eq!(k[1], kids(&jwks)[0], "the old key ID is not kept: {new_jwks}");
    let rotated_bundle = object(&env, BUCKET, LATEST);
    assert_eq!(
        rotated_bundle["retiredServiceAccountKeys"][0]["publicKey"],
        bundle["certificates"]["pki/sa.pub"]
    );
    // The Secrets' encryption key outlives the CA: every Secret in etcd and
    // in the snapshots is encrypted with it (src/render/security.rs).
    assert_ne!(rotated_bundle["secrets"]["pki/ca.key"], bundle["secrets"]["pki/ca.key"]);
    assert!(bundle["secrets"]["pki/encryption.json"].is_string(), "{bundle}");
    assert_eq!(
        rotated_bundle["secrets"]["pki/encryption.json"],
        bundle["secrets"]["pki/encryption.json"]
    );
}

#[test]
fn a_disabled_kms_key_is_refused_by_update_and_warned_about_by_status() {
    let env = Env::new();
    let wt = up_one_controller(&env);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    let one = |extra: &str| one_controller_yaml(&kms, extra);
    let ok = env.kube_aws(dir, &["status"]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(!text(&ok).contains("KMS key"), "{}", text(&ok));

    // (moto's DisableKey and the like look the key up by its ID only.)
    let id = kms.rsplit('/').next().unwrap();
    env.aws(&["kms", "disable-key", "--key-id", id]);
    let st = env.kube_aws(dir, &["status"]);
    assert!(st.status.success(), "{}", text(&st));
    assert!(
        text(&st).contains(&format!(
            "warning: the cluster's KMS key (kmsKeyARN) \"{kms}\" is Disabled: no node can decrypt its bootstrap secrets"
        )) && text(&st).contains(&format!("`aws kms enable-key --key-id {kms}`")),
        "{}",
        text(&st)
    );
    let j = env.kube_aws(dir, &["status", "-o", "json"]);
    let j: Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(j["kmsKeys"][0]["state"], "Disabled", "{j}");

    // update: refused before anything is published; the stack is untouched.
    std::fs::write(dir.join("cluster.yaml"), one("etcd:\n  backup:\n    interval: 30m\n")).unwrap();
    let objects = bucket_state(&env, BUCKET);
    let ca = root_parameter(&env, "CACertHash");
    let key = root_parameter(&env, "SecretBundleKey");
    let upd = env.kube_aws(dir, &["update", "--yes"]);
    let out = text(&upd);
    assert!(!upd.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "the KMS key \"{kms}\" is Disabled; nothing was published or changed"
        )) && out.contains("aws kms enable-key"),
        "{out}"
    );
    assert_eq!(
        bucket_state(&env, BUCKET),
        objects,
        "a refused update wrote to the bucket"
    );
    assert_eq!(
        (
            root_parameter(&env, "CACertHash"),
            root_parameter(&env, "SecretBundleKey")
        ),
        (ca, key)
    );

    // Pending deletion: said with its date and how to cancel it.
    env.aws(&[
        "kms",
        "schedule-key-deletion",
        "--key-id",
        id,
        "--pending-window-in-days",
        "7",
    ]);
    let st = env.kube_aws(dir, &["status"]);
    assert!(
        text(&st).contains("is PendingDeletion, to be deleted on ")
            && text(&st).contains(&format!("`aws kms cancel-key-deletion --key-id {kms}`")),
        "{}",
        text(&st)
    );
    // Recovered as docs/deploy.md says: the update goes through.
    env.aws(&["kms", "cancel-key-deletion", "--key-id", id]);
    env.aws(&["kms", "enable-key", "--key-id", id]);
    let upd = env.kube_aws(dir, &["update", "--yes"]);
    assert!(upd.status.success(), "{}", text(&upd));
}
