//! Issue 27 item 5, key rotation, on moto: a cluster `up` under one KMS key,
//! then `kube-aws update` under another. Shown: a key the operator cannot use
//! is refused at its cluster.yaml line before anything is published; under a
//! usable one every bundle entry (the init token, the PKI keys, the webhook's
//! certificate) is re-encrypted under the new key with its value unchanged,
//! the old key is recorded as retired (and, after a second rotation right
//! after, both old keys), no launch template changes (no node is
//! replaced: the update's preview says so too), and the roles' live policies
//! (as moto's CloudFormation applied them) decrypt under both keys and
//! encrypt under the new one only. Then, with IAM enforced, under the
//! assumed controller and worker roles: the controller decrypts its secrets
//! from the new bundle through its pointer (secrets.py), reads the new key
//! from the etcd settings (join_token.py `cluster_key`) and mints the join
//! token under it, and the worker reads both the token minted before the
//! change (under the old key) and the one after; a snapshot written under
//! the old key is still read back by the controller.
//!
//! Not covered here: moto checks no KMS resource or condition (see
//! tests/it/node_iam_moto.rs); tests/it/node_iam.rs evaluates the rendered
//! statements with a retired key in the parameter. moto's S3 does not ask KMS
//! on GetObject of an SSE-KMS object, so the snapshot read shows the S3 grant,
//! the policy check shows the key's. The retired key's expiry is
//! src/aws/publish/secrets.rs's unit test (`retired_keys`).

use crate::common;

use crate::node_iam_moto::driver;
use common::iam::{admin, assume, aws_as, enforce_iam, must};
use common::MotoEnv as Env;
use serde_json::{json, Value};

const BUCKET: &str = "kube-aws-keys";
const CLUSTER: &str = "keys";
const REGION: &str = "us-west-2";

fn cluster_yaml(kms: &str) -> String {
    format!(
        "clusterName: {CLUSTER}\nregion: {REGION}\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
         controller:\n  count: 1\n\
         worker:\n  nodePools:\n    - name: general\n      count: 1\n\
         plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n"
    )
}

fn bundle(env: &Env) -> Value {
    let out = env.aws(&[
        "s3",
        "cp",
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/secrets/bundle.json"),
        "-",
    ]);
    serde_json::from_str(&out).unwrap()
}

/// An entry's plaintext and the key KMS says encrypted it (the caller's credentials).
fn open_entry(env: &Env, name: &str, ct: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let blob = dir.path().join("ct");
    use base64::Engine;
    std::fs::write(&blob, base64::engine::general_purpose::STANDARD.decode(ct).unwrap()).unwrap();
    let v = env.aws_json(&[
        "kms",
        "decrypt",
        "--ciphertext-blob",
        &format!("fileb://{}", blob.display()),
        "--encryption-context",
        &json!({"kube-aws:cluster": CLUSTER, "kube-aws:secret": name}).to_string(),
    ]);
    (
        v["Plaintext"].as_str().unwrap().to_string(),
        v["KeyId"].as_str().unwrap().to_string(),
    )
}

