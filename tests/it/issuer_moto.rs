//! The service-account issuer against moto server. `up` creates the issuer
//! bucket `<bucket>-oidc-<cluster>` (tagged as the cluster's), sets that
//! bucket's own Block Public Access to allow a bucket policy, publishes
//! `.well-known/openid-configuration` and `keys.json` there as JSON, built
//! from the bundle's `sa.pub`, and grants anonymous `s3:GetObject` on exactly
//! those two keys. The cluster's bucket keeps Block Public Access on (AWS's
//! default for new buckets) and gets no policy. When the *account's* Block
//! Public Access is on, `up` stops before creating anything and names the
//! fix (the setting, or `issuerURL`). `destroy --purge` deletes the bucket.
//!
//! moto 5.2.5 stores Block Public Access settings (bucket and account) but
//! enforces neither: a public policy is accepted and served under any
//! setting. So what is checked here is what kube-aws sets and reads; that
//! `BlockPublicPolicy` refuses the statement and `RestrictPublicBuckets`
//! keeps anonymous readers out is AWS's documented behaviour (S3 user guide,
//! "Blocking public access to your Amazon S3 storage"). moto does evaluate
//! the bucket policy for unsigned requests: an anonymous GET of keys.json is
//! answered. Its server routes any `.well-known` URL path to its own handlers,
//! so the discovery document's public read is checked on the policy.

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

