//! The example cluster (`init --example`, the README's main job): it validates
//! and renders offline, and every artifact passes the real validators:
//! cfn-lint (0 errors), `cloud-init schema`, shellcheck and kubernetes-validate.
//! Not covered here: that the charts install on a real cluster (no Kubernetes
//! API server runs on this machine; see tests/it/render.rs for the installer run
//! against recording fakes).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn kube_aws(cwd: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", cache)
        .args(args)
        .output()
        .unwrap()
}

fn files_under(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    common::files_under(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect()
}

#[test]
fn example_validates_renders_and_passes_every_validator() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let out = kube_aws(tmp.path(), &cache, &["init", "--example", "example"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["values/metrics-server.yaml", "values/external-dns.yaml"] {
        assert!(tmp.path().join("example").join(f).is_file(), "{f} missing");
    }
    let out = kube_aws(tmp.path(), &cache, &["--dir", "example", "validate"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let out = kube_aws(tmp.path(), &cache, &["--dir", "example", "render"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "stacks:",
        "root.json",
        "node-pool-general.json",
        "controller.stub",
        "addons, in install order:",
        // The bootstrap releases first: the cloud controller and the CNI.
        "1. aws-cloud-controller-manager aws-cloud-controller-manager 0.0.11 in kube-system (bootstrap)",
        "2. aws-vpc-cni              aws-vpc-cni 1.22.4 in kube-system (bootstrap)",
        "metrics-server 3.13.1",
    ] {
        assert!(summary.contains(needle), "summary lacks {needle:?}:\n{summary}");
    }
    let rendered = tmp.path().join("example/rendered");
    // The autoscaler's release names the chart value that keeps it paused
    // through a chart upgrade (issue 38, helm_release.py paused_overrides); no
    // other release carries the field.
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rendered.join("addons/plan.json")).unwrap()).unwrap();
    for r in plan["releases"].as_array().unwrap() {
        let expected = (r["name"] == "cluster-autoscaler").then_some("replicaCount");
        assert_eq!(r["replicasValue"].as_str(), expected, "{}", r["name"]);
    }
    assert!(
        plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "cluster-autoscaler"),
        "the example enables the cluster-autoscaler plugin"
    );

    let stacks = files_under(&rendered.join("stacks"), ".json");
    assert_eq!(stacks.len(), 5, "{stacks:?}");
    let lint = Command::new(common::tool("cfn-lint"))
        .args(["--non-zero-exit-code", "error"])
        .args(&stacks)
        .output()
        .unwrap();
    assert!(
        lint.status.success(),
        "cfn-lint errors:\n{}",
        String::from_utf8_lossy(&lint.stdout)
    );

    let configs = files_under(&rendered.join("userdata"), ".cloud-config");
    assert_eq!(configs.len(), 3, "{configs:?}");
    for c in &configs {
        let out = Command::new("cloud-init")
            .args(["schema", "--config-file"])
            .arg(c)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}{}",
            c.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for stub in files_under(&rendered.join("userdata"), ".stub") {
        assert!(
            std::fs::metadata(&stub).unwrap().len() <= 4096,
            "{} over 4 KiB",
            stub.display()
        );
    }

    // The only shell left on a node: the user-data stub's script (the rest is
    // the Python node program, tested by tests/it/node_program.rs).
    let stub_root = tmp.path().join("stub-files");
    for stub in files_under(&rendered.join("userdata"), ".stub") {
        common::write_cloud_config_files(&std::fs::read_to_string(&stub).unwrap(), &stub_root);
    }
    let scripts = [stub_root.join("opt/kube-aws/bin/kube-aws-stub")];
    assert!(scripts[0].is_file());
    let out = Command::new("shellcheck")
        .args(["-S", "warning"])
        .args(&scripts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shellcheck:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let manifests = files_under(&rendered.join("manifests"), ".yaml");
    assert!(
        !manifests.is_empty(),
        "the example enables cluster-dump, which ships a manifest"
    );
    let out = Command::new(common::tool("kubernetes-validate"))
        .args(["--strict", "-k", "1.35.0"])
        .args(&manifests)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubernetes-validate:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn render_is_deterministic_and_atomic() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    assert!(kube_aws(tmp.path(), &cache, &["init", "--example", "ex"])
        .status
        .success());
    let read_all = |dir: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        files_under(dir, "")
            .into_iter()
            .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
            .collect()
    };
    assert!(kube_aws(tmp.path(), &cache, &["--dir", "ex", "render"])
        .status
        .success());
    let first = read_all(&tmp.path().join("ex/rendered"));
    assert!(kube_aws(tmp.path(), &cache, &["--dir", "ex", "render"])
        .status
        .success());
    assert_eq!(
        first,
        read_all(&tmp.path().join("ex/rendered")),
        "same input, different bytes"
    );

    // A failing render leaves the previous output untouched.
    let cluster = tmp.path().join("ex/cluster.yaml");
    let text = std::fs::read_to_string(&cluster).unwrap();
    std::fs::write(
        &cluster,
        text.replace("issuerURL: https://dex.example.com", "issuerURL: http://insecure"),
    )
    .unwrap();
    let out = kube_aws(tmp.path(), &cache, &["--dir", "ex", "render"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("issuerURL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(first, read_all(&tmp.path().join("ex/rendered")));
}

/// The content of `path` in a rendered cloud-config's write_files.
fn node_file(cloud_config: &Path, path: &str) -> String {
    let doc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(cloud_config).unwrap()).unwrap();
    let entry = doc["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str() == Some(path))
        .unwrap_or_else(|| panic!("{path} not in {}", cloud_config.display()));
    String::from_utf8(crate::common::write_file_content(entry)).unwrap()
}

/// The kubelet flags of the JoinConfiguration in a node's kubeadm documents.
fn join_kubelet_args(docs: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    let join = docs["documents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "JoinConfiguration")
        .unwrap();
    join["nodeRegistration"]["kubeletExtraArgs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_string(),
                a["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Issue 11 findings 4b, 4c, 5, 6 and 8a, on the example as rendered.
#[test]
fn example_nodes_fit_the_vpc_cni_the_cloud_provider_and_the_autoscaler() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    assert!(kube_aws(tmp.path(), &cache, &["init", "--example", "ex"])
        .status
        .success());
    let out = kube_aws(tmp.path(), &cache, &["--dir", "ex", "render"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rendered = tmp.path().join("ex/rendered");
    let kubeadm = |role: &str| -> serde_json::Value {
        let text = node_file(
            &rendered.join(format!("userdata/{role}.cloud-config")),
            "/etc/kube-aws/kubeadm.json",
        );
        serde_json::from_str(&text).unwrap()
    };

    // Max pods from the ENI table: m6i.large and c6i.xlarge under the VPC CNI.
    for (role, want) in [("controller", "29"), ("worker-general", "29"), ("worker-batch", "58")] {
        let args = join_kubelet_args(&kubeadm(role));
        assert_eq!(args.get("max-pods").map(String::as_str), Some(want), "{role}: {args:?}");
        assert_eq!(
            args.get("cloud-provider").map(String::as_str),
            Some("external"),
            "{role}"
        );
    }
    // The cluster-wide documents are in the addon bundle's file (reconfigure.py).
    let controller: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rendered.join("addons/kubeadm/cluster.json")).unwrap()).unwrap();
    let docs = controller["documents"].as_array().unwrap();
    let cluster = docs.iter().find(|d| d["kind"] == "ClusterConfiguration").unwrap();
    assert!(
        cluster["networking"].get("podSubnet").is_none(),
        "no pod CIDR outside the VPC with the VPC CNI: {}",
        cluster["networking"]
    );
    let cm_args = cluster["controllerManager"]["extraArgs"].to_string();
    assert!(!cm_args.contains("cloud-provider"), "{cm_args}");
    let kubelet = docs.iter().find(|d| d["kind"] == "KubeletConfiguration").unwrap();
    assert_eq!(kubelet["serverTLSBootstrap"], true);

    // The autoscaler's bounds reach the groups, with node templates and no DesiredCapacity.
    let stack = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(rendered.join(format!("stacks/{name}.json"))).unwrap()).unwrap()
    };
    for (pool, min, max) in [("general", "2", "10"), ("batch", "0", "20")] {
        let g = &stack(&format!("node-pool-{pool}"))["Resources"]["WorkerGroup"];
        let p = &g["Properties"];
        assert_eq!(
            (p["MinSize"].as_str(), p["MaxSize"].as_str()),
            (Some(min), Some(max)),
            "{pool}"
        );
        assert!(p.get("DesiredCapacity").is_none(), "{pool}: {p}");
        let tags: Vec<(String, String)> = p["Tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["Key"].as_str().unwrap().into(), t["Value"].as_str().unwrap().into()))
            .collect();
        let has = |k: &str, v: &str| tags.iter().any(|(a, b)| a == k && b == v);
        assert!(
            has("k8s.io/cluster-autoscaler/node-template/label/kube-aws.io/pool", pool),
            "{tags:?}"
        );
        assert!(has("kubernetes.io/cluster/example", "owned"), "{tags:?}");
        if pool == "batch" {
            assert!(
                has(
                    "k8s.io/cluster-autoscaler/node-template/taint/dedicated",
                    "batch:NoSchedule"
                ),
                "{tags:?}"
            );
            assert!(
                g.get("CreationPolicy").is_none(),
                "a group starting at 0 signals nothing"
            );
        }
    }
    // The example runs three controllers: a fixed size, one replaced at a
    // time, the new one launched before an old one goes (MaxSize one above).
    let g = &stack("control-plane")["Resources"]["ControllerGroup"];
    let cp = &g["Properties"];
    assert_eq!(cp["DesiredCapacity"], "3", "controllers keep a fixed size");
    assert_eq!((cp["MinSize"].as_str(), cp["MaxSize"].as_str()), (Some("3"), Some("4")));
    assert_eq!(
        g["UpdatePolicy"]["AutoScalingRollingUpdate"]["MinInstancesInService"],
        "3"
    );
    assert_eq!(g["CreationPolicy"]["ResourceSignal"]["Count"], 3);
}

/// Issue 24, finding 10: with the VPC CNI's prefix delegation, max-pods
/// follows the prefix formula capped as the EKS AMI's calculator recommends
/// (m6i.large: 3 * (9 * 16) + 2 = 434, 2 vCPUs: 110; c6i.xlarge: 898, 4
/// vCPUs: 110), not the secondary-address table (29 and 58).
#[test]
fn example_with_prefix_delegation_follows_the_prefix_formula() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    assert!(kube_aws(tmp.path(), &cache, &["init", "--example", "ex"])
        .status
        .success());
    let file = tmp.path().join("ex/cluster.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    let on = yaml.replace(
        "aws-vpc-cni: {enabled: true}",
        "aws-vpc-cni: {enabled: true, enablePrefixDelegation: true}",
    );
    assert_ne!(on, yaml);
    std::fs::write(&file, on).unwrap();
    let out = kube_aws(tmp.path(), &cache, &["--dir", "ex", "render"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rendered = tmp.path().join("ex/rendered");
    for role in ["controller", "worker-general", "worker-batch"] {
        let text = node_file(
            &rendered.join(format!("userdata/{role}.cloud-config")),
            "/etc/kube-aws/kubeadm.json",
        );
        let args = join_kubelet_args(&serde_json::from_str(&text).unwrap());
        assert_eq!(
            args.get("max-pods").map(String::as_str),
            Some("110"),
            "{role}: {args:?}"
        );
    }
}

/// Issue 24, finding 10: the example keeps the API off the open internet and
/// its nodes in private subnets, and no plugin bound widens a pool.
#[test]
fn example_api_is_narrowed_and_nodes_private() {
    let cfg: serde_yaml::Value = serde_yaml::from_str(include_str!("../../src/config/example/cluster.yaml")).unwrap();
    assert_eq!(cfg["network"]["privateSubnets"], serde_yaml::Value::Bool(true));
    let cidrs = cfg["apiEndpoint"]["allowedCIDRs"].as_sequence().unwrap();
    assert!(!cidrs.is_empty());
    for c in cidrs {
        let c = c.as_str().unwrap();
        let bits: u32 = c.split_once('/').unwrap().1.parse().unwrap();
        assert!(bits >= 8, "{c} is not narrowed");
    }
    for pool in cfg["worker"]["nodePools"].as_sequence().unwrap() {
        let own = pool["maxSize"].as_u64();
        let bound = pool["plugins"]["cluster-autoscaler"]["maxSize"].as_u64();
        if let (Some(own), Some(bound)) = (own, bound) {
            assert!(bound <= own, "{pool:?}");
        }
    }
}

/// Issue 39: the publish takes the render's own stack references, not a
/// scan. The example's render records that the root names each nested stack
/// (network, control plane, every pool), and the same references are found
/// again in the rendered directory read back (`--use-rendered`), by the one
/// TemplateURL text both use (render/layout.rs `template_url`).
#[test]
fn the_renders_stack_references_are_what_the_rendered_directory_names() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let out = kube_aws(tmp.path(), &cache, &["init", "--example", "example"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tree = tmp.path().join("example");
    let p = kube_aws::pipeline::prepare(&kube_aws::pipeline::PrepareOptions {
        dir: tree.clone(),
        cache_dir: cache,
        require_charts: false,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let r = kube_aws::render::render(&p.input).unwrap_or_else(|e| panic!("{e}"));
    let root = kube_aws::render::layout::ROOT_TEMPLATE;
    let stacks: std::collections::BTreeSet<String> = r
        .files
        .keys()
        .filter(|k| kube_aws::render::layout::is_stack(k) && k.as_str() != root)
        .cloned()
        .collect();
    assert!(stacks.len() >= 3, "{stacks:?}");
    assert_eq!(r.stack_refs.len(), 1, "{:?}", r.stack_refs);
    assert_eq!(r.stack_refs[root], stacks);
    assert_eq!(kube_aws::render::layout::named_stacks(&r.files), r.stack_refs);
    let dir = tree.join("rendered");
    kube_aws::render::write_rendered(&tree, &dir, &r).unwrap();
    let read = kube_aws::aws::publish::read_rendered(&dir).unwrap();
    assert_eq!(read.files, r.files);
    assert_eq!(read.stack_refs, r.stack_refs);
}
