//! What a node finds in S3 when it boots, for real against moto (started
//! through tests/support/moto_server.py): its secrets, a new secrets version
//! in its user data when one of them changed, and no bootstrap state of an
//! earlier cluster of the same name.
//!
//! Secrets from the work tree to the node: `kube-aws up` renders a
//! work tree whose plugin has a `secret: true` parameter and publishes the KMS
//! bundle to moto; then the rendered node program's `kube-aws-node secrets` runs
//! with python3 and the real aws CLI against the same moto, on the files each
//! role's cloud-config writes (extracted into a temporary root), as a node does
//! at boot.
//!
//! Checked: each role decrypts only what its node.json names (workers: the
//! bootstrap token and their pool's override, never a PKI key or the
//! controller's value); controllers find the cluster PKI kube-aws generated in
//! /etc/kubernetes/pki (keys 0600, certificates 0644) and no S3 object nor any
//! command output holds a private key in plaintext; YAML and JSON files stay well-formed whatever the value
//! holds (quotes, colons, `#`, braces, a backslash) and text files get it
//! verbatim; modes are kept; a ciphertext under another entry's name is refused
//! by KMS's encryption context; no plaintext reaches stdout or stderr.
//!
//!
//! `kube-aws kubeconfig` against the same published cluster: tests/it/kubeconfig_moto.rs.
//!
//! Not covered: IAM evaluation (moto does not enforce the roles' narrowed
//! `kms:Decrypt` conditions; tests/it/render.rs checks the rendered policies and
//! cfn-lint accepts them), and kubeadm consuming the token on a real node.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

pub(crate) const BUCKET: &str = "kube-aws-secrets";
pub(crate) const CLUSTER: &str = "vault";
/// Hostile to every format the node fills: YAML, JSON and shell alike.
const CLUSTER_VALUE: &str = r#"p@ss: "w'o#rd" {x} $(id) \ end"#;
const POOL_VALUE: &str = "pool-only-value-42";

use common::MotoEnv as Env;

/// moto with a bucket, a KMS key and the work tree (see `work_tree`).
pub(crate) fn published_env() -> (Env, tempfile::TempDir) {
    let env = Env::new();
    let tree = env.work_tree(&[BUCKET]);
    work_tree(tree.path(), &tree.kms);
    (env, tree.tree)
}

pub(crate) fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(crate) fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A work tree with one plugin that puts its secret in a manifest (YAML), a
/// controller file (text) and a worker file (JSON); the pool overrides it.
pub(crate) fn work_tree(dir: &Path, kms: &str) {
    write(
        &dir.join("cluster.yaml"),
        &format!(
            "clusterName: {CLUSTER}\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             worker:\n  nodePools:\n    - name: general\n      count: 1\n    - name: gpu\n      count: 1\n      \
             plugins:\n        vault: {{password: {POOL_VALUE}}}\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n  vault:\n    enabled: true\n    password: '{}'\n",
            CLUSTER_VALUE.replace('\'', "''")
        ),
    );
    write(
        &dir.join("plugins/vault/plugin.yaml"),
        r#"apiVersion: kube-aws/v1
kind: Plugin
metadata: {name: vault, version: 0.1.0, description: a secret in every kind of node file}
spec:
  parameters:
    password: {type: string, secret: true}
  kubernetes:
    manifests: [manifests/secret.yaml.tera]
  nodes:
    controller:
      files:
        - path: /etc/vault/env
          content: "PASSWORD={{ params.password }}\n"
          permissions: "0640"
    worker:
      files:
        - path: /etc/vault/worker.json
          content: '{"password": "{{ params.password }}", "plain": "kept"}'
"#,
    );
    write(
        &dir.join("plugins/vault/manifests/secret.yaml.tera"),
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vault\n  namespace: default\nstringData:\n  \
         password: {{ params.password }}\n  url: postgres://app:{{ params.password }}@db:5432/app\n",
    );
}

