//! The shared cluster of tests/it/real_node/addons.rs (its header says
//! what runs on it): every release of its plan, its boot (`kube-aws up
//! --wait` of a work tree with every addon plugin that runs here on, the
//! controller booted with every addon image, the reconciler's run done),
//! and its sharing between the module's three tests (booted by the first
//! to ask, stopped by the last to end or at the process's exit). No test
//! here; no check either: each addon's file has its own.

use super::dex::{certificates, dex_values, issuer, CLIENT_SECRET, DEX_HOST, REDIRECT};
use super::ebs_csi::ebs_values;
use super::irsa::{autoscaler_values, external_dns_values, nth_values, POOL, ZONE};
use super::*;

/// Every release of the shared cluster's plan, as `up --wait` and the
/// installed record name them.
pub(super) const ADDONS: [&str; 8] = [
    "aws-cloud-controller-manager",
    "metrics-server",
    "descheduler",
    "dex",
    "external-dns",
    "aws-node-termination-handler",
    "cluster-autoscaler",
    "aws-ebs-csi-driver",
];

/// The images of the EBS CSI controller's pod besides the driver's own
/// (`aws-ebs-csi-driver`, an image named after its release as the others'
/// are): its sidecars, each built by scripts/install-addon-images.sh.
const EBS_SIDECARS: [&str; 4] = ["csi-provisioner", "csi-attacher", "csi-resizer", "csi-livenessprobe"];

/// The one controller every addon runs on (see the module header), once
/// `kube-aws up --wait` has returned.
pub(super) struct Cluster {
    pub(super) bed: MotoBed,
    pub(super) inst: bed::Instance,
    pub(super) ctl: BedNode,
    /// The boot's steps, for the timeline.
    pub(super) followed: bed::Followed,
    /// The test's CA and Dex's serving certificate (`certificates`).
    pub(super) certs: tempfile::TempDir,
    /// The Route 53 zone external-dns may change (moto's ID).
    pub(super) zone_id: String,
    /// `kube-aws up --wait`'s exit code and output.
    pub(super) up: (Option<i32>, String),
    /// The addons' images (the worker imports them too).
    pub(super) images: Vec<std::path::PathBuf>,
    /// The helm tarball's sha256 (`up` publishes the chart's helm under it).
    pub(super) helm_sha256: String,
    _helm: super::ServedHelm,
}

