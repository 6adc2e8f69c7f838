//! Every built-in plugin against its real upstream chart: the charts in
//! `$KUBE_AWS_SHARED_DATA/charts` (packaged from upstream source, so their
//! digests differ from the published ones) go through a test lock and the chart
//! cache into kube-aws's own pipeline, which layers the plugin's rendered values;
//! the real Helm library (helm-python-sdk) then renders each chart with those
//! values. Checks: every image is on a public registry (never a private ECR);
//! every object passes `kubernetes-validate --strict` for the cluster's minor;
//! and the issue-11 findings are fixed in the rendered objects.
//!
//! The shared data is required: without it the test fails, it never skips.
//! A built-in whose chart is not in the shared data is named on stderr.
//! Not covered: installing the charts (no cluster here).

use crate::common;

use common::charts::{lock_to_shared_charts, shared_charts, shared_entry};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::LazyLock;

use base64::Engine;
use kube_aws::chart::ChartCache;
use kube_aws::pipeline::{prepare, PrepareOptions, Prepared};
use regex::Regex;
use serde_json::{json, Value};

/// `<account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn]/…`: a private ECR registry.
static PRIVATE_ECR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[0-9]{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/").unwrap());

/// Registries anyone can pull from without credentials.
const PUBLIC_REGISTRIES: &[&str] = &["registry.k8s.io", "public.ecr.aws", "ghcr.io", "quay.io", "docker.io"];

/// Parameters for the built-ins that need some; the rest run on their defaults.
const PARAMS: &[(&str, &str)] = &[
    (
        "dex",
        "{issuerURL: https://dex.example.com, exposure: loadBalancer, \
         certificateARN: 'arn:aws:acm:us-west-2:111122223333:certificate/0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9', \
         connector: github, connectorClientID: kube-aws-demo, \
         connectorClientSecret: not-in-any-output, staticClientSecret: also-hidden, \
         staticClientRedirectURIs: [https://app.example.com/callback]}",
    ),
    (
        "external-dns",
        "{hostedZoneId: Z0123456789ABC, domainFilter: example.com}",
    ),
];

const REGION: &str = "eu-central-1";

/// One rendered Kubernetes object.
struct Object {
    release: String,
    template: String,
    doc: Value,
}

impl Object {
    fn kind(&self) -> &str {
        self.doc["kind"].as_str().unwrap_or_default()
    }
    fn pod_spec(&self) -> &Value {
        match self.kind() {
            "CronJob" => &self.doc["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            _ => &self.doc["spec"]["template"]["spec"],
        }
    }
    fn containers(&self) -> Vec<&Value> {
        let spec = self.pod_spec();
        ["initContainers", "containers"]
            .iter()
            .filter_map(|k| spec[*k].as_array())
            .flatten()
            .collect()
    }
    fn images(&self) -> Vec<String> {
        self.containers()
            .iter()
            .filter_map(|c| c["image"].as_str().map(String::from))
            .collect()
    }
    /// Objects Helm creates only on `helm test`, which kube-aws never runs.
    fn is_test_hook(&self) -> bool {
        self.doc["metadata"]["annotations"]["helm.sh/hook"]
            .as_str()
            .is_some_and(|h| h.split(',').any(|h| h.trim().starts_with("test")))
    }
}

/// The work tree, the test lock and the warm cache for one set of plugins.
struct Checked {
    prepared: Prepared,
    objects: Vec<Object>,
    minor: String,
}

/// Renders every chart release of the cluster in `dir` with the real Helm library.
fn render_all(charts: &Path, cluster_yaml: &str) -> Checked {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cluster.yaml"), cluster_yaml).unwrap();
    let cache = ChartCache::new(tmp.path().join("cache"));
    let archives = lock_to_shared_charts(&dir, &cache, charts);

    let prepared = prepare(&PrepareOptions {
        dir: dir.clone(),
        cache_dir: cache.root().to_path_buf(),
        require_charts: true,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let minor = prepared.releases.cluster.kubernetes().minor.clone();

    let jobs: Vec<Value> = prepared
        .prepared
        .iter()
        .zip(&prepared.releases.releases)
        .map(|(p, r)| {
            // The test lock, not the built-in one, pinned each release.
            assert!(
                p.locked.urls[0].starts_with("https://shared-data.invalid/"),
                "{}",
                r.name
            );
            json!({
                "release": r.name,
                "namespace": r.namespace,
                "archive": archives[&r.name],
                "values": p.values.user,
            })
        })
        .collect();
    let jobs_file = tmp.path().join("jobs.json");
    std::fs::write(&jobs_file, serde_json::to_string(&jobs).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/helm_render.py");
    let out = Command::new(common::tool("python"))
        .arg(script)
        .arg(&jobs_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm render: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered: BTreeMap<String, BTreeMap<String, String>> = serde_json::from_slice(&out.stdout).unwrap();

    let mut objects = Vec::new();
    let mut raw = Vec::new();
    for (release, templates) in rendered {
        for (template, text) in templates {
            if !template.ends_with(".yaml") && !template.ends_with(".yml") {
                continue; // NOTES.txt
            }
            // Validated as Helm wrote it: a serde round trip would turn `0400` into a string.
            raw.push((format!("{release}-{}", template.replace('/', "_")), text.clone()));
            for d in serde_yaml::Deserializer::from_str(&text) {
                let doc: Value = serde::Deserialize::deserialize(d).unwrap();
                if !doc.is_null() {
                    objects.push(Object {
                        release: release.clone(),
                        template: template.clone(),
                        doc,
                    });
                }
            }
        }
    }
    validate_objects(&raw, tmp.path(), &prepared.releases.cluster.kubernetes().version);
    Checked {
        prepared,
        objects,
        minor,
    }
}

/// Every object passes kubernetes-validate --strict for the cluster's version
/// (one process for all of them).
fn validate_objects(rendered: &[(String, String)], tmp: &Path, k8s: &str) {
    let dir = tmp.join("objects");
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (i, (name, text)) in rendered.iter().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        let path = dir.join(format!("{i:03}-{name}"));
        std::fs::write(&path, text).unwrap();
        files.push(path);
    }
    let out = Command::new(common::tool("kubernetes-validate"))
        .args(["--strict", "-k", k8s])
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubernetes-validate --strict -k {k8s}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The cluster.yaml enabling `enabled` (and disabling the default-on built-ins not in it).
fn cluster_yaml(defs: &[kube_aws::plugin::discover::PluginDef], enabled: &[&str]) -> String {
    let mut y = format!(
        "clusterName: demo\nregion: {REGION}\ns3URI: s3://demo-bucket/kube-aws\nworker:\n  nodePools:\n    - {{name: general, minSize: 1, maxSize: 3}}\nplugins:\n"
    );
    for d in defs {
        let name = d.name();
        if enabled.contains(&name) {
            let params = PARAMS.iter().find(|(p, _)| *p == name).map(|(_, v)| *v).unwrap_or("{}");
            let params = params.trim_start_matches('{').trim_end_matches('}');
            let sep = if params.is_empty() { "" } else { ", " };
            y.push_str(&format!("  {name}: {{enabled: true{sep}{params}}}\n"));
        } else if d.manifest.enabled_by_default {
            y.push_str(&format!("  {name}: {{enabled: false}}\n"));
        }
    }
    y
}

fn find<'a>(objects: &'a [Object], release: &str, kind: &str) -> &'a Object {
    objects
        .iter()
        .find(|o| o.release == release && o.kind() == kind && !o.is_test_hook())
        .unwrap_or_else(|| panic!("release {release} renders no {kind}"))
}

fn args_of(o: &Object) -> Vec<String> {
    o.containers()
        .iter()
        .flat_map(|c| {
            c["args"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(c["command"].as_array().into_iter().flatten())
        })
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

fn image_minor(image: &str) -> String {
    let tag = image.rsplit(':').next().unwrap();
    tag.trim_start_matches('v')
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".")
}

#[test]
fn every_built_in_renders_its_real_chart_with_public_images_and_the_fixes() {
    let charts = shared_charts();
    let index: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(charts.join("index.yaml")).unwrap()).unwrap();
    let defs = kube_aws::plugin::discover::built_in().unwrap();

    // Which built-ins this data can check: every chart they declare is in it.
    let mut checkable = Vec::new();
    let mut unchecked = Vec::new();
    for d in &defs {
        let specs = &d.manifest.spec.charts;
        let missing: Vec<String> = specs
            .iter()
            .filter(|c| {
                let chart = c.chart.as_deref().unwrap_or(&c.name);
                shared_entry(&index, chart, c.version.as_deref().unwrap_or_default()).is_none()
            })
            .map(|c| format!("{} {}", c.name, c.version.as_deref().unwrap_or_default()))
            .collect();
        if specs.is_empty() {
            unchecked.push(format!(
                "{} (no chart: its manifests are checked by tests/it/catalogue.rs)",
                d.name()
            ));
        } else if !missing.is_empty() {
            unchecked.push(format!(
                "{} (chart {} not in {})",
                d.name(),
                missing.join(", "),
                charts.display()
            ));
        } else {
            checkable.push(d.name());
        }
    }
    for u in &unchecked {
        eprintln!("real_charts: cannot check built-in {u}");
    }
    // The findings of issue 11 live in these: they must be checkable.
    for needed in [
        "aws-vpc-cni",
        "aws-cloud-controller-manager",
        "dex",
        "metrics-server",
        "cluster-autoscaler",
        "aws-ebs-csi-driver",
    ] {
        assert!(checkable.contains(&needed), "{needed} cannot be checked: {unchecked:?}");
    }

    // One CNI per cluster: cilium gets a cluster of its own.
    let main: Vec<&str> = checkable.iter().copied().filter(|n| *n != "cilium").collect();
    let mut runs = vec![render_all(&charts, &cluster_yaml(&defs, &main))];
    if checkable.contains(&"cilium") {
        let alone: Vec<&str> = ["cilium", "aws-cloud-controller-manager"]
            .into_iter()
            .filter(|n| checkable.contains(n))
            .collect();
        runs.push(render_all(&charts, &cluster_yaml(&defs, &alone)));
    }

    // Every built-in with a chart here was rendered.
    let rendered: Vec<&str> = runs
        .iter()
        .flat_map(|r| r.prepared.releases.plugins.plugins.iter().map(|p| p.name.as_str()))
        .collect();
    for n in &checkable {
        assert!(rendered.contains(n), "{n} was not rendered");
    }

    // Every image the built-ins run is on a public registry, never a private ECR.
    for run in &runs {
        let mut seen = 0;
        for o in run.objects.iter().filter(|o| !o.is_test_hook()) {
            for image in o.images() {
                seen += 1;
                assert!(
                    !PRIVATE_ECR.is_match(&image),
                    "{} {}: {image} is in a private ECR",
                    o.release,
                    o.template
                );
                let host = image.split('/').next().unwrap();
                let host = if host.contains('.') { host } else { "docker.io" };
                assert!(
                    PUBLIC_REGISTRIES.contains(&host),
                    "{} {}: {image} is not on a known public registry ({PUBLIC_REGISTRIES:?})",
                    o.release,
                    o.template
                );
            }
        }
        assert!(seen > 0, "no image found at all");
    }

    let run = &runs[0];
    let objects = &run.objects;

    // Finding 3: the VPC CNI runs only public images, all three of them.
    let cni = find(objects, "aws-vpc-cni", "DaemonSet");
    let cni_images = cni.images();
    assert_eq!(cni_images.len(), 3, "{cni_images:?}");
    for prefix in ["amazon-k8s-cni-init:", "amazon-k8s-cni:", "aws-network-policy-agent:"] {
        assert!(
            cni_images
                .iter()
                .any(|i| i.starts_with(&format!("public.ecr.aws/eks/{prefix}"))),
            "{prefix} {cni_images:?}"
        );
    }

    // Finding 5a: the CCM runs on the controllers, on the host network, with the cluster's minor.
    let ccm = find(objects, "aws-cloud-controller-manager", "DaemonSet");
    let spec = ccm.pod_spec();
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["nodeSelector"]["node-role.kubernetes.io/control-plane"], "");
    let tolerated: Vec<&str> = spec["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    for key in [
        "node-role.kubernetes.io/control-plane",
        "node.cloudprovider.kubernetes.io/uninitialized",
    ] {
        assert!(tolerated.contains(&key), "{key}: {tolerated:?}");
    }
    let args = args_of(ccm);
    for a in [
        "--cloud-provider=aws",
        "--cluster-name=demo",
        "--configure-cloud-routes=false",
    ] {
        assert!(args.contains(&a.to_string()), "{a}: {args:?}");
    }
    let k8s = run.prepared.releases.cluster.kubernetes();
    assert_eq!(
        ccm.images(),
        [format!(
            "registry.k8s.io/provider-aws/cloud-controller-manager:{}",
            k8s.release.cloud_controller_manager
        )]
    );
    assert_eq!(image_minor(&ccm.images()[0]), run.minor);

    // Dex's issuer over https (exposure loadBalancer): the real chart's Service
    // is a network load balancer with a TLS listener on 443 and the ACM
    // certificate, named the issuer's host by external-dns.
    let svc = objects
        .iter()
        .find(|o| o.release == "dex" && o.kind() == "Service")
        .expect("dex renders its Service");
    assert_eq!(svc.doc["spec"]["type"], "LoadBalancer", "{}", svc.doc);
    let ann = &svc.doc["metadata"]["annotations"];
    assert_eq!(ann["service.beta.kubernetes.io/aws-load-balancer-type"], "nlb");
    assert_eq!(ann["service.beta.kubernetes.io/aws-load-balancer-ssl-ports"], "443");
    assert!(ann["service.beta.kubernetes.io/aws-load-balancer-ssl-cert"]
        .as_str()
        .is_some_and(|a| a.starts_with("arn:aws:acm:")));
    assert_eq!(ann["external-dns.alpha.kubernetes.io/hostname"], "dex.example.com");
    let ports = svc.doc["spec"]["ports"].as_array().unwrap();
    assert!(
        ports.iter().any(|p| p["port"] == 443 && p["targetPort"] == "http"),
        "{ports:?}"
    );

    // Finding 7: dex's config has a connector, its secret only as a reference.
    let secret = objects
        .iter()
        .find(|o| o.release == "dex" && o.kind() == "Secret" && o.doc["data"]["config.yaml"].is_string())
        .expect("dex renders its config Secret");
    let config = base64::engine::general_purpose::STANDARD
        .decode(secret.doc["data"]["config.yaml"].as_str().unwrap())
        .unwrap();
    let config: Value = serde_yaml::from_slice(&config).unwrap();
    assert!(config["issuer"].as_str().unwrap().starts_with("https://"), "{config}");
    let connectors = config["connectors"].as_array().expect("dex has connectors");
    assert_eq!(connectors.len(), 1, "{config}");
    assert_eq!(connectors[0]["type"], "github");
    assert_eq!(
        connectors[0]["config"]["clientSecret"],
        "kube-aws-secret.dex.connectorClientSecret"
    );
    assert_eq!(
        connectors[0]["config"]["redirectURI"],
        "https://dex.example.com/callback"
    );
    let all = serde_json::to_string(&objects.iter().map(|o| &o.doc).collect::<Vec<_>>()).unwrap();
    assert!(!all.contains("not-in-any-output") && !all.contains("also-hidden"));

    // Finding 8b: metrics-server verifies kubelet TLS and dials the InternalIP first.
    let ms = args_of(find(objects, "metrics-server", "Deployment"));
    assert!(!ms.iter().any(|a| a.contains("kubelet-insecure-tls")), "{ms:?}");
    assert!(
        ms.contains(&"--kubelet-preferred-address-types=InternalIP,Hostname".to_string()),
        "{ms:?}"
    );
    let flags: Vec<&str> = ms.iter().filter_map(|a| a.split('=').next()).collect();
    let mut unique = flags.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), flags.len(), "a flag given twice: {ms:?}");

    // cluster-autoscaler: cluster name, region, ASG discovery, and the cluster's minor.
    let ca = find(objects, "cluster-autoscaler", "Deployment");
    let ca_args = args_of(ca);
    assert!(ca_args.contains(&"--cloud-provider=aws".to_string()), "{ca_args:?}");
    assert!(
        ca_args.contains(
            &"--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/demo"
                .to_string()
        ),
        "{ca_args:?}"
    );
    let env = ca.containers()[0]["env"].as_array().unwrap().clone();
    assert!(
        env.iter().any(|e| e["name"] == "AWS_REGION" && e["value"] == REGION),
        "{env:?}"
    );
    assert_eq!(ca.images().len(), 1);
    assert_eq!(image_minor(&ca.images()[0]), run.minor, "{:?}", ca.images());
    assert!(ca.images()[0].ends_with(&format!(":{}", k8s.release.cluster_autoscaler)));

    // IAM roles for service accounts: each chart's pods run as the service
    // account the role trusts (plugin.yaml serviceAccounts), annotated with the
    // role's ARN for the pod identity webhook.
    for (release, kind, sa) in [
        ("cluster-autoscaler", "Deployment", "cluster-autoscaler"),
        ("external-dns", "Deployment", "external-dns"),
        ("aws-ebs-csi-driver", "Deployment", "ebs-csi-controller-sa"),
    ] {
        let workload = objects
            .iter()
            .find(|o| o.release == release && o.kind() == kind && !o.is_test_hook())
            .unwrap_or_else(|| panic!("{release} renders no {kind}"));
        assert_eq!(workload.pod_spec()["serviceAccountName"], sa, "{release}");
        // The pods carry the ARN too, so a changed role recreates them.
        assert_eq!(
            workload.doc["spec"]["template"]["metadata"]["annotations"]["kube-aws.io/role-arn"],
            format!("arn:aws:iam::000000000000:role/demo-{REGION}-kube-system-{sa}"),
            "{release}"
        );
        let account = objects
            .iter()
            .find(|o| o.release == release && o.kind() == "ServiceAccount" && o.doc["metadata"]["name"] == sa)
            .unwrap_or_else(|| panic!("{release} renders no ServiceAccount {sa}"));
        assert_eq!(account.doc["metadata"]["namespace"], "kube-system", "{release}");
        assert_eq!(
            account.doc["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
            format!("arn:aws:iam::000000000000:role/demo-{REGION}-kube-system-{sa}"),
            "{release}"
        );
    }
    // The EBS node plugin reads its instance from the Node, not IMDS (hop limit 1).
    let ebs_node = objects
        .iter()
        .find(|o| {
            o.release == "aws-ebs-csi-driver" && o.kind() == "DaemonSet" && o.doc["metadata"]["name"] == "ebs-csi-node"
        })
        .unwrap();
    assert!(
        args_of(ebs_node).contains(&"--metadata-sources=kubernetes".to_string()),
        "{:?}",
        args_of(ebs_node)
    );
    // The EBS controller has the region set.
    let ebs = objects
        .iter()
        .find(|o| o.release == "aws-ebs-csi-driver" && o.kind() == "Deployment")
        .unwrap();
    let ebs_env: Vec<&Value> = ebs
        .containers()
        .iter()
        .flat_map(|c| c["env"].as_array().into_iter().flatten())
        .collect();
    assert!(
        ebs_env
            .iter()
            .any(|e| e["name"] == "AWS_REGION" && e["value"] == REGION),
        "{ebs_env:?}"
    );
}
