//! On the real control plane (tests/it/common/testbed.rs; built by
//! scripts/install-testbed.sh at the default minor's exact patch):
//! - the built kubeadm accepts every kubeadm document a node hands it
//!   (`kubeadm config validate`): the example and the every-hook fixture, the
//!   controller (init and control-plane join) and each pool (worker join),
//!   each completed by the node program's own code (kubeadmcfg.py);
//! - the real kube-apiserver, kube-controller-manager and kube-scheduler start
//!   with the flags plugins contribute (the example's OIDC flags, the
//!   every-hook fixture's flags), and a misspelt plugin flag makes the
//!   apiserver refuse to start;
//! - the fixture itself: kwok nodes carrying a controller's and two pools'
//!   labels and taints become Ready, and Deployments are scheduled by the real
//!   scheduler onto the nodes their taints and selectors allow;
//! - the cluster PKI kube-aws generates (src/pki.rs): the built kubeadm takes
//!   its CAs and service-account key as they are and signs the control plane's
//!   certificates from them, the real kube-apiserver runs with them and issues
//!   service-account tokens with the ECDSA key, and a kubeconfig minted by
//!   kube-aws's own code (merged into a file holding another context) reaches
//!   `/readyz` and may do everything (`kubectl auth can-i '*' '*'`) as
//!   `kubeadm:cluster-admins`. The ClusterRoleBinding that makes that group
//!   cluster-admin is created by the fixture the way `kubeadm init` creates it
//!   (`kubeadm:cluster-admins` → ClusterRole `cluster-admin`, Group
//!   `kubeadm:cluster-admins`); it is not made by kube-aws. A certificate of
//!   another group is denied, one from a foreign CA is unauthenticated.
//! - IAM roles for service accounts (src/irsa.rs): with kube-aws's issuer
//!   flags the real kube-apiserver signs a TokenRequest token whose signature
//!   verifies (joserfc, a JOSE library) with the JWKS kube-aws publishes, whose
//!   `kid` is the JWKS's and whose `iss` is the discovery document's, and
//!   still accepts a token of kubeadm's default issuer; it accepts the pod
//!   identity webhook's manifests (server-side dry run: the CEL
//!   matchConditions compile) with the serving certificate kube-aws signs.
//! - the pod identity webhook itself (its program built from the Go module
//!   proxy at the plugin image's tag, run on the host with the plugin's
//!   flags, behind the plugin's MutatingWebhookConfiguration with a URL
//!   instead of the Service): while it is down a pod of a kube-aws role is
//!   refused and any other pod is created; once it is up, a pod created right
//!   after its annotated service account gets AWS_ROLE_ARN,
//!   AWS_WEB_IDENTITY_TOKEN_FILE and the projected `sts.amazonaws.com` token;
//!   its rendered Deployment passes the rollout the plan asks the reconciler
//!   to wait for, with its two replicas on two nodes (zone and host spread,
//!   on nodes labelled with zones as the cloud controller manager labels
//!   them) and a disruption budget allowing one eviction.
//! - the API load balancer's health check (HTTPS GET /readyz, no
//!   credentials) gets 200 from an apiserver with the example's flags, and
//!   cluster-dump's service account is denied Secrets, nodes/proxy and
//!   pods/exec unless includeSecrets is on (`kubectl auth can-i --as`).
//! - Pod Security admission (issue 27): the real kube-apiserver with the
//!   example's flags and the admission configuration its controller file
//!   holds refuses a host-network pod in a user namespace (baseline) and
//!   admits one in kube-system (exempt).
//!
//! Not covered here: the addon installer with the real helm (issue 15's next
//! part), anything run by kubelet or containerd (kwok simulates the nodes; no
//! container runs), and the node's own systemd and `kubeadm init`/`join` steps
//! (tests/it/node_bootstrap.rs runs those under fakes).
//! With `KUBE_AWS_TESTBED=skip` every test here skips and says so.

use crate::common;
use crate::render_fixtures;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::testbed::{self, extra_args, kubeadm_json, run, ControlPlane};

