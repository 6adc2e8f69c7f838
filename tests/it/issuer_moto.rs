//! The service-account issuer against moto server: `up` publishes
//! `oidc/.well-known/openid-configuration` and `oidc/keys.json` as JSON, built
//! from the bundle's `sa.pub`, and the bucket policy gets one statement that
//! grants anonymous `s3:GetObject` on exactly those two keys, next to the
//! statements that were there. A bucket whose Block Public Access refuses a
//! public statement stops `up` with the fix named.
//!
//! moto evaluates the bucket policy for unsigned requests: an anonymous GET of
//! keys.json is answered and one of the secret bundle refused. What it cannot
//! show: its server routes any `.well-known` URL path to its own handlers, so
//! the discovery document's public read is checked on the policy read back.

use crate::common;

use std::path::Path;

use common::MotoEnv as Env;
use serde_json::{json, Value};

const CLUSTER: &str = "demo";

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// cluster.yaml and a smallest rendered directory `up --use-rendered` publishes.
fn work_tree(dir: &Path, kms: &str, bucket: &str) {
    write(
        &dir.join("cluster.yaml"),
        &format!(
            "clusterName: {CLUSTER}\nregion: us-west-2\ns3URI: s3://{bucket}/clusters\nkmsKeyARN: {kms}\n\
             worker:\n  nodePools:\n    - name: general\n      count: 1\n"
        ),
    );
    let r = dir.join("rendered");
    write(
        &r.join("stacks/root.json"),
        r#"{"AWSTemplateFormatVersion": "2010-09-09",
 "Resources": {"Queue": {"Type": "AWS::SQS::Queue", "Properties": {}}}}
"#,
    );
    write(&r.join("addons/plan.json"), r#"{"releases": []}"#);
}

fn get(env: &Env, bucket: &str, rel: &str) -> (Value, Value) {
    let key = format!("clusters/{CLUSTER}/{rel}");
    let head = env.aws_json(&["s3api", "head-object", "--bucket", bucket, "--key", &key]);
    let out = tempfile::NamedTempFile::new().unwrap();
    env.aws(&[
        "s3",
        "cp",
        "--quiet",
        &format!("s3://{bucket}/{key}"),
        out.path().to_str().unwrap(),
    ]);
    let body: Value = serde_json::from_slice(&std::fs::read(out.path()).unwrap()).unwrap();
    (head, body)
}

