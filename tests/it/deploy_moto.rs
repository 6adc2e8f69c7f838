//! End to end against moto server: `up --wait`, `status`, `update` (refused
//! without a terminal, with a changed value, with no changes), `destroy --wait`
//! (and `--purge`), with real S3 objects and stack states checked through the
//! API, and every published object and all output grepped for the secrets.
//! Plus the faults: no credentials, a missing bucket, an unreachable endpoint,
//! a stack that exists. Waiting (Ctrl-C while waiting, `status --wait`
//! resuming, the endpoint lost mid-wait and back, the progress drawn on a
//! real pseudo-terminal): tests/it/deploy_wait_moto.rs.
//!
//! moto runs through tests/support/moto_server.py, which patches the moto
//! bugs our real templates hit (each documented there); everything else is
//! moto as it is.
//!
//! What moto cannot show (covered by the pure-function tests in
//! src/aws/wait/tests.rs and src/aws/wait/watch.rs): WaitConditions are ignored (so
//! no addon signal, success or FAILURE, reaches the stack), there are no
//! per-resource events, a failed stack never rolls back, and CreateStack
//! completes synchronously except for a custom resource waiting for its
//! response (which the Ctrl-C and terminal tests use to keep a stack in
//! progress); throttling is not staged here, and the endpoint dying mid-wait
//! only as far as its coming back (a proxy the test takes down).
//!
//! These tests publish a small hand-written rendered directory
//! (`--use-rendered`), so that they control every reference;
//! tests/it/deploy_real_tree_moto.rs renders a real work tree and publishes
//! what render wrote.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

pub(crate) const BUCKET: &str = "kube-aws-e2e";
pub(crate) const CLUSTER: &str = "demo";

use common::MotoEnv as Env;

pub(crate) fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(crate) fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub(crate) fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A work tree with cluster.yaml and a rendered directory in render's layout,
/// plus one chart tarball in the cache. Returns the chart's digest.
pub(crate) fn work_tree(env: &Env, dir: &Path, kms: &str, bucket: &str, vpc_tag: &str) -> String {
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
        r#"{
  "AWSTemplateFormatVersion": "2010-09-09",
  "Parameters": {"ArtifactBaseURL": {"Type": "String"}, "ArtifactS3URI": {"Type": "String"}},
  "Resources": {
    "Network": {"Type": "AWS::CloudFormation::Stack",
                "Properties": {"TemplateURL": {"Fn::Sub": "${ArtifactBaseURL}/stacks/network.json"}}},
    "ControlPlane": {"Type": "AWS::CloudFormation::Stack",
                     "Properties": {"TemplateURL": {"Fn::Sub": "${ArtifactBaseURL}/stacks/control-plane.json"},
                                    "Parameters": {"ArtifactS3URI": {"Ref": "ArtifactS3URI"}}}}
  },
  "Outputs": {"APIEndpoint": {"Value": "https://api.demo.example.com:6443"}}
}
"#,
    );
    write(
        &r.join("stacks/network.json"),
        &format!(
            r#"{{"Resources": {{"VPC": {{"Type": "AWS::EC2::VPC",
  "Properties": {{"CidrBlock": "10.0.0.0/16", "Tags": [{{"Key": "rev", "Value": "{vpc_tag}"}}]}}}}}},
 "Outputs": {{"VpcId": {{"Value": {{"Ref": "VPC"}}}}}}}}
"#
        ),
    );
    write(
        &r.join("stacks/control-plane.json"),
        r#"{"Parameters": {"ArtifactS3URI": {"Type": "String"}},
 "Resources": {"Controller": {"Type": "AWS::SQS::Queue",
   "Properties": {"Tags": [{"Key": "user-data", "Value": {"Fn::Sub": "${ArtifactS3URI}/userdata/controller.cloud-config"}}]}}}}