mod pki;
mod webhook;

/// Every node cloud-config of a render, by role (`controller`, `worker-general`, ...).
pub(crate) type CloudConfigs = BTreeMap<String, String>;

/// A controller's kubeadm.json gets the addon bundle's cluster-wide documents
/// (`addons/kubeadm/cluster.json`), as its boot adds them
/// (src/node/kube_aws_node/reconfigure.py `with_published`).
fn cloud_configs_of(files: impl IntoIterator<Item = (String, String)>) -> CloudConfigs {
    let files: Vec<(String, String)> = files.into_iter().collect();
    let cluster: Option<serde_json::Value> = files
        .iter()
        .find(|(p, _)| *p == kube_aws::render::layout::kubeadm_cluster())
        .map(|(_, t)| serde_json::from_str(t).unwrap());
    files
        .into_iter()
        .filter_map(|(path, text)| {
            let role = path
                .strip_prefix("userdata/")?
                .strip_suffix(".cloud-config")?
                .to_string();
            let text = match (&cluster, role.as_str()) {
                (Some(c), "controller") => edit_kubeadm_json(&text, |v| {
                    let docs = c["documents"].as_array().unwrap().iter().cloned();
                    v["documents"].as_array_mut().unwrap().extend(docs)
                }),
                _ => text,
            };
            Some((role, text))
        })
        .collect()
}

