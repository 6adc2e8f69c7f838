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
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        "clusterName: testbed\nregion: us-west-2\ns3URI: s3://tb-bucket/c\n\
         kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n\
         worker:\n  nodePools: [{name: a, count: 1}]\nplugins:\n  cluster-autoscaler: {enabled: true}\n",
    )
    .unwrap();
    let cluster = kube_aws::config::load_cluster(dir.path()).unwrap();
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

/// The pod identity webhook's program (scripts/install-testbed.sh builds it
/// from the Go module proxy at the plugin image's tag).
const WEBHOOK_BINARY: &str = "amazon-eks-pod-identity-webhook";

/// The plugin's manifests as the cluster `cluster_yaml` renders them, one
/// JSON value per document.
fn webhook_documents(cluster: &kube_aws::config::Cluster) -> Vec<serde_json::Value> {
    let r = kube_aws::plugin::resolve_plugins(cluster).unwrap();
    let m = r
        .cluster
        .manifests
        .iter()
        .find(|m| m.plugin == "pod-identity-webhook")
        .expect("the pod-identity-webhook plugin renders its manifests");
    serde_yaml::Deserializer::from_str(&m.content)
        .map(|d| serde_json::to_value(<serde_yaml::Value as serde::Deserialize>::deserialize(d).unwrap()).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the webhook's manifests"))
}

/// A pod of `sa` in kube-system, as `kubectl create` gets it back (JSON).
fn pod_json(name: &str, sa: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "serviceAccountName": sa,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
        },
    })
    .to_string()
}