"#,
    );
    write(
        &r.join("userdata/controller.cloud-config"),
        "#cloud-config\nwrite_files:\n  - path: /etc/kube-aws/source\n    content: secrets/bundle.json addons/plan.json\n",
    );
    write(
        &r.join("userdata/controller.stub"),
        "#!/bin/sh\naws s3 cp \"$S3/userdata/controller.cloud-config\" /var/lib/cloud/x\n",
    );
    let chart = b"not really a tarball, but content-addressed all the same";
    let digest = sha256(chart);
    let cache = env.home.path().join("cache/kube-aws/charts/sha256");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join(format!("{digest}.tgz")), chart).unwrap();
    write(
        &r.join("addons/plan.json"),
        &format!(
            r#"{{"releases": [{{"name": "metrics-server", "chart": "metrics-server", "sha256": "{digest}",
  "values": "addons/values/metrics-server.yaml"}}]}}"#
        ),
    );
    write(&r.join("addons/values/metrics-server.yaml"), "replicas: 2\n");
    digest
}

/// Every object under the cluster's prefix: key → bytes.
pub(crate) fn objects(env: &Env, bucket: &str) -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    env.aws(&[
        "s3",
        "cp",
        "--recursive",
        "--quiet",
        &format!("s3://{bucket}/clusters/{CLUSTER}/"),
        dir.path().to_str().unwrap(),
    ]);
    objects_in(dir.path())
}

/// Every file under `root`: relative path → bytes.
fn objects_in(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p: PathBuf = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Decrypts bundle entry `name` under its encryption context, as a node does.
fn decrypt(env: &Env, name: &str, ciphertext_b64: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let ct = dir.path().join("ct");
    use base64::Engine;
    std::fs::write(
        &ct,
        base64::engine::general_purpose::STANDARD
            .decode(ciphertext_b64)
            .unwrap(),
    )
    .unwrap();
    let plain_b64 = env.aws(&[
        "kms",
        "decrypt",
        "--ciphertext-blob",
        &format!("fileb://{}", ct.display()),
        "--encryption-context",
        &serde_json::json!({"kube-aws:cluster": CLUSTER, "kube-aws:secret": name}).to_string(),
        "--query",
        "Plaintext",
        "--output",
        "text",
    ]);
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(plain_b64.trim())
            .unwrap(),
    )
    .unwrap()
}

