//! The cluster-autoscaler's pause around `update --wait` (issue 28,
//! src/aws/autoscaler.rs) against the real kube-apiserver of the control-plane
//! test bed: the `scale` subresource read and patched with a client
//! certificate over TLS that trusts only the cluster CA; a Deployment scaled
//! to 0 and back to the count it had; a missing Deployment left alone; a
//! client the API server does not trust refused with its status.
//!
//! Not covered: `update` itself calling these around a real CloudFormation
//! roll and rollback (moto neither rolls nor rolls back, and its load
//! balancer's DNS name reaches no API server); the certificate `update` mints
//! is the one `kube-aws kubeconfig` mints (tests of src/aws/kubeconfig.rs).

use crate::common::testbed;

use base64::Engine;
use kube_aws::aws::autoscaler::{pause_deployment, resume_deployment, Paused, ScaleClient};
use kube_aws::kubeconfig::Entry;

fn admin_entry(cp: &testbed::ControlPlane) -> Entry {
    let text = std::fs::read_to_string(&cp.kubeconfig).unwrap();
    let k: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let b64 = |v: &serde_yaml::Value| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    Entry {
        context: "bed".into(),
        cluster: "bed".into(),
        user: "admin".into(),
        server: k["clusters"][0]["cluster"]["server"].as_str().unwrap().to_string(),
        ca_pem: b64(&k["clusters"][0]["cluster"]["certificate-authority-data"]),
        cert_pem: b64(&k["users"][0]["user"]["client-certificate-data"]),
        key_pem: b64(&k["users"][0]["user"]["client-key-data"]),
    }
}

fn spec_replicas(cp: &testbed::ControlPlane, ns: &str, name: &str) -> String {
    cp.kubectl(&["-n", ns, "get", "deployment", name, "-o", "jsonpath={.spec.replicas}"])
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn autoscaler_is_scaled_to_zero_and_back_through_the_api_server() {
    let Some(cp) = testbed::shared("autoscaler_is_scaled_to_zero_and_back_through_the_api_server") else {
        return;
    };
    let ns = cp.namespace("ca-pause");
    cp.kubectl(&[
        "-n",
        &ns,
        "create",
        "deployment",
        "cluster-autoscaler",
        "--image=registry.k8s.io/pause:3.10",
        "--replicas=2",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let api = ScaleClient::new(&admin_entry(&cp)).unwrap();

    let paused = rt.block_on(pause_deployment(&api, &ns, "cluster-autoscaler")).unwrap();
    assert_eq!(paused, Paused { replicas: Some(2) });
    assert_eq!(spec_replicas(&cp, &ns, "cluster-autoscaler"), "0");
    rt.block_on(resume_deployment(&api, &ns, "cluster-autoscaler", &paused))
        .unwrap();
    assert_eq!(spec_replicas(&cp, &ns, "cluster-autoscaler"), "2");

    // No Deployment (the release not installed yet): nothing read, nothing done.
    let none = rt.block_on(pause_deployment(&api, &ns, "absent")).unwrap();
    assert_eq!(none, Paused { replicas: None });
    rt.block_on(resume_deployment(&api, &ns, "absent", &none)).unwrap();

    // A certificate of another CA: the API server does not take it as anyone
    // allowed to scale (its request is anonymous or refused).
    let mut stranger = admin_entry(&cp);
    let other = kube_aws::pki::generate("stranger", time::OffsetDateTime::now_utc()).unwrap();
    let cred = kube_aws::pki::mint_client(
        &other.public[kube_aws::pki::CA_CERT],
        &other.keys[kube_aws::pki::CA_KEY],
        "stranger",
        Some(kube_aws::pki::DEFAULT_GROUP),
        std::time::Duration::from_secs(600),
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    stranger.cert_pem = cred.cert_pem;
    stranger.key_pem = cred.key_pem.expose().to_string();
    let api = ScaleClient::new(&stranger).unwrap();
    let err = rt.block_on(pause_deployment(&api, &ns, "cluster-autoscaler"));
    assert!(err.is_err(), "{err:?}");
    assert!(
        err.unwrap_err().to_string().contains("answered 401"),
        "a certificate of another CA"
    );
    assert_eq!(spec_replicas(&cp, &ns, "cluster-autoscaler"), "2");
}
