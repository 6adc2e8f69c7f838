//! `destroy`'s first step on a real kube-apiserver (the test bed's, with a
//! PKI kube-aws generated and a client certificate minted by kube-aws's own
//! code, as `destroy` mints one): Services of type LoadBalancer and
//! PersistentVolumeClaims are deleted through the API, other Services and
//! Retain volumes are not, and the call waits while the controllers that own
//! their cloud resources hold them (a stand-in thread plays the cloud
//! controller's `service.kubernetes.io/load-balancer-cleanup` finalizer and
//! the CSI driver deleting the PersistentVolume). `--keep-volumes` deletes no
//! claim; an API that does not answer is reported, not an error.
//!
//! Not covered here: a real cloud controller or CSI driver deleting a real
//! load balancer or volume (none runs against moto); the sweep after the
//! stacks is tests/it/destroy_sweep_moto.rs.

use crate::common::testbed::{self, ControlPlane};

use std::time::{Duration, Instant};

use kube_aws::aws::lifecycle::destroy_api::{cleanup, ApiCleanup, ApiOptions};

fn entry(pki: &kube_aws::pki::ClusterPki, port: u16) -> kube_aws::kubeconfig::Entry {
    let cred = kube_aws::pki::mint_client(
        &pki.public[kube_aws::pki::CA_CERT],
        &pki.keys[kube_aws::pki::CA_KEY],
        kube_aws::pki::DEFAULT_USER,
        Some(kube_aws::pki::DEFAULT_GROUP),
        Duration::from_secs(600),
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    kube_aws::kubeconfig::Entry {
        context: "t".into(),
        cluster: "t".into(),
        user: "t".into(),
        server: format!("https://127.0.0.1:{port}"),
        ca_pem: pki.public[kube_aws::pki::CA_CERT].clone(),
        cert_pem: cred.cert_pem.clone(),
        key_pem: cred.key_pem.expose().to_string(),
    }
}

fn pki_files(pki: &kube_aws::pki::ClusterPki) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = pki.public.clone().into_iter().collect();
    files.extend(pki.keys.iter().map(|(k, v)| (k.clone(), v.expose().to_string())));
    files
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, finalizers: [service.kubernetes.io/load-balancer-cleanup]}
spec: {type: LoadBalancer, ports: [{port: 80}], selector: {app: web}}
---
apiVersion: v1
kind: Service
metadata: {name: internal, namespace: default}
spec: {ports: [{port: 80}], selector: {app: web}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec: {accessModes: [ReadWriteOnce], storageClassName: gp3, resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-data}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: gp3
  claimRef: {namespace: default, name: data}
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-0123456789abcdef0}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-retained}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: gp3
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-0fedcba9876543210}
"#;

fn names(cp: &ControlPlane, what: &str) -> String {
    cp.kubectl(&["get", what, "-A", "-o", "jsonpath={.items[*].metadata.name}"])
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Plays the cloud controller and the CSI driver: once `web` is being
/// deleted, waits `delay` (the load balancer's deletion) and lets it go;
/// once the claim is being deleted, lets it go and deletes its volume.
fn controllers(cp: &ControlPlane, delay: Duration) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let deleting = |what: &str| {
        cp.kubectl(&[
            "get",
            what,
            "-n",
            "default",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ])
        .map(|t| !t.trim().is_empty())
        .unwrap_or(false)
    };
    let release = |what: &str| {
        let _ = cp.kubectl(&[
            "patch",
            what,
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]);
    };
    let (mut svc, mut pvc) = (false, false);
    while Instant::now() < deadline && !(svc && pvc) {
        if !svc && deleting("service/web") {
            std::thread::sleep(delay);
            release("service/web");
            svc = true;
        }
        if !pvc && deleting("pvc/data") {
            release("pvc/data");
            let _ = cp.kubectl(&["delete", "pv", "pv-data", "--wait=false"]);
            let _ = cp.kubectl(&[
                "patch",
                "pv",
                "pv-data",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ]);
            pvc = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn run_cleanup(e: &kube_aws::kubeconfig::Entry, keep_volumes: bool, wait: Duration) -> (ApiCleanup, Vec<String>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut notes = Vec::new();
    let opts = ApiOptions {
        keep_volumes,
        wait,
        poll: Duration::from_millis(300),
    };
    let r = rt.block_on(cleanup(e, opts, &mut |l| notes.push(l))).unwrap();
    (r, notes)
}

#[test]
fn load_balancer_services_and_claims_are_deleted_and_waited_for() {
    let Some(bin) = testbed::bin_dir("load_balancer_services_and_claims_are_deleted_and_waited_for") else {
        return;
    };
    let pki = kube_aws::pki::generate("sweep", time::OffsetDateTime::now_utc()).unwrap();
    let cp = ControlPlane::start_api_with_pki(&bin, &pki_files(&pki));
    let e = entry(&pki, cp.api_port);
    cp.kubectl_stdin(&["apply", "-f", "-"], OBJECTS)
        .unwrap_or_else(|e| panic!("{e}"));

    // --keep-volumes: the Service goes, the claim stays.
    let start = Instant::now();
    let (r, notes) = std::thread::scope(|s| {
        s.spawn(|| controllers(&cp, Duration::from_secs(2)));
        run_cleanup(&e, true, Duration::from_secs(30))
    });
    let waited = start.elapsed();
    let ApiCleanup::Done { deleted, left } = r else {
        panic!("{r:?}")
    };
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(deleted.services.len(), 1, "{deleted:?}");
    assert!(deleted.claims.is_empty());
    assert!(
        waited >= Duration::from_secs(2),
        "did not wait for the finalizer: {waited:?}"
    );
    assert_eq!(notes, ["deleting service default/web (type LoadBalancer)"]);
    assert_eq!(
        names(&cp, "services").split_whitespace().collect::<Vec<_>>(),
        ["internal", "kubernetes"]
    );
    assert_eq!(names(&cp, "pvc"), "data");

    // Without it the claim goes, and its Delete volume with it; Retain stays.
    let (r, notes) = std::thread::scope(|s| {
        s.spawn(|| controllers(&cp, Duration::from_millis(0)));
        run_cleanup(&e, false, Duration::from_secs(30))
    });
    let ApiCleanup::Done { deleted, left } = r else {
        panic!("{r:?}")
    };
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(deleted.volumes, ["pv-data"]);
    assert_eq!(notes, ["deleting persistentvolumeclaim default/data"]);
    assert_eq!(names(&cp, "pvc"), "");
    assert_eq!(names(&cp, "pv"), "pv-retained");

    // What does not go within the wait is reported as left.
    cp.kubectl_stdin(&["apply", "-f", "-"], OBJECTS)
        .unwrap_or_else(|e| panic!("{e}"));
    let (r, _) = run_cleanup(&e, true, Duration::from_secs(1));
    let ApiCleanup::Done { left, .. } = r else {
        panic!("{r:?}")
    };
    assert_eq!(left, ["service default/web"]);
    cp.kubectl(&[
        "patch",
        "service/web",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .unwrap();

    // An API that does not answer: nothing deleted, no error.
    let mut gone = e.clone();
    gone.server = format!("https://127.0.0.1:{}", crate::common::free_port());
    let (r, _) = run_cleanup(&gone, false, Duration::from_secs(1));
    assert!(matches!(r, ApiCleanup::Unreachable(_)), "{r:?}");
}