/// One node: its role's files under a fresh root, with runtime.json as the stub writes it.
pub(crate) fn node(dir: &Path, role: &str) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let cc = std::fs::read_to_string(dir.join(format!("rendered/userdata/{role}.cloud-config"))).unwrap();
    common::write_cloud_config_files(&cc, root.path());
    let stub = std::fs::read_to_string(dir.join(format!("rendered/userdata/{role}.stub"))).unwrap();
    common::write_cloud_config_files(&stub.replace("${AWS::Region}", "us-west-2"), root.path());
    root
}

fn run_node_script(env: &Env, root: &Path) -> Output {
    let mut cmd = Command::new("python3");
    env.apply(&mut cmd);
    cmd.arg(root.join("opt/kube-aws/bin/kube-aws-node"))
        .arg("secrets")
        .env("KUBE_AWS_ROOT", root);
    cmd.output().unwrap()
}

pub(crate) fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path)).unwrap()
}

pub(crate) fn mode(root: &Path, path: &str) -> u32 {
    std::fs::metadata(root.join(path)).unwrap().permissions().mode() & 0o7777
}

fn stored(root: &Path) -> Vec<String> {
    let dir = root.join("run/kube-aws/secrets");
    let mut names = Vec::new();
    for e in walk(&dir) {
        names.push(e.strip_prefix(&dir).unwrap().to_string_lossy().to_string());
    }
    names.sort();
    names
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn nodes_decrypt_their_own_secrets_and_fill_them_in() {
    let (env, tree) = published_env();
    let dir = tree.path();
    let up = env.kube_aws(dir, &["up"]);
    let bundle = env.aws(&[
        "s3",
        "cp",
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/secrets/bundle.json"),
        "-",
    ]);
    assert!(
        bundle.contains("kube-aws-secret.vault.password"),
        "{bundle}\n{}",
        text(&up)
    );
    let mut output = text(&up);

    // The controller: token, certificate key and the cluster value.
    let c = node(dir, "controller");
    let run = run_node_script(&env, c.path());
    output.push_str(&text(&run));
    assert!(run.status.success(), "{}", text(&run));
    // The pod identity webhook's serving certificate, key and CA bundle (on by
    // default) are the controller's too: its manifest names them.
    assert_eq!(
        stored(c.path()),
        [
            "kube-aws-secret.pod-identity-webhook.ca-bundle",
            "kube-aws-secret.pod-identity-webhook.tls-crt",
            "kube-aws-secret.pod-identity-webhook.tls-key",
            "kube-aws-secret.vault.password",
            "kubeadm/bootstrap-token",
            "pki/ca.key",
            "pki/encryption.json",
            "pki/etcd/ca.key",
            "pki/front-proxy-ca.key",
            "pki/sa.key",
        ]
    );
    // The EncryptionConfiguration (src/render/security.rs) where the API server reads it, private.
    let enc = c.path().join("etc/kubernetes/pki/encryption.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&enc).unwrap()).unwrap();
    assert_eq!(config["kind"], "EncryptionConfiguration");
    let key = &config["resources"][0]["providers"][0]["secretbox"]["keys"][0];
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(key["secret"].as_str().unwrap())
            .unwrap()
            .len(),
        32
    );
    assert_eq!(
        config["resources"][0]["providers"][1],
        serde_json::json!({"identity": {}})
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&enc).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(
        !bundle.contains(key["secret"].as_str().unwrap()),
        "the key is only in the bundle encrypted"
    );
    // The cluster PKI where kubeadm looks for it, keys private, and the CA the bundle publishes.
    let b: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    for f in ["ca", "front-proxy-ca", "etcd/ca", "sa"] {
        let (public, key) = if f == "sa" {
            ("sa.pub".to_string(), "sa.key".to_string())
        } else {
            (format!("{f}.crt"), format!("{f}.key"))
        };
        let kp = format!("etc/kubernetes/pki/{key}");
        assert!(read(c.path(), &kp).starts_with("-----BEGIN PRIVATE KEY-----"), "{kp}");
        assert_eq!(mode(c.path(), &kp), 0o600, "{kp}");
        let pp = format!("etc/kubernetes/pki/{public}");
        assert_eq!(
            read(c.path(), &pp),
            b["certificates"][format!("pki/{public}")].as_str().unwrap()
        );
        assert_eq!(mode(c.path(), &pp), 0o644, "{pp}");
        assert_eq!(
            read(c.path(), &kp),
            read(c.path(), &format!("run/kube-aws/secrets/pki/{key}"))
        );
    }
    let token = read(c.path(), "run/kube-aws/secrets/kubeadm/bootstrap-token");
    assert!(
        regex::Regex::new(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
            .unwrap()
            .is_match(&token),
        "{token:?}"
    );
    assert_eq!(mode(c.path(), "run/kube-aws/secrets/kubeadm/bootstrap-token"), 0o600);
    assert_eq!(read(c.path(), "etc/vault/env"), format!("PASSWORD={CLUSTER_VALUE}\n"));
    assert_eq!(mode(c.path(), "etc/vault/env"), 0o640);
    // The plugin manifest is in the addon bundle, not in the user data: the
    // controller decrypted its secret at boot, and the reconciler fills it in
    // (tests/it/installer.rs runs that fill).
    assert!(!c.path().join("etc/kube-aws/addons/manifests").exists());
    let addons: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("rendered/addons/bundle.json")).unwrap()).unwrap();
    assert_eq!(
        addons["secretFiles"],
        serde_json::json!([
            {"path": "manifests/pod-identity-webhook/webhook.yaml", "format": "yaml"},
            {"path": "manifests/vault/secret.yaml", "format": "yaml"}
        ]),
        "{addons}"
    );
    // The webhook's key reaches the controller decrypted, and only there.
    let key = read(
        c.path(),
        "run/kube-aws/secrets/kube-aws-secret.pod-identity-webhook.tls-key",
    );
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key:?}");
    let webhook = addons["files"]["manifests/pod-identity-webhook/webhook.yaml"]
        .as_str()
        .unwrap();
    assert!(!webhook.contains("PRIVATE KEY") && webhook.contains("kube-aws-secret.pod-identity-webhook.tls-key"));
    let manifest = addons["files"]["manifests/vault/secret.yaml"].as_str().unwrap();
    assert!(manifest.contains("kube-aws-secret.vault.password") && !manifest.contains(CLUSTER_VALUE));

    // Running it again changes nothing (a reboot).
    let env_file = read(c.path(), "etc/vault/env");
    let again = run_node_script(&env, c.path());
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(read(c.path(), "etc/vault/env"), env_file);

    // A worker of the plain pool: the cluster value, nothing else (it joins
    // with the controllers' published join token, not the bundle's).
    let w = node(dir, "worker-general");
    let run = run_node_script(&env, w.path());
    output.push_str(&text(&run));
    assert!(run.status.success(), "{}", text(&run));
    assert_eq!(stored(w.path()), ["kube-aws-secret.vault.password"]);
    assert!(!w.path().join("etc/kubernetes/pki").exists(), "workers get no PKI");
    let j: serde_json::Value = serde_json::from_str(&read(w.path(), "etc/vault/worker.json")).unwrap();
    assert_eq!(j["password"].as_str(), Some(CLUSTER_VALUE));
    assert_eq!(j["plain"].as_str(), Some("kept"));
    assert!(!w.path().join("run/kube-aws/secrets/kubeadm/bootstrap-token").exists());

    // The gpu pool overrides the value: it gets its own entry only.
    let g = node(dir, "worker-gpu");
    let run = run_node_script(&env, g.path());
    output.push_str(&text(&run));
    assert!(run.status.success(), "{}", text(&run));
    assert_eq!(stored(g.path()), ["kube-aws-secret.vault.password.pool-gpu"]);
    let j: serde_json::Value = serde_json::from_str(&read(g.path(), "etc/vault/worker.json")).unwrap();
    assert_eq!(j["password"].as_str(), Some(POOL_VALUE));

    // The plaintext never reached any output, the rendered files or S3.
    for secret in [CLUSTER_VALUE, POOL_VALUE, token.as_str()] {
        assert!(!output.contains(secret), "{secret:?} leaked:\n{output}");
        for f in walk(&dir.join("rendered")) {
            let body = std::fs::read(&f).unwrap();
            assert!(
                !String::from_utf8_lossy(&body).contains(secret),
                "{secret:?} in {}",
                f.display()
            );
        }
    }
    assert!(!bundle.contains(CLUSTER_VALUE) && !bundle.contains(POOL_VALUE) && !bundle.contains(&token));
    // No private key in plaintext anywhere: every object in the bucket, the rendered files, the output.
    for key in env
        .aws(&[
            "s3api",
            "list-objects-v2",
            "--bucket",
            BUCKET,
            "--query",
            "Contents[].Key",
            "--output",
            "text",
        ])
        .split_whitespace()
    {
        let body = env.aws(&["s3", "cp", &format!("s3://{BUCKET}/{key}"), "-"]);
        assert!(!body.contains("PRIVATE KEY"), "{key} holds a private key");
    }
    assert!(
        bundle.contains("BEGIN CERTIFICATE"),
        "the public half is published: {bundle}"
    );
    assert!(!output.contains("PRIVATE KEY"), "{output}");
    for f in walk(&dir.join("rendered")) {
        assert!(!String::from_utf8_lossy(&std::fs::read(&f).unwrap()).contains("PRIVATE KEY"));
    }
    // Each PKI key is a KMS ciphertext bound to its own entry name.
    for name in ["pki/ca.key", "pki/front-proxy-ca.key", "pki/etcd/ca.key", "pki/sa.key"] {
        let ct = b["secrets"][name]
            .as_str()
            .unwrap_or_else(|| panic!("{name} not in the bundle"));
        let blob = tree.path().join("blob");
        std::fs::write(
            &blob,
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, ct).unwrap(),
        )
        .unwrap();
        let ctx = format!(r#"{{"kube-aws:cluster":"{CLUSTER}","kube-aws:secret":"{name}"}}"#);
        let plain = env.aws(&[
            "kms",
            "decrypt",
            "--ciphertext-blob",
            &format!("fileb://{}", blob.display()),
            "--encryption-context",
            &ctx,
            "--query",
            "Plaintext",
            "--output",
            "text",
        ]);
        let pem = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, plain.trim()).unwrap();
        assert!(String::from_utf8(pem)
            .unwrap()
            .starts_with("-----BEGIN PRIVATE KEY-----"));
    }
    // A second publish keeps the same PKI (and so the same CA hash).
    let upd = env.kube_aws(dir, &["update", "--yes"]);
    assert!(upd.status.success(), "{}", text(&upd));
    let again = env.aws(&[
        "s3",
        "cp",
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/secrets/bundle.json"),
        "-",
    ]);
    let a: serde_json::Value = serde_json::from_str(&again).unwrap_or_else(|e| panic!("{e}: {}", text(&upd)));
    assert_eq!(a["certificates"], b["certificates"], "{}", text(&upd));
    for name in ["pki/ca.key", "pki/front-proxy-ca.key", "pki/etcd/ca.key", "pki/sa.key"] {
        assert_eq!(
            a["secrets"][name], b["secrets"][name],
            "{name} was re-encrypted or regenerated"
        );
    }
}

