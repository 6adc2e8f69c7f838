//! The cluster-autoscaler's pause around `update --wait` (issues 28 and 38,
//! src/aws/lifecycle/autoscaler.rs) against the real kube-apiserver of the control-plane
//! test bed: the release's Deployments found by their
//! `app.kubernetes.io/instance` label and patched with a client certificate
//! over TLS that trusts only the cluster CA; a Deployment scaled to 0 with its
//! count recorded in the `kube-aws.io/paused-replicas` annotation, and given
//! back that count with the annotation removed; a pause an earlier `update`
//! left (the count put back by a chart upgrade in between) keeps its record;
//! the hand resume docs/deploy.md gives; a release without a Deployment
//! left alone; a client the API server does
//! not trust refused with its status.
//!
//! Not covered: `update` itself calling these around a real CloudFormation
//! roll and rollback (moto neither rolls nor rolls back, and its load
//! balancer's DNS name reaches no API server); the certificate `update` mints
//! is the one `kube-aws kubeconfig` mints (tests of src/aws/lifecycle/kubeconfig.rs).
//! The reconciler's side of the pause (a chart upgrade of a paused release)
//! is helm_pause_testbed.rs.

use crate::common::testbed;

use base64::Engine;
use kube_aws::aws::lifecycle::autoscaler::{
    pause_release, resume_by_hand, resume_release, Paused, ScaleClient, Scaled, PAUSED_REPLICAS_ANNOTATION,
    RELEASE_LABEL,
};
use kube_aws::kubeconfig::Entry;

pub fn admin_entry(cp: &testbed::ControlPlane) -> Entry {
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

/// The pause annotation's value ("" when there is none).
pub fn recorded(cp: &testbed::ControlPlane, ns: &str, name: &str) -> String {
    let path = format!(
        "jsonpath={{.metadata.annotations.{}}}",
        PAUSED_REPLICAS_ANNOTATION.replace('.', "\\.")
    );
    cp.kubectl(&["-n", ns, "get", "deployment", name, "-o", &path])
        .unwrap_or_else(|e| panic!("{e}"))
}

fn paused(name: &str, replicas: u32) -> Paused {
    Paused {
        deployments: vec![Scaled {
            name: name.into(),
            replicas,
        }],
    }
}

#[test]
fn autoscaler_is_scaled_to_zero_and_back_through_the_api_server() {
    let Some(cp) = testbed::shared("autoscaler_is_scaled_to_zero_and_back_through_the_api_server") else {
        return;
    };
    let ns = cp.namespace("ca-pause");
    // Named as chart 9.59.0 names it, which is not the release's name.
    let deploy = "cluster-autoscaler-aws-cluster-autoscaler";
    cp.kubectl(&[
        "-n",
        &ns,
        "create",
        "deployment",
        deploy,
        "--image=registry.k8s.io/pause:3.10",
        "--replicas=2",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    // Another release's Deployment in the same namespace: never touched.
    cp.kubectl(&[
        "-n",
        &ns,
        "create",
        "deployment",
        "other",
        "--image=registry.k8s.io/pause:3.10",
        "--replicas=1",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let label = format!("{RELEASE_LABEL}=cluster-autoscaler");
    cp.kubectl(&["-n", &ns, "label", "deployment", deploy, &label])
        .unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let api = ScaleClient::new(&admin_entry(&cp)).unwrap();

    let p = rt.block_on(pause_release(&api, &ns, "cluster-autoscaler")).unwrap();
    assert_eq!(p, paused(deploy, 2));
    assert_eq!(spec_replicas(&cp, &ns, deploy), "0");
    assert_eq!(
        recorded(&cp, &ns, deploy),
        "2",
        "the pause is recorded on the Deployment"
    );
    assert_eq!(spec_replicas(&cp, &ns, "other"), "1");

    // A second pause (the next `update` after one that died before its
    // resume), once a chart upgrade without the reconciler's override put
    // the chart's count back: the recorded 2 is kept, not the 1 it finds.
    cp.kubectl(&["-n", &ns, "scale", "deployment", deploy, "--replicas=1"])
        .unwrap_or_else(|e| panic!("{e}"));
    let p = rt.block_on(pause_release(&api, &ns, "cluster-autoscaler")).unwrap();
    assert_eq!(p, paused(deploy, 2));
    assert_eq!(spec_replicas(&cp, &ns, deploy), "0");
    assert_eq!(recorded(&cp, &ns, deploy), "2");

    let r = rt.block_on(resume_release(&api, &ns, "cluster-autoscaler")).unwrap();
    assert_eq!(r, paused(deploy, 2));
    assert_eq!(spec_replicas(&cp, &ns, deploy), "2");
    assert_eq!(recorded(&cp, &ns, deploy), "", "the resume removes the record");
    // A second resume finds no record and changes nothing.
    let r = rt.block_on(resume_release(&api, &ns, "cluster-autoscaler")).unwrap();
    assert_eq!(r, Paused::default());
    assert_eq!(spec_replicas(&cp, &ns, deploy), "2");

    // The hand resume docs/deploy.md gives (for an `update` killed before
    // its resume): its listing shows the recorded count, and its one merge
    // patch gives it back with the record removed.
    rt.block_on(pause_release(&api, &ns, "cluster-autoscaler")).unwrap();
    let shell = |cmd: &str| {
        let mut c = std::process::Command::new("sh");
        c.args(["-c", cmd])
            .env("KUBECONFIG", &cp.kubeconfig)
            .env("PATH", format!("{}:/usr/bin:/bin", cp.bin.display()));
        testbed::run(c).unwrap_or_else(|e| panic!("{e}"))
    };
    let listing = shell(&format!(
        "kubectl -n {ns} get deployments -l app.kubernetes.io/instance=cluster-autoscaler \
         -o custom-columns='NAME:.metadata.name,PAUSED:.metadata.annotations.kube-aws\\.io/paused-replicas'"
    ));
    assert!(
        listing
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == [deploy, "2"]),
        "{listing}"
    );
    shell(&resume_by_hand(&ns, deploy, 2));
    assert_eq!(spec_replicas(&cp, &ns, deploy), "2");
    assert_eq!(recorded(&cp, &ns, deploy), "");

    // No Deployment (the release not installed yet): nothing read, nothing done.
    let none = rt.block_on(pause_release(&api, &ns, "absent")).unwrap();
    assert_eq!(none, Paused::default());
    assert_eq!(
        rt.block_on(resume_release(&api, &ns, "absent")).unwrap(),
        Paused::default()
    );

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
    let err = rt.block_on(pause_release(&api, &ns, "cluster-autoscaler"));
    assert!(err.is_err(), "{err:?}");
    assert!(
        err.unwrap_err().to_string().contains("answered 401"),
        "a certificate of another CA"
    );
    assert_eq!(spec_replicas(&cp, &ns, deploy), "2");
}
