//! The kube-aws PKI on the control-plane test bed (the helpers of
//! tests/it/testbed.rs): a minted kubeconfig is cluster-admin, and the
//! apiserver signs service-account tokens the published JWKS verifies.

use super::*;

#[test]
fn a_minted_kubeconfig_is_cluster_admin_on_a_control_plane_with_the_kube_aws_pki() {
    let Some(bin) = testbed::bin_dir("a_minted_kubeconfig_is_cluster_admin") else {
        return;
    };
    let now = time::OffsetDateTime::now_utc();
    let pki = kube_aws::pki::generate("testbed", now).unwrap();
    let files = pki_files(&pki);
    let cp = ControlPlane::start_api_with_pki(&bin, &files);

    // kubeadm kept the CAs and the service-account key as they were given...
    for (name, pem) in &files {
        let on_disk = std::fs::read_to_string(cp.pki.join(name.strip_prefix("pki/").unwrap())).unwrap();
        assert_eq!(&on_disk, pem, "kubeadm replaced {name}");
    }
    // ...and signed the serving certificate and the etcd ones from them.
    for (ca, leaf) in [
        ("ca.crt", "apiserver.crt"),
        ("ca.crt", "apiserver-kubelet-client.crt"),
        ("front-proxy-ca.crt", "front-proxy-client.crt"),
        ("etcd/ca.crt", "etcd/server.crt"),
        ("etcd/ca.crt", "apiserver-etcd-client.crt"),
    ] {
        let mut c = Command::new("openssl");
        c.args(["verify", "-CAfile"])
            .arg(cp.pki.join(ca))
            .arg(cp.pki.join(leaf));
        run(c).unwrap_or_else(|e| panic!("{leaf} is not signed by the given {ca}: {e}"));
    }

    // A kubeconfig minted and merged by kube-aws's own code, next to another context.
    let home = tempfile::tempdir().unwrap();
    let kc = home.path().join("config");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster: {server: 'https://other:443'}\n\
         users:\n- name: other\n  user: {token: abc}\ncontexts:\n- name: other\n  context: {cluster: other, user: other}\n\
         current-context: other\n",
    )
    .unwrap();
    let mint = |user: &str, group: &str, ca_key: &kube_aws::pki::PrivatePem| {
        kube_aws::pki::mint_client(
            &pki.public[kube_aws::pki::CA_CERT],
            ca_key,
            user,
            Some(group),
            std::time::Duration::from_secs(600),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap()
    };
    let write = |path: &Path, context: &str, cred: &kube_aws::pki::ClientCredential| {
        let entry = kube_aws::kubeconfig::Entry {
            context: context.into(),
            cluster: "testbed".into(),
            user: format!("{context}-user"),
            server: format!("https://127.0.0.1:{}", cp.api_port),
            ca_pem: pki.public[kube_aws::pki::CA_CERT].clone(),
            cert_pem: cred.cert_pem.clone(),
            key_pem: cred.key_pem.expose().to_string(),
        };
        kube_aws::kubeconfig::write_merged(path, &entry).unwrap();
    };
    let admin = mint(
        kube_aws::pki::DEFAULT_USER,
        kube_aws::pki::DEFAULT_GROUP,
        &pki.keys[kube_aws::pki::CA_KEY],
    );
    write(&kc, "testbed", &admin);
    // The server certificate verifies against the CA in the kubeconfig (no insecure flag).
    let ready = kubectl_with(&bin, &kc, &["get", "--raw", "/readyz"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ready.trim(), "ok");
    let can = kubectl_with(&bin, &kc, &["auth", "can-i", "*", "*"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(can.trim(), "yes");
    let who = kubectl_with(
        &bin,
        &kc,
        &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(who.trim(), "kube-aws-admin");
    let contexts = kubectl_with(&bin, &kc, &["config", "get-contexts", "-o", "name"]).unwrap();
    assert_eq!(contexts.split_whitespace().collect::<Vec<_>>(), ["other", "testbed"]);

    // The ECDSA service-account key signs tokens the apiserver accepts (no
    // controller manager here makes the default account: the test does).
    kubectl_with(&bin, &kc, &["create", "serviceaccount", "probe", "-n", "default"]).unwrap_or_else(|e| panic!("{e}"));
    let token =
        kubectl_with(&bin, &kc, &["create", "token", "probe", "-n", "default"]).unwrap_or_else(|e| panic!("{e}"));
    // Only the token: a client certificate would authenticate first.
    let empty = home.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let server = format!("--server=https://127.0.0.1:{}", cp.api_port);
    let ca = format!("--certificate-authority={}", cp.pki.join("ca.crt").display());
    let sa = kubectl_with(
        &bin,
        &empty,
        &[
            &server,
            &ca,
            "--token",
            token.trim(),
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sa.trim(), "system:serviceaccount:default:probe");

    // Another group is authenticated but not an admin; a foreign CA's certificate is not authenticated.
    let other = home.path().join("other-group");
    write(
        &other,
        "viewer",
        &mint("someone", "team-a", &pki.keys[kube_aws::pki::CA_KEY]),
    );
    let no = kubectl_with(&bin, &other, &["auth", "can-i", "*", "*"]);
    assert!(matches!(&no, Err(e) if e.contains("no")), "{no:?}");
    let foreign_pki = kube_aws::pki::generate("elsewhere", now).unwrap();
    let forged = home.path().join("forged");
    write(
        &forged,
        "forged",
        &mint(
            "kube-aws-admin",
            "kubeadm:cluster-admins",
            &foreign_pki.keys[kube_aws::pki::CA_KEY],
        ),
    );
    let denied = kubectl_with(&bin, &forged, &["auth", "can-i", "*", "*"]);
    assert!(
        matches!(&denied, Err(e) if e.contains("Unauthorized") || e.contains("must be logged in")),
        "{denied:?}"
    );
}

#[test]
fn the_apiserver_signs_tokens_the_published_jwks_verifies() {
    let Some(bin) = testbed::bin_dir("the_apiserver_signs_tokens_the_published_jwks_verifies") else {
        return;
    };
    let now = time::OffsetDateTime::now_utc();
    let pki = kube_aws::pki::generate("testbed", now).unwrap();
    let cp = ControlPlane::start_api_with_pki(&bin, &pki_files(&pki));

    // A cluster whose issuer is its issuer bucket (`<bucket>-oidc-<cluster>`), with kube-aws's flags.
    let cluster = autoscaler_cluster();
    let flags = kube_aws::irsa::apiserver_flags(&cluster.config);
    let port = common::free_port();
    let _api = cp
        .apiserver_proc("kube-apiserver-irsa", port, &flags, "/registry")
        .unwrap_or_else(|e| panic!("{e}"));
    let kc = cp.kubeconfig_for("super-admin.conf", port);
    let kubectl = |args: &[&str]| kubectl_with(&bin, &kc, args).unwrap_or_else(|e| panic!("{e}"));
    kubectl(&["create", "serviceaccount", "demo"]);
    let token = kubectl(&["create", "token", "demo", "--audience", "sts.amazonaws.com"]);

    // What `up` publishes for this cluster.
    let objects = kube_aws::irsa::discovery_objects(&cluster.config, &pki.public[kube_aws::pki::SA_PUB]).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&objects[0].1).unwrap();
    let jwks = String::from_utf8(objects[1].1.clone()).unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("jwks.json"), &jwks).unwrap();
    std::fs::write(work.path().join("token"), token.trim()).unwrap();
    // joserfc verifies the signature with the key set and returns the claims and header.
    let program = "import json, sys\n\
from joserfc import jwt\n\
from joserfc.jwk import KeySet\n\
keys = KeySet.import_key_set(json.load(open(sys.argv[1])))\n\
tok = jwt.decode(open(sys.argv[2]).read().strip(), keys, algorithms=['ES256'])\n\
print(json.dumps({'header': tok.header, 'claims': tok.claims}))\n";
    let mut c = Command::new(common::tool("python"));
    c.args(["-c", program])
        .arg(work.path().join("jwks.json"))
        .arg(work.path().join("token"));
    let out: serde_json::Value = serde_json::from_str(&run(c).unwrap_or_else(|e| panic!("{e}"))).unwrap();
    let keys: serde_json::Value = serde_json::from_str(&jwks).unwrap();
    assert_eq!(out["header"]["kid"], keys["keys"][0]["kid"]);
    assert_eq!(out["header"]["alg"], "ES256");
    assert_eq!(out["claims"]["iss"], doc["issuer"]);
    assert_eq!(
        out["claims"]["iss"],
        "https://tb-bucket-oidc-testbed.s3.us-west-2.amazonaws.com"
    );
    assert_eq!(out["claims"]["aud"], serde_json::json!(["sts.amazonaws.com"]));
    assert_eq!(out["claims"]["sub"], "system:serviceaccount:default:demo");

    // A token of kubeadm's default issuer (signed by the first apiserver, the
    // cluster before the update) is still accepted.
    let old_kc = cp.kubeconfig_for("super-admin.conf", cp.api_port);
    let old = kubectl_with(&bin, &old_kc, &["create", "token", "demo"]).unwrap_or_else(|e| panic!("{e}"));
    let review = format!(
        "{{\"apiVersion\": \"authentication.k8s.io/v1\", \"kind\": \"TokenReview\", \"spec\": {{\"token\": \"{}\"}}}}",
        old.trim()
    );
    std::fs::write(work.path().join("review.json"), review).unwrap();
    let got = kubectl(&[
        "create",
        "-o",
        "json",
        "-f",
        work.path().join("review.json").to_str().unwrap(),
    ]);
    let got: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["status"]["authenticated"], true, "{got}");
    assert_eq!(got["status"]["user"]["username"], "system:serviceaccount:default:demo");

    // The webhook's manifests, filled in as the controller fills them, pass a
    // server-side dry run (the CEL matchConditions compile).
    let r = kube_aws::plugin::resolve_plugins(&cluster).unwrap();
    let m = r
        .cluster
        .manifests
        .iter()
        .find(|m| m.plugin == "pod-identity-webhook")
        .unwrap();
    let mut text = m.content.clone();
    let entries = kube_aws::pki::webhook_entries(
        &pki.public[kube_aws::pki::CA_CERT],
        &pki.keys[kube_aws::pki::CA_KEY],
        now,
    )
    .unwrap();
    for (name, value) in &entries {
        // The controller fills YAML string values; a JSON string is a YAML one.
        text = text.replace(&format!("\"{name}\""), &serde_json::to_string(value.expose()).unwrap());
    }
    assert!(text.contains("kube-system/cluster-autoscaler"), "{text}");
    std::fs::write(work.path().join("webhook.yaml"), &text).unwrap();
    kubectl(&[
        "apply",
        "--dry-run=server",
        "-f",
        work.path().join("webhook.yaml").to_str().unwrap(),
    ]);
}