/// `kube-aws init --example` + `render`, through the built binary.
pub(crate) fn example_cloud_configs() -> CloudConfigs {
    let tmp = tempfile::tempdir().unwrap();
    let kube_aws = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kube-aws"))
            .current_dir(tmp.path())
            .env("NO_COLOR", "1")
            .env("XDG_CACHE_HOME", tmp.path().join("cache"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kube-aws {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kube_aws(&["init", "--example", "example"]);
    kube_aws(&["--dir", "example", "render", "--output-dir", "out"]);
    let dir = tmp.path().join("example/out/userdata");
    let dir = if dir.is_dir() {
        dir
    } else {
        tmp.path().join("out/userdata")
    };
    let cluster = kube_aws::render::layout::kubeadm_cluster();
    let cluster_path = dir.parent().unwrap().join(&cluster);
    cloud_configs_of(
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (
                    format!("userdata/{}", p.file_name().unwrap().to_string_lossy()),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .chain([(cluster, std::fs::read_to_string(&cluster_path).unwrap())]),
    )
}

/// The every-hook fixture (tests/it/render_fixtures), rendered by the library.
fn fixture_cloud_configs(input: &kube_aws::render::RenderInput) -> CloudConfigs {
    let r = kube_aws::render::render(input).unwrap_or_else(|e| panic!("render: {e}"));
    cloud_configs_of(
        r.files
            .iter()
            .map(|(p, b)| (p.clone(), String::from_utf8_lossy(b).into_owned())),
    )
}

/// Drives the node program's own kubeadm config code (kubeadmcfg.py, from the
/// cloud-config's files), which completes the rendered documents at boot
/// (endpoint, version, token, CA hash), with the built kubeadm's version.
const KUBEADM_CONFIG_DRIVER: &str = r#"
import json, subprocess, sys
lib, docs_file, runtime_file, out, mode, token_file = sys.argv[1:7]
sys.path.insert(0, lib)
from kube_aws_node import kubeadmcfg
docs = json.load(open(docs_file))["documents"]
rt = json.load(open(runtime_file))
version = subprocess.check_output(["kubeadm", "version", "-o", "short"], universal_newlines=True).strip()
token = open(token_file).read().strip()
with open(out, "w") as f:
    f.write(kubeadmcfg.text(kubeadmcfg.documents(docs, rt, "", mode, token, version)))
"#;

/// The kubeadm configuration a node of `cloud_config` passes to kubeadm in
/// `mode` (init, control-plane, worker), made by the node's own code with the
/// built kubeadm on PATH, written to `out`.
fn node_kubeadm_config(bin: &Path, cloud_config: &str, mode: &str, out: &Path) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    common::write_cloud_config_files(cloud_config, &t.join("node"));
    std::fs::write(t.join("kubeadm.json"), kubeadm_json(cloud_config).to_string()).unwrap();
    let hash = format!("sha256:{}", "ab".repeat(32));
    std::fs::write(
        t.join("runtime.json"),
        format!(r#"{{"apiEndpoint": "api.testbed.internal", "caCertHash": "{hash}"}}"#),
    )
    .unwrap();
    std::fs::write(t.join("bootstrap-token"), "abcdef.0123456789abcdef\n").unwrap();
    let mut c = Command::new("python3");
    c.arg("-c")
        .arg(KUBEADM_CONFIG_DRIVER)
        .arg(t.join("node/opt/kube-aws/lib"))
        .arg(t.join("kubeadm.json"))
        .arg(t.join("runtime.json"))
        .arg(out)
        .arg(mode)
        .arg(t.join("bootstrap-token"))
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()),
        );
    run(c).map(|_| ())
}

/// `kubeadm config validate` on every configuration the nodes of `configs`
/// use; the number validated, or Err with kubeadm's reason.
fn validate_all(bin: &Path, what: &str, configs: &CloudConfigs) -> Result<usize, String> {
    let tmp = tempfile::tempdir().unwrap();
    let mut validated = 0;
    for (role, cc) in configs {
        let modes: &[&str] = if role == "controller" {
            &["init", "control-plane"]
        } else {
            &["worker"]
        };
        for mode in modes {
            let out = tmp.path().join(format!("{role}-{mode}.yaml"));
            node_kubeadm_config(bin, cc, mode, &out).map_err(|e| format!("{what} {role} {mode}: {e}"))?;
            let mut c = Command::new(bin.join("kubeadm"));
            c.args(["config", "validate", "--config"]).arg(&out);
            run(c).map_err(|e| {
                format!(
                    "{what}: kubeadm rejects the {mode} configuration of {role}: {e}\n{}",
                    std::fs::read_to_string(&out).unwrap()
                )
            })?;
            validated += 1;
        }
    }
    Ok(validated)
}

/// `cloud_config` with its kubeadm.json changed by `edit`.
fn edit_kubeadm_json(cloud_config: &str, edit: impl Fn(&mut serde_json::Value)) -> String {
    use base64::Engine;
    let mut doc: serde_yaml::Value = serde_yaml::from_str(cloud_config).unwrap();
    let mut found = false;
    for f in doc["write_files"].as_sequence_mut().unwrap() {
        if f["path"] == "/etc/kube-aws/kubeadm.json" {
            let mut v = kubeadm_json(cloud_config);
            edit(&mut v);
            let text = serde_json::to_string_pretty(&v).unwrap();
            f["content"] = if f["encoding"].as_str() == Some("b64") {
                base64::engine::general_purpose::STANDARD.encode(text).into()
            } else {
                text.into()
            };
            found = true;
        }
    }
    assert!(found, "no kubeadm.json in the cloud-config");
    format!("#cloud-config\n{}", serde_yaml::to_string(&doc).unwrap())
}

#[test]
fn kubeadm_accepts_every_rendered_kubeadm_document() {
    let Some(bin) = testbed::bin_dir("kubeadm_accepts_every_rendered_kubeadm_document") else {
        return;
    };
    let example = example_cloud_configs();
    assert!(example.len() >= 2, "a controller and a pool: {:?}", example.keys());
    let n = validate_all(&bin, "example", &example).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        n,
        example.len() + 1,
        "init and control-plane join, and each pool's join"
    );

    let full = fixture_cloud_configs(&render_fixtures::full());
    assert!(full.len() >= 3, "a controller and two pools: {:?}", full.keys());
    let n = validate_all(&bin, "every-hook fixture", &full).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n, full.len() + 1);

    // The check can fail: a pod subnet that is not a CIDR.
    let broken = edit_kubeadm_json(&full["controller"], |v| {
        for d in v["documents"].as_array_mut().unwrap() {
            if d["kind"] == "ClusterConfiguration" {
                d["networking"]["podSubnet"] = "10.999.0.0/16".into();
            }
        }
    });
    let err = validate_all(&bin, "broken", &[("controller".to_string(), broken)].into())
        .expect_err("kubeadm must reject a pod subnet that is not a CIDR");
    assert!(
        err.contains("kubeadm rejects the init configuration") && err.contains("podSubnet"),
        "{err}"
    );
}

