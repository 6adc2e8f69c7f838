//! `kube-aws kubeconfig` against moto, on the cluster tests/it/node_secrets.rs
//! publishes (its work tree and helpers): it merges a context named after
//! the cluster into an existing file without losing its contexts, at mode
//! 0600, with the endpoint from the stack's ApiEndpoint output and a
//! certificate that `openssl verify` accepts against the published CA; a CA
//! key under a KMS key the caller cannot use (one of another region: moto
//! answers AccessDenied), a bad TTL and a file that is not YAML fail
//! clearly, writing nothing.
//!
//! Not covered: IAM evaluation of the caller's kms:Decrypt (moto does not
//! enforce it).

use std::process::Command;

use std::os::unix::fs::PermissionsExt;

use crate::node_secrets::{api_endpoint, mode, published_env, read, text, write, BUCKET, CLUSTER};

fn b64(s: &str) -> String {
    String::from_utf8(base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s).unwrap()).unwrap()
}

#[test]
fn kubeconfig_mints_a_certificate_and_merges_a_context() {
    let (env, tree) = published_env();
    let dir = tree.path();
    let up = env.kube_aws(dir, &["up"]);
    assert!(up.status.success(), "{}", text(&up));
    let endpoint = api_endpoint(&env);
    let bundle: serde_json::Value = serde_json::from_str(&env.aws(&[
        "s3",
        "cp",
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/secrets/bundle.json"),
        "-",
    ]))
    .unwrap();

    // An existing kubeconfig with another cluster's context, world-readable.
    let kc = env.home.path().join(".kube/config");
    let other = "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: 'https://other:443'}\n\
                 users:\n- name: other\n  user: {token: abc}\ncontexts:\n- name: other\n  context: {cluster: other, user: other}\n\
                 current-context: other\n";
    write(&kc, other);
    std::fs::set_permissions(&kc, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = env.kube_aws(dir, &["kubeconfig", "--ttl", "2h"]);
    assert!(run.status.success(), "{}", text(&run));
    let out = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(out.contains(&format!("API endpoint: https://{endpoint}:6443")), "{out}");
    assert!(out.contains("certificate expires: "), "{out}");
    assert!(!text(&run).contains("PRIVATE KEY"));
    assert_eq!(mode(env.home.path(), ".kube/config"), 0o600);
    let v: serde_yaml::Value = serde_yaml::from_str(&read(env.home.path(), ".kube/config")).unwrap();
    let names = |k: &str| -> Vec<String> {
        v[k].as_sequence()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("contexts"), ["other", CLUSTER]);
    assert_eq!(names("clusters"), ["other", CLUSTER]);
    assert_eq!(v["users"][0]["user"]["token"], "abc", "the other user is kept");
    assert_eq!(v["current-context"], CLUSTER);
    let cluster = &v["clusters"][1]["cluster"];
    assert_eq!(cluster["server"].as_str().unwrap(), format!("https://{endpoint}:6443"));
    let ca = b64(cluster["certificate-authority-data"].as_str().unwrap());
    assert_eq!(ca, bundle["certificates"]["pki/ca.crt"].as_str().unwrap());
    let user = &v["users"][1]["user"];
    let cert = b64(user["client-certificate-data"].as_str().unwrap());
    assert!(b64(user["client-key-data"].as_str().unwrap()).contains("PRIVATE KEY"));
    // openssl accepts the certificate against the published CA, for 2 hours, as the admin group.
    let ca_file = tree.path().join("ca.crt");
    let cert_file = tree.path().join("client.crt");
    std::fs::write(&ca_file, &ca).unwrap();
    std::fs::write(&cert_file, &cert).unwrap();
    let verify = Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(&ca_file)
        .arg(&cert_file)
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", text(&verify));
    let subject = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-in"])
        .arg(&cert_file)
        .output()
        .unwrap();
    let subject = String::from_utf8_lossy(&subject.stdout).to_string();
    assert!(
        subject.contains("CN = kube-aws-admin") && subject.contains("O = kubeadm:cluster-admins"),
        "{subject}"
    );
    let not_after = kube_aws::pki::not_after(&cert).unwrap();
    let left = not_after - time::OffsetDateTime::now_utc();
    assert!(
        left <= time::Duration::hours(2) && left > time::Duration::minutes(110),
        "{left}"
    );

    // --file - prints it; nothing else is written.
    let before = read(env.home.path(), ".kube/config");
    let printed = env.kube_aws(
        dir,
        &["kubeconfig", "--file", "-", "--user", "ops", "--context", "prod"],
    );
    assert!(printed.status.success(), "{}", text(&printed));
    let p: serde_yaml::Value = serde_yaml::from_slice(&printed.stdout).unwrap();
    assert_eq!(p["current-context"], "prod");
    assert_eq!(read(env.home.path(), ".kube/config"), before);

    // Refused before anything is written: a TTL over 7 days, a malformed one, a file that is not YAML.
    for (args, needle) in [
        (vec!["kubeconfig", "--ttl", "8d"], "longer than 7 days"),
        (vec!["kubeconfig", "--ttl", "soon"], "is not a duration"),
    ] {
        let r = env.kube_aws(dir, &args);
        assert_eq!(r.status.code(), Some(1), "{}", text(&r));
        assert!(text(&r).contains(needle), "{}", text(&r));
        assert_eq!(read(env.home.path(), ".kube/config"), before);
    }
    let broken = tree.path().join("broken-config");
    write(&broken, "clusters: [unclosed\n\t- {");
    let r = env.kube_aws(dir, &["kubeconfig", "--file", broken.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    // The one YAML reader locates it (file:line:col) and says what to do.
    assert!(text(&r).contains("broken-config:1:"), "{}", text(&r));
    assert!(text(&r).contains("malformed YAML"), "{}", text(&r));
    assert!(text(&r).contains("--file"), "{}", text(&r));
    assert_eq!(std::fs::read_to_string(&broken).unwrap(), "clusters: [unclosed\n\t- {");

    // A CA key under a KMS key the caller cannot use (another region's: KMS
    // answers AccessDenied, as for a key policy that leaves the caller out).
    let foreign = env.create_kms_key_in("eu-west-1");
    let ct = env.encrypt_entry("eu-west-1", &foreign, CLUSTER, "pki/ca.key", b"not the real key");
    let mut b = bundle.clone();
    b["secrets"]["pki/ca.key"] = serde_json::Value::String(ct);
    let swapped = tree.path().join("bundle.json");
    std::fs::write(&swapped, b.to_string()).unwrap();
    env.aws(&[
        "s3",
        "cp",
        swapped.to_str().unwrap(),
        &format!("s3://{BUCKET}/clusters/{CLUSTER}/secrets/bundle.json"),
    ]);
    let denied = env.kube_aws(dir, &["kubeconfig"]);
    assert_ne!(denied.status.code(), Some(0), "{}", text(&denied));
    let t = text(&denied);
    assert!(
        t.contains("your AWS identity may not decrypt the cluster CA key"),
        "{t}"
    );
    assert!(t.contains("kms:Decrypt"), "{t}");
    assert_eq!(read(env.home.path(), ".kube/config"), before, "nothing written");
}
