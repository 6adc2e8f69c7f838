//! The node bootstrap (`kube-aws-node bootstrap`, the node program as the
//! cloud-config ships it) run for real with python3, on the files a role's
//! cloud-config writes (extracted under a temporary root). S3 and KMS are
//! real: the aws CLI against moto, shared by the nodes of one test, so they
//! see each other's locks (conditional writes), and each node decrypts a
//! secret bundle the test encrypts with moto's KMS. kubeadm, kubectl,
//! systemctl, containerd, modprobe, sysctl and curl (IMDS) are recording
//! fakes, as is CloudFormation's SignalResource: no EC2 instance, kubelet,
//! API server or signalable auto scaling group exists here (tests/it/testbed.rs
//! runs the real control plane).
//!
//! Checked: the first controller inits with the bundle's token (expiring after
//! the join token TTL), no certificate key and no upload, then mints and
//! publishes a join token (SSM SecureString); later controllers join the
//! control plane (no certificate key: the PKI is on disk) and workers join,
//! with that published token and the CA hash of runtime.json (the
//! `CACertHash` stack parameter), waiting up to 30 minutes for discovery; the
//! installer starts once per addon plan and secrets version (again after an
//! update changes either); a failed join, a failed init or a lock S3 will not
//! grant (a missing bucket) signals FAILURE instead of guessing. Joining
//! controllers take the S3 join lock one at a time and release it; a stale
//! one is broken, a held one waited for, then FAILURE; each node signals
//! SUCCESS only once its own Node object is Ready, FAILURE with the reason
//! after the timeout.
//! Not covered here: real kubeadm, kubelet, systemd, cloud-init or IMDS
//! behaviour. The real-node bed (tests/it/real_node/) boots the rendered
//! user-data with all of them: a controller to Ready, three controllers under
//! the join lock and a replacement, a worker's join, the reconciler's timer, a
//! failed bootstrap's status object and FAILURE signal (moto's CreationPolicy
//! through tests/support/moto_signals.py). What stays here is what the bed cannot
//! stage cheaply: a stale or held join lock, a lock S3 will not grant, a join
//! that fails, the Ready timeout, the installer's start once per plan and
//! secrets version, and the signals of an update's rolling policy (moto
//! takes signals only at create).
//! tests/it/node_secrets.rs runs the secrets script against moto.
//!
//! Time: a cluster's setup (moto, the bundle encrypted with moto's KMS, the
//! plan) and a controller's boot (about 20 aws CLI calls) are most of a
//! test's time, so the failure tests share two clusters set up once (see
//! [`FRESH`]: which tests may share, and why their assertions stay their
//! own), and the bundle's entries are encrypted in one process.

use crate::common;
use crate::render_fixtures;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use render_fixtures::*;

mod bed;
use bed::*;

/// The full fixture's bucket (its s3URI is s3://kube-aws-test/clusters).
const BUCKET: &str = "kube-aws-test";
const TOKEN: &str = "abcdef.0123456789abcdef";
/// What CloudFormation substitutes for `${CACertHash}`.
const CA_HASH: &str = "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

const HOSTNAME: &str = "ip-10-0-1-23.eu-west-1.compute.internal";
/// The addon reconciler's timer: every controller runs it; the reconciler
/// takes the per-plan lock itself (tests/it/installer.rs).
const INSTALLER: &str = "systemctl enable --now kube-aws-addons.timer";
const SUCCESS: &str = "--status SUCCESS";