fn get_from(env: &Env, bucket: &str, key: &str) -> (Value, Value) {
    let head = env.aws_json(&["s3api", "head-object", "--bucket", bucket, "--key", key]);
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

/// An object under the cluster's prefix of the cluster bucket.
fn get(env: &Env, bucket: &str, rel: &str) -> (Value, Value) {
    get_from(env, bucket, &format!("clusters/{CLUSTER}/{rel}"))
}

/// One raw HTTP/1.0 request to moto; the status code and body.
fn raw(env: &Env, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let url = env.moto.url();
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let addr = host.replace("localhost", "127.0.0.1");
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok();
    let code = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (code, body)
}

/// The HTTP status of an unsigned path-style GET of `key` from moto.
fn anonymous_get(env: &Env, bucket: &str, key: &str) -> u16 {
    raw(env, "GET", &format!("/{bucket}/{key}"), &[], "").0
}

/// S3 Block Public Access on the bucket, all four settings: AWS's default
/// for a bucket created since April 2023.
fn block_public_access(env: &Env, bucket: &str) {
    env.aws(&[
        "s3api",
        "put-public-access-block",
        "--bucket",
        bucket,
        "--public-access-block-configuration",
        "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true",
    ]);
}

/// The account's Block Public Access (s3control, path `/v20180820/…`, which
/// moto's server routes whatever the host; the aws CLI would put the account
/// in the host name, which does not resolve here).
fn block_public_access_for_the_account(env: &Env, account: &str) {
    let body = "<PublicAccessBlockConfiguration xmlns=\"http://awss3control.amazonaws.com/doc/2018-08-20/\">\
        <BlockPublicAcls>true</BlockPublicAcls><IgnorePublicAcls>true</IgnorePublicAcls>\
        <BlockPublicPolicy>true</BlockPublicPolicy><RestrictPublicBuckets>true</RestrictPublicBuckets>\
        </PublicAccessBlockConfiguration>";
    let (code, text) = raw(
        env,
        "PUT",
        "/v20180820/configuration/publicAccessBlock",
        &[
            ("x-amz-account-id", account),
            (
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=testing/20250101/us-west-2/s3/aws4_request, SignedHeaders=host, Signature=x",
            ),
        ],
        body,
    );
    assert_eq!(code, 200, "{text}");
}

fn no_bucket_policy(env: &Env, bucket: &str) -> bool {
    let mut cmd = std::process::Command::new(common::tool("aws"));
    env.apply(&mut cmd);
    let none = cmd
        .args(["s3api", "get-bucket-policy", "--bucket", bucket])
        .output()
        .unwrap();
    String::from_utf8_lossy(&none.stderr).contains("NoSuchBucketPolicy")
}

fn bucket_exists(env: &Env, bucket: &str) -> bool {
    let list = env.aws_json(&["s3api", "list-buckets"]);
    list["Buckets"].as_array().unwrap().iter().any(|b| b["Name"] == bucket)
}

#[test]
fn up_with_block_public_access_on_serves_the_issuer_from_its_own_bucket() {
    let env = Env::new();
    let bucket = "kube-aws-issuer";
    let issuer_bucket = "kube-aws-issuer-oidc-demo";
    let tree = env.work_tree(&[bucket]);
    let kms = tree.kms.clone();
    // The defaults of a new bucket: Block Public Access on.
    block_public_access(&env, bucket);
    work_tree(tree.path(), &kms, bucket);

    let up = env.kube_aws(tree.path(), &["up", "--use-rendered"]);
    assert!(up.status.success(), "{}", text(&up));

    // The issuer is the issuer bucket's HTTPS root (known at render time).
    let issuer = format!("https://{issuer_bucket}.s3.us-west-2.amazonaws.com");
    let (head, doc) = get_from(&env, issuer_bucket, ".well-known/openid-configuration");
    assert_eq!(head["ContentType"], "application/json", "{head}");
    assert_eq!(doc["issuer"], json!(issuer));
    assert_eq!(doc["jwks_uri"], json!(format!("{issuer}/keys.json")));
    assert_eq!(doc["id_token_signing_alg_values_supported"], json!(["ES256"]));
    assert_eq!(doc["response_types_supported"], json!(["id_token"]));
    assert_eq!(doc["subject_types_supported"], json!(["public"]));

    // keys.json is the JWKS of the bundle's sa.pub, kid as kube-apiserver computes it.
    let (head, keys) = get_from(&env, issuer_bucket, "keys.json");
    assert_eq!(head["ContentType"], "application/json", "{head}");
    let (_, bundle) = get(&env, bucket, "secrets/bundle.json");
    let sa_pub = bundle["certificates"]["pki/sa.pub"].as_str().unwrap();
    let (want, _) = kube_aws::irsa::jwks(sa_pub).unwrap();
    assert_eq!(keys, want);
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1);

    // The issuer bucket: tagged as this cluster's, ACLs off, its own Block
    // Public Access allowing exactly its policy, and the policy one statement
    // on exactly the two keys.
    let tags = env.aws_json(&["s3api", "get-bucket-tagging", "--bucket", issuer_bucket]);
    assert_eq!(
        tags["TagSet"],
        json!([{"Key": "kube-aws:issuer-of", "Value": format!("s3://{bucket}/clusters/{CLUSTER}")}])
    );
    let own = env.aws_json(&["s3api", "get-bucket-ownership-controls", "--bucket", issuer_bucket]);
    assert_eq!(
        own["OwnershipControls"]["Rules"][0]["ObjectOwnership"],
        "BucketOwnerEnforced"
    );
    let pab = env.aws_json(&["s3api", "get-public-access-block", "--bucket", issuer_bucket]);
    assert_eq!(
        pab["PublicAccessBlockConfiguration"],
        json!({"BlockPublicAcls": true, "IgnorePublicAcls": true, "BlockPublicPolicy": false, "RestrictPublicBuckets": false})
    );
    let got = env.aws_json(&["s3api", "get-bucket-policy", "--bucket", issuer_bucket]);
    let policy: Value = serde_json::from_str(got["Policy"].as_str().unwrap()).unwrap();
    let statements = policy["Statement"].as_array().unwrap();
    assert_eq!(statements.len(), 1, "{policy}");
    let ours = &statements[0];
    assert_eq!(ours["Effect"], "Allow");
    assert_eq!(ours["Principal"], "*");
    assert_eq!(ours["Action"], "s3:GetObject");
    assert_eq!(
        ours["Resource"],
        json!([
            format!("arn:aws:s3:::{issuer_bucket}/.well-known/openid-configuration"),
            format!("arn:aws:s3:::{issuer_bucket}/keys.json"),
        ])
    );
    assert!(ours.get("Condition").is_none());

    // The cluster's bucket is left as it was: Block Public Access on, no policy.
    assert!(no_bucket_policy(&env, bucket), "the cluster bucket got a policy");
    let pab = env.aws_json(&["s3api", "get-public-access-block", "--bucket", bucket]);
    assert_eq!(pab["PublicAccessBlockConfiguration"]["BlockPublicPolicy"], true);

    // Anonymously (an unsigned GET, as IAM reads them): the keys are public,
    // the bundle in the cluster's bucket is not.
    assert_eq!(anonymous_get(&env, issuer_bucket, "keys.json"), 200);
    assert_eq!(
        anonymous_get(&env, bucket, &format!("clusters/{CLUSTER}/secrets/bundle.json")),
        403
    );

    // A second publish changes nothing: the same objects, the same policy.
    let again = env.kube_aws(tree.path(), &["update", "--use-rendered", "--yes"]);
    let after = env.aws_json(&["s3api", "get-bucket-policy", "--bucket", issuer_bucket]);
    let after: Value = serde_json::from_str(after["Policy"].as_str().unwrap()).unwrap();
    assert_eq!(after, policy, "{}", text(&again));
    let (_, keys_after) = get_from(&env, issuer_bucket, "keys.json");
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

    // destroy --purge deletes the issuer bucket.
    let d = env.kube_aws(tree.path(), &["destroy", "--yes", "--wait", "--purge"]);
    assert!(d.status.success(), "{}", text(&d));
    assert!(text(&d).contains(issuer_bucket), "{}", text(&d));
    assert!(!bucket_exists(&env, issuer_bucket), "the issuer bucket is deleted");
    assert!(bucket_exists(&env, bucket), "the cluster bucket is the user's");
}