/// The apiServer, controllerManager and scheduler extraArgs of a controller's kubeadm documents.
pub(crate) fn plugin_flags(configs: &CloudConfigs) -> [Vec<(String, String)>; 3] {
    let kubeadm = kubeadm_json(&configs["controller"]);
    let cluster = kubeadm["documents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "ClusterConfiguration")
        .expect("a ClusterConfiguration")
        .clone();
    ["apiServer", "controllerManager", "scheduler"].map(|c| extra_args(&cluster[c]["extraArgs"]))
}

/// Flag values naming a file the node writes point at that file under
/// `root`: the cloud-config's files, the EncryptionConfiguration the node
/// program places from the secret bundle (here with a test key), and the
/// audit log's file.
pub(crate) fn rooted(flags: &[(String, String)], cloud_config: &str, root: &Path) -> Vec<(String, String)> {
    common::write_cloud_config_files(cloud_config, root);
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    let config = under(kube_aws::render::security::ENCRYPTION_FILE);
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let key = (
        "key-test".to_string(),
        "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqo=".to_string(),
    );
    std::fs::write(&config, kube_aws::render::security::encryption_configuration(&[key])).unwrap();
    let audit = under(kube_aws::render::security::AUDIT_LOG);
    std::fs::create_dir_all(audit.parent().unwrap()).unwrap();
    std::fs::write(&audit, "").unwrap();
    flags
        .iter()
        .map(|(k, v)| {
            let under: PathBuf = root.join(v.trim_start_matches('/'));
            if v.starts_with('/') && under.is_file() {
                (k.clone(), under.display().to_string())
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect()
}

/// Starts kube-apiserver, kube-controller-manager and kube-scheduler with the
/// plugin flags of `configs`: a control plane of their own (the shared etcd,
/// another key prefix), so the shared one's tests never see a second
/// controller manager. Err names the component that refused them.
fn start_with_plugin_flags(cp: &ControlPlane, what: &str, configs: &CloudConfigs) -> Result<(), String> {
    let root = tempfile::tempdir().unwrap();
    let [api, kcm, sched] = plugin_flags(configs).map(|f| rooted(&f, &configs["controller"], root.path()));
    let port = common::free_port();
    let name = format!("kube-apiserver-{what}");
    let _api = cp.apiserver_proc(&name, port, &api, &format!("/registry-{what}"))?;
    let _kcm = cp.controller_manager_proc(&format!("kube-controller-manager-{what}"), port, &kcm)?;
    let _sched = cp.scheduler_proc(&format!("kube-scheduler-{what}"), port, &sched)?;
    Ok(())
}

#[test]
fn control_plane_starts_with_the_flags_plugins_contribute() {
    let Some(cp) = testbed::shared("control_plane_starts_with_the_flags_plugins_contribute") else {
        return;
    };
    let example = example_cloud_configs();
    let [api, _, _] = plugin_flags(&example);
    assert!(
        api.iter().any(|(k, _)| k == "oidc-issuer-url"),
        "the example enables dex, which adds OIDC flags: {api:?}"
    );
    start_with_plugin_flags(&cp, "example", &example).unwrap_or_else(|e| panic!("example: {e}"));

    let full = fixture_cloud_configs(&render_fixtures::full());
    let flags = plugin_flags(&full);
    assert!(
        flags.iter().all(|f| !f.is_empty()),
        "every component gets a flag: {flags:?}"
    );
    start_with_plugin_flags(&cp, "every-hook", &full).unwrap_or_else(|e| panic!("every-hook fixture: {e}"));

    // A plugin's misspelt flag: the real apiserver refuses to start.
    let mut input = render_fixtures::full();
    input
        .plugins
        .cluster
        .api_server_flags
        .insert("oidc-issuer-ulr".into(), "https://dex.example.com".into());
    let err = start_with_plugin_flags(&cp, "misspelt", &fixture_cloud_configs(&input))
        .expect_err("kube-apiserver must refuse --oidc-issuer-ulr");
    assert!(
        err.contains("kube-apiserver-misspelt exited") && err.contains("oidc-issuer-ulr"),
        "{err}"
    );
}

#[test]
fn kwok_nodes_are_ready_and_deployments_are_scheduled_by_taints_and_labels() {
    let Some(cp) = testbed::shared("kwok_nodes_are_ready_and_deployments_are_scheduled_by_taints_and_labels") else {
        return;
    };
    // Every simulated node is registered as render describes it, and Ready.
    for n in &cp.nodes {
        let node: serde_json::Value =
            serde_json::from_str(&cp.kubectl(&["get", "node", &n.name, "-o", "json"]).unwrap()).unwrap();
        for (k, v) in &n.labels {
            assert_eq!(node["metadata"]["labels"][k], *v, "{}: label {k}", n.name);
        }
        let taints = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
        for (k, _, e) in &n.taints {
            assert!(
                taints.iter().any(|t| t["key"] == *k && t["effect"] == *e),
                "{}: taint {k}:{e} missing: {taints:?}",
                n.name
            );
        }
        let ready = node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready, "{} is not Ready: {}", n.name, node["status"]);
    }
    let untainted: Vec<&str> = cp
        .nodes
        .iter()
        .filter(|n| !n.taints.iter().any(|(_, _, e)| e == "NoSchedule" || e == "NoExecute"))
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(untainted.len(), 1, "one pool without taints: {:?}", cp.nodes);
    let batch = cp
        .nodes
        .iter()
        .find(|n| n.labels.iter().any(|(k, v)| k == "workload" && v == "batch"))
        .expect("the labelled pool");
    let (tk, tv, te) = batch.taints.iter().find(|(k, _, _)| k == "dedicated").unwrap();

    let ns = cp.namespace("sched");
    let deployment = |name: &str, spec_extra: serde_json::Value| {
        let mut pod_spec = serde_json::json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]});
        for (k, v) in spec_extra.as_object().unwrap() {
            pod_spec[k] = v.clone();
        }
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}},
        })
        .to_string()
    };
    cp.kubectl_stdin(&["apply", "-f", "-"], &deployment("plain", serde_json::json!({})))
        .unwrap();
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        &deployment(
            "batch",
            serde_json::json!({
                "nodeSelector": {"workload": "batch"},
                "tolerations": [{"key": tk, "operator": "Equal", "value": tv, "effect": te}],
            }),
        ),
    )
    .unwrap();
    for (name, want) in [("plain", untainted[0]), ("batch", batch.name.as_str())] {
        cp.kubectl(&[
            "-n",
            &ns,
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=180s",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let pods: serde_json::Value = serde_json::from_str(
            &cp.kubectl(&["-n", &ns, "get", "pods", "-l", &format!("app={name}"), "-o", "json"])
                .unwrap(),
        )
        .unwrap();
        let items = pods["items"].as_array().unwrap();
        assert_eq!(items.len(), 3, "{name}: {pods}");
        for p in items {
            assert_eq!(p["spec"]["nodeName"], want, "{name}: scheduled onto the wrong node");
            assert_eq!(p["status"]["phase"], "Running", "{name}: {}", p["status"]);
        }
    }
}