pub(crate) fn stack_status(env: &Env) -> Option<String> {
    let mut cmd = Command::new(common::tool("aws"));
    env.apply(&mut cmd);
    let out = cmd
        .args([
            "cloudformation",
            "describe-stacks",
            "--stack-name",
            CLUSTER,
            "--query",
            "Stacks[0].StackStatus",
            "--output",
            "text",
        ])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn up_status_update_destroy_against_moto() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    let chart_digest = work_tree(&env, dir, &kms, BUCKET, "1");
    let mut all_output = String::new();

    // up --wait
    let up = env.kube_aws(dir, &["up", "--use-rendered", "--wait", "--timeout", "2m"]);
    all_output.push_str(&text(&up));
    assert!(up.status.success(), "{}", text(&up));
    // moto completes wait conditions unsignalled and no installer wrote a status
    // object: the closing line says so instead of claiming the addon is ready.
    assert!(
        text(&up).contains("0 of 1 addon(s) report ready; not reported ready: metrics-server (pending)"),
        "{}",
        text(&up)
    );
    // Not a terminal: plain progress lines, one per stack and per addon.
    assert!(text(&up).contains("stack Network: CREATE_COMPLETE"), "{}", text(&up));
    assert!(text(&up).contains("addon metrics-server: pending"), "{}", text(&up));
    assert_eq!(stack_status(&env).as_deref(), Some("CREATE_COMPLETE"));

    // The objects: content-addressed keys, the sha256 in the key matches the
    // body, SSE on every one, the chart under charts/sha256.
    let objs = objects(&env, BUCKET);
    let keys: Vec<&str> = objs.iter().map(|(k, _)| k.as_str()).collect();
    assert!(
        keys.contains(&format!("charts/{chart_digest}.tgz").as_str()),
        "{keys:?}"
    );
    for source in [
        "stacks/root.json",
        "stacks/network.json",
        "stacks/control-plane.json",
        "userdata/controller.stub",
        "addons/plan.json",
        "addons/values/metrics-server.yaml",
        "secrets/bundle.json",
    ] {
        let (dir_part, name) = source.rsplit_once('/').unwrap();
        let found = objs.iter().find(|(k, body)| {
            k.starts_with(&format!("{dir_part}/"))
                && k.ends_with(&format!("/{name}"))
                && k.split('/').count() == source.split('/').count() + 1
                && k.contains(&sha256(body))
        });
        assert!(found.is_some(), "no content-addressed object for {source} in {keys:?}");
    }
    for (k, _) in &objs {
        let head = env.aws_json(&[
            "s3api",
            "head-object",
            "--bucket",
            BUCKET,
            "--key",
            &format!("clusters/{CLUSTER}/{k}"),
        ]);
        assert_eq!(head["ServerSideEncryption"], "AES256", "{k}: {head}");
    }
    // References were rewritten: the root names the content-addressed network template.
    let root = objs
        .iter()
        .find(|(k, _)| k.starts_with("stacks/") && k.ends_with("/root.json"))
        .unwrap();
    let net = objs.iter().find(|(k, _)| k.ends_with("/network.json")).unwrap();
    assert!(
        String::from_utf8_lossy(&root.1).contains(&net.0),
        "root does not name {}",
        net.0
    );
    // The cloud-config goes where the stub looks for it, byte for byte: node paths
    // inside it are never rewritten.
    let cc_body = std::fs::read(dir.join("rendered/userdata/controller.cloud-config")).unwrap();
    let cc_key = format!("userdata/controller/{}.cloud-config", sha256(&cc_body));
    assert!(
        objs.iter().any(|(k, b)| k == &cc_key && b == &cc_body),
        "{cc_key} not in {keys:?}"
    );
    let bundle_key = objs
        .iter()
        .find(|(k, _)| k.starts_with("secrets/") && k.ends_with("/bundle.json"))
        .unwrap();

    // The nested stack was created from the published template.
    let resources = env.aws_json(&["cloudformation", "list-stack-resources", "--stack-name", CLUSTER]);
    let nested: Vec<&str> = resources["StackResourceSummaries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ResourceType"] == "AWS::CloudFormation::Stack")
        .map(|r| r["LogicalResourceId"].as_str().unwrap())
        .collect();
    assert_eq!(nested, ["Network", "ControlPlane"]);

    // The secrets: decrypt them as a node would, then grep for the plaintext.
    let bundle: serde_json::Value = serde_json::from_slice(&bundle_key.1).unwrap();
    let token = decrypt(
        &env,
        "kubeadm/bootstrap-token",
        bundle["secrets"]["kubeadm/bootstrap-token"].as_str().unwrap(),
    );
    // The cluster CA's key (src/pki.rs), KMS-encrypted under its own entry name.
    let cert_key = decrypt(&env, "pki/ca.key", bundle["secrets"]["pki/ca.key"].as_str().unwrap());
    assert!(regex::Regex::new(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
        .unwrap()
        .is_match(&token));
    assert!(cert_key.starts_with("-----BEGIN PRIVATE KEY-----"), "the CA key");
    assert!(bundle["certificates"]["pki/ca.crt"]
        .as_str()
        .unwrap()
        .starts_with("-----BEGIN CERTIFICATE-----"));

    // status, text and JSON, with an addon status object as a node writes it.
    env.aws(&[
        "s3api", "put-object", "--bucket", BUCKET, "--key", &format!("clusters/{CLUSTER}/status/addons/metrics-server.json"),
        "--body", write_tmp(r#"{"release": "metrics-server", "phase": "ready", "message": "deployed revision 1", "startedAt": "2026-11-29T20:00:00Z", "updatedAt": "2026-11-29T20:01:00Z"}"#).to_str().unwrap(),
    ]);
    // A controller's certificate report (src/node/kube_aws_node/certs.py), its
    // earliest leaf 20 days from expiry: status warns (issue 27).
    let now = std::time::SystemTime::now();
    let stamp = |t: std::time::SystemTime| humantime::format_rfc3339_seconds(t).to_string();
    let leaf = now + std::time::Duration::from_secs(20 * 86400 + 3600);
    let leaf_epoch = leaf.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let report = serde_json::json!({"instanceId": "i-0abc", "nodeName": "ip-10-0-1-5.ec2.internal",
        "checkedAt": stamp(now), "renewed": [], "ok": true, "error": "",
        "earliestLeaf": {"name": "apiserver", "expires": stamp(leaf), "expiresEpoch": leaf_epoch},
        "earliestCA": {"name": "ca", "expires": "2036-11-28T20:14:06Z", "expiresEpoch": 2_111_516_046u64}});
    env.aws(&[
        "s3api",
        "put-object",
        "--bucket",
        BUCKET,
        "--key",
        &format!("clusters/{CLUSTER}/status/certs/i-0abc.json"),
        "--body",
        write_tmp(&report.to_string()).to_str().unwrap(),
    ]);
    // The join token's status (src/node/kube_aws_node/join_token.py), minted
    // three hours ago, and an etcd snapshot five hours old (stale at the
    // default interval of 1h): status shows both ages and warns of the snapshot.
    let minted = now - std::time::Duration::from_secs(3 * 3600 + 120);
    let token_status = serde_json::json!({"instanceId": "i-0abc", "checkedAt": stamp(now), "action": "kept",
        "reason": "", "tokenId": "abcdef", "mintedAt": stamp(minted),
        "expires": stamp(minted + std::time::Duration::from_secs(86400)), "ok": true, "error": ""});
    env.aws(&[
        "s3api",
        "put-object",
        "--bucket",
        BUCKET,
        "--key",
        &format!("clusters/{CLUSTER}/status/bootstrap-token.json"),
        "--body",
        write_tmp(&token_status.to_string()).to_str().unwrap(),
    ]);
    env.aws(&[
        "s3api",
        "put-object",
        "--bucket",
        BUCKET,
        "--key",
        &format!("clusters/{CLUSTER}/etcd/20261201T000000Z-i-0abc.db"),
        "--body",
        write_tmp("snapshot").to_str().unwrap(),
    ]);
    let st = env.kube_aws(dir, &["status"]);
    all_output.push_str(&text(&st));
    assert!(st.status.success(), "{}", text(&st));
    let t = text(&st);
    assert!(
        t.contains("certificates: earliest apiserver on ip-10-0-1-5.ec2.internal expires"),
        "{t}"
    );
    assert!(t.contains("join token: abcdef, minted 3h2m ago, expires"), "{t}");
    // moto stores the object now: the snapshot is fresh, no warning.
    assert!(t.contains("etcd: newest snapshot "), "{t}");
    assert!(!t.contains("etcd snapshot is"), "{t}");
    assert!(
        t.contains("warning: the certificate \"apiserver\" on ip-10-0-1-5.ec2.internal expires"),
        "{t}"
    );
    assert!(t.contains("stack demo: CREATE_COMPLETE"), "{t}");
    assert!(t.contains("Network: CREATE_COMPLETE"), "{t}");
    assert!(t.contains("APIEndpoint: https://api.demo.example.com:6443"), "{t}");
    assert!(t.contains("metrics-server: ready (deployed revision 1)"), "{t}");
    let stj = env.kube_aws(dir, &["status", "-o", "json"]);
    all_output.push_str(&text(&stj));
    let j: serde_json::Value = serde_json::from_slice(&stj.stdout).unwrap();
    assert_eq!(j["stack"]["status"], "CREATE_COMPLETE");
    assert_eq!(j["stack"]["outputs"][0]["key"], "APIEndpoint");
    assert_eq!(j["addons"][0]["phase"], "ready");
    assert_eq!(j["nested"].as_array().unwrap().len(), 2);
    assert_eq!(j["certificates"]["earliestLeaf"]["daysLeft"], 20);
    assert_eq!(j["certificates"]["earliestCA"]["certificate"], "ca");
    assert_eq!(j["certificates"]["warnings"].as_array().unwrap().len(), 1);
    assert_eq!(j["bootstrapToken"]["tokenId"], "abcdef", "{j}");
    assert!(
        j["bootstrapToken"]["ageSeconds"].as_i64().unwrap() >= 3 * 3600 + 120,
        "{j}"
    );
    assert!(j["bootstrapToken"]["warnings"].as_array().unwrap().is_empty(), "{j}");
    assert!(
        j["etcdSnapshot"]["newest"]
            .as_str()
            .unwrap()
            .ends_with("20261201T000000Z-i-0abc.db"),
        "{j}"
    );
    assert!(j["etcdSnapshot"]["ageSeconds"].as_i64().unwrap() < 600, "{j}");
    // status --wait on a finished stack returns at once.
    let stw = env.kube_aws(dir, &["status", "--wait"]);
    assert!(stw.status.success(), "{}", text(&stw));

    // up again: the stack exists; point at update.
    let again = env.kube_aws(dir, &["up", "--use-rendered"]);
    all_output.push_str(&text(&again));
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains("already exists: run `kube-aws update`"),
        "{}",
        text(&again)
    );

    // update with no changes: says so, exit 0, nothing re-uploaded.
    let before = objects(&env, BUCKET).len();
    let same = env.kube_aws(dir, &["update", "--use-rendered"]);
    all_output.push_str(&text(&same));
    assert!(same.status.success(), "{}", text(&same));
    assert!(text(&same).contains("no changes"), "{}", text(&same));
    assert_eq!(objects(&env, BUCKET).len(), before);

    // A changed value in a nested template: without a terminal and without
    // --yes, refused; with --yes, applied.
    work_tree(&env, dir, &kms, BUCKET, "2");
    let refused = env.kube_aws(dir, &["update", "--use-rendered"]);
    all_output.push_str(&text(&refused));
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("Network (AWS::CloudFormation::Stack)"),
        "{}",
        text(&refused)
    );
    assert!(text(&refused).contains("pass --yes"), "{}", text(&refused));
    assert_eq!(stack_status(&env).as_deref(), Some("CREATE_COMPLETE"));
    let upd = env.kube_aws(dir, &["update", "--use-rendered", "--yes", "--wait", "--timeout", "2m"]);
    all_output.push_str(&text(&upd));
    assert!(upd.status.success(), "{}", text(&upd));
    assert!(text(&upd).contains("UPDATE_COMPLETE"), "{}", text(&upd));
    assert_eq!(stack_status(&env).as_deref(), Some("UPDATE_COMPLETE"));
    let live = env.aws(&[
        "cloudformation",
        "get-template",
        "--stack-name",
        CLUSTER,
        "--query",
        "TemplateBody",
        "--output",
        "json",
    ]);
    assert!(
        !live.contains(&net.0),
        "the live root template still names the old network template"
    );
    // The secrets stayed the same: the bundle was reused, not regenerated.
    let bundle2 = env.aws(&[
        "s3",
        "cp",
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/secrets/bundle.json"),
        "-",
    ]);
    let bundle2: serde_json::Value = serde_json::from_str(&bundle2).unwrap();
    assert_eq!(bundle2["secrets"], bundle["secrets"]);

    // destroy: refused without --yes off a terminal; --wait until gone; objects kept.
    let no = env.kube_aws(dir, &["destroy"]);
    assert_eq!(no.status.code(), Some(1), "{}", text(&no));
    let d = env.kube_aws(dir, &["destroy", "--yes", "--wait", "--timeout", "2m"]);
    all_output.push_str(&text(&d));
    assert!(d.status.success(), "{}", text(&d));
    assert!(matches!(stack_status(&env).as_deref(), None | Some("DELETE_COMPLETE")));
    assert!(
        !objects(&env, BUCKET).is_empty(),
        "destroy without --purge must keep the objects"
    );
    let gone = env.kube_aws(dir, &["status"]);
    assert_eq!(gone.status.code(), Some(1), "{}", text(&gone));
    assert!(
        text(&gone).contains("does not exist: run `kube-aws up`"),
        "{}",
        text(&gone)
    );

    // up again reuses the published objects; destroy --purge removes them.
    let up2 = env.kube_aws(dir, &["up", "--use-rendered"]);
    all_output.push_str(&text(&up2));
    assert!(up2.status.success(), "{}", text(&up2));
    assert!(text(&up2).contains("(0 new)"), "{}", text(&up2));
    let p = env.kube_aws(dir, &["destroy", "--yes", "--wait", "--purge"]);
    all_output.push_str(&text(&p));
    assert!(p.status.success(), "{}", text(&p));
    assert!(objects(&env, BUCKET).is_empty());

    // No secret in plaintext anywhere: every object published by the first
    // `up`, the rendered templates, and the output of every command above.
    for (k, body) in objs {
        let s = String::from_utf8_lossy(&body);
        assert!(!s.contains(&token) && !s.contains(&cert_key), "plaintext secret in {k}");
        assert!(!s.contains("PRIVATE KEY"), "a private key in plaintext in {k}");
    }
    for (k, body) in objects_in(&dir.join("rendered")) {
        let s = String::from_utf8_lossy(&body);
        assert!(
            !s.contains(&token) && !s.contains(&cert_key),
            "plaintext secret in rendered/{k}"
        );
    }
    assert!(
        !all_output.contains(&token) && !all_output.contains(&cert_key) && !all_output.contains("PRIVATE KEY"),
        "plaintext secret in the output"
    );
}