/// The secret bundle key a role's stack points its nodes at (the SSM
/// parameter of src/render/layout.rs `secret_bundle_parameter`), under the
/// cluster's prefix.
fn pointed_bundle(env: &Env, role: &str) -> String {
    let v = env.aws_json(&[
        "ssm",
        "get-parameter",
        "--name",
        &format!("/kube-aws/{CLUSTER}/secret-bundle/{role}"),
    ]);
    let key = v["Parameter"]["Value"].as_str().unwrap().to_string();
    assert!(
        regex::Regex::new(r"^secrets/[0-9a-f]{64}/bundle\.json$")
            .unwrap()
            .is_match(&key),
        "{key}"
    );
    format!("clusters/{CLUSTER}/{key}")
}

#[test]
fn a_ciphertext_under_another_name_is_refused() {
    let (env, tree) = published_env();
    let dir = tree.path();
    let up = env.kube_aws(dir, &["up"]);
    assert!(up.status.success(), "{}", text(&up));
    // The bundle the worker's stack points at (nodes never read the latest).
    let key = pointed_bundle(&env, "worker-general");
    let bundle = env.aws(&["s3", "cp", &format!("s3://{BUCKET}/{key}"), "-"]);
    let mut b: serde_json::Value = serde_json::from_str(&bundle).unwrap_or_else(|e| panic!("{e}: {}", text(&up)));
    // Someone swaps the controller-only CA key's ciphertext in as the
    // worker-readable plugin secret: the encryption context names the entry, so KMS refuses.
    b["secrets"]["kube-aws-secret.vault.password"] = b["secrets"]["pki/ca.key"].clone();
    let swapped = tree.path().join("swapped.json");
    std::fs::write(&swapped, b.to_string()).unwrap();
    env.aws(&["s3", "cp", swapped.to_str().unwrap(), &format!("s3://{BUCKET}/{key}")]);
    let w = node(dir, "worker-general");
    let run = run_node_script(&env, w.path());
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("cannot decrypt the secret 'kube-aws-secret.vault.password' with this node's role"),
        "{err}"
    );
    assert!(!w
        .path()
        .join("run/kube-aws/secrets/kube-aws-secret.vault.password")
        .exists());
    // The worker file still holds the reference, not a value.
    assert!(read(w.path(), "etc/vault/worker.json").contains("kube-aws-secret.vault.password"));
}