#[test]
fn pod_identity_webhook_mutates_a_pod_of_an_annotated_service_account() {
    let test = "pod_identity_webhook_mutates_a_pod_of_an_annotated_service_account";
    let Some(bin) = testbed::bin_dir(test) else {
        return;
    };
    let webhook = bin.join(WEBHOOK_BINARY);
    assert!(
        webhook.exists(),
        "{} is missing: run `make testbed` (scripts/install-testbed.sh builds it from the Go module proxy)",
        webhook.display()
    );
    let now = time::OffsetDateTime::now_utc();
    let pki = kube_aws::pki::generate("testbed", now).unwrap();
    let cp = ControlPlane::start_api_with_pki(&bin, &pki_files(&pki));

    // The plugin as the example renders it: cluster-autoscaler's service
    // account is one of kube-aws's roles (the Fail entry).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        "clusterName: testbed\nregion: us-west-2\ns3URI: s3://tb-bucket/c\n\
         kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n\
         worker:\n  nodePools: [{name: a, count: 1}]\nplugins:\n  cluster-autoscaler: {enabled: true}\n",
    )
    .unwrap();
    let cluster = kube_aws::config::load_cluster(dir.path()).unwrap();
    let role_arn = kube_aws::irsa::role_arn(
        &cluster.config,
        &kube_aws::irsa::role_name(&cluster.config, "kube-system", "cluster-autoscaler"),
    );
    let docs = webhook_documents(&cluster);

    // The webhook runs on the host (no container runs on this test bed): its
    // Service becomes a URL to 127.0.0.1, served with a certificate for that
    // address whose self-signed CA is the caBundle. Everything else of the
    // configuration (entries, failure policies, selectors, CEL conditions) is
    // the plugin's.
    let port = common::free_port();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let work = tempfile::tempdir().unwrap();
    let (crt, tls_key) = (work.path().join("tls.crt"), work.path().join("tls.key"));
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&tls_key, key.serialize_pem()).unwrap();
    let ca_bundle = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(cert.pem())
    };
    let mut mwc = kind(&docs, "MutatingWebhookConfiguration").clone();
    let entries = mwc["webhooks"].as_array_mut().unwrap();
    assert_eq!(entries.len(), 2, "{mwc}");
    for e in entries.iter_mut() {
        e["clientConfig"] = serde_json::json!({
            "url": format!("https://127.0.0.1:{port}/mutate"),
            "caBundle": ca_bundle,
        });
    }
    cp.kubectl_stdin(&["apply", "-f", "-"], &mwc.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    let sa = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "cluster-autoscaler",
            "namespace": "kube-system",
            "annotations": {kube_aws::irsa::ROLE_ARN_ANNOTATION: role_arn},
        },
    });

    // Down: a pod of a kube-aws role is refused (fail-closed), any other pod is created as it is.
    cp.kubectl_stdin(&["apply", "-f", "-"], &sa.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    // No controller manager here makes `default` accounts: one without the annotation.
    cp.kubectl(&["-n", "kube-system", "create", "serviceaccount", "plain"])
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let refused = loop {
        match cp.kubectl_stdin(
            &["create", "-o", "json", "-f", "-"],
            &pod_json("early", "cluster-autoscaler"),
        ) {
            Err(e) => break e,
            Ok(_) => {
                // Created before the apiserver saw the configuration: try again.
                let _ = cp.kubectl(&["-n", "kube-system", "delete", "pod", "early", "--wait=false"]);
                assert!(
                    std::time::Instant::now() < deadline,
                    "the webhook configuration never took effect"
                );
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        }
    };
    assert!(
        refused.contains("roles.pod-identity-webhook.kube-aws.io") && refused.contains("failed calling webhook"),
        "{refused}"
    );
    let other = cp
        .kubectl_stdin(&["create", "-o", "json", "-f", "-"], &pod_json("other-early", "plain"))
        .unwrap_or_else(|e| panic!("a pod of another account is blocked while the webhook is down: {e}"));
    let other: serde_json::Value = serde_json::from_str(&other).unwrap();
    assert!(!other.to_string().contains("AWS_ROLE_ARN"), "{other}");
    cp.kubectl(&["-n", "kube-system", "delete", "serviceaccount", "cluster-autoscaler"])
        .unwrap_or_else(|e| panic!("{e}"));

    // Up: the program with the plugin's own flags, but for this host.
    let deployment = kind(&docs, "Deployment");
    let command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert_eq!(command[0], "/webhook");
    let mut args: Vec<String> = command[1..]
        .iter()
        .filter(|a| {
            !["--port=", "--tls-cert=", "--tls-key="]
                .iter()
                .any(|p| a.starts_with(p))
        })
        .cloned()
        .collect();
    assert!(args.contains(&"--in-cluster=false".to_string()), "{args:?}");
    assert!(
        args.contains(&"--service-account-lookup-grace-period=2s".to_string()),
        "{args:?}"
    );
    args.extend([
        format!("--port={port}"),
        format!("--tls-cert={}", crt.display()),
        format!("--tls-key={}", tls_key.display()),
        format!("--metrics-port={}", common::free_port()),
        format!("--kubeconfig={}", cp.kubeconfig.display()),
    ]);
    let started = std::time::Instant::now();
    let mut c = Command::new(&webhook);
    c.args(&args);
    let mut proc = testbed::Proc::spawn("pod-identity-webhook", c, work.path().join("webhook.log"));
    proc.wait_until(std::time::Duration::from_secs(60), || {
        let mut c = Command::new("curl");
        c.args(["-s", "--max-time", "5", "--cacert"])
            .arg(&crt)
            .arg(format!("https://127.0.0.1:{port}/healthz"));
        run(c).is_ok()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{test}: the webhook answered /healthz after {:?}", started.elapsed());

    // The account and its pod in one request stream, as a chart's
    // ServiceAccount and workload arrive; the pod is mutated. (Here the
    // webhook's informer sees the account before the pod arrives even
    // without `--service-account-lookup-grace-period`: the flag covers a
    // loaded controller, where the pod could otherwise go through unmutated.)
    let both = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [sa, serde_json::from_str::<serde_json::Value>(&pod_json("app", "cluster-autoscaler")).unwrap()],
    });
    let created = cp
        .kubectl_stdin(&["create", "-o", "json", "-f", "-"], &both.to_string())
        .unwrap_or_else(|e| panic!("{e}\nwebhook log:\n{}", proc.log_tail(30)));
    // kubectl prints each created object, one JSON document after another.
    let pod = serde_json::Deserializer::from_str(&created)
        .into_iter::<serde_json::Value>()
        .map(|d| d.unwrap())
        .find(|d| d["kind"] == "Pod")
        .unwrap_or_else(|| panic!("no pod in {created}"))
        .to_string();
    let pod: serde_json::Value = serde_json::from_str(&pod).unwrap();
    let container = &pod["spec"]["containers"][0];
    let env: BTreeMap<String, String> = container["env"]
        .as_array()
        .unwrap_or_else(|| panic!("the pod was not mutated: {pod}\nwebhook log:\n{}", proc.log_tail(30)))
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let token_dir = "/var/run/secrets/eks.amazonaws.com/serviceaccount";
    assert_eq!(env["AWS_ROLE_ARN"], role_arn, "{pod}");
    assert_eq!(
        env["AWS_WEB_IDENTITY_TOKEN_FILE"],
        format!("{token_dir}/token"),
        "{pod}"
    );
    assert_eq!(env["AWS_REGION"], "us-west-2", "{pod}");
    assert_eq!(env["AWS_STS_REGIONAL_ENDPOINTS"], "regional", "{pod}");
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "aws-iam-token")
        .unwrap_or_else(|| panic!("no aws-iam-token volume: {pod}"));
    let token = &volume["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(token["audience"], kube_aws::irsa::AUDIENCE, "{pod}");
    assert_eq!(token["path"], "token", "{pod}");
    assert!(
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "aws-iam-token" && m["mountPath"] == token_dir && m["readOnly"] == true),
        "{pod}"
    );

    // A pod of an account without the annotation goes through untouched.
    let plain = cp
        .kubectl_stdin(&["create", "-o", "json", "-f", "-"], &pod_json("plain", "plain"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !plain.contains("AWS_ROLE_ARN") && !plain.contains("aws-iam-token"),
        "{plain}"
    );
    drop(proc);
}

/// The gate the plan asks the reconciler for (`manifestRollouts`: `kubectl
/// rollout status`) passes on the rendered Deployment on kwok nodes (a
/// controller and two pools): both replicas are Ready on two different
/// nodes (the soft spread by host), with the priority class, and the
/// disruption budget lets one of them be evicted, not both.
#[test]
fn pod_identity_webhook_rolls_out_two_spread_replicas_with_a_disruption_budget() {
    let test = "pod_identity_webhook_rolls_out_two_spread_replicas_with_a_disruption_budget";
    let Some(cp) = testbed::shared(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        "clusterName: testbed\nregion: us-west-2\ns3URI: s3://tb-bucket/c\n\
         worker:\n  nodePools: [{name: a, count: 1}]\n",
    )
    .unwrap();
    let cluster = kube_aws::config::load_cluster(dir.path()).unwrap();
    let docs = webhook_documents(&cluster);
    // In a namespace of its own (the shared control plane's kube-system is
    // the installer tests'); kwok runs no container, so the certificate
    // Secret the pods mount is not needed.
    let ns = cp.namespace("piwh");
    // The zone label the cloud controller manager gives every node when it
    // initializes it (kubelet registers none with an external cloud
    // provider). kube-scheduler leaves a node missing any of a pod's spread
    // keys out of the spread's scoring (podtopologyspread/scoring.go), so
    // without it the host spread would do nothing either.
    for (i, n) in cp.nodes.iter().enumerate() {
        let zone = format!("topology.kubernetes.io/zone=us-west-2{}", ['a', 'b', 'c'][i % 3]);
        cp.kubectl(&["label", "node", &n.name, &zone, "--overwrite"])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut items = Vec::new();
    for k in ["ServiceAccount", "Deployment", "PodDisruptionBudget"] {
        let mut d = kind(&docs, k).clone();
        assert_eq!(d["metadata"]["namespace"], "kube-system", "{d}");
        d["metadata"]["namespace"] = serde_json::json!(ns);
        items.push(d);
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    cp.kubectl_stdin(&["apply", "-f", "-"], &list.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    cp.kubectl(&[
        "-n",
        &ns,
        "rollout",
        "status",
        "deployment/pod-identity-webhook",
        &format!(
            "--timeout={}s",
            kube_aws::render::plan::MANIFEST_ROLLOUT_TIMEOUT_SECONDS
        ),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let pods: serde_json::Value = serde_json::from_str(
        &cp.kubectl(&["-n", &ns, "get", "pods", "-l", "app=pod-identity-webhook", "-o", "json"])
            .unwrap(),
    )
    .unwrap();
    let pods = pods["items"].as_array().unwrap();
    assert_eq!(pods.len(), 2, "{pods:?}");
    let nodes: std::collections::BTreeSet<&str> = pods
        .iter()
        .map(|p| {
            assert_eq!(p["spec"]["priorityClassName"], "system-cluster-critical");
            assert!(p["spec"]["priority"].as_i64().unwrap() >= 2_000_000_000, "{p}");
            p["spec"]["nodeName"].as_str().unwrap()
        })
        .collect();
    assert_eq!(nodes.len(), 2, "both replicas on one node: {nodes:?}");
    // The disruption controller's view: two healthy, one may go.
    let mut status = serde_json::Value::Null;
    for _ in 0..120 {
        let pdb: serde_json::Value = serde_json::from_str(
            &cp.kubectl(&["-n", &ns, "get", "pdb", "pod-identity-webhook", "-o", "json"])
                .unwrap(),
        )
        .unwrap();
        status = pdb["status"].clone();
        if status["currentHealthy"] == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert_eq!(status["currentHealthy"], 2, "{status}");
    assert_eq!(status["desiredHealthy"], 1, "{status}");
    assert_eq!(status["disruptionsAllowed"], 1, "{status}");
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