#[test]
fn controllers_init_once_then_join_and_the_installer_runs_once_per_plan() {
    let c = Cluster::new();

    // The first controller: kubeadm init with the bundle's secrets.
    let first = c.node("controller");
    let a = c.boot(&first, &[], &[]);
    assert!(a.ok, "{}\n{:#?}", a.stderr, a.log);
    let init = a.doc("init.yaml", "InitConfiguration");
    assert_eq!(init["bootstrapTokens"][0]["token"], TOKEN);
    // The init token expires (bootstrapTokens.ttlHours, 24 by default): joins
    // use the token the controller minted and published right after init.
    assert_eq!(init["bootstrapTokens"][0]["ttl"], "86400s");
    let join_token = c.published_token();
    assert_ne!(join_token, TOKEN);
    assert!(
        a.ran("systemctl enable --now kube-aws-bootstrap-token.timer"),
        "{:#?}",
        a.log
    );
    assert!(
        !a.stderr.contains(&join_token[7..]),
        "the join token is in the boot log"
    );
    assert!(init.get("certificateKey").is_none(), "no certificate upload: {init}");
    assert!(!a.ran("--upload-certs"), "{:#?}", a.log);
    let cluster = a.doc("init.yaml", "ClusterConfiguration");
    assert_eq!(cluster["controlPlaneEndpoint"], "api.full.example.com:6443");
    assert_eq!(cluster["kubernetesVersion"], "v1.31.2");
    // The cluster-wide documents come from the addon bundle the plan pointer
    // names, not the user data (reconfigure.py), and the node then enables
    // the timer that applies a later change in place.
    assert!(
        a.ran("ssm get-parameter --name /kube-aws/full/addon-plan"),
        "{:#?}",
        a.log
    );
    assert!(
        cluster["apiServer"]["extraArgs"].to_string().contains("oidc"),
        "the plugins' apiserver flags, from the bundle: {cluster}"
    );
    assert!(a.doc("init.yaml", "KubeletConfiguration")["serverTLSBootstrap"] == true);
    assert!(
        a.ran("systemctl enable --now kube-aws-reconfigure.timer"),
        "{:#?}",
        a.log
    );
    // The config holding the token is private.
    let mode = std::fs::metadata(first.join("var/lib/kube-aws/kubeadm.yaml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Nothing to join with is published: the CA hash is a stack parameter.
    assert!(c.object("bootstrap/join.json").is_none());
    assert!(
        a.ran(SUCCESS) && a.ran(INSTALLER) && !a.ran("upload-certs"),
        "{:#?}",
        a.log
    );
    // Named by its EC2 private DNS name, from IMDS, so the cloud controller manager finds the instance.
    assert_eq!(init["nodeRegistration"]["name"], HOSTNAME);
    // Kubernetes packages at the exact patch of the cluster's version, past the repository's exclude.
    let k8s = kube_aws::config::resolve_version(&full().cluster.kubernetes_version).unwrap();
    let (version, minor) = (k8s.version, k8s.minor);
    assert_eq!(version.split('.').count(), 3, "an exact patch: {version}");
    assert!(
        a.ran(&format!(
            "dnf install -y --disableexcludes=kubernetes kubelet-{version} kubeadm-{version} kubectl-{version} cri-tools-{minor}.*"
        )),
        "{:#?}",
        a.log
    );
    // systemd-networkd manages the primary ENI only; the VPC CNI owns the others.
    let dropin =
        std::fs::read_to_string(first.join("etc/systemd/network/80-ec2.network.d/10-kube-aws-primary-eni-only.conf"))
            .unwrap();
    assert!(
        dropin.contains("[Match]\nPermanentMACAddress=0e:49:61:0f:c3:11\n"),
        "{dropin}"
    );
    assert!(a.ran("networkctl reload"));
    // Plugin units are names after `--`, never options.
    assert!(a.ran("systemctl enable --now -- dex-sync.service"), "{:#?}", a.log);
    // A boot that worked leaves no failure report.
    assert!(c
        .object(&format!("status/nodes/{}.json", instance_id(&first)))
        .is_none());
    // kubeadm's own output (which shows the token) is kept out of the boot log.
    assert!(!a.stdout.contains(TOKEN) && !a.stderr.contains(TOKEN));
    let init_log = first.join("var/lib/kube-aws/kubeadm-init.log");
    assert!(std::fs::read_to_string(&init_log).unwrap().contains("kubeadm join"));
    assert_eq!(
        std::fs::metadata(&init_log).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The reconciler's timer starts before the signal: it installs the CNI,
    // without which the node never becomes Ready; SUCCESS follows Ready.
    let ready = a
        .log
        .iter()
        .position(|l| l.starts_with("kubectl") && l.contains(&format!("get node {HOSTNAME} -o json")));
    assert!(a.log.iter().position(|l| l.contains(INSTALLER)) < ready, "{:#?}", a.log);
    assert!(ready < a.log.iter().position(|l| l.contains(SUCCESS)), "{:#?}", a.log);
    assert!(
        a.ran("kubectl --kubeconfig") && a.ran("/etc/kubernetes/admin.conf get node"),
        "{:#?}",
        a.log
    );

    // A second controller of the same plan joins the control plane; the installer already ran.
    let second = c.node("controller");
    let b = c.boot(&second, &[], &[]);
    assert!(b.ok, "{}\n{:#?}", b.stderr, b.log);
    assert!(!b.ran("kubeadm init --config"));
    let jc = b.doc("join.yaml", "JoinConfiguration");
    assert_eq!(jc["discovery"]["bootstrapToken"]["token"], join_token.as_str());
    assert_eq!(jc["discovery"]["bootstrapToken"]["caCertHashes"][0], CA_HASH);
    assert_eq!(jc["timeouts"]["discovery"], "30m0s", "{jc}");
    assert_eq!(
        jc["discovery"]["bootstrapToken"]["apiServerEndpoint"],
        "api.full.example.com:6443"
    );
    assert_eq!(
        jc["controlPlane"],
        serde_json::json!({}),
        "the PKI is on disk: no certificate key"
    );
    assert_eq!(
        b.yaml_docs("join.yaml").len(),
        1,
        "a joining node gets no init documents"
    );
    // Every controller runs the reconciler's timer, before its own signal; the
    // reconciler decides per plan which one installs (tests/it/installer.rs).
    assert!(b.ran(SUCCESS) && b.ran(INSTALLER));
    assert!(b.log.iter().position(|l| l.contains(INSTALLER)) < b.log.iter().position(|l| l.contains(SUCCESS)));
    // It joined under the join lock, and released it.
    assert!(b.ran("join lock: held"), "{:#?}", b.log);
    assert!(c.object("bootstrap/join-lock").is_none(), "the join lock is released");

    // A worker joins as a worker: no certificate key, no timer, no installer.
    let w = c.node("worker-general");
    let wb = c.boot(&w, &[], &[]);
    assert!(wb.ok, "{}", wb.stderr);
    let jc = wb.doc("join.yaml", "JoinConfiguration");
    // The published join token; the worker never decrypted the bundle's.
    assert_eq!(jc["discovery"]["bootstrapToken"]["token"], join_token.as_str());
    assert!(!w.join("run/kube-aws/secrets/kubeadm/bootstrap-token").exists());
    assert!(
        wb.ran("ssm get-parameter --name /kube-aws/full/bootstrap-token --with-decryption"),
        "{:#?}",
        wb.log
    );
    assert_eq!(jc["discovery"]["bootstrapToken"]["caCertHashes"][0], CA_HASH);
    assert!(jc.get("controlPlane").is_none(), "{jc}");
    assert_eq!(jc["nodeRegistration"]["name"], HOSTNAME);
    assert!(wb.ran(SUCCESS) && !wb.ran(INSTALLER) && !wb.ran("upload-certs"));
    // A worker asks for its own Node with the kubelet's credentials.
    assert!(wb.ran("/etc/kubernetes/kubelet.conf get node"), "{:#?}", wb.log);
    assert!(!wb.ran("join-lock"), "workers take no join lock: {:#?}", wb.log);
}

/// A controller one minor newer than the cluster (kubeadm-config names the
/// minor before this node's, as while a `kubernetesVersion` roll replaces the
/// first controller): under the join lock it uploads its own configuration
/// (kubeadm's, at its version), joins, waits for Ready, runs `kubeadm upgrade
/// apply` and records the version the control plane reached. When apply
/// fails, the boot fails (FAILURE: the group rolls back, no other node has
/// changed), both ConfigMaps are put back at the old version, and the status
/// objects say what failed (issue 26 items 3 and 5). kubeadm and kubectl are
/// fakes here: the real ones are tests/it/real_node/.
#[test]
fn a_newer_controller_upgrades_the_control_plane_under_the_join_lock_and_a_failed_upgrade_says_what_failed() {
    let c = Cluster::new();
    let first = c.node("controller");
    let a = c.boot(&first, &[], &[]);
    assert!(a.ok, "{}\n{:#?}", a.stderr, a.log);
    let k8s = kube_aws::config::resolve_version(&full().cluster.kubernetes_version).unwrap();
    let mine = k8s.version.clone();
    // The init recorded the version this control plane runs.
    let status = |c: &Cluster| -> serde_json::Value {
        serde_json::from_str(
            &c.object("status/control-plane/upgrade.json")
                .expect("no upgrade status"),
        )
        .unwrap()
    };
    assert_eq!(status(&c)["version"], mine.as_str());
    let parts: Vec<u32> = mine.split('.').map(|p| p.parse().unwrap()).collect();
    let older = format!("{}.{}.0", parts[0], parts[1] - 1);

    let second = c.node("controller");
    let b = c.boot(&second, &[], &[("FAKE_CLUSTER_VERSION", &older)]);
    assert!(b.ok, "{}\n{:#?}", b.stderr, b.log);
    let at = |needle: &str| {
        b.log
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} not run: {:#?}", b.log))
    };
    // The new version reaches kubeadm-config before the join, apply after Ready, all under the lock.
    assert!(at("kubeadm init phase upload-config all --config") < at("kubeadm join --config"));
    assert!(at("kubeadm join --config") < at(&format!("get node {HOSTNAME}")));
    assert!(at(&format!("get node {HOSTNAME}")) < at(&format!("kubeadm upgrade apply v{mine} --yes")));
    assert!(b.ran("upgrade apply, join lock: held"), "{:#?}", b.log);
    assert!(at(&format!("kubeadm upgrade apply v{mine}")) < at(SUCCESS));
    let s = status(&c);
    assert_eq!(
        (&s["phase"], &s["from"], &s["to"], &s["version"]),
        (
            &serde_json::json!("upgraded"),
            &serde_json::json!(older),
            &serde_json::json!(mine),
            &serde_json::json!(mine)
        ),
        "{s:#}"
    );
    // What it uploaded is its own kubeadm configuration (private: it holds the token).
    assert!(b.ran("upload-config all --config /"), "{:#?}", b.log);
    assert!(b.ran("kubeadm-upgrade.yaml --kubeconfig"), "{:#?}", b.log);
    assert!(!b.ran(" replace -f "), "nothing put back: {:#?}", b.log);

    // The next one fails at kubeadm upgrade apply.
    let third = c.node("controller");
    let f = c.boot(
        &third,
        &[],
        &[("FAKE_CLUSTER_VERSION", &older), ("FAKE_UPGRADE_FAIL", "1")],
    );
    assert!(!f.ok);
    assert!(f.ran("--status FAILURE") && !f.ran(SUCCESS), "{:#?}", f.log);
    // kubeadm-config and kubelet-config are put back as they were read.
    let back: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f.out.join("replaced-kubeadm-config.json")).unwrap()).unwrap();
    assert!(
        back["data"]["ClusterConfiguration"]
            .as_str()
            .unwrap()
            .contains(&format!("kubernetesVersion: v{older}")),
        "{back:#}"
    );
    assert!(f.out.join("replaced-kubelet-config.json").exists());
    let s = status(&c);
    assert_eq!(
        (&s["phase"], &s["step"]),
        (
            &serde_json::json!("failed"),
            &serde_json::json!("kubeadm-upgrade-apply")
        ),
        "{s:#}"
    );
    assert_eq!(
        s["version"],
        older.as_str(),
        "the control plane stays at {older}: {s:#}"
    );
    let msg = s["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("kubeadm upgrade apply v{mine} exited 1")),
        "{msg}"
    );
    assert!(
        msg.contains("kubeadm-config and kubelet-config are back as they were"),
        "{msg}"
    );
    // The node's own failure report names the step and what failed.
    let r = report(&c, &third);
    assert_eq!(r["step"], "kubeadm-upgrade-apply", "{r:#}");
    assert_eq!(r["command"], "kubernetes upgrade", "{r:#}");
    assert!(f.stderr.contains("kubeadm upgrade apply"), "{}", f.stderr);
    assert!(c.object("bootstrap/join-lock").is_none(), "the join lock is released");
}

#[test]
fn a_failed_join_signals_failure() {
    let c = initialized();
    let w = c.node("worker-general");
    let b = c.boot(&w, &[], &[("FAKE_JOIN_FAIL", "1")]);
    assert!(!b.ok);
    assert!(b.ran("--status FAILURE") && !b.ran(SUCCESS), "{:#?}", b.log);
    assert!(b.stderr.contains("couldn't validate the identity"), "{}", b.stderr);
}

#[test]
fn a_failed_init_signals_failure_and_points_at_its_private_log() {
    let c = fresh();
    let n = c.node("controller");
    let b = c.boot(&n, &[], &[("FAKE_INIT_FAIL", "1")]);
    assert!(!b.ok);
    assert!(b.ran("--status FAILURE") && !b.ran(SUCCESS), "{:#?}", b.log);
    assert!(
        b.stderr.contains("kubeadm init failed; its output is in"),
        "{}",
        b.stderr
    );
    assert!(!b.stderr.contains(TOKEN) && !b.stdout.contains(TOKEN));
    assert!(c.object("bootstrap/join.json").is_none());
}

#[test]
fn a_lock_s3_will_not_answer_fails_the_boot_instead_of_guessing() {
    let c = fresh();
    let n = c.node("controller");
    // S3 answers the conditional write, but not with PreconditionFailed.
    let b = c.boot(&n, &[], &[("FAKE_PUT_FAIL", "1")]);
    assert!(!b.ok);
    assert!(
        b.stderr.contains("cannot take the lock") && b.stderr.contains("NoSuchBucket"),
        "{}",
        b.stderr
    );
    assert!(b.ran("--status FAILURE"));
    assert!(!b.ran("kubeadm init") && !b.ran("kubeadm join"), "{:#?}", b.log);
    // NoSuchBucket is an answer retrying cannot change: asked once.
    assert_eq!(b.log.iter().filter(|l| l.contains("s3api put-object")).count(), 1);
    assert_eq!(report(&c, &n)["step"], "init-lock");
}

/// The failure report the node at `node` published, read back from moto.
fn report(c: &Cluster, node: &Path) -> serde_json::Value {
    let text = c
        .object(&format!("status/nodes/{}.json", instance_id(node)))
        .expect("no failure report in S3");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_failure_inside_a_function_signals_failure_at_once_and_publishes_a_blanked_report() {
    let c = initialized();
    // `kubeadm version` fails inside kubeadm_config (a function, in a subshell),
    // printing the bootstrap token: without `set -E` no trap would run at all.
    let w = c.node("worker-general");
    let token = c.published_token();
    let b = c.boot(&w, &[], &[("FAKE_VERSION_FAIL", "1"), ("FAKE_TOKEN", &token)]);
    assert!(!b.ok);
    assert!(b.ran("--status FAILURE") && !b.ran(SUCCESS), "{:#?}", b.log);
    assert_eq!(
        b.log.iter().filter(|l| l.contains("signal-resource")).count(),
        1,
        "one signal, from the script itself, not one per subshell: {:#?}",
        b.log
    );
    assert!(!b.ran("kubeadm join"), "it stopped at the failing step: {:#?}", b.log);
    let r = report(&c, &w);
    assert_eq!(r["step"], "kubeadm-join", "{r:#}");
    assert_eq!(r["role"], "worker-general");
    assert_eq!(r["nodeName"], HOSTNAME);
    assert_eq!(r["instanceId"], instance_id(&w).as_str());
    assert_eq!(r["asgLogicalId"], "WorkerGroup");
    assert!(r["exitCode"].as_i64().unwrap() != 0);
    let log = r["log"].as_str().unwrap();
    assert!(log.contains("kube-aws: step kubeadm-join"), "{log}");
    assert!(
        log.contains("kubeadm: cannot read config with token <secret kubeadm/join-token>"),
        "{log}"
    );
    assert!(!r.to_string().contains(&token), "{r:#}");
    // The console still shows what happened.
    assert!(b.stderr.contains("step kubeadm-join failed"), "{}", b.stderr);
}

#[test]
fn a_failed_package_install_and_a_bad_node_name_are_reported_with_their_step() {
    let c = fresh();
    let n = c.node("worker-general");
    let b = c.boot(&n, &[], &[("FAKE_DNF_FAIL", "kubelet")]);
    assert!(!b.ok && b.ran("--status FAILURE"), "{:#?}", b.log);
    let r = report(&c, &n);
    assert_eq!(r["step"], "packages", "{r:#}");
    assert!(r["command"].as_str().unwrap().starts_with("dnf install"), "{r:#}");
    assert!(r["log"].as_str().unwrap().contains("Unable to find a match"), "{r:#}");
    assert!(!b.ran("kubeadm join"), "{:#?}", b.log);

    // IMDS answering with something Kubernetes cannot take as a node name.
    let n = c.node("worker-general");
    let b = c.boot(&n, &[], &[("FAKE_HOSTNAME", "bad name; $(id)")]);
    assert!(!b.ok && b.ran("--status FAILURE"), "{:#?}", b.log);
    let r = report(&c, &n);
    assert_eq!(r["step"], "metadata", "{r:#}");
    assert!(r["log"].as_str().unwrap().contains("is not a DNS name"), "{r:#}");
    assert!(!b.ran("dnf install"), "{:#?}", b.log);
}

#[test]
fn a_held_join_lock_is_waited_for_then_fails_and_a_stale_one_is_broken() {
    // The one test of the shared cluster that joins controllers.
    let c = initialized();
    // Another controller is joining: its lock is fresh.
    let lock_file = tempfile::NamedTempFile::new().unwrap();
    let lock = lock_file.path();
    std::fs::write(lock, "{}").unwrap();
    c.moto.aws(&[
        "s3",
        "cp",
        lock.to_str().unwrap(),
        &format!("s3://{BUCKET}/clusters/full/bootstrap/join-lock"),
        "--region",
        "eu-west-1",
    ]);
    let second = c.node("controller");
    let b = c.boot(&second, &[], &[("KUBE_AWS_JOIN_LOCK_WAIT", "0")]);
    assert!(!b.ok && b.ran("--status FAILURE"), "{:#?}", b.log);
    assert!(!b.ran("kubeadm join"), "{:#?}", b.log);
    assert!(b.stderr.contains("is still held by another node"), "{}", b.stderr);
    assert_eq!(report(&c, &second)["step"], "join-lock");
    assert!(
        c.object("bootstrap/join-lock").is_some(),
        "another node's lock is left alone"
    );
    // Left by a node that died: older than the stale timeout, it is removed and taken.
    let third = c.node("controller");
    let b = c.boot(&third, &[], &[("KUBE_AWS_JOIN_LOCK_STALE", "0")]);
    assert!(b.ok, "{}\n{:#?}", b.stderr, b.log);
    assert!(b.stderr.contains("stale after 0s): removing it"), "{}", b.stderr);
    assert!(b.ran("kubeadm join") && b.ran("join lock: held") && b.ran(SUCCESS));
    assert!(c.object("bootstrap/join-lock").is_none());
}

#[test]
fn a_node_that_never_becomes_ready_signals_failure_with_the_reason() {
    let c = initialized();
    let w = c.node("worker-general");
    let b = c.boot(
        &w,
        &[],
        &[
            ("KUBE_AWS_NODE_READY_TIMEOUT", "0"),
            (
                "FAKE_NOT_READY",
                "container runtime network not ready: cni plugin not initialized",
            ),
        ],
    );
    assert!(!b.ok, "{:#?}", b.log);
    assert!(b.ran("--status FAILURE") && !b.ran(SUCCESS), "{:#?}", b.log);
    let r = report(&c, &w);
    assert_eq!(r["step"], "node-ready", "{r:#}");
    let log = r["log"].as_str().unwrap();
    assert!(
        log.contains(&format!(
            "node {HOSTNAME} is not Ready after 0s: KubeletNotReady: container runtime network not ready"
        )),
        "{log}"
    );
}