/// After `destroy` (without `--purge`), the objects nodes wrote stay. A new
/// cluster's first controller would find the old init lock and try to join a
/// cluster that is gone, and `--wait` would show the old addons' phases: `up`
/// clears them, and only them, before creating the stack.
#[test]
fn up_clears_what_an_earlier_cluster_left() {
    let (env, tree) = published_env();
    let dir = tree.path();
    let base = format!("s3://{BUCKET}/clusters/{CLUSTER}");
    let body = tree.path().join("body");
    std::fs::write(&body, "{}").unwrap();
    let stale = [
        "bootstrap/init-lock",
        "bootstrap/join.json",
        "status/addons/dex.json",
        "status/nodes/i-0ld.json",
    ];
    let kept = ["charts/0000.tgz", "userdata/controller/old.cloud-config"];
    for key in stale.iter().chain(&kept) {
        env.aws(&["s3", "cp", body.to_str().unwrap(), &format!("{base}/{key}")]);
    }
    let up = env.kube_aws(dir, &["up"]);
    let listing = env.aws(&["s3", "ls", "--recursive", &format!("{base}/")]);
    for key in stale {
        assert!(!listing.contains(key), "{key} left behind:\n{listing}\n{}", text(&up));
    }
    for key in kept {
        assert!(listing.contains(key), "{key} deleted:\n{listing}");
    }
    assert!(listing.contains("secrets/bundle.json"), "{listing}");

    // A node of this cluster fails its bootstrap and publishes its report (as
    // node-bootstrap.sh writes it): `status` names the node and the step, with
    // the end of its log, in text and JSON.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let report = serde_json::json!({
        "instanceId": "i-0123456789abcdef0",
        "nodeName": "ip-10-0-1-23.us-west-2.compute.internal",
        "role": "worker-general",
        "stack": "vault-NodePoolGeneral-1ABC",
        "asgLogicalId": "WorkerGroup",
        "step": "kubeadm-join",
        "exitCode": 1,
        "command": "kubeadm join --config /var/lib/kube-aws/kubeadm.yaml",
        "log": "kube-aws: step kubeadm-join\nerror execution phase preflight: couldn't validate the identity of the API Server\n",
        "timestamp": now,
    });
    std::fs::write(&body, report.to_string()).unwrap();
    env.aws(&[
        "s3",
        "cp",
        body.to_str().unwrap(),
        &format!("{base}/status/nodes/i-0123456789abcdef0.json"),
    ]);
    let st = env.kube_aws(dir, &["status"]);
    let out = String::from_utf8_lossy(&st.stdout);
    assert!(
        out.contains(
            "node ip-10-0-1-23.us-west-2.compute.internal (i-0123456789abcdef0, worker-general) \
             failed at step kubeadm-join (exit 1): kubeadm join --config /var/lib/kube-aws/kubeadm.yaml"
        ),
        "{}",
        text(&st)
    );
    assert!(out.contains("| error execution phase preflight"), "{}", text(&st));
    let stj = env.kube_aws(dir, &["status", "-o", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&stj.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&stj)));
    assert_eq!(j["nodes"][0]["step"], "kubeadm-join", "{j:#}");
}