/// kubectl with a kubeconfig of the test's own.
/// A cluster with cluster-autoscaler on (one of kube-aws's service-account
/// roles), its issuer its issuer bucket, loaded from a cluster.yaml.
fn autoscaler_cluster() -> kube_aws::config::Cluster {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        "clusterName: testbed\nregion: us-west-2\ns3URI: s3://tb-bucket/c\n\
         kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n\
         worker:\n  nodePools: [{name: a, count: 1}]\nplugins:\n  cluster-autoscaler: {enabled: true}\n",
    )
    .unwrap();
    kube_aws::config::load_cluster(dir.path()).unwrap()
}

fn kubectl_with(bin: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    let mut c = Command::new(bin.join("kubectl"));
    c.arg("--kubeconfig").arg(kubeconfig).args(args);
    run(c)
}

/// A generated PKI as bundle entries (`pki/X` → PEM), public and private.
fn pki_files(pki: &kube_aws::pki::ClusterPki) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = pki.public.clone().into_iter().collect();
    files.extend(pki.keys.iter().map(|(k, v)| (k.clone(), v.expose().to_string())));
    files
}

/// Issue 24, finding 10: the API load balancer's health check (HTTPS GET
/// /readyz, healthy on 200, no credentials: an NLB has none) gets 200 from a
/// real kube-apiserver started with the example's flags, anonymously, through
/// the default ClusterRole system:public-info-viewer.
#[test]
fn the_load_balancer_health_check_reads_readyz_anonymously() {
    let Some(cp) = testbed::shared("the_load_balancer_health_check_reads_readyz_anonymously") else {
        return;
    };
    let example = example_cloud_configs();
    let root = tempfile::tempdir().unwrap();
    let [api, _, _] = plugin_flags(&example).map(|f| rooted(&f, &example["controller"], root.path()));
    let port = common::free_port();
    let _api = cp
        .apiserver_proc("kube-apiserver-readyz", port, &api, "/registry-readyz")
        .unwrap_or_else(|e| panic!("{e}"));
    // As the NLB asks: HTTPS, no client certificate, no token, the
    // certificate not verified.
    let get = |path: &str| {
        let mut c = Command::new("curl");
        c.args([
            "-sk",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("https://127.0.0.1:{port}{path}"),
        ]);
        run(c).unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(get("/readyz"), "200", "the health check's request");
    // Anonymous is no more than that: the API itself stays closed.
    assert_eq!(get("/api/v1/namespaces/kube-system/secrets"), "403");
    let rules = cp
        .kubectl(&["get", "clusterrole", "system:public-info-viewer", "-o", "json"])
        .unwrap();
    let rules: serde_json::Value = serde_json::from_str(&rules).unwrap();
    assert!(rules["rules"].to_string().contains("/readyz"), "{rules}");
}

/// Issue 24, finding 10: on the real apiserver, cluster-dump's service account
/// is denied Secrets (and nodes/proxy) unless includeSecrets is on.
#[test]
fn cluster_dump_cannot_read_secrets_on_a_real_apiserver() {
    let Some(cp) = testbed::shared("cluster_dump_cannot_read_secrets_on_a_real_apiserver") else {
        return;
    };
    let sa = "--as=system:serviceaccount:kube-system:cluster-dump";
    let can = |args: &[&str]| -> String {
        let mut a = vec!["auth", "can-i"];
        a.extend_from_slice(args);
        a.push(sa);
        // `can-i` exits 1 on "no": the answer is its output's line "yes" or "no".
        let out = cp.kubectl(&a).unwrap_or_else(|e| e);
        match out.lines().find(|l| matches!(l.trim(), "yes" | "no")) {
            Some(answer) => answer.trim().to_string(),
            None => panic!("{out}"),
        }
    };
    for include in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cluster.yaml"),
            format!(
                "clusterName: testbed\nregion: us-west-2\ns3URI: s3://tb-bucket/c\n\
                 kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n\
                 plugins:\n  cluster-dump: {{enabled: true, includeSecrets: {include}}}\n"
            ),
        )
        .unwrap();
        let cluster = kube_aws::config::load_cluster(dir.path()).unwrap();
        let r = kube_aws::plugin::resolve_plugins(&cluster).unwrap_or_else(|e| panic!("{e}"));
        let m = r.cluster.manifests.iter().find(|m| m.plugin == "cluster-dump").unwrap();
        // The RBAC objects only: the CronJob would run at its hour.
        let rbac: Vec<String> = m
            .content
            .split("\n---\n")
            .filter(|d| d.contains("kind: ClusterRole"))
            .map(String::from)
            .collect();
        assert_eq!(rbac.len(), 2, "{}", m.content);
        cp.kubectl_stdin(&["apply", "-f", "-"], &rbac.join("\n---\n"))
            .unwrap_or_else(|e| panic!("{e}"));
        let secrets = can(&["list", "secrets", "--all-namespaces"]);
        assert_eq!(secrets, if include { "yes" } else { "no" }, "includeSecrets {include}");
        let secret = can(&["get", "secrets/bootstrap-token-abcdef", "-n", "kube-system"]);
        assert_eq!(secret, if include { "yes" } else { "no" }, "includeSecrets {include}");
        for denied in [
            &["get", "nodes", "--subresource=proxy"][..],
            &["get", "pods", "--subresource=exec", "-n", "kube-system"],
            &["create", "pods", "--subresource=exec", "-n", "kube-system"],
            &["delete", "pods", "-n", "kube-system"],
        ] {
            let answer = can(denied);
            assert_eq!(answer, "no", "{denied:?}");
        }
        for allowed in [
            &["list", "pods", "--all-namespaces"][..],
            &["list", "deployments.apps", "--all-namespaces"],
            &["list", "nodes"],
            &["list", "customresourcedefinitions.apiextensions.k8s.io"],
        ] {
            assert_eq!(can(allowed), "yes", "{allowed:?}");
        }
    }
}

