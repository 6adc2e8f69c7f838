//! The plugin system on fixture work trees: a work-tree plugin using every
//! hook, a built-in overridden from the work tree, per-controller and per-pool
//! parameter overrides, and the `plugins` and `schema plugin` commands.
//!
//! Not covered here: how render lays these hooks out (the render issue's tests),
//! and KMS encryption of secret values (the deploy issue).

use std::path::{Path, PathBuf};

use crate::common;

use assert_cmd::Command;
use kube_aws::config::{load_cluster, ChartSource, Origin};
use kube_aws::plugin::{resolve_plugins, PluginSource, ResolvedPlugins};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn resolve(name: &str) -> ResolvedPlugins {
    let cluster = load_cluster(&fixture(name)).unwrap();
    resolve_plugins(&cluster).unwrap_or_else(|e| panic!("{e}"))
}

fn kube_aws(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("kube-aws").unwrap();
    let cache = std::env::temp_dir().join(format!("kube-aws-plugin-test-cache-{}", std::process::id()));
    c.env("NO_COLOR", "1").env("XDG_CACHE_HOME", cache).current_dir(dir);
    c
}

#[test]
fn every_hook_resolves_into_the_merged_model() {
    let r = resolve("every-hook");
    let names: Vec<&str> = r.plugins.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["everything", "metrics-server"]);

    // Control-plane flags, rendered; an empty value drops the flag.
    let api = &r.cluster.api_server_flags;
    assert_eq!(api["oidc-issuer-url"], "https://demo.example.com");
    assert_eq!(api["oidc-username-claim"], "email");
    assert!(!api.contains_key("feature-gates"));
    assert_eq!(r.cluster.controller_manager_flags["terminated-pod-gc-threshold"], "100");
    assert_eq!(r.cluster.scheduler_flags["v"], "2");

    // Manifests: a template and a plain file, both checked as Kubernetes objects.
    let m: Vec<&str> = r.cluster.manifests.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(m, ["rbac.yaml", "plain.yaml"]);
    assert!(r.cluster.manifests[0].content.contains("name: \"hello\""));

    // CloudFormation, parsed as JSON.
    let cfn = &r.cluster.cloudformation[0];
    assert_eq!(cfn.stack, "root");
    assert_eq!(
        cfn.resources["EverythingBucket"]["Properties"]["Tags"][0]["Value"],
        "hello"
    );
    assert!(cfn.outputs.contains_key("EverythingBucketName"));

    // Controller scope: the controller's override of greeting.
    let c = &r.controller;
    assert_eq!(c.kubelet_flags["pods-per-core"], "50");
    assert_eq!(
        c.iam_statements[0].statement["Resource"],
        "arn:aws:s3:::demo-bucket/kube-aws/demo/everything/*"
    );
    assert_eq!(c.files[0].path, "/etc/everything/greeting");
    assert_eq!(c.files[0].content, "from-controller\n");
    assert_eq!(c.files[1].permissions, "0600");
    let cfg: serde_json::Value = serde_json::from_str(&c.files[1].content).unwrap();
    assert_eq!(cfg["greeting"], "from-controller");
    assert_eq!(cfg["role"], "controller");
    assert_eq!(c.systemd_units[0].name, "everything.service");
    assert!(c.systemd_units[0].enable);
    assert_eq!(c.node_labels["everything/role"], "controller");
    assert_eq!(c.taints[0].key, "everything/controller");
    assert!(c.asg_tags.is_empty());

    // Worker scopes: one per pool, in cluster.yaml order.
    assert_eq!(r.pools.keys().collect::<Vec<_>>(), ["general", "gpu"]);
    for (pool, hooks) in &r.pools {
        assert_eq!(hooks.files[0].path, format!("/etc/everything/{pool}.json"));
        assert_eq!(hooks.node_labels["everything/pool"], *pool);
        assert_eq!(hooks.asg_tags["k8s.io/cluster-autoscaler/demo"], "owned");
        assert!(!hooks.systemd_units[0].enable);
        let cond = &hooks.iam_statements[0].statement["Condition"]["StringEquals"];
        assert_eq!(cond[format!("aws:ResourceTag/pool-{pool}")], "yes");
        assert!(hooks.taints.is_empty());
    }
}

