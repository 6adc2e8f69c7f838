//! The nodes' AWS calls under their own roles, against moto with IAM
//! enforced: a 3-controller work tree goes `up` (moto's CloudFormation
//! creates the rendered roles and policies in moto's IAM), then IAM is
//! switched on (`/moto-api/reset-auth`), the test's admin user assumes the
//! controller and the worker role, and tests/support/node_iam_driver.py makes
//! the node program's calls with each role's session credentials: every
//! grant of the call table (src/node/iam-calls.json), the `denied` entries,
//! three controllers joining in turn under the join lock and a replacement
//! breaking a dead controller's lock (locks.py itself), and the secrets a
//! worker and a controller decrypt at boot (secrets.py itself).
//!
//! What moto does not cover, and who does: moto checks the action for every
//! service and the object or bucket ARN for S3, but not the resource of
//! other services (tests/support/moto_server.py patch 5; their resources are
//! checked by tests/it/node_iam.rs against the rendered policies), and no
//! Condition it cannot evaluate (KMS encryption contexts, s3:prefix): the
//! `denied` entries that rest on a condition are node_iam.rs's only. It
//! returns 403 for a missing key only when the action is denied (AWS also
//! does without s3:ListBucket), which is why locks.py lists instead of
//! HeadObject. moto runs no instance: the admin assumes the roles in place of
//! EC2's instance profile.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::MotoEnv as Env;
use serde_json::{json, Value};

const BUCKET: &str = "kube-aws-iam";
const CLUSTER: &str = "iam";
const REGION: &str = "us-west-2";

pub(crate) use common::iam::{admin, assume, aws_as, enforce_iam, must, Creds};

/// The node program's calls as `who`, through tests/support/node_iam_driver.py.
pub fn driver(env: &Env, who: &Creds, args: &[&str]) -> Value {
    let mut cmd = Command::new(common::tool("python"));
    env.apply(&mut cmd);
    cmd.env("AWS_ACCESS_KEY_ID", &who.key)
        .env("AWS_SECRET_ACCESS_KEY", &who.secret)
        .env("AWS_SESSION_TOKEN", who.token.as_deref().unwrap_or(""))
        .env("KUBE_AWS_RETRY_DELAY", "0")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/node_iam_driver.py"))
        .args(args);
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "node_iam_driver {args:?}: {}",
        common::output_text(&o)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The physical ID of `logical` in the nested stack that has it.
fn physical_id(env: &Env, admin: &Creds, logical: &str) -> (String, String) {
    let stacks = must(env, admin, &["cloudformation", "describe-stacks"]);
    for s in stacks["Stacks"].as_array().unwrap() {
        let name = s["StackName"].as_str().unwrap();
        let (ok, out) = aws_as(
            env,
            admin,
            &[
                "cloudformation",
                "describe-stack-resource",
                "--stack-name",
                name,
                "--logical-resource-id",
                logical,
            ],
        );
        if ok {
            let v: Value = serde_json::from_str(out.trim()).unwrap();
            let id = v["StackResourceDetail"]["PhysicalResourceId"]
                .as_str()
                .unwrap()
                .to_string();
            return (name.to_string(), id);
        }
    }
    panic!("no stack has {logical}")
}

fn not_allowed(answers: &Value) -> Vec<String> {
    answers
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["answer"] != "allowed")
        .map(|a| format!("{} {} ({})", a["action"], a["resource"], a["detail"]))
        .collect()
}