/// A stack's parameters, by name.
fn stack_parameters(env: &Env, stack: &str) -> std::collections::BTreeMap<String, String> {
    let out = env.aws(&[
        "cloudformation",
        "describe-stacks",
        "--stack-name",
        stack,
        "--output",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["Stacks"][0]["Parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["ParameterKey"].as_str().unwrap().to_string(),
                p["ParameterValue"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn root_parameters(env: &Env) -> std::collections::BTreeMap<String, String> {
    stack_parameters(env, CLUSTER)
}

/// A changed secret value changes no rendered file, yet must reach the nodes
/// that use it: each node stack gets a secrets version (a hash of its
/// entries' ciphertexts), so `update` replaces exactly those groups.
#[test]
fn a_changed_secret_rolls_only_the_nodes_that_use_it() {
    let (env, tree) = published_env();
    let dir = tree.path();
    let run = |args: &[&str]| env.kube_aws(dir, args);
    let up = run(&["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    let before = root_parameters(&env);
    for p in ["ControlPlane", "NodePoolGeneral", "NodePoolGpu"] {
        let v = &before[&format!("{p}SecretsVersion")];
        assert!(v.len() == 16 && v.chars().all(|c| c.is_ascii_hexdigit()), "{p}: {v:?}");
    }

    // Publishing again with the same values keeps every ciphertext: no changes.
    let same = run(&["update", "--yes"]);
    assert!(
        same.status.success() && text(&same).contains("no changes"),
        "{}",
        text(&same)
    );

    let new_value = "rotated-value-7";
    let yaml = std::fs::read_to_string(dir.join("cluster.yaml")).unwrap();
    let yaml = yaml.replace(&format!("'{}'", CLUSTER_VALUE.replace('\'', "''")), new_value);
    assert!(yaml.contains(new_value));
    std::fs::write(dir.join("cluster.yaml"), yaml).unwrap();
    let rendered_before = std::fs::read(dir.join("rendered/stacks/control-plane.json")).unwrap();

    // A declined update points no node at a new bundle, and leaves the latest
    // bundle (`secrets/bundle.json`) as it was: it is written only once a
    // change set is confirmed (issue 36 §3). A node that boots now (a
    // scale-up, a health replacement) still gets the value its stack version
    // was rolled out with.
    let pointed_before = pointed_bundle(&env, "controller");
    let declined = run(&["update"]);
    assert_ne!(declined.status.code(), Some(0), "{}", text(&declined));
    assert_eq!(
        pointed_bundle(&env, "controller"),
        pointed_before,
        "{}",
        text(&declined)
    );
    let latest = env.aws(&[
        "s3",
        "cp",
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/secrets/bundle.json"),
        "-",
    ]);
    let old = env.aws(&["s3", "cp", &format!("s3://{BUCKET}/{pointed_before}"), "-"]);
    assert_eq!(latest, old, "the declined update moved the latest bundle");
    let c = node(dir, "controller");
    let boot = run_node_script(&env, c.path());
    assert!(boot.status.success(), "{}", text(&boot));
    assert_eq!(read(c.path(), "etc/vault/env"), format!("PASSWORD={CLUSTER_VALUE}\n"));

    let upd = run(&["update", "--yes", "--wait", "--timeout", "2m"]);
    assert!(upd.status.success(), "{}", text(&upd));
    // The rendered files are the same: only the published versions differ.
    assert_eq!(
        std::fs::read(dir.join("rendered/stacks/control-plane.json")).unwrap(),
        rendered_before
    );
    let after = root_parameters(&env);
    assert_ne!(
        before["ControlPlaneSecretsVersion"],
        after["ControlPlaneSecretsVersion"]
    );
    assert_ne!(
        before["NodePoolGeneralSecretsVersion"],
        after["NodePoolGeneralSecretsVersion"]
    );
    assert_eq!(
        before["NodePoolGpuSecretsVersion"], after["NodePoolGpuSecretsVersion"],
        "the gpu pool overrides the value: its own secret did not change"
    );
    // The preview names the changed versions (moto's change set lists no
    // resource for a change of parameters only; AWS lists the nested stacks).
    assert!(
        text(&upd).contains(
            "parameters changed: SecretBundleKey, ControlPlaneSecretsVersion, NodePoolGeneralSecretsVersion\n"
        ),
        "{}",
        text(&upd)
    );
    // ... and says which groups roll for it, from the templates (src/aws/lifecycle/rolls.rs).
    let rolls = String::from_utf8_lossy(&upd.stdout)
        .lines()
        .find(|l| l.starts_with("rolls: "))
        .unwrap_or_default()
        .to_string();
    assert!(
        rolls.starts_with("rolls: ControlPlane/ControllerGroup: ")
            && rolls.contains(
                "; then NodePoolGeneral/WorkerGroup: 1 instance replaced, one at a time (launch template (UserData))"
            )
            && !rolls.contains("NodePoolGpu"),
        "{}",
        text(&upd)
    );
    // Now the controllers' stack points at the new bundle, and a node that
    // boots gets the new value.
    assert_ne!(pointed_bundle(&env, "controller"), pointed_before);
    let c = node(dir, "controller");
    let boot = run_node_script(&env, c.path());
    assert!(boot.status.success(), "{}", text(&boot));
    assert_eq!(read(c.path(), "etc/vault/env"), format!("PASSWORD={new_value}\n"));
    // Each node stack got its version, and its nodes' user data carries it, so
    // CloudFormation replaces them.
    for (stack, param) in [
        ("ControlPlane", "ControlPlaneSecretsVersion"),
        ("NodePoolGeneral", "NodePoolGeneralSecretsVersion"),
        ("NodePoolGpu", "NodePoolGpuSecretsVersion"),
    ] {
        let nested = nested_stack(&env, stack);
        assert_eq!(nested["SecretsVersion"], after[param], "{stack}");
    }
    let user_data = launch_template_user_data(&env);
    for (role, param) in [
        ("controller", "ControlPlaneSecretsVersion"),
        ("worker-gpu", "NodePoolGpuSecretsVersion"),
    ] {
        let want = format!("\"role\":\"{role}\"");
        let version = format!("\"secretsVersion\":\"{}\"", after[param]);
        assert!(
            user_data.iter().any(|u| u.contains(&want) && u.contains(&version)),
            "no {role} user data with {version}: {user_data:#?}"
        );
    }
    for secret in [CLUSTER_VALUE, new_value, POOL_VALUE] {
        assert!(
            !text(&upd).contains(secret) && !text(&up).contains(secret),
            "{secret:?} leaked"
        );
    }
}

/// A nested stack's parameters, by the root's logical ID for it.
fn nested_stack(env: &Env, logical_id: &str) -> std::collections::BTreeMap<String, String> {
    let id = env.aws(&[
        "cloudformation",
        "describe-stack-resource",
        "--stack-name",
        CLUSTER,
        "--logical-resource-id",
        logical_id,
        "--query",
        "StackResourceDetail.PhysicalResourceId",
        "--output",
        "text",
    ]);
    stack_parameters(env, id.trim())
}

/// The decoded user data of the latest version of each launch template.
fn launch_template_user_data(env: &Env) -> Vec<String> {
    use base64::Engine;
    let ids = env.aws(&[
        "ec2",
        "describe-launch-templates",
        "--query",
        "LaunchTemplates[].LaunchTemplateId",
        "--output",
        "text",
    ]);
    ids.split_whitespace()
        .map(|id| {
            let v: serde_json::Value = serde_json::from_str(&env.aws(&[
                "ec2",
                "describe-launch-template-versions",
                "--versions",
                "$Latest",
                "--output",
                "json",
                "--launch-template-id",
                id,
            ]))
            .unwrap();
            let data = v["LaunchTemplateVersions"][0]["LaunchTemplateData"]["UserData"]
                .as_str()
                .unwrap_or_default();
            String::from_utf8_lossy(
                &base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap_or_default(),
            )
            .into_owned()
        })
        .collect()
}

/// The root stack's ApiEndpoint output, as moto reports it.
pub(crate) fn api_endpoint(env: &Env) -> String {
    let s = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]);
    s["Stacks"][0]["Outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["OutputKey"] == "ApiEndpoint")
        .and_then(|o| o["OutputValue"].as_str())
        .unwrap_or_else(|| panic!("no ApiEndpoint output: {s}"))
        .to_string()
}

/// A cluster published before kube-aws held the PKI (its bundle has kubeadm's
/// certificate key and no CA): its nodes trust a CA kube-aws does not have, so
/// `up` refuses rather than publish a new one, names the fix, and creates no stack.
#[test]
fn a_bundle_from_before_the_pki_is_refused_not_given_a_new_ca() {
    let (env, tree) = published_env();
    let dir = tree.path();
    let kms = read(dir, "cluster.yaml")
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("kmsKeyARN:")
                .map(|v| v.trim().trim_matches('"').to_string())
        })
        .expect("kmsKeyARN in the work tree");
    let legacy = serde_json::json!({
        "apiVersion": "kube-aws/v1",
        "kind": "SecretBundle",
        "kmsKeyARN": kms,
        "encryptionContext": {"kube-aws:cluster": CLUSTER},
        "secrets": {"kubeadm/bootstrap-token": "AQID", "kubeadm/certificate-key": "AQID"},
    });
    let body = dir.join("legacy.json");
    std::fs::write(&body, legacy.to_string()).unwrap();
    env.aws(&[
        "s3",
        "cp",
        body.to_str().unwrap(),
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/secrets/bundle.json"),
    ]);
    let up = env.kube_aws(dir, &["up"]);
    assert_ne!(up.status.code(), Some(0), "{}", text(&up));
    let err = String::from_utf8_lossy(&up.stderr);
    assert!(err.contains("created before kube-aws held its CAs"), "{}", text(&up));
    assert!(err.contains("destroy --purge"), "{}", text(&up));
    let stacks = env.aws(&[
        "cloudformation",
        "list-stacks",
        "--query",
        "StackSummaries[].StackName",
        "--output",
        "text",
    ]);
    assert!(!stacks.contains(CLUSTER), "a stack was created: {stacks}");
}