#[test]
fn per_pool_overrides_stay_in_their_pool() {
    let r = resolve("every-hook");
    let general = &r.pools["general"];
    let gpu = &r.pools["gpu"];
    assert_eq!(general.kubelet_flags["pods-per-core"], "10");
    assert_eq!(gpu.kubelet_flags["pods-per-core"], "50");
    assert_eq!(general.node_labels["everything/size"], "1");
    assert_eq!(gpu.node_labels["everything/size"], "5");
    // The controller keeps its own greeting; pools keep the cluster's.
    let general_cfg: serde_json::Value = serde_json::from_str(&general.files[0].content).unwrap();
    assert_eq!(general_cfg["greeting"], "hello");
    assert_eq!(general_cfg["size"], 1);
    let gpu_cfg: serde_json::Value = serde_json::from_str(&gpu.files[0].content).unwrap();
    assert_eq!(gpu_cfg["size"], 5);
    // The cluster scope (chart values) sees neither override.
    let values = &r.releases[0].values[0].content;
    assert!(values.contains("greeting: \"hello\""), "{values}");
    assert!(values.contains("role: cluster"), "{values}");
}

#[test]
fn secrets_are_references_never_values() {
    let r = resolve("every-hook");
    let refs: Vec<(&str, &str)> = r
        .secrets
        .iter()
        .map(|s| (s.reference.as_str(), s.scope.as_str()))
        .collect();
    assert_eq!(
        refs,
        [
            ("kube-aws-secret.everything.token", "cluster"),
            ("kube-aws-secret.everything.token.pool-gpu", "pool-gpu"),
        ]
    );
    assert_eq!(r.secrets[0].value.expose(), "cluster-secret");
    assert_eq!(r.secrets[1].value.expose(), "pool-secret");
    let values = &r.releases[0].values[0].content;
    assert!(
        values.contains("token: \"kube-aws-secret.everything.token\""),
        "{values}"
    );
    // Nothing serialized or debug-printed carries a secret value.
    let json = serde_json::to_string(&r).unwrap();
    let debug = format!("{r:?}");
    for text in [&json, &debug] {
        assert!(!text.contains("cluster-secret") && !text.contains("pool-secret"));
    }
    let out = kube_aws(&fixture("every-hook"))
        .args(["validate", "-o", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("cluster-secret") && !stdout.contains("pool-secret"));
    // Nor does any rendered artifact: render writes references only.
    let out_dir = tempfile::tempdir().unwrap();
    let out = kube_aws(&fixture("every-hook"))
        .args(["render", "--output-dir"])
        .arg(out_dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = common::files_under(out_dir.path());
    for p in &files {
        let text = String::from_utf8_lossy(&std::fs::read(p).unwrap()).to_string();
        assert!(
            !text.contains("cluster-secret") && !text.contains("pool-secret"),
            "{}",
            p.display()
        );
    }
    assert!(files.len() > 10, "render wrote only {} files", files.len());
}

#[test]
fn plugin_releases_carry_their_origin_and_values_layers() {
    let r = resolve("every-hook");
    let ev = &r.releases[0];
    assert_eq!(ev.release.name, "everything");
    assert_eq!(ev.release.namespace, "hello");
    assert_eq!(ev.release.version.as_deref(), Some("~1.2"));
    assert_eq!(ev.release.timeout.as_secs(), 120);
    assert_eq!(
        ev.release.origin,
        Origin::Plugin {
            plugin: "everything".into(),
            index: 0
        }
    );
    // The user's values/<release>.yaml layers over the plugin's values.
    assert_eq!(ev.release.values_files, ["values/everything.yaml"]);
    assert!(ev.release.set.is_empty());
    let files: Vec<&str> = ev.values.iter().map(|v| v.file.as_str()).collect();
    assert_eq!(files, ["values.yaml.tera", "plugin.yaml#spec.charts[0].set"]);
    assert_eq!(ev.values[1].content.trim(), "greeting: hello");
    let v: serde_yaml::Value = serde_yaml::from_str(&ev.values[0].content).unwrap();
    assert_eq!(v["zones"][1], "b");
    assert_eq!(v["extra"]["team"], "web");
    assert_eq!(v["ratio"].as_f64(), Some(0.5));
    assert_eq!(v["debug"].as_bool(), Some(true));
}

#[test]
fn work_tree_overrides_a_built_in() {
    let r = resolve("every-hook");
    let ms = r.plugins.iter().find(|p| p.name == "metrics-server").unwrap();
    assert_eq!(ms.source, PluginSource::WorkTree);
    assert_eq!(ms.version, "9.9.9-local");
    let rel = &r.releases[1].release;
    assert_eq!(rel.namespace, "monitoring");
    assert_eq!(rel.source, ChartSource::Repo("https://charts.example.com/forks".into()));
    assert_eq!(r.releases[1].values[0].content.trim(), "replicas: '2'");
}

#[test]
fn built_in_metrics_server_resolves() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/x\nplugins:\n  metrics-server: {enabled: true, replicas: 2}\n",
    )
    .unwrap();
    let cluster = load_cluster(dir.path()).unwrap();
    let r = resolve_plugins(&cluster).unwrap();
    let ms = r.plugins.iter().find(|p| p.name == "metrics-server").unwrap();
    assert_eq!(ms.source, PluginSource::BuiltIn);
    let rel = r.releases.iter().find(|p| p.release.name == "metrics-server").unwrap();
    assert_eq!(rel.release.version.as_deref(), Some("3.13.1"));
    let v: serde_yaml::Value = serde_yaml::from_str(&rel.values[0].content).unwrap();
    assert_eq!(v["replicas"].as_i64(), Some(2));
    assert_eq!(v["podDisruptionBudget"]["enabled"].as_bool(), Some(true));
}