#[test]
fn every_node_call_runs_under_its_own_role_with_iam_enforced() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    std::fs::write(
        dir.join("cluster.yaml"),
        format!(
            "clusterName: {CLUSTER}\nregion: {REGION}\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             controller:\n  count: 3\n\
             worker:\n  nodePools:\n    - name: general\n      count: 1\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
        ),
    )
    .unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "3m"]);
    assert!(up.status.success(), "{}", common::output_text(&up));

    let (admin, admin_arn) = admin(&env);
    let ciphertext = env.encrypt_entry(REGION, &kms, CLUSTER, "kubeadm/bootstrap-token", b"x");
    enforce_iam(&env);
    // Enforcement is on: the default test credentials are unknown to IAM now.
    let (ok, out) = aws_as(
        &env,
        &Creds {
            key: "testing".into(),
            secret: "testing".into(),
            token: None,
        },
        &["s3api", "list-objects-v2", "--bucket", BUCKET],
    );
    assert!(!ok, "moto still answers unknown credentials: {out}");

    let (cp_stack, _) = physical_id(&env, &admin, "ControllerRole");
    let (_, group) = physical_id(&env, &admin, "ControllerGroup");
    let plan_parameter = format!("/kube-aws/{CLUSTER}/addon-plan");
    let vars = |stack: &str, node_role: &str| {
        json!({"node_role": node_role, "bucket": BUCKET, "prefix": format!("clusters/{CLUSTER}"), "cluster": CLUSTER, "region": REGION,
               "account": "123456789012", "stack": stack, "kms": kms, "controller_group": group,
               "plan_parameter": plan_parameter, "etcd_parameter": format!("/kube-aws/{CLUSTER}/etcd"),
               "ciphertext": ciphertext})
        .to_string()
    };
    let controller = assume(&env, &admin, &admin_arn, "ControllerRole");
    let worker = assume(&env, &admin, &admin_arn, "WorkerRole");

    // Three controllers join in turn, and a replacement breaks a dead one's lock.
    let joins = driver(&env, &controller, &["joins", &vars(&cp_stack, "controller"), "3"]);
    let steps = joins.as_array().unwrap();
    assert_eq!(steps.len(), 4, "{joins}");
    assert!(
        steps.iter().all(|s| s["joined"] == true),
        "a controller could not join under its role:\n{joins:#}"
    );
    assert_eq!(steps[0]["init"], true, "{joins}");
    assert_eq!(steps[1]["init"], false, "{joins}");

    // Boot secrets: a controller the init token and the cluster's CA key
    // (a worker joins with the published join token, below).
    let c = driver(
        &env,
        &controller,
        &[
            "secrets",
            &vars(&cp_stack, "controller"),
            "kubeadm/bootstrap-token,pki/ca.key",
        ],
    );
    assert_eq!(c["ok"], true, "{c}");

    // The join token: a controller mints and publishes it (join_token.py,
    // under the token lock), a worker reads it, and a worker cannot publish one.
    let minted = driver(&env, &controller, &["token-mint", &vars(&cp_stack, "controller")]);
    assert_eq!(
        (&minted["ok"], &minted["action"]),
        (&json!(true), &json!("minted")),
        "{minted}"
    );
    let read = driver(&env, &worker, &["token-read", &vars("w", "worker-general")]);
    assert_eq!(read["ok"], true, "{read}");
    assert_eq!(read["tokenId"], minted["tokenId"], "{read}");
    let forged = driver(&env, &worker, &["token-publish", &vars("w", "worker-general")]);
    assert_eq!(forged["ok"], false, "a worker published a join token: {forged}");
    assert!(forged["error"].as_str().unwrap().contains("AccessDenied"), "{forged}");

    // Every grant of the table, under its role.
    for (role, who, stack, node_role) in [
        ("controller", &controller, cp_stack.as_str(), "controller"),
        ("worker", &worker, "w", "worker-general"),
    ] {
        let a = driver(&env, who, &["grants", role, &vars(stack, node_role)]);
        assert!(a.as_array().unwrap().len() >= 5, "{a}");
        let bad = not_allowed(&a);
        assert!(
            bad.is_empty(),
            "{role}: calls IAM refused under the role:\n{}",
            bad.join("\n")
        );
    }

    // And what a role must not do is refused: those entries moto can judge
    // (S3, whose requests carry their ARN; no condition).
    for (role, who, node_role) in [
        ("controller", &controller, "controller"),
        ("worker", &worker, "worker-general"),
    ] {
        let a = driver(&env, who, &["denied", role, &vars("s", node_role)]);
        let judged: Vec<&Value> = a
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["context"].as_object().unwrap().is_empty())
            .filter(|x| x["action"].as_str().unwrap().starts_with("s3:"))
            .collect();
        assert!(judged.len() >= 2, "{a}");
        for x in judged {
            assert_eq!(x["answer"], "denied", "{role} may: {x}");
        }
    }
}