/// The decoded user data of each launch template's latest version, sorted
/// with the stack's name blanked (moto's CloudFormation makes an updated
/// nested stack and its resources anew, under new names, so names are no
/// evidence; what an instance boots from is: the secrets version, the CA
/// hash and the cloud-config's sha256).
fn launch_templates(env: &Env) -> Vec<String> {
    use base64::Engine;
    let v = env.aws_json(&["ec2", "describe-launch-templates"]);
    let mut out: Vec<String> = v["LaunchTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let id = t["LaunchTemplateId"].as_str().unwrap();
            let d = env.aws_json(&[
                "ec2",
                "describe-launch-template-versions",
                "--versions",
                "$Latest",
                "--launch-template-id",
                id,
            ]);
            let data = d["LaunchTemplateVersions"][0]["LaunchTemplateData"]["UserData"]
                .as_str()
                .unwrap_or_default();
            let text =
                String::from_utf8_lossy(&base64::engine::general_purpose::STANDARD.decode(data).unwrap()).into_owned();
            regex::Regex::new(r#""stackName":"[^"]*""#)
                .unwrap()
                .replace(&text, r#""stackName":"-""#)
                .into_owned()
        })
        .collect();
    out.sort();
    out
}

/// The statements of the live role whose name holds `logical`, by Sid.
fn live_statements(env: &Env, logical: &str) -> Vec<Value> {
    let roles = env.aws_json(&["iam", "list-roles"]);
    let name = roles["Roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["RoleName"].as_str().unwrap().to_string())
        .find(|n| n.contains(&format!("-{logical}-")))
        .unwrap();
    let mut out = vec![];
    let names = env.aws_json(&["iam", "list-role-policies", "--role-name", &name]);
    for p in names["PolicyNames"].as_array().unwrap() {
        let doc = env.aws_json(&[
            "iam",
            "get-role-policy",
            "--role-name",
            &name,
            "--policy-name",
            p.as_str().unwrap(),
        ]);
        out.extend(statements_of(&doc["PolicyDocument"], &format!("policy {p} of {name}")));
    }
    // And the managed policies attached to it (the keys' statements are in
    // one of their own: src/render/cfn/iam_size.rs).
    let attached = env.aws_json(&["iam", "list-attached-role-policies", "--role-name", &name]);
    for p in attached["AttachedPolicies"].as_array().unwrap() {
        let arn = p["PolicyArn"].as_str().unwrap();
        let policy = env.aws_json(&["iam", "get-policy", "--policy-arn", arn]);
        let version = policy["Policy"]["DefaultVersionId"].as_str().unwrap();
        let doc = env.aws_json(&[
            "iam",
            "get-policy-version",
            "--policy-arn",
            arn,
            "--version-id",
            version,
        ]);
        out.extend(statements_of(
            &doc["PolicyVersion"]["Document"],
            &format!("policy {arn} of {name}"),
        ));
    }
    out
}

/// The statements of a policy document as IAM returns it. moto answers a
/// policy CloudFormation put with the Python repr of the document (single
/// quotes; the rendered policies hold no quote or backslash of their own).
fn statements_of(document: &Value, what: &str) -> Vec<Value> {
    let policy: Value = match document {
        Value::String(text) => serde_json::from_str(text)
            .or_else(|_| serde_json::from_str(&text.replace('\'', "\"")))
            .unwrap_or_else(|e| panic!("{what}: {e}: {text}")),
        v => v.clone(),
    };
    match &policy["Statement"] {
        Value::Array(a) => a.clone(),
        other => panic!("{what}: {other} in {policy}"),
    }
}

fn resources(statements: &[Value], sid: &str) -> Vec<String> {
    let s = statements
        .iter()
        .find(|s| s["Sid"] == sid)
        .unwrap_or_else(|| panic!("no statement {sid}: {statements:#?}"));
    match &s["Resource"] {
        Value::String(r) => vec![r.clone()],
        Value::Array(a) => a.iter().map(|r| r.as_str().unwrap().to_string()).collect(),
        other => panic!("{sid}: Resource {other}"),
    }
}

#[test]
fn a_new_kms_key_re_encrypts_every_secret_keeps_the_old_for_snapshots_and_replaces_no_node() {
    let env = Env::new();
    let tree = env.work_tree(&[BUCKET]);
    let (dir, k1) = (tree.path(), tree.kms.clone());
    let k2 = env.create_kms_key();
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(&k1)).unwrap();
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "3m"]);
    assert!(up.status.success(), "{}", common::output_text(&up));

    let before = bundle(&env);
    assert_eq!(before["kmsKeyARN"], k1.as_str());
    let plain_before: Vec<(String, String)> = before["secrets"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(n, ct)| (n.clone(), open_entry(&env, n, ct.as_str().unwrap()).0))
        .collect();
    assert!(plain_before.iter().any(|(n, _)| n == "pki/ca.key"), "{before}");
    assert!(
        plain_before.iter().any(|(n, _)| n == "kubeadm/bootstrap-token"),
        "{before}"
    );
    let templates = launch_templates(&env);
    assert!(
        templates.len() >= 2 && templates.iter().all(|u| u.contains("secretsVersion")),
        "{templates:?}"
    );

    // IAM on: the operator is an admin user from now on; the nodes are their roles.
    let (admin_creds, admin_arn) = admin(&env);
    enforce_iam(&env);
    env.act_as(&admin_creds.key, &admin_creds.secret);
    let controller = assume(&env, &admin_creds, &admin_arn, "ControllerRole");
    let vars = |node_role: &str, kms: &str| {
        json!({"node_role": node_role, "bucket": BUCKET, "prefix": format!("clusters/{CLUSTER}"), "cluster": CLUSTER,
               "region": REGION, "account": "123456789012", "kms": kms,
               "etcd_parameter": format!("/kube-aws/{CLUSTER}/etcd")})
        .to_string()
    };
    // Before the change: the controllers mint under k1, and a snapshot is taken under k1.
    let key = driver(&env, &controller, &["token-key", &vars("controller", "")]);
    assert_eq!(key["kms"], k1.as_str(), "{key}");
    let minted = driver(&env, &controller, &["token-mint", &vars("controller", &k1)]);
    assert_eq!(minted["ok"], true, "{minted}");
    let snap = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(snap.path(), b"etcd snapshot under the old key").unwrap();
    let snapshot_key = format!("clusters/{CLUSTER}/etcd/hourly/old.db");
    must(
        &env,
        &controller,
        &[
            "s3api",
            "put-object",
            "--bucket",
            BUCKET,
            "--key",
            &snapshot_key,
            "--body",
            snap.path().to_str().unwrap(),
            "--server-side-encryption",
            "aws:kms",
            "--ssekms-key-id",
            &k1,
        ],
    );

    // A key the operator cannot use (another account's): refused at its
    // line, nothing published, the stack untouched.
    let foreign = "arn:aws:kms:us-west-2:111122223333:key/00000000-0000-0000-0000-000000000000";
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(foreign)).unwrap();
    let bad = env.kube_aws(dir, &["update", "--yes"]);
    let text = common::output_text(&bad);
    assert!(!bad.status.success(), "{text}");
    assert!(
        text.contains(&format!("cluster.yaml:4:12: kmsKeyARN: \"{foreign}\" cannot be used")),
        "{text}"
    );
    assert!(text.contains(&format!("set kmsKeyARN back to \"{k1}\"")), "{text}");
    assert_eq!(bundle(&env), before, "a refused key changed the published bundle");
    assert!(!text.contains("changes to stack"), "{text}");

    // The new key.
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(&k2)).unwrap();
    let t0 = std::time::Instant::now();
    let update = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "3m"]);
    let text = common::output_text(&update);
    assert!(update.status.success(), "{text}");
    eprintln!("update under the new key: {:.1}s", t0.elapsed().as_secs_f64());
    assert!(text.contains(&format!("kmsKeyARN changes from {k1}")), "{text}");
    assert!(
        text.contains("rolls: nothing: no instance is replaced"),
        "a key rotation must replace no node:\n{text}"
    );
    assert_eq!(
        launch_templates(&env),
        templates,
        "a launch template's user data changed"
    );

    let after = bundle(&env);
    assert_eq!(after["kmsKeyARN"], k2.as_str());
    assert_eq!(after["retiredKeys"][0]["arn"], k1.as_str(), "{after}");
    assert_eq!(
        after["certificates"], before["certificates"],
        "the PKI's public half changed"
    );
    let key_id = |arn: &str| arn.rsplit('/').next().unwrap().to_string();
    for (name, plain) in &plain_before {
        let ct = after["secrets"][name]
            .as_str()
            .unwrap_or_else(|| panic!("{name} is gone: {after}"));
        assert_ne!(ct, before["secrets"][name].as_str().unwrap(), "{name} not re-encrypted");
        let (p, by) = open_entry(&env, name, ct);
        assert_eq!(&p, plain, "{name}'s value changed");
        assert!(by.ends_with(&key_id(&k2)), "{name} is under {by}, not {k2}");
        assert_eq!(after["origins"][name], before["secrets"][name], "{name}'s origin");
    }

    // The roles' policies as CloudFormation applied them: decrypt under both keys, encrypt under the new.
    let both = |r: Vec<String>| r.contains(&k1) && r.contains(&k2);
    let cp = live_statements(&env, "ControllerRole");
    let w = live_statements(&env, "WorkerRole");
    assert!(both(resources(&cp, "DecryptOwnSecrets")), "{cp:#?}");
    assert!(both(resources(&cp, "DecryptEtcdSnapshots")), "{cp:#?}");
    assert!(both(resources(&cp, "JoinTokenKey")), "{cp:#?}");
    assert!(both(resources(&w, "JoinTokenKey")), "{w:#?}");
    assert_eq!(resources(&cp, "EncryptEtcdSnapshots"), vec![k2.clone()]);
    assert_eq!(resources(&cp, "JoinTokenKeyEncrypt"), vec![k2.clone()]);

    // Under the roles, IAM enforced. moto's CloudFormation made the updated
    // nested stacks' roles anew (AWS updates a role's policy in place, and a
    // running node keeps its role), so the roles are assumed again.
    let controller = assume(&env, &admin_creds, &admin_arn, "ControllerRole");
    let worker = assume(&env, &admin_creds, &admin_arn, "WorkerRole");
    // A worker still reads the token minted under k1.
    let read = driver(&env, &worker, &["token-read", &vars("worker-general", &k2)]);
    assert_eq!(
        (&read["ok"], &read["tokenId"]),
        (&json!(true), &minted["tokenId"]),
        "{read}"
    );
    // The controller decrypts its secrets from the new bundle through its pointer.
    let names: Vec<String> = cp
        .iter()
        .find(|s| s["Sid"] == "DecryptOwnSecrets")
        .map(|s| {
            let v = &s["Condition"]["StringEquals"]["kms:EncryptionContext:kube-aws:secret"];
            v.as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap();
    let c = driver(
        &env,
        &controller,
        &["secrets", &vars("controller", &k2), &names.join(",")],
    );
    assert_eq!(c["ok"], true, "{c}");
    // It mints under the new key, and a worker joins with that token.
    let key = driver(&env, &controller, &["token-key", &vars("controller", "")]);
    assert_eq!(key["kms"], k2.as_str(), "{key}");
    let fresh = driver(&env, &controller, &["token-mint", &vars("controller", &k2)]);
    assert_eq!(
        (&fresh["ok"], &fresh["action"]),
        (&json!(true), &json!("minted")),
        "{fresh}"
    );
    let p = must(
        &env,
        &admin_creds,
        &[
            "ssm",
            "describe-parameters",
            "--filters",
            &format!("Key=Name,Values=/kube-aws/{CLUSTER}/bootstrap-token"),
        ],
    );
    assert!(
        k2.ends_with(p["Parameters"][0]["KeyId"].as_str().unwrap_or("none")),
        "the fresh token is not under the new key: {p}"
    );
    let read = driver(&env, &worker, &["token-read", &vars("worker-general", &k2)]);
    assert_eq!(
        (&read["ok"], &read["tokenId"]),
        (&json!(true), &fresh["tokenId"]),
        "{read}"
    );
    // The snapshot taken under k1 is still read back by the controller.
    let (ok, out) = aws_as(
        &env,
        &controller,
        &[
            "s3api",
            "get-object",
            "--bucket",
            BUCKET,
            "--key",
            &snapshot_key,
            "/dev/null",
        ],
    );
    assert!(ok, "{out}");

    // A second rotation right after the first (issue 36: two rotations
    // within the retention window once pushed the controller role over
    // IAM's inline limit): the update succeeds, both old keys are kept
    // retired, and the live policies decrypt under all three keys.
    let k3 = env.create_kms_key();
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(&k3)).unwrap();
    let update = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "3m"]);
    let text = common::output_text(&update);
    assert!(update.status.success(), "{text}");
    let third = bundle(&env);
    assert_eq!(third["kmsKeyARN"], k3.as_str());
    let retired: Vec<&str> = third["retiredKeys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["arn"].as_str().unwrap())
        .collect();
    assert_eq!(retired, [k1.as_str(), k2.as_str()], "{third}");
    let all = |r: Vec<String>| [&k1, &k2, &k3].iter().all(|k| r.contains(k));
    let cp = live_statements(&env, "ControllerRole");
    assert!(all(resources(&cp, "DecryptOwnSecrets")), "{cp:#?}");
    assert!(all(resources(&cp, "DecryptEtcdSnapshots")), "{cp:#?}");
    assert_eq!(resources(&cp, "JoinTokenKeyEncrypt"), vec![k3.clone()]);

    // Two more rotations fill the room the policies are sized for (4 retired
    // keys, src/render/cfn/iam_size.rs); a fifth within the retention window
    // is refused before anything is published.
    let mut keys = vec![k1.clone(), k2.clone(), k3.clone()];
    for _ in 0..2 {
        let k = env.create_kms_key();
        std::fs::write(dir.join("cluster.yaml"), cluster_yaml(&k)).unwrap();
        let update = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "3m"]);
        assert!(update.status.success(), "{}", common::output_text(&update));
        keys.push(k);
    }
    let full = bundle(&env);
    assert_eq!(full["retiredKeys"].as_array().unwrap().len(), 4, "{full}");
    let cp = live_statements(&env, "ControllerRole");
    assert!(
        keys.iter().all(|k| resources(&cp, "DecryptEtcdSnapshots").contains(k)),
        "{cp:#?}"
    );
    let k6 = env.create_kms_key();
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml(&k6)).unwrap();
    let refused = env.kube_aws(dir, &["update", "--yes"]);
    let text = common::output_text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "kmsKeyARN \"{k6}\" would retire a 5th KMS key within the 91 days"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("Wait until the oldest, {k1} (retired")),
        "{text}"
    );
    assert_eq!(bundle(&env), full, "a refused rotation changed the published bundle");
}