/// Issue 27, pod security: with the example's flags, `admission-control-config-file`
/// pointing at the controller's rendered admission configuration, a real
/// kube-apiserver refuses a host-network pod (the way a pod reaches the node
/// role despite hop limit 1) in a user namespace and admits it in kube-system.
#[test]
fn pod_security_refuses_host_network_pods_outside_kube_system() {
    let Some(cp) = testbed::shared("pod_security_refuses_host_network_pods_outside_kube_system") else {
        return;
    };
    let example = example_cloud_configs();
    let root = tempfile::tempdir().unwrap();
    let [api, _, _] = plugin_flags(&example).map(|f| rooted(&f, &example["controller"], root.path()));
    let admission = api
        .iter()
        .find(|(k, _)| k == "admission-control-config-file")
        .expect("the controller's apiserver gets an admission configuration");
    assert!(
        admission.1.starts_with(&root.path().display().to_string()),
        "the flag names a file the controller's cloud-config writes: {admission:?}"
    );
    let port = common::free_port();
    let _api = cp
        .apiserver_proc("kube-apiserver-psa", port, &api, "/registry-psa")
        .unwrap_or_else(|e| panic!("{e}"));
    let kc = cp.kubeconfig_for("super-admin.conf", port);
    let pod = |ns: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "host-net", "namespace": ns},
            "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
        .to_string()
    };
    let create = |ns: &str| {
        let mut c = Command::new(cp.bin.join("kubectl"));
        c.arg("--kubeconfig").arg(&kc).args(["create", "-f", "-", "-o", "name"]);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(pod(ns).as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    kubectl_with(&cp.bin, &kc, &["create", "namespace", "team-a"]).unwrap_or_else(|e| panic!("{e}"));
    // No controller manager runs on this apiserver: the service accounts it
    // would make, which the ServiceAccount admission plugin looks up.
    for ns in ["team-a", "kube-system"] {
        let _ = kubectl_with(&cp.bin, &kc, &["create", "serviceaccount", "default", "-n", ns]);
    }
    let (ok, out) = create("team-a");
    assert!(!ok, "a host-network pod in a user namespace must be refused: {out}");
    assert!(
        out.contains("violates PodSecurity \"baseline:latest\"") && out.contains("hostNetwork"),
        "{out}"
    );
    let (ok, out) = create("kube-system");
    assert!(ok, "kube-system is exempt: {out}");
    assert!(out.contains("pod/host-net"), "{out}");
}
