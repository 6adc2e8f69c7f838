//! The addons run for real on the real-node bed (issue 41): the built-in
//! plugins' charts installed by the controller's own reconciler, from images
//! built from source (scripts/install-addon-images.sh), and used the way a
//! user would use them.
//!
//! One cluster for all of them (`boot`): one controller booted from its
//! user-data, every addon plugin that can run here on (Dex; external-dns,
//! aws-node-termination-handler, the cluster-autoscaler and the EBS CSI
//! controller with their IRSA roles; the AWS cloud controller manager, metrics-server and the
//! descheduler; the pod identity webhook, always on), `kube-aws up --wait`
//! running from before the boot. Three tests share it (`shared`), each
//! below with its own header: Dex's login
//! (`addons_dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group`),
//! IRSA (`addons_irsa_external_dns_termination_handler_autoscaler_and_ebs_csi_call_aws_under_their_roles_only`)
//! and the plan, then a worker
//! (`addons_the_plan_ccm_metrics_server_descheduler_webhook_run_up_wait_names_every_addon_and_a_worker_joins`).
//! The first to ask boots it; the others wait for that boot; the last to
//! end stops it, and when a filter selects fewer of them, the process's
//! exit does (an `atexit` hook: libtest has no teardown, and ends with
//! `std::process::exit`). The worker joins once the Dex and IRSA tests have
//! ended, as neither expects a second node. Until stop 49 each was its own
//! test with its own cluster (three boots), then three checks of one test
//! (docs/testing.md, "One cluster for the addons").
//!
//! The plan, as the reconciler installs it (kube-aws-addons.timer, enabled
//! by the bootstrap's `installer` step, under the controller role with IAM
//! enforced: the plan pointer from SSM, the bundle from S3): the pod
//! identity webhook's manifests, then the helm releases, the AWS cloud
//! controller manager first (the plan's bootstrap release), then the other
//! seven, and the installed record. The helm client runs for real: `kube-aws
//! up` downloads it as a user's `helm.binary` names it (a tarball of the
//! test bed's helm, built from source at the pinned version, served over
//! HTTP) and publishes it with the charts (the real upstream charts of
//! `shared/data/charts`, locked for the test); the reconciler installs that
//! helm from S3 and runs `helm upgrade --install --wait --atomic`. The
//! images are built from source and imported into the node's containerd
//! under their published names (the webhook's from the test bed's binary;
//! metrics-server v0.8.0's program under the v0.8.1 tag the chart pulls,
//! the proxy serving no v0.8.1).
//!
//! The cloud controller manager (cloud-provider-aws v1.35.3) runs on the
//! controller's host network with the controller role's IMDS credentials,
//! against moto's EC2 (`AWS_ENDPOINT_URL` in the test's values: its
//! aws-sdk-go-v2 clients read it; IAM enforced). The test leaves the
//! kubelet's `node.cloudprovider.kubernetes.io/uninitialized` taint to it
//! (it removes only the control-plane taint, as a single-node cluster's
//! operator would) and checks that it initializes the node as on EC2: the
//! taint gone, the providerID `aws:///<zone>/<instance id>`, the zone label
//! and the node's addresses from the instance (moto's DescribeInstances by
//! private DNS name; tests/support/moto_server.py patch 16 answers
//! DescribeInstanceTopology empty, as AWS does for instance types without
//! topology); then CoreDNS, which cannot schedule before, answers the
//! kubernetes Service's name through kube-dns's Service. Its service (load
//! balancer) controller runs with no Service it serves (the IRSA check's
//! Service names another `loadBalancerClass`); the node lifecycle
//! controller's deletion of a terminated instance's Node is not exercised.
//!
//! The plan's checks: the descheduler's CronJob (every minute here)
//! completes a Job; the webhook's Deployment rolls out and a pod of an
//! annotated service account is mutated (a server-side dry run);
//! metrics-server's APIService serves the controller's metrics, scraped from
//! its kubelet over TLS verified with the cluster CA (no
//! `--kubelet-insecure-tls`), the kubelet's serving certificate approved by
//! kube-aws's approver (against the moto instance), and `kubectl top node`
//! answers. Readiness is real: moto holds the stack until the controllers'
//! group and each addon's wait condition are signalled
//! (tests/support/moto_signals.py), and `up --wait` returns 0 naming all
//! eight releases ready, from the reconciler's own signals and status
//! objects (the webhook, plugin manifests with no wait condition, rolled
//! out before the releases started).
//!
//! A broken addon is named on a cluster of its own
//! (`a_broken_metrics_server_is_named_by_the_reconciler_and_up_wait_exits_3`,
//! at the end: `up --wait` must fail there, and on the shared one must not).
//!
//! The EBS CSI controller (the driver v1.64.0 from its tagged source, its
//! sidecars from the module proxy, the livenessprobe our own program:
//! upstream's is not served; `ebs_csi_controller_provisions_and_deletes_a_volume_under_its_role`)
//! runs in the IRSA test. Not run here: the EBS CSI node plugin (it needs
//! block devices: the test's values leave its DaemonSets out) and
//! the VPC CNI (it needs EC2 network interfaces) cannot run on the bed.
//! Pulls from a registry: none (the images are imported).
//!
//! # Dex end to end
//!
//! `dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group` runs on
//! the shared controller, whose work tree has the dex plugin on:
//! `connector: local` (Dex's own password
//! database, one static user, `oauth2.passwordConnector: local`), its static
//! client `kubernetes` with a secret parameter (KMS-encrypted by `up`,
//! substituted on the node: the token requests authenticate with it, and a
//! wrong one is refused),
//! `exposure: values` and `oidcCA` set to the test's CA. The test's
//! values/dex.yaml makes Dex serve HTTPS (the chart's `https.enabled`) with a
//! certificate for `dex.bed.test` signed by that CA (a TLS Secret the test
//! creates, mounted through the chart's `volumes`) on a NodePort (30554) of
//! the controller. The reconciler installs the chart (Dex v2.44.0 built from
//! its source tarball, imported into the node's containerd); then:
//!
//! - discovery answers on https://dex.bed.test:30554, verified with the CA;
//! - the kube-apiserver runs with `--oidc-issuer-url`, `--oidc-client-id`,
//!   `--oidc-ca-file` (the plugin's file, holding the CA) and the claims' flags;
//! - an ID token from the password grant (the static user's email and
//!   password, the client's id and secret) is accepted: `kubectl auth whoami`
//!   shows the user's email;
//! - a group: Dex 2.44's password database emits **no groups** (its
//!   `storage.Password` has no groups field; `passwordDB.Login` in
//!   server/server.go returns email, username and user ID only), and no
//!   connector that emits groups has a server here (LDAP, an upstream
//!   OIDC provider). Dex's own `mockCallback` connector does: its identity
//!   (kilgore@kilgore.trout) is in the group `authors`. The test adds it in
//!   values and walks the authorization-code flow by hand (`/auth` with
//!   `connector_id`, Dex's redirects, the code at the static client's
//!   redirect URI, the code exchanged at `/token`); `whoami` shows the email
//!   and the group, and a RoleBinding of the group `authors` grants exactly
//!   `get`/`list` pods in `team-a`: `auth can-i` says yes there, no for
//!   secrets there and no for pods in `default`; the password user (no
//!   groups) gets nothing; a token with a broken signature is refused.
//!
//! What differs from production, and what is not covered: there is no
//! load balancer (exposure `loadBalancer`: the NLB, its ACM certificate and
//! external-dns's record need a cloud controller manager and ACM; moto has
//! no NLB data path; the cloud controller manager that runs here has no
//! load balancer to make), so the issuer is a NodePort on the controller and its
//! name `dex.bed.test` is in the node's /etc/hosts (where the VPC's DNS or
//! external-dns would name it), written before kubeadm init (kubelet copies
//! it into the apiserver's host-network pod); the certificate is the test's
//! CA's, not a public one; no browser login (the mock connector's redirects
//! are followed with curl; upstream providers such as GitHub are not
//! reachable here); one controller, no workers.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::bed::{self, BedNode, MotoBed};
use crate::common::nodebed;
use crate::common::output_text;

/// Dex's name, as the node's /etc/hosts has it, and its NodePort.
const DEX_HOST: &str = "dex.bed.test";
const DEX_PORT: u16 = 30554;
/// The static client's redirect URI: nothing listens there, the test reads
/// the code from Dex's redirect to it.
const REDIRECT: &str = "http://127.0.0.1:5555/callback";
/// The static user of Dex's own config.dev.yaml (v2.44.0): its bcrypt hash
/// is of "password".
const USER: &str = "admin@example.com";
const PASSWORD: &str = "password";
const USER_HASH: &str = "$2a$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W";
const CLIENT_SECRET: &str = "bed-dex-client-secret";

/// The test's CA and Dex's serving certificate for `DEX_HOST`, by openssl.
fn certificates(dir: &Path) {
    let sh = format!(
        "set -e; cd {d}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=kube-aws-bed-dex-ca \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN={DEX_HOST} -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=DNS:{DEX_HOST}\\nextendedKeyUsage=serverAuth\\nkeyUsage=critical,digitalSignature\\n' >tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile tls.ext -out tls.crt 2>/dev/null",
        d = dir.display()
    );
    let o = Command::new("bash").args(["-c", &sh]).output().unwrap();
    assert!(o.status.success(), "openssl: {}", output_text(&o));
}

/// The test's values/dex.yaml: HTTPS with the mounted certificate on a
/// NodePort, the static user, and Dex's mockCallback connector (groups).
fn dex_values() -> String {
    format!(
        r#"https:
  enabled: true
service:
  type: NodePort
  ports:
    https:
      nodePort: {DEX_PORT}
config:
  web:
    tlsCert: /etc/dex/tls/tls.crt
    tlsKey: /etc/dex/tls/tls.key
  staticPasswords:
    - email: {USER}
      hash: "{USER_HASH}"
      username: admin
      userID: 08a8684b-db88-4b73-90a9-3cd1661f5466
  connectors:
    - type: mockCallback
      id: mock
      name: Mock (groups)
volumes:
  - name: tls
    secret:
      secretName: dex-tls
volumeMounts:
  - name: tls
    mountPath: /etc/dex/tls
    readOnly: true
"#
    )
}