fn write_tmp(content: &str) -> PathBuf {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), content).unwrap();
    f.into_temp_path().keep().unwrap()
}

#[test]
fn faults_have_clear_messages_and_exit_codes() {
    let env = Env::new();
    let kms = env.create_kms_key();
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path();

    // The bucket does not exist: say so, exit 4, and do not create it.
    work_tree(&env, dir, &kms, "no-such-bucket-here", "1");
    let o = env.kube_aws(dir, &["up", "--use-rendered", "--wait"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("the bucket \"no-such-bucket-here\" does not exist"),
        "{}",
        text(&o)
    );
    let buckets = env.aws(&["s3api", "list-buckets", "--query", "Buckets[].Name", "--output", "text"]);
    assert!(!buckets.contains("no-such-bucket-here"));

    // No credentials: say how to set them, exit 4.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
    env.apply(&mut cmd);
    cmd.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_CONFIG_FILE", dir.join("none"))
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("none"))
        .arg("--dir")
        .arg(dir)
        .args(["status"]);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("no AWS credentials found"), "{}", text(&o));
    assert!(text(&o).contains("AWS_ACCESS_KEY_ID"), "{}", text(&o));

    // The endpoint is not there: a network error, exit 4.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-aws"));
    env.apply(&mut cmd);
    cmd.env("AWS_ENDPOINT_URL", format!("http://localhost:{}", common::free_port()))
        .arg("--dir")
        .arg(dir)
        .args(["status"]);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("cannot reach AWS"), "{}", text(&o));

    // No rendered files: exit 1, pointing at render.
    std::fs::remove_dir_all(dir.join("rendered")).unwrap();
    let o = env.kube_aws(dir, &["up", "--use-rendered"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("run `kube-aws render` first"), "{}", text(&o));
}