#[test]
fn disabled_plugins_contribute_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cluster.yaml"),
        "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/x\n",
    )
    .unwrap();
    let cluster = load_cluster(dir.path()).unwrap();
    let r = resolve_plugins(&cluster).unwrap();
    assert!(r.plugins.iter().all(|p| p.name != "metrics-server"));
    assert!(r.releases.iter().all(|p| p.release.name != "metrics-server"));
}

#[test]
fn whole_model_snapshot() {
    let r = resolve("every-hook");
    insta::assert_json_snapshot!(r);
}

#[test]
fn plugins_list_and_show() {
    let dir = fixture("every-hook");
    let out = kube_aws(&dir).args(["plugins", "list", "-o", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ev = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "everything")
        .unwrap();
    assert_eq!(ev["source"], "work-tree");
    assert_eq!(ev["enabled"], true);
    assert_eq!(ev["version"], "1.2.3");

    let text = kube_aws(&dir).args(["plugins", "list"]).output().unwrap();
    insta::assert_snapshot!("plugins_list", String::from_utf8_lossy(&text.stdout));
    let show = kube_aws(&dir).args(["plugins", "show", "everything"]).output().unwrap();
    assert!(show.status.success());
    insta::assert_snapshot!("plugins_show", String::from_utf8_lossy(&show.stdout));

    let json = kube_aws(&dir)
        .args(["plugins", "show", "everything", "-o", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["parameters"]["greeting"]["required"], true);
    assert_eq!(v["parameters"]["poolSize"]["default"], 1);
    assert_eq!(v["charts"][0]["name"], "everything");
    assert!(v["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h == "apiserver flag --oidc-issuer-url"));

    let missing = kube_aws(&dir).args(["plugins", "show", "everythin"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("did you mean \"everything\""));
}

#[test]
fn plugins_list_without_a_cluster_shows_built_ins() {
    let dir = tempfile::tempdir().unwrap();
    let out = kube_aws(dir.path())
        .args(["plugins", "list", "-o", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ms = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics-server")
        .unwrap();
    assert_eq!(ms["source"], "built-in");
    assert_eq!(ms["enabled"], false);
}

#[test]
fn schema_plugin_is_strict() {
    let out = Command::cargo_bin("kube-aws")
        .unwrap()
        .args(["schema", "plugin"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["title"], "kube-aws plugin.yaml");
    assert_eq!(schema["additionalProperties"], false);
    // Every fixture and built-in plugin.yaml validates against the schema.
    let validator = jsonschema::JSONSchema::compile(&schema).unwrap();
    let mut files = vec![fixture("every-hook/plugins/everything/plugin.yaml")];
    for e in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins")).unwrap() {
        files.push(e.unwrap().path().join("plugin.yaml"));
    }
    for f in files {
        let v: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let msgs: Vec<String> = match validator.validate(&v) {
            Ok(()) => Vec::new(),
            Err(errs) => errs.map(|e| e.to_string()).collect(),
        };
        assert!(msgs.is_empty(), "{}: {msgs:?}", f.display());
    }
}

/// A plugin's CloudFormation contribution, wrapped in a bare template, passes
/// cfn-lint. (How render merges it into the real stack is tested by render.)
#[test]
fn cloudformation_contribution_passes_cfn_lint() {
    let r = resolve("every-hook");
    let c = &r.cluster.cloudformation[0];
    let template = serde_json::json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Resources": c.resources,
        "Outputs": c.outputs,
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    std::fs::write(&path, serde_json::to_string_pretty(&template).unwrap()).unwrap();
    let out = std::process::Command::new(common::tool("cfn-lint"))
        .arg(&path)
        .args(["--non-zero-exit-code", "error"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}