#[test]
fn a_bucket_of_that_name_not_tagged_as_the_clusters_is_not_used() {
    let env = Env::new();
    let bucket = "kube-aws-taken";
    let tree = env.work_tree(&[bucket, &format!("{bucket}-oidc-{CLUSTER}")]);
    let kms = tree.kms.clone();
    work_tree(tree.path(), &kms, bucket);
    let up = env.kube_aws(tree.path(), &["up", "--use-rendered"]);
    let out = text(&up);
    assert_eq!(up.status.code(), Some(1), "{out}");
    assert!(
        out.contains("kube-aws-taken-oidc-demo") && out.contains("kube-aws:issuer-of") && out.contains("issuerURL"),
        "{out}"
    );
    assert!(no_bucket_policy(&env, &format!("{bucket}-oidc-{CLUSTER}")));
}

#[test]
fn account_block_public_access_stops_up_with_the_fix_named() {
    let env = Env::new();
    let bucket = "kube-aws-blocked";
    let tree = env.work_tree(&[bucket]);
    let kms = tree.kms.clone();
    let account = kms.split(':').nth(4).unwrap().to_string();
    block_public_access_for_the_account(&env, &account);
    work_tree(tree.path(), &kms, bucket);
    let up = env.kube_aws(tree.path(), &["up", "--use-rendered"]);
    let out = text(&up);
    assert_eq!(up.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("S3 Block Public Access is on for the account {account}"))
            && out.contains("BlockPublicPolicy, RestrictPublicBuckets")
            && out.contains("issuerURL"),
        "{out}"
    );
    assert!(!bucket_exists(&env, "kube-aws-blocked-oidc-demo"), "nothing created");

    // With issuerURL the documents are published for copying, privately, and
    // no bucket is created or made public.
    let cy = tree.path().join("cluster.yaml");
    let mut yaml = std::fs::read_to_string(&cy).unwrap();
    yaml.push_str("issuerURL: https://oidc.example.com/demo\n");
    std::fs::write(&cy, yaml).unwrap();
    let up = env.kube_aws(tree.path(), &["up", "--use-rendered"]);
    assert!(up.status.success(), "{}", text(&up));
    let (_, doc) = get(&env, bucket, "oidc/.well-known/openid-configuration");
    assert_eq!(doc["issuer"], "https://oidc.example.com/demo");
    assert_eq!(doc["jwks_uri"], "https://oidc.example.com/demo/keys.json");
    assert!(no_bucket_policy(&env, bucket));
    assert!(!bucket_exists(&env, "kube-aws-blocked-oidc-demo"));
    assert_eq!(
        anonymous_get(&env, bucket, &format!("clusters/{CLUSTER}/oidc/keys.json")),
        403
    );
}