/// Boots the shared cluster: `kube-aws up --wait` of a work tree with every
/// addon plugin that runs here on (the values of each addon's own
/// file: Dex's, IRSA's, the plan's), its charts locked to the shared
/// ones, a hosted zone in moto, one worker pool for the autoscaler to
/// discover; the controller booted with Dex's name in its /etc/hosts and
/// every addon image imported; then Dex's TLS Secret and the RBAC the Dex
/// checks use, and the reconciler's run done with every release ready.
fn boot(test: &'static str, image: &Path) -> Cluster {
    let images: Vec<std::path::PathBuf> = ADDONS
        .iter()
        .chain(EBS_SIDECARS.iter())
        .map(|n| nodebed::addon_image(test, n))
        .collect();
    let certs = tempfile::tempdir().unwrap();
    certificates(certs.path());
    let ca = std::fs::read_to_string(certs.path().join("ca.crt")).unwrap();
    let helm = super::served_helm(test);
    // The zone's ID is moto's: the work tree's cluster.yaml takes it in
    // `prepare`, before `up`.
    let extra = format!(
        "  dex: {{enabled: true, issuerURL: \"{issuer}\", exposure: values, connector: local, \
         staticClientSecret: {CLIENT_SECRET}, staticClientRedirectURIs: [\"{REDIRECT}\"], oidcCA: {ca}}}\n  \
         external-dns: {{enabled: true, hostedZoneId: ZONE_ID, domainFilter: {ZONE}}}\n  \
         aws-node-termination-handler: {{enabled: true}}\n  cluster-autoscaler: {{enabled: true}}\n  \
         metrics-server: {{enabled: true}}\n  descheduler: {{enabled: true, schedule: \"* * * * *\"}}\n  \
         aws-cloud-controller-manager: {{enabled: true}}\n  aws-ebs-csi-driver: {{enabled: true}}\n{helm}{POOL}",
        issuer = issuer(),
        ca = serde_json::to_string(&ca).unwrap(),
        helm = helm.yaml
    );
    let zone_id = std::sync::Mutex::new(String::new());
    let (bed, up) = MotoBed::up_waiting_prepared(test, image, &extra, &[], &|env, dir, moto| {
        let z = env.aws_json(&[
            "route53",
            "create-hosted-zone",
            "--name",
            ZONE,
            "--caller-reference",
            "irsa-bed",
        ]);
        let id = z["HostedZone"]["Id"]
            .as_str()
            .unwrap_or_else(|| panic!("create-hosted-zone: {z}"))
            .trim_start_matches("/hostedzone/")
            .to_string();
        let cluster = std::fs::read_to_string(dir.join("cluster.yaml")).unwrap();
        std::fs::write(dir.join("cluster.yaml"), cluster.replace("ZONE_ID", &id)).unwrap();
        std::fs::create_dir_all(dir.join("values")).unwrap();
        // The cloud controller manager's endpoint: moto as the node reaches
        // it (the pod is on the host network). cloud-provider-aws 1.35 builds
        // every client with aws-sdk-go-v2's LoadDefaultConfig, which reads
        // AWS_ENDPOINT_URL; data in the test's values, not a plugin setting.
        let ccm = format!(
            "env:\n  - name: AWS_ENDPOINT_URL\n    value: {}\n",
            serde_json::to_string(moto).unwrap()
        );
        for (name, values) in [
            ("dex", dex_values()),
            ("external-dns", external_dns_values(moto)),
            ("aws-node-termination-handler", nth_values(moto)),
            ("cluster-autoscaler", autoscaler_values(moto)),
            ("aws-cloud-controller-manager", ccm),
            ("aws-ebs-csi-driver", ebs_values(moto)),
        ] {
            std::fs::write(dir.join(format!("values/{name}.yaml")), values).unwrap();
        }
        // The charts locked once cluster.yaml is whole (the lock loads it).
        super::lock_shared_charts(env, dir);
        *zone_id.lock().unwrap() = id;
    });
    let zone_id = zone_id.into_inner().unwrap();
    // EC2's DNS as the bed gives it (bed/node.rs `boot`), plus Dex's name at the
    // controller, where the NodePort answers: the controller's address is
    // moto's, known before the boot.
    let at = bed.instances(&format!("{}-controller", bed::BED_CLUSTER)).remove(0);
    let hosts = format!(
        "{ip} {dns};{ip} {api};{ip} {DEX_HOST}",
        ip = at.ip,
        dns = at.dns,
        api = bed.api
    );
    let image_paths: Vec<&Path> = images.iter().map(|p| p.as_path()).collect();
    let (inst, ctl, followed) = super::addon_controller_with(&bed, vec![("NODEBED_HOSTS", hosts)], &image_paths, true);
    // Dex's serving certificate: a TLS Secret in its namespace, which the
    // release's pod mounts (it waits for it, as helm waits for the pod; the
    // namespace may be helm's already). The RoleBinding of the Dex group
    // `authors` that the Dex checks use.
    for args in [
        vec!["create", "namespace", "dex"],
        vec![
            "-n",
            "dex",
            "create",
            "secret",
            "tls",
            "dex-tls",
            &format!("--cert={}", certs.path().join("tls.crt").display()),
            &format!("--key={}", certs.path().join("tls.key").display()),
        ],
        vec!["create", "namespace", "team-a"],
        vec![
            "-n",
            "team-a",
            "create",
            "role",
            "pod-reader",
            "--verb=get,list",
            "--resource=pods",
        ],
        vec![
            "-n",
            "team-a",
            "create",
            "rolebinding",
            "authors-read-pods",
            "--role=pod-reader",
            "--group=authors",
        ],
    ]
    .iter()
    .map(|a| a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = bed.kubectl(&ctl, &args);
        let namespace_there = args[..2] == ["create", "namespace"] && output_text(&o).contains("AlreadyExists");
        assert!(
            o.status.success() || namespace_there,
            "kubectl {args:?}: {}",
            output_text(&o)
        );
    }
    // The reconciler's timer run installs the plan: the webhook's manifests
    // and every release.
    let done = format!(
        "journalctl --no-pager -u kube-aws-addons.service | grep -q 'done: {} ready, 0 failed or skipped, 0 dropped'",
        ADDONS.len()
    );
    if let Err(e) = ctl
        .node
        .wait_for("the reconciler's run", &done, Duration::from_secs(600))
    {
        panic!(
            "{e}\n--- kube-aws-addons ---\n{}\n--- pods ---\n{}",
            output_text(
                &ctl.node
                    .exec(&["journalctl", "--no-pager", "-n", "80", "-u", "kube-aws-addons.service"])
            ),
            output_text(&bed.kubectl(&ctl, &["get", "pods", "-A", "-o", "wide"])),
        );
    }
    // `kube-aws up --wait`, running since before the boot, returns once
    // every wait condition is signalled.
    let up = up.finish(Duration::from_secs(180));
    Cluster {
        bed,
        inst,
        ctl,
        followed,
        certs,
        zone_id,
        up,
        images,
        helm_sha256: helm.sha256.clone(),
        _helm: helm,
    }
}