/// The HTTP status of an unsigned path-style GET of `rel` from moto.
fn anonymous_get(env: &Env, bucket: &str, rel: &str) -> u16 {
    use std::io::{Read, Write};
    let url = env.moto.url();
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let addr = host.replace("localhost", "127.0.0.1");
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "GET /{bucket}/clusters/{CLUSTER}/{rel} HTTP/1.0\r\nHost: {host}\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok();
    resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[test]
fn up_publishes_the_discovery_documents_and_makes_only_them_public() {
    let env = Env::new();
    let bucket = "kube-aws-issuer";
    env.aws(&["s3", "mb", &format!("s3://{bucket}")]);
    // A statement of the bucket's owner, which must survive.
    let theirs = json!({"Sid": "KeepTheBucket", "Effect": "Deny", "Principal": "*", "Action": "s3:DeleteBucket",
        "Resource": format!("arn:aws:s3:::{bucket}")});
    let policy = json!({"Version": "2012-10-17", "Statement": [theirs]}).to_string();
    env.aws(&["s3api", "put-bucket-policy", "--bucket", bucket, "--policy", &policy]);
    let kms = env.create_kms_key();
    let tree = tempfile::tempdir().unwrap();
    work_tree(tree.path(), &kms, bucket);

    let up = env.kube_aws(tree.path(), &["up", "--use-rendered"]);
    assert!(up.status.success(), "{}", text(&up));

    let issuer = format!("https://{bucket}.s3.us-west-2.amazonaws.com/clusters/{CLUSTER}/oidc");
    let (head, doc) = get(&env, bucket, "oidc/.well-known/openid-configuration");
    assert_eq!(head["ContentType"], "application/json", "{head}");
    assert_eq!(doc["issuer"], json!(issuer));
    assert_eq!(doc["jwks_uri"], json!(format!("{issuer}/keys.json")));
    assert_eq!(doc["id_token_signing_alg_values_supported"], json!(["ES256"]));
    assert_eq!(doc["response_types_supported"], json!(["id_token"]));
    assert_eq!(doc["subject_types_supported"], json!(["public"]));

    // keys.json is the JWKS of the bundle's sa.pub, kid as kube-apiserver computes it.
    let (head, keys) = get(&env, bucket, "oidc/keys.json");
    assert_eq!(head["ContentType"], "application/json", "{head}");
    let (_, bundle) = get(&env, bucket, "secrets/bundle.json");
    let sa_pub = bundle["certificates"]["pki/sa.pub"].as_str().unwrap();
    let (want, _) = kube_aws::irsa::jwks(sa_pub).unwrap();
    assert_eq!(keys, want);
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1);

    // The bucket policy: the owner's statement, and one of ours, exactly the two keys.
    let got = env.aws_json(&["s3api", "get-bucket-policy", "--bucket", bucket]);
    let policy: Value = serde_json::from_str(got["Policy"].as_str().unwrap()).unwrap();
    let statements = policy["Statement"].as_array().unwrap();
    assert_eq!(statements.len(), 2, "{policy}");
    assert_eq!(statements[0], theirs);
    let ours = &statements[1];
    assert_eq!(ours["Effect"], "Allow");
    assert_eq!(ours["Principal"], "*");
    assert_eq!(ours["Action"], "s3:GetObject");
    assert_eq!(
        ours["Resource"],
        json!([
            format!("arn:aws:s3:::{bucket}/clusters/{CLUSTER}/oidc/.well-known/openid-configuration"),
            format!("arn:aws:s3:::{bucket}/clusters/{CLUSTER}/oidc/keys.json"),
        ])
    );
    assert!(ours.get("Condition").is_none());

    // Anonymously (an unsigned GET, as IAM reads them): the keys are public,
    // the bundle next to them is not. (moto's server answers every URL path
    // with `.well-known` in it from its own routes, 404 here, so the discovery
    // document's public read is the policy statement checked above.)
    assert_eq!(anonymous_get(&env, bucket, "oidc/keys.json"), 200);
    assert_eq!(anonymous_get(&env, bucket, "secrets/bundle.json"), 403);

    // A second up changes nothing: the same two objects, the same policy.
    let again = env.kube_aws(tree.path(), &["update", "--use-rendered", "--yes"]);
    let after = env.aws_json(&["s3api", "get-bucket-policy", "--bucket", bucket]);
    let after: Value = serde_json::from_str(after["Policy"].as_str().unwrap()).unwrap();
    assert_eq!(after, policy, "{}", text(&again));
    let (_, keys_after) = get(&env, bucket, "oidc/keys.json");
    assert_eq!(keys_after, keys, "the signing key is generated once");
    // The pod identity webhook's serving certificate, key and CA bundle are
    // KMS-encrypted bundle entries, kept as they are by the second publish (a
    // new ciphertext would replace the controllers).
    let (_, bundle_after) = get(&env, bucket, "secrets/bundle.json");
    for entry in kube_aws::pki::WEBHOOK_ENTRIES {
        let ct = bundle["secrets"][entry]
            .as_str()
            .unwrap_or_else(|| panic!("{entry} missing"));
        assert_eq!(bundle_after["secrets"][entry].as_str(), Some(ct), "{entry}");
        assert!(!ct.contains("BEGIN"), "{entry} is a ciphertext");
    }
    assert!(bundle["certificates"].get(kube_aws::pki::WEBHOOK_KEY).is_none());

    // destroy --purge takes the cluster's statement back out, and only it.
    let d = env.kube_aws(tree.path(), &["destroy", "--yes", "--wait", "--purge"]);
    assert!(d.status.success(), "{}", text(&d));
    let left = env.aws_json(&["s3api", "get-bucket-policy", "--bucket", bucket]);
    let left: Value = serde_json::from_str(left["Policy"].as_str().unwrap()).unwrap();
    assert_eq!(left["Statement"], json!([theirs]));
}

#[test]
fn block_public_access_stops_up_with_the_fix_named() {
    let env = Env::new();
    let bucket = "kube-aws-blocked";
    env.aws(&["s3", "mb", &format!("s3://{bucket}")]);
    env.aws(&[
        "s3api",
        "put-public-access-block",
        "--bucket",
        bucket,
        "--public-access-block-configuration",
        "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true",
    ]);
    let kms = env.create_kms_key();
    let tree = tempfile::tempdir().unwrap();
    work_tree(tree.path(), &kms, bucket);
    let up = env.kube_aws(tree.path(), &["up", "--use-rendered"]);
    let out = text(&up);
    assert_eq!(up.status.code(), Some(1), "{out}");
    assert!(
        out.contains("BlockPublicPolicy, RestrictPublicBuckets") && out.contains("issuerURL"),
        "{out}"
    );
    let mut cmd = std::process::Command::new(common::tool("aws"));
    env.apply(&mut cmd);
    let none = cmd
        .args(["s3api", "get-bucket-policy", "--bucket", bucket])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("NoSuchBucketPolicy"),
        "no policy was written: {}",
        text(&none)
    );

    // With issuerURL the documents are published for copying, privately, and
    // the bucket (and its Block Public Access) is left alone.
    let cy = tree.path().join("cluster.yaml");
    let mut yaml = std::fs::read_to_string(&cy).unwrap();
    yaml.push_str("issuerURL: https://oidc.example.com/demo\n");
    std::fs::write(&cy, yaml).unwrap();
    let up = env.kube_aws(tree.path(), &["up", "--use-rendered"]);
    assert!(up.status.success(), "{}", text(&up));
    let (_, doc) = get(&env, bucket, "oidc/.well-known/openid-configuration");
    assert_eq!(doc["issuer"], "https://oidc.example.com/demo");
    assert_eq!(doc["jwks_uri"], "https://oidc.example.com/demo/keys.json");
}