/// curl from the host to Dex by its name at the controller's address,
/// verifying with the test's CA.
fn curl(dir: &Path, ip: &str, args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(dir.join("ca.crt"))
        .args(["--resolve", &format!("{DEX_HOST}:{DEX_PORT}:{ip}")])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn issuer() -> String {
    format!("https://{DEX_HOST}:{DEX_PORT}")
}

/// The ID token of a `/token` answer, or a panic naming the answer.
fn id_token(o: &Output, what: &str) -> String {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{what}: no JSON from /token ({e}): {}", output_text(o)));
    v["id_token"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no id_token: {v}"))
        .to_string()
}

/// kubectl as a bearer of `token` only (no client certificate, which the
/// apiserver would take first), verifying the API with the cluster CA.
fn kubectl_as(bed: &MotoBed, ctl: &BedNode, token: &str, args: &[&str]) -> Output {
    let empty = bed.dir().join("empty.kubeconfig");
    std::fs::write(&empty, "apiVersion: v1\nkind: Config\n").unwrap();
    Command::new(&bed.kubectl)
        .arg("--kubeconfig")
        .arg(&empty)
        .args(["--server", &format!("https://{}:6443", ctl.node.ip)])
        .arg("--certificate-authority")
        .arg(ctl.node.rootfs().join("etc/kubernetes/pki/ca.crt"))
        .args(["--token", token])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The last lines of the logs of the pods whose directory under
/// /var/log/pods starts with `prefix` (`<namespace>_<pod name>`), read on
/// the node: `kubectl logs` needs the kubelet's serving certificate, which
/// no one may have approved yet when a step fails early.
fn pod_logs(ctl: &BedNode, prefix: &str) -> String {
    ctl.node
        .sh(&format!("tail -n 30 /var/log/pods/{prefix}*/*/*.log 2>&1 || true"))
}

/// `kubectl auth can-i` as `token`: its answer ("yes"/"no").
fn can_i(bed: &MotoBed, ctl: &BedNode, token: &str, verb: &str, what: &str, ns: &str) -> String {
    let o = kubectl_as(bed, ctl, token, &["auth", "can-i", verb, what, "-n", ns]);
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The authorization-code flow through Dex's mockCallback connector, by
/// hand: every redirect is Dex's own until the one to the client's redirect
/// URI, which carries the code.
fn mock_login_code(dir: &Path, ip: &str) -> String {
    let mut url = format!(
        "{}/auth?client_id=kubernetes&response_type=code&scope=openid+email+groups+profile&state=bed&connector_id=mock&redirect_uri={}",
        issuer(),
        REDIRECT.replace(':', "%3A").replace('/', "%2F")
    );
    let mut hops = Vec::new();
    for _ in 0..8 {
        let o = curl(
            dir,
            ip,
            &["-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", &url],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        hops.push(format!("{url} -> {text} {}", String::from_utf8_lossy(&o.stderr)));
        let next = text.split_once(' ').map(|(_, u)| u.to_string()).unwrap_or_default();
        if let Some(q) = next.strip_prefix(&format!("{REDIRECT}?")) {
            if let Some(code) = q.split('&').find_map(|kv| kv.strip_prefix("code=")) {
                return code.to_string();
            }
            panic!("no code in the redirect to the client: {next}\n{}", hops.join("\n"));
        }
        assert!(
            next.starts_with(&issuer()),
            "Dex's login did not redirect within Dex or to the client:\n{}",
            hops.join("\n")
        );
        url = next;
    }
    panic!("too many redirects:\n{}", hops.join("\n"));
}

/// Every release of the shared cluster's plan, as `up --wait` and the
/// installed record name them.
const ADDONS: [&str; 8] = [
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
struct Cluster {
    bed: MotoBed,
    inst: bed::Instance,
    ctl: BedNode,
    /// The boot's steps, for the timeline.
    followed: bed::Followed,
    /// The test's CA and Dex's serving certificate (`certificates`).
    certs: tempfile::TempDir,
    /// The Route 53 zone external-dns may change (moto's ID).
    zone_id: String,
    /// `kube-aws up --wait`'s exit code and output.
    up: (Option<i32>, String),
    /// The addons' images (the worker imports them too).
    images: Vec<std::path::PathBuf>,
    /// The helm tarball's sha256 (`up` publishes the chart's helm under it).
    helm_sha256: String,
    _helm: super::ServedHelm,
}

/// Boots the shared cluster: `kube-aws up --wait` of a work tree with every
/// addon plugin that runs here on (the values of each addon's own section
/// below: Dex's, IRSA's, the plan's), its charts locked to the shared
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
    // EC2's DNS as the bed gives it (bed.rs `boot`), plus Dex's name at the
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
static CHECKS_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

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
struct Use(Option<std::sync::Arc<Cluster>>);

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
fn shared(test: &'static str) -> Option<Use> {
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
struct Running;

impl Running {
    fn start() -> Running {
        CHECKS_RUNNING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        CHECKS_RUNNING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Dex on the shared cluster: discovery on HTTPS, the OIDC flags, a token
/// from the password grant and one from the mock connector's group
/// accepted by the API server, RBAC bound to that group (the module
/// header, "Dex end to end").
#[test]
fn addons_dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group() {
    let running = Running::start();
    let Some(c) = shared("real_node::addons::addons_dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group")
    else {
        return;
    };
    dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group(&c);
    drop(running);
}

/// IRSA on the shared cluster: external-dns, aws-node-termination-handler,
/// the cluster-autoscaler and the EBS CSI controller call moto under their
/// own roles through `AssumeRoleWithWebIdentity`, and what their roles must
/// not do is refused (the sections' headers below); the EBS CSI controller
/// provisions and deletes a volume for a claim.
#[test]
fn addons_irsa_external_dns_termination_handler_autoscaler_and_ebs_csi_call_aws_under_their_roles_only() {
    let running = Running::start();
    let Some(c) = shared(
        "real_node::addons::addons_irsa_external_dns_termination_handler_autoscaler_and_ebs_csi_call_aws_under_their_roles_only",
    ) else {
        return;
    };
    irsa_external_dns_termination_handler_and_autoscaler_call_aws_under_their_roles_only(&c);
    let ebs = ebs_csi_controller_provisions_and_deletes_a_volume_under_its_role(&c);
    eprintln!("ebs csi: {ebs}");
    drop(running);
}

/// The plan on the shared cluster: the cloud controller manager,
/// metrics-server, the descheduler and the pod identity webhook run and
/// `up --wait` named every addon ready; then, once the Dex and IRSA tests
/// are done (neither expects a second node), a worker joins, metrics-server
/// answers for both nodes and pods reach each other across them. Its name
/// sorts after the other two, so libtest starts it last.
#[test]
fn addons_the_plan_ccm_metrics_server_descheduler_webhook_run_up_wait_names_every_addon_and_a_worker_joins() {
    let test = "real_node::addons::addons_the_plan_ccm_metrics_server_descheduler_webhook_run_up_wait_names_every_addon_and_a_worker_joins";
    let t0 = Instant::now();
    let Some(c) = shared(test) else {
        return;
    };
    let t_ready = t0.elapsed();
    the_plan_ccm_metrics_server_descheduler_and_webhook_run_and_up_wait_names_every_addon(&c);
    // The other two started before this one (name order), so they are
    // counted by now; wait for them to end.
    let waited = Instant::now();
    while CHECKS_RUNNING.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(1200),
            "the Dex and IRSA tests still run after 20 minutes"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let waited = waited.elapsed();
    let worker = a_worker_joins_and_metrics_server_answers_for_every_node(&c);
    // The boot and the addons' bring-up (scripts/bench-node.sh prints them).
    eprintln!(
        "--- boot timeline ---\n{}{}--- end ---",
        bed::timeline(&c.ctl, &c.followed),
        bed::addon_timeline(&c.bed, &c.ctl, &ADDONS)
    );
    eprintln!(
        "{test}: the shared cluster ready after {:.1}s of this test ({}); waited {:.1}s for the other checks; \
         the worker {worker}; test {:.1}s",
        t_ready.as_secs_f64(),
        c.followed.times(),
        waited.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// Dex on the shared cluster (the module header says what it shows).
fn dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group(c: &Cluster) {
    let (bed, ctl, inst, certs) = (&c.bed, &c.ctl, &c.inst, &c.certs);
    let t0 = Instant::now();
    let dex_logs = || pod_logs(ctl, "dex_dex-");

    // Discovery over HTTPS at the issuer, verified with the CA.
    let disco = curl(
        certs.path(),
        &inst.ip,
        &[&format!("{}/.well-known/openid-configuration", issuer())],
    );
    let disco_json: serde_json::Value = serde_json::from_slice(&disco.stdout).unwrap_or_default();
    assert_eq!(
        disco_json["issuer"],
        issuer().as_str(),
        "discovery: {}\n{}",
        output_text(&disco),
        dex_logs()
    );
    assert!(
        disco_json["grant_types_supported"].to_string().contains("password"),
        "the password grant is not offered: {disco_json}"
    );

    // The password grant: the static user, the static client's secret (the
    // plugin's secret parameter, decrypted on the node).
    let token_url = format!("{}/token", issuer());
    let password_token = |client_secret: &str, password: &str| {
        curl(
            certs.path(),
            &inst.ip,
            &[
                "-u",
                &format!("kubernetes:{client_secret}"),
                "-d",
                "grant_type=password",
                "--data-urlencode",
                "scope=openid email groups profile",
                "--data-urlencode",
                &format!("username={USER}"),
                "--data-urlencode",
                &format!("password={password}"),
                &token_url,
            ],
        )
    };
    let wrong = password_token(CLIENT_SECRET, "not-the-password");
    assert!(
        String::from_utf8_lossy(&wrong.stdout).contains("access_denied"),
        "a wrong password was not refused: {}",
        output_text(&wrong)
    );
    let wrong = password_token("not-the-client-secret", PASSWORD);
    assert!(
        String::from_utf8_lossy(&wrong.stdout).contains("invalid_client"),
        "a wrong client secret was not refused: {}",
        output_text(&wrong)
    );
    let user_token = id_token(&password_token(CLIENT_SECRET, PASSWORD), "the password grant");

    // The apiserver accepts it (it retries Dex's discovery until Dex
    // answers, so the first calls may come before it has the keys).
    let start = Instant::now();
    let whoami = loop {
        let o = kubectl_as(bed, ctl, &user_token, &["auth", "whoami", "-o", "json"]);
        if o.status.success() || start.elapsed() > Duration::from_secs(120) {
            break o;
        }
        std::thread::sleep(Duration::from_secs(3));
    };
    let who: serde_json::Value = serde_json::from_slice(&whoami.stdout).unwrap_or_default();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        USER,
        "whoami with the password grant's token: {}\n--- kube-apiserver ---\n{}",
        output_text(&whoami),
        pod_logs(ctl, "kube-system_kube-apiserver-")
    );
    let t_login = t0.elapsed();
    let groups = who["status"]["userInfo"]["groups"].to_string();
    assert_eq!(
        groups, r#"["system:authenticated"]"#,
        "the password database has no groups: {who}"
    );
    assert_eq!(can_i(bed, ctl, &user_token, "get", "pods", "team-a"), "no");

    // A group: the mockCallback connector's identity, through the code flow.
    let code = mock_login_code(certs.path(), &inst.ip);
    let exchanged = curl(
        certs.path(),
        &inst.ip,
        &[
            "-u",
            &format!("kubernetes:{CLIENT_SECRET}"),
            "-d",
            "grant_type=authorization_code",
            "--data-urlencode",
            &format!("code={code}"),
            "--data-urlencode",
            &format!("redirect_uri={REDIRECT}"),
            &token_url,
        ],
    );
    let author = id_token(&exchanged, "the code exchange");
    let whoami = kubectl_as(bed, ctl, &author, &["auth", "whoami", "-o", "json"]);
    let who: serde_json::Value = serde_json::from_slice(&whoami.stdout).unwrap_or_default();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "kilgore@kilgore.trout",
        "{}",
        output_text(&whoami)
    );
    let groups: Vec<&str> = who["status"]["userInfo"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str())
        .collect();
    assert!(groups.contains(&"authors"), "whoami shows no Dex group: {who}");
    // The RoleBinding of `authors` grants what it should, and nothing more.
    assert_eq!(can_i(bed, ctl, &author, "get", "pods", "team-a"), "yes");
    assert_eq!(can_i(bed, ctl, &author, "list", "pods", "team-a"), "yes");
    assert_eq!(can_i(bed, ctl, &author, "get", "secrets", "team-a"), "no");
    assert_eq!(can_i(bed, ctl, &author, "get", "pods", "default"), "no");
    assert_eq!(can_i(bed, ctl, &author, "delete", "pods", "team-a"), "no");
    let pods = kubectl_as(bed, ctl, &author, &["-n", "team-a", "get", "pods"]);
    assert!(pods.status.success(), "{}", output_text(&pods));
    let secrets = kubectl_as(bed, ctl, &author, &["-n", "team-a", "get", "secrets"]);
    assert!(
        !secrets.status.success() && output_text(&secrets).contains("Forbidden"),
        "{}",
        output_text(&secrets)
    );
    // A token whose signature is not Dex's is refused.
    // (A character in the middle of the signature: the last one's low bits
    // may be padding.)
    let sig = author.rfind('.').unwrap() + 10;
    let mut forged = author.clone();
    let flip = if &author[sig..sig + 1] == "A" { "B" } else { "A" };
    forged.replace_range(sig..sig + 1, flip);
    let refused = kubectl_as(bed, ctl, &forged, &["auth", "whoami"]);
    assert!(
        !refused.status.success() && output_text(&refused).contains("Unauthorized"),
        "a forged token: {}",
        output_text(&refused)
    );
    eprintln!(
        "dex: the password login accepted {:.1}s, the checks {:.1}s after the addons were ready",
        t_login.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The plan's own addons on the shared cluster: the AWS cloud controller
/// manager initialized the node, cluster DNS answers, the installed record
/// names every release, the helm client is the one `up` published, the pod
/// identity webhook rolled out and mutates, metrics-server serves the
/// node's metrics (the kubelet's serving certificate approved by the
/// approver), a descheduler Job succeeded, and `up --wait` returned 0
/// naming every addon ready.
fn the_plan_ccm_metrics_server_descheduler_and_webhook_run_and_up_wait_names_every_addon(c: &Cluster) {
    let (bed, ctl, inst) = (&c.bed, &c.ctl, &c.inst);
    let t0 = Instant::now();
    let zone = super::cloud_node_initialized(bed, ctl, inst);
    let t_initialized = t0.elapsed();
    // With the node initialized, CoreDNS (no toleration for the
    // uninitialized taint) schedules and serves the cluster's names through
    // its Service: the kubernetes Service's address, asked of kube-dns's.
    let svc = |ns: &str, name: &str| {
        let o = bed.kubectl(
            ctl,
            &["-n", ns, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}"],
        );
        assert!(o.status.success(), "{}", output_text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let (dns, api) = (svc("kube-system", "kube-dns"), svc("default", "kubernetes"));
    let start = Instant::now();
    let answer = loop {
        let a = super::dns_a(ctl, &dns, "kubernetes.default.svc.cluster.local");
        if !a.is_empty() || start.elapsed() > Duration::from_secs(180) {
            break a;
        }
        std::thread::sleep(Duration::from_secs(3));
    };
    assert_eq!(
        answer,
        vec![api.clone()],
        "kube-dns ({dns}) on kubernetes.default.svc.cluster.local:\n{}",
        output_text(&bed.kubectl(ctl, &["-n", "kube-system", "get", "pods", "-o", "wide"]))
    );
    let t_dns = t0.elapsed();

    let timer = ctl.node.sh("systemctl show -p ActiveState kube-aws-addons.timer");
    assert_eq!(timer.trim(), "ActiveState=active", "{timer}");
    // The installed record, in S3.
    let record = bed.status_object("addons/installed.json");
    assert!(
        record.contains("\"plan\"")
            && record.contains("pod-identity-webhook")
            && record.contains("MutatingWebhookConfiguration")
            && ADDONS.iter().all(|a| record.contains(&format!("\"{a}\""))),
        "the installed record: {record}"
    );
    // The helm client the node ran is the copy `up` published with the chart.
    bed.aws(&[
        "s3api",
        "head-object",
        "--bucket",
        bed::BED_BUCKET,
        "--key",
        &format!("clusters/{}/charts/{}.tgz", bed::BED_CLUSTER, c.helm_sha256),
    ]);
    // The webhook runs on the real controller, from the image built here.
    let rollout = bed.kubectl(
        ctl,
        &[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment/pod-identity-webhook",
            "--timeout=300s",
        ],
    );
    assert!(
        rollout.status.success(),
        "the webhook did not roll out: {}\n{}\n{}",
        output_text(&rollout),
        output_text(&bed.kubectl(ctl, &["-n", "kube-system", "get", "pods", "-o", "wide"])),
        output_text(&bed.kubectl(
            ctl,
            &[
                "-n",
                "kube-system",
                "describe",
                "pods",
                "-l",
                "app=pod-identity-webhook"
            ]
        ))
    );
    let t_rolled = t0.elapsed();
    // It mutates a pod whose service account names a role.
    let sa = bed.kubectl(ctl, &["create", "serviceaccount", "demo"]);
    assert!(sa.status.success(), "{}", output_text(&sa));
    let ann = bed.kubectl(
        ctl,
        &[
            "annotate",
            "serviceaccount",
            "demo",
            "eks.amazonaws.com/role-arn=arn:aws:iam::123456789012:role/demo",
        ],
    );
    assert!(ann.status.success(), "{}", output_text(&ann));
    let start = Instant::now();
    let env = loop {
        let o = bed.kubectl(
            ctl,
            &[
                "run",
                "demo",
                "--image=registry.k8s.io/pause:3.10.1",
                "--overrides={\"spec\":{\"serviceAccountName\":\"demo\"}}",
                "--dry-run=server",
                "-o",
                "jsonpath={.spec.containers[0].env}",
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if text.contains("AWS_ROLE_ARN") || start.elapsed() > Duration::from_secs(60) {
            break format!("{text}\n{}", output_text(&o));
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    assert!(
        env.contains("arn:aws:iam::123456789012:role/demo") && env.contains("AWS_WEB_IDENTITY_TOKEN_FILE"),
        "the webhook did not mutate the pod: {env}"
    );
    // metrics-server: the node's metrics through its APIService, scraped
    // from the kubelet over TLS (no --kubelet-insecure-tls).
    node_metrics(bed, ctl, &inst.dns, Duration::from_secs(180));
    let t_metrics = t0.elapsed();
    let top = bed.kubectl(ctl, &["top", "node", &inst.dns]);
    assert!(
        top.status.success() && String::from_utf8_lossy(&top.stdout).contains(&inst.dns),
        "kubectl top node: {}",
        output_text(&top)
    );
    // The kubelet's serving certificate is the approver's work.
    serving_certificate_approved(bed, ctl, &inst.dns);
    // The descheduler's CronJob (every minute here) runs its container to
    // completion: a Job of the release succeeds.
    let start = Instant::now();
    let jobs = loop {
        let o = bed.kubectl(
            ctl,
            &[
                "-n",
                "kube-system",
                "get",
                "jobs",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.succeeded}/{.status.failed}{\"\\n\"}{end}",
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let done = text.lines().any(|l| l.starts_with("descheduler-") && l.contains("=1/"));
        if done || start.elapsed() > Duration::from_secs(180) {
            break text;
        }
        std::thread::sleep(Duration::from_secs(5));
    };
    assert!(
        jobs.lines().any(|l| l.starts_with("descheduler-") && l.contains("=1/")),
        "no descheduler Job succeeded: {jobs}\n{}\n{}",
        output_text(&bed.kubectl(ctl, &["-n", "kube-system", "get", "cronjobs,jobs,pods", "-o", "wide"])),
        super::system_logs(bed, ctl, "app.kubernetes.io/instance=descheduler")
    );
    let t_descheduled = t0.elapsed();
    // `kube-aws up --wait`, running since before the boot, returned 0 once
    // the controllers' group and every addon's wait condition were
    // signalled, naming every addon ready.
    let (code, up_text) = &c.up;
    let named = |l: &&str| {
        l.contains(&format!(
            "is CREATE_COMPLETE; every addon is ready ({}): ",
            ADDONS.len()
        )) && ADDONS.iter().all(|a| l.contains(a))
    };
    assert!(
        *code == Some(0) && up_text.lines().any(|l| named(&l)),
        "kube-aws up --wait (exit {code:?}):\n{up_text}"
    );
    eprintln!(
        "plan: initialized by the cloud controller manager {:.1}s (zone {zone}); cluster DNS answering {:.1}s; \
         webhook rolled out {:.1}s; node metrics served {:.1}s; a descheduler run done {:.1}s, after the addons were ready",
        t_initialized.as_secs_f64(),
        t_dns.as_secs_f64(),
        t_rolled.as_secs_f64(),
        t_metrics.as_secs_f64(),
        t_descheduled.as_secs_f64(),
    );
}

/// Asserts that the approver (kube-aws-csr-approver on the controllers)
/// approved a kubelet-serving request of node `dns`.
fn serving_certificate_approved(bed: &MotoBed, ctl: &BedNode, dns: &str) {
    let csrs = bed.kubectl(ctl, &["get", "csr", "-o", "json"]);
    let csrs: serde_json::Value = serde_json::from_slice(&csrs.stdout).unwrap_or_default();
    let approved = csrs["items"].as_array().into_iter().flatten().any(|c| {
        c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
            && c["spec"]["username"] == format!("system:node:{dns}").as_str()
            && c["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["type"] == "Approved")
    });
    assert!(approved, "no approved kubelet-serving request of {dns}: {csrs}");
}

/// The node's metrics through metrics-server's APIService, asked for up to
/// `limit`: the answer, or a panic with what ran and metrics-server's log.
fn node_metrics(bed: &MotoBed, ctl: &BedNode, dns: &str, limit: Duration) -> String {
    let start = Instant::now();
    let path = format!("/apis/metrics.k8s.io/v1beta1/nodes/{dns}");
    let metrics = loop {
        let o = bed.kubectl(ctl, &["get", "--raw", &path]);
        if o.status.success() || start.elapsed() > limit {
            break o;
        }
        std::thread::sleep(Duration::from_secs(3));
    };
    assert!(
        metrics.status.success() && String::from_utf8_lossy(&metrics.stdout).contains("\"cpu\""),
        "no metrics of {dns} from metrics-server: {}\n{}\n{}",
        output_text(&metrics),
        output_text(&bed.kubectl(ctl, &["get", "nodes,csr", "-o", "wide"])),
        super::system_logs(bed, ctl, "app.kubernetes.io/name=metrics-server")
    );
    String::from_utf8_lossy(&metrics.stdout).into_owned()
}

/// A worker joins the shared cluster after the other checks (a scale-up by
/// hand, as the cluster-autoscaler would ask for one: the pool's group's
/// desired capacity raised to one, moto launching the instance), booted
/// from the worker launch template's user-data with the addon images
/// imported as on the controller (a pod may land on it). The cloud
/// controller manager initializes it as it did the controller, the
/// approver approves its kubelet's serving certificate, and metrics-server,
/// a pod on the controller, scrapes the worker's kubelet over TLS verified
/// with the cluster CA: a pod reaching another node, its answer routed back
/// to the controller's pod subnet (the bed's routes between nodes, in the
/// VPC CNI's place). `metrics.k8s.io` answers for every node and `kubectl
/// top nodes` lists both. Then pods across the nodes
/// (real_node.rs `pod_to_service_to_pod`): a pod on the worker answers the
/// controller, and a pod on the controller writes to it through a Service by
/// its DNS name, resolved by CoreDNS through kube-dns's Service, routed by
/// kube-proxy. Not covered: the VPC CNI itself; the pods there are static
/// pods from the etcd image (the bed has no image with a general client).
fn a_worker_joins_and_metrics_server_answers_for_every_node(c: &Cluster) -> String {
    let (bed, ctl) = (&c.bed, &c.ctl);
    let t0 = Instant::now();
    let groups = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--filters",
        &format!("Name=tag-key,Values=k8s.io/cluster-autoscaler/{}", bed::BED_CLUSTER),
    ]);
    let group = groups["AutoScalingGroups"][0]["AutoScalingGroupName"]
        .as_str()
        .unwrap_or_else(|| panic!("no worker group: {groups}"))
        .to_string();
    bed.aws(&[
        "autoscaling",
        "set-desired-capacity",
        "--auto-scaling-group-name",
        &group,
        "--desired-capacity",
        "1",
    ]);
    let inst = bed.instances(&format!("{}-worker-general", bed::BED_CLUSTER)).remove(0);
    let wk = bed.boot(
        "worker-general",
        "WorkerRole",
        &inst,
        &c.inst.ip,
        super::pod_net(1, &[(ctl, 0)]),
    );
    let images: Vec<&Path> = c.images.iter().map(|p| p.as_path()).collect();
    let f = super::ready_importing(bed, &wk, &images, bed::READY_LIMIT);
    let t_ready = t0.elapsed();
    let zone = super::cloud_node_initialized(bed, ctl, &inst);
    let metrics = node_metrics(bed, ctl, &inst.dns, Duration::from_secs(240));
    let t_metrics = t0.elapsed();
    serving_certificate_approved(bed, ctl, &inst.dns);
    let top = bed.kubectl(ctl, &["top", "nodes"]);
    let listed = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success() && listed.contains(&inst.dns) && listed.contains(&c.inst.dns),
        "kubectl top nodes: {}",
        output_text(&top)
    );
    assert!(metrics.contains(&inst.dns), "{metrics}");
    // Pods across the two nodes, and a Service by its DNS name: CoreDNS
    // runs here (the cloud controller manager initialized the controller).
    let net = super::pod_to_service_to_pod(bed, ctl, &wk, true);
    format!(
        "worker: Ready {:.1}s after the scale-up ({}), initialized in {zone}; its metrics served {:.1}s; {net}",
        t_ready.as_secs_f64(),
        f.times(),
        t_metrics.as_secs_f64()
    )
}

/// The Route 53 zone external-dns may change, created in moto before `up`
/// (the plugin takes its ID), and the name the test's Service asks for.
const ZONE: &str = "irsa.bed.test";
const RECORD: &str = "web.irsa.bed.test";
/// The address the test writes into the Service's load-balancer status, as
/// a cloud controller manager would (TEST-NET-3).
const LB_IP: &str = "203.0.113.10";
/// The addons' roles, as src/aws/state/role_names.rs names them
/// (`<cluster>-<region>-<namespace>-<service account>`).
const EXTERNAL_DNS_ROLE: &str = "bed-us-west-2-kube-system-external-dns";
const NTH_ROLE: &str = "bed-us-west-2-kube-system-aws-node-termination-handler";
const AUTOSCALER_ROLE: &str = "bed-us-west-2-kube-system-cluster-autoscaler";
/// The worker pool the cluster-autoscaler is to discover: no instances
/// (the bed boots no workers), room for two.
const POOL: &str = "worker:\n  nodePools:\n    - name: general\n      minSize: 0\n      maxSize: 2\n";

/// The test's values/external-dns.yaml: only data. Helm replaces lists, so
/// `env` repeats the plugin's AWS_DEFAULT_REGION and adds moto's endpoints
/// for Route 53 and STS (aws-sdk-go-v2's AWS_ENDPOINT_URL_<SERVICE>: see
/// the test's header for why not AWS_ENDPOINT_URL alone); a short interval
/// and the event trigger, so the record follows the Service in seconds.
fn external_dns_values(moto: &str) -> String {
    format!(
        r#"env:
  - name: AWS_DEFAULT_REGION
    value: "{region}"
  - name: AWS_ENDPOINT_URL_ROUTE_53
    value: "{moto}"
  - name: AWS_ENDPOINT_URL_STS
    value: "{moto}"
interval: 10s
triggerLoopOnEvent: true
logLevel: debug
"#,
        region = bed::BED_REGION
    )
}

/// The test's values/aws-node-termination-handler.yaml: moto through the
/// chart's `awsEndpoint` (the handler's AWS_ENDPOINT, one endpoint for SQS,
/// EC2, Auto Scaling and the web identity's STS: see the test's header),
/// and debug logs (the credentials' provider, the dropped event).
fn nth_values(moto: &str) -> String {
    format!("awsEndpoint: \"{moto}\"\nlogLevel: debug\n")
}

/// The test's values/cluster-autoscaler.yaml: the AWS provider's cloud
/// config with `[ServiceOverride]` sections sending Auto Scaling and EC2 to
/// moto (upstream's cloudprovider/aws/README.md "Using cloud config with
/// helm": a ConfigMap, here the chart's own `extraObjects`, mounted at
/// `cloudConfigPath`), and STS through aws-sdk-go-v2's
/// AWS_ENDPOINT_URL_STS (the chart's `extraEnv`), as for external-dns.
fn autoscaler_values(moto: &str) -> String {
    let region = bed::BED_REGION;
    let overrides: String = ["ec2", "autoscaling"]
        .iter()
        .map(|s| {
            format!(
                "        [ServiceOverride \"{s}\"]\n          Service={s}\n          Region={region}\n          \
                 URL={moto}\n          SigningRegion={region}\n"
            )
        })
        .collect();
    format!(
        r#"extraEnv:
  AWS_ENDPOINT_URL_STS: "{moto}"
cloudConfigPath: /config/cloud.conf
extraVolumes:
  - name: cloud-config
    configMap:
      name: cluster-autoscaler-cloud-config
extraVolumeMounts:
  - name: cloud-config
    mountPath: /config
    readOnly: true
extraObjects:
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: cluster-autoscaler-cloud-config
    data:
      cloud.conf: |
{overrides}"#
    )
}

/// An addon's pod as the pod identity webhook mutated it: its role
/// (`AWS_ROLE_ARN`) and the projected token for `sts.amazonaws.com`, read
/// from the kubelet's volume on the node, with its claims.
struct IrsaPod {
    role_arn: Option<String>,
    token: String,
    claims: serde_json::Value,
    /// The pod's IP on the bed's bridge.
    ip: String,
}

/// The Running pod of the service account `sa` in kube-system.
fn irsa_pod(bed: &MotoBed, ctl: &BedNode, sa: &str) -> IrsaPod {
    let pods = bed.kubectl(ctl, &["-n", "kube-system", "get", "pods", "-o", "json"]);
    let pods: serde_json::Value = serde_json::from_slice(&pods.stdout).unwrap_or_default();
    let pod = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["spec"]["serviceAccountName"] == sa && p["status"]["phase"] == "Running")
        .unwrap_or_else(|| panic!("no Running pod of the service account {sa}: {pods}"));
    let env: Vec<(String, String)> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let var = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let token_file =
        var("AWS_WEB_IDENTITY_TOKEN_FILE").unwrap_or_else(|| panic!("{sa}: no AWS_WEB_IDENTITY_TOKEN_FILE: {env:?}"));
    // The projected token, as the kubelet wrote it for the pod.
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let volume = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "sts.amazonaws.com")
        .unwrap_or_else(|| panic!("no projected token for sts.amazonaws.com: {pod}"));
    let path = volume["projected"]["sources"][0]["serviceAccountToken"]["path"]
        .as_str()
        .unwrap();
    let token = ctl
        .node
        .sh(&format!(
            "cat /var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/{}/{path}",
            volume["name"].as_str().unwrap(),
        ))
        .trim()
        .to_string();
    assert!(token_file.ends_with(path), "{token_file} is not the projected {path}");
    let claims: serde_json::Value = {
        use base64::Engine;
        let part = token.split('.').nth(1).unwrap_or_default();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part.trim_end_matches('='))
                .unwrap_or_default(),
        )
        .unwrap_or_default()
    };
    IrsaPod {
        role_arn: var("AWS_ROLE_ARN"),
        token,
        claims,
        ip: pod["status"]["podIP"].as_str().unwrap_or_default().to_string(),
    }
}

/// `sts assume-role-with-web-identity` with the aws CLI, unsigned, as STS
/// takes it.
fn web_identity(bed: &MotoBed, role: &str, token: &str) -> Output {
    let mut c = Command::new(crate::common::tool("aws"));
    bed.env.apply(&mut c);
    c.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .args([
            "sts",
            "assume-role-with-web-identity",
            "--role-arn",
            role,
            "--role-session-name",
            "irsa-bed-cli",
            "--web-identity-token",
            token,
            "--output",
            "json",
        ])
        .stdin(Stdio::null());
    c.output().unwrap()
}

/// The credentials of a pod's token for its role, or a panic naming STS's
/// answer.
fn role_creds(bed: &MotoBed, role: &str, token: &str) -> crate::common::iam::Creds {
    let o = web_identity(bed, role, token);
    assert!(o.status.success(), "the pod's token for {role}: {}", output_text(&o));
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    crate::common::iam::Creds {
        key: c["Credentials"]["AccessKeyId"].as_str().unwrap().to_string(),
        secret: c["Credentials"]["SecretAccessKey"].as_str().unwrap().to_string(),
        token: c["Credentials"]["SessionToken"].as_str().map(str::to_string),
    }
}

/// Asserts that `who` is refused each of `calls` (AccessDenied).
fn refused(bed: &MotoBed, who: &crate::common::iam::Creds, what: &str, calls: &[Vec<&str>]) {
    for args in calls {
        let (ok, out) = crate::common::iam::aws_as(&bed.env, who, args);
        assert!(
            !ok && out.contains("AccessDenied"),
            "{what} was not refused {args:?}: {out}"
        );
    }
}

/// Whether moto holds an assumed-role session of `role_arn` (moto's
/// `/moto-api/data.json`): the trace of an SDK's web identity exchange.
fn moto_sessions(bed: &MotoBed, role_arn: &str) -> usize {
    let data = Command::new("curl")
        .args(["-fsS", &format!("{}/moto-api/data.json", bed.env.moto.url())])
        .output()
        .unwrap();
    let data: serde_json::Value = serde_json::from_slice(&data.stdout).unwrap_or_default();
    data["sts"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .flat_map(|v| v.as_array().into_iter().flatten())
        .filter(|r| r["role_arn"] == role_arn)
        .count()
}

/// IRSA end to end with external-dns on moto's Route 53,
/// aws-node-termination-handler on moto's SQS and EC2, and the
/// cluster-autoscaler on moto's Auto Scaling and EC2, on the shared cluster.
///
/// `irsa_external_dns_termination_handler_and_autoscaler_call_aws_under_their_roles_only`
/// runs on the shared controller (`boot`), with the external-dns plugin
/// on for a hosted zone created in moto before `up` (`hostedZoneId`,
/// `domainFilter`), the aws-node-termination-handler and cluster-autoscaler
/// plugins on, and one worker pool `general` (minSize 0, maxSize 2: no
/// instance, no worker boots) that carries the autoscaler's discovery tags
/// and the handler's managed tag. `up` renders the plugin's service-account role
/// (`bed-us-west-2-kube-system-external-dns`: ChangeResourceRecordSets on
/// the zone, the List calls), trusted only for the token of
/// `system:serviceaccount:kube-system:external-dns` with audience
/// `sts.amazonaws.com` from the cluster's issuer (the issuer bucket in
/// moto's S3, discovery and keys published by `up`). On the node, the
/// reconciler installs the pod identity webhook (its image from the test
/// bed's binary) and the external-dns chart 1.21.1 (external-dns v0.21.0
/// built from the Go module proxy's source by
/// scripts/install-addon-images.sh, under the tag the chart pulls). Then:
///
/// - the webhook has mutated the pod: `AWS_ROLE_ARN` is the role and
///   `AWS_WEB_IDENTITY_TOKEN_FILE` the projected token (audience
///   `sts.amazonaws.com`, issued by the cluster's issuer, `sub` the service
///   account);
/// - a Service `web` (type LoadBalancer, annotated with the hostname
///   `web.irsa.bed.test`; its load-balancer status written by the test,
///   as a cloud controller manager would; its `loadBalancerClass` one that
///   no controller here serves, so the cloud controller manager that runs
///   on the cluster leaves it alone: k8s.io/cloud-provider v0.35
///   controllers/service `wantsLoadBalancer`; external-dns's service
///   source does not look at the class) gets its A record in moto's zone:
///   external-dns's aws-sdk-go-v2 reads the token, calls moto's
///   `AssumeRoleWithWebIdentity` (unsigned) and changes the record set with
///   the role's credentials, moto's IAM enforced;
/// - moto holds an assumed-role session of exactly that role (moto's
///   `/moto-api/data.json`), and the node's own role (the controller's: the
///   other credentials on the node) is refused
///   `route53:ChangeResourceRecordSets` on the zone: the record could only be
///   made under the IRSA role. (Checked that this can fail: with the role's
///   `ChangeResourceRecordSets` taken out of plugins/external-dns, moto
///   refuses external-dns's change batch, 403, and the test fails at the
///   record);
/// - the pod's own token, read from the kubelet's projected volume on the
///   node, assumes the role with the aws CLI, and those credentials are
///   refused what the role's policy does not grant (`CreateHostedZone`,
///   `iam:ListRoles`: AccessDenied); the same token is refused for another
///   role (the controller's: AccessDenied by its trust policy), and a token
///   with a flipped signature byte is refused (InvalidIdentityToken).
///
/// What moto does with the token: moto 5.2.5 alone does not read it at all
/// (its AssumeRoleWithWebIdentity is AssumeRole: any string, any role, no
/// trust policy), and with IAM enforced it fails the call (an unsigned
/// request: HTTP 500). tests/support/moto_server.py patch 12 lets the
/// unsigned call in and checks what STS checks that moto can hold: the
/// JWT's signature against the JWKS the issuer's discovery document names
/// (read from moto's S3, where `up` published them), `exp`, and the role's
/// trust policy (`sub`, `aud`). So the token's signature is verified here,
/// against the keys kube-aws published.
///
/// The endpoint: external-dns 0.21 builds its AWS config with
/// `config.LoadDefaultConfig` (provider/aws/config.go) and has no endpoint
/// flag; aws-sdk-go-v2 honours `AWS_ENDPOINT_URL_<SERVICE>`. The global
/// `AWS_ENDPOINT_URL` alone would not reach moto's STS: the web-identity
/// credential provider's STS client is made before the config's base
/// endpoint is resolved (config v1.32 `resolveCredentials` comes before
/// `resolveBaseEndpoint`), and sts's `resolveBaseEndpoint` skips its own
/// lookup when only the global variable is set, so the exchange would go to
/// the real sts.us-west-2.amazonaws.com. The endpoints are data in the
/// test's values (`env`), not a plugin setting: a user on AWS has no use for
/// them.
///
/// aws-node-termination-handler (chart 0.27.6, v1.25.6 built from the Go
/// module proxy by scripts/install-addon-images.sh, under the tag the chart
/// pulls) runs in Queue Processor mode on the queue the plugin's
/// CloudFormation creates in moto (`bed-nth`), under its role
/// (`bed-us-west-2-kube-system-aws-node-termination-handler`: the README's
/// "IAM Policy for aws-node-termination-handler Deployment", v1.25.6, the
/// queue and lifecycle action scoped to the cluster). Its pod Running and
/// Ready; the webhook gave it the role and the token; the test sends a
/// spot interruption warning (EventBridge's event, as README.md documents
/// it) for the controller's instance to the queue, and the handler
/// consumes it: it receives it, describes the instance (EC2), finds it
/// without the managed tag (controllers do not carry it: only pools that
/// enable the plugin) and deletes the message ("dropping interruption event
/// for unmanaged node", the queue empty). Its credentials are the web
/// identity's ("AWS Credentials retrieved from provider:
/// WebIdentityCredentials" in its log; moto holds a session of its role),
/// and the node's role is refused `sqs:ReceiveMessage` on the queue. With
/// the pod's token the role describes instances and is refused
/// `sqs:SendMessage`, `autoscaling:SetDesiredCapacity` and IAM. (Checked
/// that this can fail: with `sqs:DeleteMessage` taken out of the plugin's
/// statement, moto refuses the handler's delete and the test fails at the
/// queue, the message still in flight.)
/// Its endpoint: the handler uses aws-sdk-go v1 (go.mod v1.55.4), which
/// reads no AWS_ENDPOINT_URL; its `aws-endpoint` setting (pkg/config
/// config.go, env AWS_ENDPOINT, "[testing] If specified, use the AWS
/// endpoint to make API calls"; the chart's `awsEndpoint`) goes into the
/// one `aws.Config` of cmd/node-termination-handler.go's SQS session, and
/// v1's session builds the web identity provider's STS client from that
/// same config (aws/session/credentials.go `assumeWebIdentity`), so one
/// value reaches moto's SQS, EC2, Auto Scaling and STS. The queue URL is
/// the one the plugin renders (sqs.us-west-2.amazonaws.com); moto resolves
/// the queue by its path. Not covered: a drain (the one node is the
/// controller, which the handler must not drain; tests/it/nth_testbed.rs
/// drains kwok nodes with the real program on the host), the lifecycle
/// action's completion (moto has no lifecycle actions outside
/// tests/support/moto_lifecycle.py), EventBridge's delivery (the test sends
/// the event itself: moto's EventBridge does not emit EC2's events), and
/// the `aws:ResourceTag` condition on CompleteLifecycleAction (moto's IAM
/// does not evaluate conditions).
///
/// cluster-autoscaler (chart 9.59.0, 1.35.0 built from the tagged source
/// tarball with the AWS provider only, `-tags aws`) runs under its role
/// (`bed-us-west-2-kube-system-cluster-autoscaler`: the actions of
/// upstream's cloudprovider/aws/README.md "IAM Policy", full and
/// minimal, 1.35.0; the writes scoped by the discovery tag). Its pod Running
/// and Ready, its `/health-check` answering, and its status ConfigMap
/// (`cluster-autoscaler-status`) names the worker pool's group, found by the
/// tags kube-aws renders (`--node-group-auto-discovery=asg:tag=…`, the
/// chart's from the plugin's `autoDiscovery.clusterName`); moto holds a
/// session of its role; with the pod's token the role describes the groups
/// and is refused EC2's DescribeVpcs, DeleteAutoScalingGroup and IAM.
/// Its endpoint: the AWS provider builds its Auto Scaling and EC2 clients
/// with a legacy endpoint resolver of its own
/// (cloudprovider/aws/aws_manager.go, `WithEndpointResolver(
/// newAutoscalingOverrideResolver(cloudConfig))`), which answers from the
/// cloud config's `[ServiceOverride]` sections and otherwise from the
/// SDK's default table, so AWS_ENDPOINT_URL_AUTOSCALING would not reach
/// these clients; the cloud config is the documented way
/// (cloudprovider/aws/README.md "Using cloud config with helm"), here a
/// ConfigMap from the chart's `extraObjects`. STS is the web identity
/// provider's, from `config.LoadDefaultConfig` (aws_sdk_provider.go), as
/// for external-dns: AWS_ENDPOINT_URL_STS. Its start-up EC2
/// DescribeInstanceTypes uses a client without that resolver and goes to
/// the real EC2 endpoint (no DNS for it here): the autoscaler logs the
/// failure and falls back to its static instance-type list, as upstream
/// intends. moto returned an empty `MixedInstancesPolicy` for every group
/// made by CloudFormation, on which the autoscaler panicked:
/// tests/support/moto_server.py patch 15. Not covered: a scale-up or
/// scale-down (no worker boots here: a launched moto instance would never
/// join), the `aws:ResourceTag` condition on the writes (moto's IAM does not
/// evaluate conditions), EKS managed node groups (moto has no EKS here).
///
/// Not covered, and why: real Route 53 and real STS (no AWS account here);
/// the IAM OIDC provider object and its thumbprint (moto's CloudFormation
/// has no AWS::IAM::OIDCProvider, so nothing resolves the trust policy's
/// Federated principal, and IAM would fetch the discovery document over
/// public HTTPS, which moto's S3 cannot serve); a Service's name from a
/// real load balancer (moto has no load balancer data path: the test
/// writes the status); an Ingress (no ingress controller writes its
/// status); which STS endpoint the SDK picks on AWS (moot with an explicit
/// endpoint). One controller, no workers.
fn irsa_external_dns_termination_handler_and_autoscaler_call_aws_under_their_roles_only(c: &Cluster) {
    let (bed, ctl, inst, zone_id) = (&c.bed, &c.ctl, &c.inst, &c.zone_id);
    let t0 = Instant::now();
    let account = bed.admin_arn.split(':').nth(4).unwrap().to_string();
    let arn = |role: &str| format!("arn:aws:iam::{account}:role/{role}");
    let role_arn = arn(EXTERNAL_DNS_ROLE);
    for role in [EXTERNAL_DNS_ROLE, NTH_ROLE, AUTOSCALER_ROLE] {
        let r = bed.aws(&["iam", "get-role", "--role-name", role]);
        assert_eq!(r["Role"]["Arn"], arn(role).as_str(), "{r}");
    }
    let edns_logs = || pod_logs(ctl, "kube-system_external-dns-");

    // Each addon's pod as the webhook mutated it: its role and its token
    // (audience sts.amazonaws.com, issued by the cluster's issuer, `sub` its
    // service account).
    let issuer = format!(
        "https://{}.s3.{}.amazonaws.com",
        kube_aws::irsa::issuer_bucket_name(bed::BED_BUCKET, bed::BED_CLUSTER),
        bed::BED_REGION
    );
    let [edns, nth, autoscaler] = [
        ("external-dns", EXTERNAL_DNS_ROLE),
        ("aws-node-termination-handler", NTH_ROLE),
        ("cluster-autoscaler", AUTOSCALER_ROLE),
    ]
    .map(|(sa, role)| {
        let pod = irsa_pod(bed, ctl, sa);
        assert_eq!(
            pod.role_arn.as_deref(),
            Some(arn(role).as_str()),
            "the webhook did not give {sa} its role"
        );
        let c = &pod.claims;
        assert_eq!(
            c["sub"],
            format!("system:serviceaccount:kube-system:{sa}").as_str(),
            "{c}"
        );
        assert_eq!(c["aud"][0], "sts.amazonaws.com", "{c}");
        assert_eq!(c["iss"], issuer.as_str(), "{c}");
        pod
    });
    let token = edns.token.clone();

    // aws-node-termination-handler: a spot interruption warning for the
    // controller's instance, as EventBridge delivers it to the queue. The
    // aws CLI does not take AWS_ENDPOINT_URL for SQS: moto named here (as
    // tests/it/workers_moto.rs does).
    let moto = bed.env.moto.url();
    let queue = bed.aws(&[
        "sqs",
        "--endpoint-url",
        &moto,
        "get-queue-url",
        "--queue-name",
        &format!("{}-nth", bed::BED_CLUSTER),
    ])["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    let event = serde_json::json!({
        "version": "0",
        "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": account,
        "time": "2026-01-01T00:00:00Z",
        "region": bed::BED_REGION,
        "resources": [format!("arn:aws:ec2:{}:{account}:instance/{}", bed::BED_REGION, inst.id)],
        "detail": {"instance-id": inst.id, "instance-action": "terminate"}
    });
    bed.aws(&[
        "sqs",
        "--endpoint-url",
        &moto,
        "send-message",
        "--queue-url",
        &queue,
        "--message-body",
        &event.to_string(),
    ]);

    // external-dns: a Service asking for the name; its load balancer's
    // address as a cloud controller manager would write it.
    let svc = bed.dir().join("web.yaml");
    std::fs::write(
        &svc,
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: default\n  annotations:\n    \
             external-dns.alpha.kubernetes.io/hostname: {RECORD}\nspec:\n  type: LoadBalancer\n  \
             loadBalancerClass: bed.test/status-written-by-the-test\n  selector: {{app: web}}\n  ports: [{{port: 80}}]\n"
        ),
    )
    .unwrap();
    let o = bed.kubectl(ctl, &["apply", "-f", svc.to_str().unwrap()]);
    assert!(o.status.success(), "{}", output_text(&o));
    let o = bed.kubectl(
        ctl,
        &[
            "-n",
            "default",
            "patch",
            "service",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"loadBalancer":{{"ingress":[{{"ip":"{LB_IP}"}}]}}}}}}"#),
        ],
    );
    assert!(o.status.success(), "{}", output_text(&o));

    // The record in moto's zone.
    let start = Instant::now();
    let record = loop {
        let sets = bed.aws(&["route53", "list-resource-record-sets", "--hosted-zone-id", zone_id]);
        let a = sets["ResourceRecordSets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["Name"] == format!("{RECORD}.") && r["Type"] == "A")
            .cloned();
        if let Some(a) = a {
            break a;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "no A record {RECORD} in moto's zone: {sets}\n--- external-dns ---\n{}",
            edns_logs()
        );
        std::thread::sleep(Duration::from_secs(3));
    };
    assert_eq!(record["ResourceRecords"][0]["Value"], LB_IP, "{record}");
    let t_record = t0.elapsed();

    // moto holds a session of exactly that role (the SDK's exchange).
    assert!(
        moto_sessions(bed, &role_arn) > 0,
        "moto assumed no session of {role_arn}"
    );
    // The node's own role (reachable from the pod through IMDS) may not
    // change the zone: the record could only come from the IRSA role.
    let node_creds = crate::node_iam_moto::assume(&bed.env, &bed.admin, &bed.admin_arn, "ControllerRole");
    let batch = format!(
        r#"{{"Changes":[{{"Action":"UPSERT","ResourceRecordSet":{{"Name":"node.{ZONE}","Type":"A","TTL":60,"ResourceRecords":[{{"Value":"192.0.2.1"}}]}}}}]}}"#
    );
    // moto's Route 53 errors are in the query protocol's XML, which the CLI
    // does not parse for a REST-XML service ("An error occurred ()"): the
    // response body, as --debug logs it, names the error.
    refused(
        bed,
        &node_creds,
        "the node role",
        &[vec![
            "route53",
            "change-resource-record-sets",
            "--hosted-zone-id",
            &zone_id,
            "--change-batch",
            &batch,
            "--debug",
        ]],
    );

    // The pod's token with the aws CLI: it assumes the role (unsigned, as
    // STS takes it)...
    let creds = role_creds(bed, &role_arn, &token);
    // ...which may list the zone's records (its policy)...
    let (ok, out) = crate::common::iam::aws_as(
        &bed.env,
        &creds,
        &["route53", "list-resource-record-sets", "--hosted-zone-id", zone_id],
    );
    assert!(ok && out.contains(RECORD), "the role's own call: {out}");
    // ...and nothing outside it.
    refused(
        bed,
        &creds,
        "the external-dns role",
        &[
            vec![
                "route53",
                "create-hosted-zone",
                "--name",
                "other.bed.test",
                "--caller-reference",
                "x",
                "--debug",
            ],
            vec!["route53", "delete-hosted-zone", "--id", &zone_id, "--debug"],
            vec!["iam", "list-roles"],
            vec!["s3api", "list-buckets"],
        ],
    );
    // The token is good for its role only, and only as signed.
    let controller_role = bed.aws(&["iam", "list-roles"])["Roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["RoleName"].as_str().unwrap_or_default().contains("-ControllerRole-"))
        .map(|r| r["Arn"].as_str().unwrap().to_string())
        .unwrap();
    let o = web_identity(bed, &controller_role, &token);
    assert!(
        !o.status.success() && output_text(&o).contains("AccessDenied"),
        "the pod's token assumed the controller's role: {}",
        output_text(&o)
    );
    let sig = token.rfind('.').unwrap() + 10;
    let mut forged = token.clone();
    let flip = if &token[sig..sig + 1] == "A" { "B" } else { "A" };
    forged.replace_range(sig..sig + 1, flip);
    let o = web_identity(bed, &role_arn, &forged);
    assert!(
        !o.status.success() && output_text(&o).contains("InvalidIdentityToken"),
        "a forged token: {}",
        output_text(&o)
    );

    // aws-node-termination-handler consumed the warning under its role:
    // received, the instance described, found unmanaged, the message
    // deleted (the queue empty), with the web identity's credentials. The
    // handler logs "SQS Deleted Message" after its DeleteMessage call
    // whatever its outcome (sqs-monitor.go deleteMessages): the queue's
    // counts are what show the delete.
    let nth_arn = arn(NTH_ROLE);
    let nth_log = "/var/log/pods/kube-system_aws-node-termination-handler-*/*/*.log";
    let consumed = ctl.node.wait_for(
        "the handler's consumption of the spot warning",
        &format!(
            "grep -h 'dropping interruption event for unmanaged node' {nth_log} | grep -q {id} && \
             grep -q 'SQS Deleted Message' {nth_log}",
            id = inst.id
        ),
        Duration::from_secs(120),
    );
    if let Err(e) = consumed {
        panic!(
            "{e}\n--- aws-node-termination-handler ---\n{}",
            pod_logs(ctl, "kube-system_aws-node-termination-handler-")
        );
    }
    let attrs = bed.aws(&[
        "sqs",
        "--endpoint-url",
        &moto,
        "get-queue-attributes",
        "--queue-url",
        &queue,
        "--attribute-names",
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
    ]);
    assert_eq!(attrs["Attributes"]["ApproximateNumberOfMessages"], "0", "{attrs}");
    assert_eq!(
        attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"], "0",
        "{attrs}"
    );
    assert!(
        ctl.node
            .sh(&format!(
                "grep -c 'retrieved from provider: WebIdentityCredentials' {nth_log} || true"
            ))
            .trim()
            != "0",
        "the handler's credentials were not the web identity's:\n{}",
        pod_logs(ctl, "kube-system_aws-node-termination-handler-")
    );
    assert!(moto_sessions(bed, &nth_arn) > 0, "moto assumed no session of {nth_arn}");
    // The node's role cannot read the queue: the handler's receive was the
    // IRSA role's.
    refused(
        bed,
        &node_creds,
        "the node role",
        &[vec![
            "sqs",
            "--endpoint-url",
            &moto,
            "receive-message",
            "--queue-url",
            &queue,
        ]],
    );
    let nth_creds = role_creds(bed, &nth_arn, &nth.token);
    let (ok, out) = crate::common::iam::aws_as(
        &bed.env,
        &nth_creds,
        &["ec2", "describe-instances", "--instance-ids", &inst.id],
    );
    assert!(ok && out.contains(&inst.id), "the handler's role's own call: {out}");
    let groups = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--filters",
        &format!("Name=tag-key,Values=k8s.io/cluster-autoscaler/{}", bed::BED_CLUSTER),
    ]);
    let groups: Vec<String> = groups["AutoScalingGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["AutoScalingGroupName"].as_str().map(str::to_string))
        .collect();
    assert!(!groups.is_empty(), "no group carries the autoscaler's discovery tag");
    refused(
        bed,
        &nth_creds,
        "the handler's role",
        &[
            vec![
                "sqs",
                "--endpoint-url",
                &moto,
                "send-message",
                "--queue-url",
                &queue,
                "--message-body",
                "{}",
            ],
            vec![
                "autoscaling",
                "set-desired-capacity",
                "--auto-scaling-group-name",
                &groups[0],
                "--desired-capacity",
                "0",
            ],
            vec!["iam", "list-roles"],
        ],
    );
    let t_nth = t0.elapsed();

    // cluster-autoscaler: healthy, and its status names each group that
    // carries the discovery tags.
    let autoscaler_arn = arn(AUTOSCALER_ROLE);
    let autoscaler_logs = || pod_logs(ctl, "kube-system_cluster-autoscaler-");
    if let Err(e) = ctl.node.wait_for(
        "the autoscaler's /health-check",
        &format!("curl -fsS http://{}:8085/health-check", autoscaler.ip),
        Duration::from_secs(60),
    ) {
        panic!("{e}\n--- cluster-autoscaler ---\n{}", autoscaler_logs());
    }
    let start = Instant::now();
    loop {
        let o = bed.kubectl(
            ctl,
            &[
                "-n",
                "kube-system",
                "get",
                "configmap",
                "cluster-autoscaler-status",
                "-o",
                "jsonpath={.data.status}",
            ],
        );
        let status = String::from_utf8_lossy(&o.stdout).into_owned();
        if groups.iter().all(|g| status.contains(&format!("name: {g}"))) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the autoscaler's status does not name the groups {groups:?}: {status}\n--- cluster-autoscaler ---\n{}",
            autoscaler_logs()
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    assert!(
        moto_sessions(bed, &autoscaler_arn) > 0,
        "moto assumed no session of {autoscaler_arn}"
    );
    let autoscaler_creds = role_creds(bed, &autoscaler_arn, &autoscaler.token);
    let (ok, out) = crate::common::iam::aws_as(
        &bed.env,
        &autoscaler_creds,
        &["autoscaling", "describe-auto-scaling-groups"],
    );
    assert!(
        ok && out.contains(&groups[0]),
        "the autoscaler's role's own call: {out}"
    );
    refused(
        bed,
        &autoscaler_creds,
        "the autoscaler's role",
        &[
            vec!["ec2", "describe-vpcs"],
            vec![
                "autoscaling",
                "delete-auto-scaling-group",
                "--auto-scaling-group-name",
                "not-this-cluster",
            ],
            vec!["iam", "list-roles"],
        ],
    );
    eprintln!(
        "irsa: the record in moto {:.1}s; the handler's message consumed {:.1}s; the checks {:.1}s after the addons were ready",
        t_record.as_secs_f64(),
        t_nth.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The EBS CSI controller's IRSA role, as the stack names it
/// (plugins/aws-ebs-csi-driver, `serviceAccounts`).
const EBS_ROLE: &str = "bed-us-west-2-kube-system-ebs-csi-controller-sa";

/// The test's values/aws-ebs-csi-driver.yaml: only data. The controller's
/// EC2 client at moto through the driver's own `AWS_EC2_ENDPOINT`
/// (pkg/cloud/cloud.go `NewCloud`: the EC2 client's BaseEndpoint; the chart
/// reads it from an optional ConfigMap, `controller.env` sets it here), STS
/// through aws-sdk-go-v2's `AWS_ENDPOINT_URL_STS`, as for external-dns (the
/// controller's health check is an EC2 dry run, `DescribeAvailabilityZones`
/// in pkg/driver/identity.go `Probe`: without moto the pod is never Ready).
/// The node DaemonSets are left out (the chart's `node.enableLinux` and
/// `node.enableWindows`, templates/_node.tpl): the node plugin mounts block
/// devices, which the bed's nodes have none to give, and its
/// csi-node-driver-registrar is not served by the module proxy.
fn ebs_values(moto: &str) -> String {
    let moto = serde_json::to_string(moto).unwrap();
    format!(
        "controller:\n  env:\n    - name: AWS_EC2_ENDPOINT\n      value: {moto}\n    \
         - name: AWS_ENDPOINT_URL_STS\n      value: {moto}\n\
         node:\n  enableLinux: false\n  enableWindows: false\n"
    )
}

/// The EBS CSI controller on the shared cluster (issue 41): the chart's
/// controller Deployment (aws-ebs-csi-driver 2.64.0: two replicas of the
/// driver v1.64.0, built from its tagged source, with the
/// csi-provisioner v6.3.0, csi-attacher v4.12.0, csi-resizer and
/// livenessprobe sidecars; scripts/install-addon-images.sh says which
/// version of each is built and why) runs Ready, every container of each
/// pod ready, its readiness the liveness-probe sidecar's `/healthz`. Its
/// pods carry the IRSA role the webhook gives them. Then a volume's life,
/// as a user's PersistentVolumeClaim drives it: the external-provisioner
/// asks the driver, the driver calls moto's EC2 `CreateVolume` under the
/// role (an `AssumeRoleWithWebIdentity` session in moto, IAM enforced), the
/// claim binds to a PersistentVolume of that volume, tagged as the plugin's
/// policy conditions expect (`ebs.csi.aws.com/cluster`, `CSIVolumeName`,
/// the claim's name, the cluster's `kubernetes.io/cluster/<name>: owned`);
/// deleting the claim deletes the volume in moto (reclaim policy Delete).
/// The role can describe volumes, and is refused what the policy does not
/// grant (terminating an instance, describing security groups, listing
/// roles).
///
/// Not covered, and why: attaching and mounting (the node plugin needs
/// block devices, so it runs on no node here). Without the node plugin no
/// CSINode names the driver or its zone, so a claim of the plugin's `ebs-sc`
/// class (WaitForFirstConsumer) is not provisioned, and with Immediate
/// binding alone external-provisioner v6 refuses ("no available topology
/// found": it aggregates the zones from the CSINodes): the check's class
/// binds at once and names the controller's zone in `allowedTopologies`, as
/// a user pins a class to zones, so the requirement comes from the class;
/// the policy's tag conditions (moto's IAM does
/// not evaluate conditions, as for the other roles); snapshots (no snapshot
/// CRDs: the chart leaves out the snapshotter); the livenessprobe sidecar is
/// our own program (scripts/nodebed/csi-livenessprobe, upstream's source is
/// not served here), so its `/healthz` is what upstream documents, not
/// upstream's binary.
fn ebs_csi_controller_provisions_and_deletes_a_volume_under_its_role(c: &Cluster) -> String {
    let (bed, ctl, inst) = (&c.bed, &c.ctl, &c.inst);
    let t0 = Instant::now();
    let account = bed.admin_arn.split(':').nth(4).unwrap().to_string();
    let role_arn = format!("arn:aws:iam::{account}:role/{EBS_ROLE}");
    let ebs_logs = || {
        output_text(&bed.kubectl(
            ctl,
            &[
                "-n",
                "kube-system",
                "logs",
                "-l",
                "app=ebs-csi-controller",
                "--all-containers",
                "--tail=20",
            ],
        ))
    };
    // The controller's pods: Running, every container ready.
    let pods = bed.kubectl(
        ctl,
        &[
            "-n",
            "kube-system",
            "get",
            "pods",
            "-l",
            "app=ebs-csi-controller",
            "-o",
            "json",
        ],
    );
    let pods: serde_json::Value = serde_json::from_slice(&pods.stdout).unwrap_or_default();
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 2, "the chart's two controller replicas: {pods}");
    for p in &items {
        let mut ready: Vec<(String, bool)> = p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| (s["name"].as_str().unwrap_or("?").to_string(), s["ready"] == true))
            .collect();
        ready.sort();
        let names: Vec<&str> = ready.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "csi-attacher",
                "csi-provisioner",
                "csi-resizer",
                "ebs-plugin",
                "liveness-probe"
            ],
            "the controller pod's containers: {p}"
        );
        assert!(
            ready.iter().all(|(_, r)| *r),
            "a container of {} is not ready: {ready:?}\n{}",
            p["metadata"]["name"],
            ebs_logs()
        );
    }
    let pod = irsa_pod(bed, ctl, "ebs-csi-controller-sa");
    assert_eq!(
        pod.role_arn.as_deref(),
        Some(role_arn.as_str()),
        "the webhook did not give the EBS CSI controller its role"
    );
    // A claim of a class with Immediate binding and the controller's zone
    // as its allowed topology (the header says why).
    let zone = bed.kubectl(
        ctl,
        &[
            "get",
            "node",
            &inst.dns,
            "-o",
            "jsonpath={.metadata.labels.topology\\.kubernetes\\.io/zone}",
        ],
    );
    let zone = String::from_utf8_lossy(&zone.stdout).trim().to_string();
    assert!(!zone.is_empty(), "the controller's Node has no zone label");
    let claim = bed.dir().join("ebs-claim.yaml");
    std::fs::write(
        &claim,
        format!(
            r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: ebs-bed-immediate
provisioner: ebs.csi.aws.com
volumeBindingMode: Immediate
reclaimPolicy: Delete
parameters:
  type: gp3
allowedTopologies:
  - matchLabelExpressions:
      - key: topology.kubernetes.io/zone
        values: [{zone}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bed-data
  namespace: default
spec:
  storageClassName: ebs-bed-immediate
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
"#
        ),
    )
    .unwrap();
    let o = bed.kubectl(ctl, &["apply", "-f", claim.to_str().unwrap()]);
    assert!(o.status.success(), "{}", output_text(&o));
    let start = Instant::now();
    let pv = loop {
        let o = bed.kubectl(
            ctl,
            &[
                "-n",
                "default",
                "get",
                "pvc",
                "bed-data",
                "-o",
                "jsonpath={.status.phase} {.spec.volumeName}",
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if let Some(pv) = text.strip_prefix("Bound ") {
            break pv.trim().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the claim did not bind: {text}\n{}\n{}",
            output_text(&bed.kubectl(ctl, &["-n", "default", "describe", "pvc", "bed-data"])),
            ebs_logs()
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    let t_bound = t0.elapsed();
    let handle = bed.kubectl(
        ctl,
        &[
            "get",
            "pv",
            &pv,
            "-o",
            "jsonpath={.spec.csi.driver} {.spec.csi.volumeHandle}",
        ],
    );
    let handle = String::from_utf8_lossy(&handle.stdout).into_owned();
    let volume = handle
        .strip_prefix("ebs.csi.aws.com ")
        .unwrap_or_else(|| panic!("the PersistentVolume {pv} is not the driver's: {handle}"))
        .trim()
        .to_string();
    // The volume in moto, as the driver made it.
    let v = bed.aws(&["ec2", "describe-volumes", "--volume-ids", &volume]);
    let v = &v["Volumes"][0];
    let tag = |k: &str| {
        v["Tags"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["Key"] == k)
            .and_then(|t| t["Value"].as_str())
            .map(str::to_string)
    };
    assert_eq!(v["Size"], 1, "{v}");
    assert_eq!(v["AvailabilityZone"], zone.as_str(), "{v}");
    assert_eq!(v["VolumeType"], "gp3", "{v}");
    assert_eq!(tag("CSIVolumeName").as_deref(), Some(pv.as_str()), "{v}");
    assert_eq!(tag("ebs.csi.aws.com/cluster").as_deref(), Some("true"), "{v}");
    assert_eq!(
        tag("kubernetes.io/created-for/pvc/name").as_deref(),
        Some("bed-data"),
        "{v}"
    );
    assert_eq!(
        tag(&format!("kubernetes.io/cluster/{}", bed::BED_CLUSTER)).as_deref(),
        Some("owned"),
        "{v}"
    );
    assert!(
        moto_sessions(bed, &role_arn) > 0,
        "moto assumed no session of {role_arn}"
    );
    // The role's own call, and what it must not do.
    let creds = role_creds(bed, &role_arn, &pod.token);
    let (ok, out) = crate::common::iam::aws_as(&bed.env, &creds, &["ec2", "describe-volumes", "--volume-ids", &volume]);
    assert!(ok && out.contains(&volume), "the EBS CSI role's own call: {out}");
    refused(
        bed,
        &creds,
        "the EBS CSI controller's role",
        &[
            vec!["ec2", "terminate-instances", "--instance-ids", &inst.id],
            vec!["ec2", "describe-security-groups"],
            vec!["iam", "list-roles"],
        ],
    );
    // The claim deleted: the driver deletes the volume.
    let o = bed.kubectl(ctl, &["-n", "default", "delete", "pvc", "bed-data", "--wait=false"]);
    assert!(o.status.success(), "{}", output_text(&o));
    let start = Instant::now();
    loop {
        let (ok, out) = crate::common::iam::aws_as(
            &bed.env,
            &bed.admin,
            &["ec2", "describe-volumes", "--volume-ids", &volume],
        );
        if !ok && out.contains("InvalidVolume.NotFound") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the volume {volume} is still there after its claim was deleted: {out}\n{}",
            ebs_logs()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    format!(
        "the claim bound {:.1}s (volume {volume}), the volume deleted {:.1}s",
        t_bound.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    )
}

/// A broken addon is named (issue 41): metrics-server given a flag it does
/// not know through its values, the real chart's `args`, crash-loops on the
/// real controller, while the descheduler (the same plan) installs fine.
/// The reconciler, looking at the release's pods while `helm upgrade
/// --install --wait --atomic` waits (before --atomic uninstalls the failed
/// first install), names the crashing container in the release's status
/// object and signals its wait condition FAILURE; `kube-aws up --wait`,
/// running since before the boot, exits 3 naming the release, the pod, the
/// container and `CrashLoopBackOff: ` with the container's last words (its
/// previous log: metrics-server writes no termination message). Nothing
/// else is undone: the descheduler's release stays installed and recorded.
///
/// metrics-server is listed in cluster.yaml as the user's own chart (the
/// same upstream chart and version the plugin pins), with `set: {args:
/// [--no-such-flag]}` and `timeout: 40s`: the plugin's own timeout (5m, by
/// its plugin.yaml) cannot be shortened from cluster.yaml; the reconciler
/// makes one attempt of a release whose container crash-loops (the plan
/// allows three: helm_release.py NOT_RETRIED), and the test checks that. Not covered: a failed upgrade's rollback (the first install
/// here is uninstalled; the upgrade path is src/node/tests and
/// tests/it/installer.rs); CloudFormation's rollback of the stack after the
/// FAILURE signal (moto's model of it, tests/support/moto_signals.py, keeps
/// the resources: `up --on-failure` decides it on AWS); workers and the VPC
/// CNI, as the shared cluster above. Its own cluster: `up --wait` must fail
/// here, and the shared one must not.
#[test]
fn a_broken_metrics_server_is_named_by_the_reconciler_and_up_wait_exits_3() {
    let test = "real_node::addons::a_broken_metrics_server_is_named_by_the_reconciler_and_up_wait_exits_3";
    let Some(image) = nodebed::image_dir(test) else {
        return;
    };
    let t0 = Instant::now();
    let metrics_image = nodebed::addon_image(test, "metrics-server");
    let descheduler_image = nodebed::addon_image(test, "descheduler");
    let helm = super::served_helm(test);
    let extra = format!(
        "  descheduler: {{enabled: true, schedule: \"* * * * *\"}}\n{}\
         charts:\n  - name: metrics-server\n    repo: https://kubernetes-sigs.github.io/metrics-server/\n    \
         version: 3.13.1\n    namespace: kube-system\n    timeout: 40s\n    set: {{args: [\"--no-such-flag\"]}}\n",
        helm.yaml
    );
    let (bed, up) = MotoBed::up_waiting_prepared(test, &image, &extra, &[], &|env, dir, _| {
        super::lock_shared_charts(env, dir)
    });
    // (The node has the addresses a CCM would give it from its
    // registration on: the apiserver reaches the kubelet for the crashed
    // container's log by them.)
    let (_inst, ctl, f) = super::addon_controller(&bed, vec![], &[&metrics_image, &descheduler_image]);
    let t_ready = t0.elapsed();
    // The cluster's own view while helm waits: the container crash-loops on
    // the unknown flag (its pods are gone once --atomic has uninstalled it).
    let start = Instant::now();
    let pods = loop {
        let o = bed.kubectl(
            &ctl,
            &[
                "-n",
                "kube-system",
                "get",
                "pods",
                "-l",
                "app.kubernetes.io/instance=metrics-server",
                "-o",
                "json",
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if text.contains("CrashLoopBackOff") && !text.contains("\"restartCount\": 0") {
            break text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(420),
            "metrics-server never crash-looped: {text}\n{}",
            output_text(
                &ctl.node
                    .exec(&["journalctl", "--no-pager", "-n", "60", "-u", "kube-aws-addons.service"])
            )
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    eprintln!("{test}: --- the pods (src/node/tests/recorded/pods-crashloop.json) ---\n{pods}\n--- end ---");
    let t_crashed = t0.elapsed();
    // `kube-aws up --wait` exits 3 naming the release, the pod, the container
    // and its last words.
    let (code, up_text) = up.finish(Duration::from_secs(420));
    let said = up_text
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        code == Some(3)
            && said.starts_with("error: addon \"metrics-server\" failed: pod kube-system/metrics-server-")
            && said.contains(" container metrics-server: CrashLoopBackOff: ")
            && said.contains("unknown flag: --no-such-flag"),
        "kube-aws up --wait (exit {code:?}), expected exit 3 naming metrics-server's crashing container:\n{up_text}\n\
         --- kube-aws-addons ---\n{}",
        output_text(
            &ctl.node
                .exec(&["journalctl", "--no-pager", "-n", "80", "-u", "kube-aws-addons.service"])
        )
    );
    eprintln!("{test}: kube-aws up --wait ended (exit {code:?}): {said}");
    let t_failed = t0.elapsed();
    // Nothing else is undone: the descheduler is installed and recorded,
    // the failed first install of metrics-server uninstalled by --atomic.
    let ran = ctl.node.wait_for(
        "the reconciler's run",
        "journalctl --no-pager -u kube-aws-addons.service | grep -q 'done: 1 ready, 1 failed or skipped, 0 dropped'",
        Duration::from_secs(120),
    );
    assert!(ran.is_ok(), "{ran:?}");
    // One attempt: the crash loop is the release's own fault, so the
    // reconciler does not wait two more timeouts before naming it
    // (helm_release.py NOT_RETRIED; the plan's retryAfter tries it again).
    let journal = output_text(
        &ctl.node
            .exec(&["journalctl", "--no-pager", "-u", "kube-aws-addons.service"]),
    );
    assert!(
        journal.contains("not tried again in this run: CrashLoopBackOff") && !journal.contains("attempt 1 of"),
        "the reconciler tried the crash-looping release again:\n{journal}"
    );
    let cron = bed.kubectl(
        &ctl,
        &["-n", "kube-system", "get", "cronjob", "descheduler", "-o", "name"],
    );
    assert!(
        cron.status.success(),
        "the descheduler's CronJob: {}",
        output_text(&cron)
    );
    let gone = bed.kubectl(
        &ctl,
        &["-n", "kube-system", "get", "deployment", "metrics-server", "-o", "name"],
    );
    assert!(
        !gone.status.success(),
        "metrics-server's failed install is still there: {}",
        output_text(&gone)
    );
    let record: serde_json::Value = serde_json::from_str(&bed.status_object("addons/installed.json")).unwrap();
    let names: Vec<&str> = record["releases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, vec!["descheduler"], "the installed record: {record}");
    // The status object `up --wait` read (src/aws/wait/tests.rs records one).
    let status = bed.status_object("addons/metrics-server.json");
    assert!(status.contains("CrashLoopBackOff"), "{status}");
    eprintln!("{test}: --- metrics-server's status object ---\n{status}\n--- end ---");
    eprintln!(
        "{test}: controller Ready {:.1}s ({}); metrics-server crash-looping {:.1}s; up --wait exited 3 {:.1}s; \
         test {:.1}s",
        t_ready.as_secs_f64(),
        f.times(),
        t_crashed.as_secs_f64(),
        t_failed.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