/// How many tests share the cluster: the last of them to end stops it.
const SHARING: usize = 3;

/// The shared cluster: booted by the first of the module's tests to ask
/// (the others wait on the lock meanwhile), stopped when the last of the
/// [`SHARING`] tests ends, passed or failed ([`Use`]'s drop), or, when a
/// filter selected fewer of them, as the test process exits: libtest ends
/// with `std::process::exit`, which runs the C library's `atexit` hooks
/// (a static's value is never dropped otherwise). A boot that fails fails
/// each test that asks, with its reason.
static SHARED: std::sync::Mutex<Option<Result<std::sync::Arc<Cluster>, String>>> = std::sync::Mutex::new(None);
/// The sharing tests that have ended.
static ENDED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The Dex and IRSA tests running now: the worker (the plan's test) joins
/// only when none is, as neither expects a second node.
pub(super) static CHECKS_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Stops the shared cluster, if it is up: takes it out of [`SHARED`] (a
/// poisoned lock too) and drops it.
fn stop_shared() {
    let c = SHARED.lock().unwrap_or_else(|p| p.into_inner()).take();
    drop(c);
}

extern "C" fn stop_shared_at_exit() {
    // Never unwind into the C library.
    let _ = std::panic::catch_unwind(stop_shared);
}

/// A test's hold on the shared cluster.
pub(super) struct Use(Option<std::sync::Arc<Cluster>>);

impl std::ops::Deref for Use {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        self.0.as_ref().unwrap()
    }
}

impl Drop for Use {
    fn drop(&mut self) {
        drop(self.0.take());
        if ENDED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == SHARING {
            stop_shared();
        }
    }
}

/// The shared cluster for `test`, booted if no test has yet; `None` when
/// the bed is skipped (nodebed::image_dir says so).
pub(super) fn shared(test: &'static str) -> Option<Use> {
    let image = nodebed::image_dir(test)?;
    let mut g = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        // SAFETY: registers a plain `extern "C" fn` with the C library.
        unsafe { libc::atexit(stop_shared_at_exit) };
        let t0 = Instant::now();
        let booted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| boot(test, &image))).map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        });
        if booted.is_ok() {
            eprintln!(
                "{test}: booted the shared cluster: up, the boot and every addon ready in {:.1}s",
                t0.elapsed().as_secs_f64()
            );
        }
        *g = Some(booted.map(std::sync::Arc::new));
    }
    let got = g.as_ref().unwrap().clone();
    drop(g);
    match got {
        Ok(c) => Some(Use(Some(c))),
        Err(e) => {
            // Counted as ended, so the last test still stops what there is.
            drop(Use(None));
            panic!("{test}: the shared cluster did not boot (the first test's output has it all): {e}")
        }
    }
}

/// A Dex or IRSA check running: counted while it runs, passed or failed.
pub(super) struct Running;

impl Running {
    pub(super) fn start() -> Running {
        CHECKS_RUNNING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        CHECKS_RUNNING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
