//! Checks of the whole catalogue of built-in plugins (the fixtures of
//! tests/it/catalogue.rs): chart versions that exist, manifests and scripts
//! the real validators accept, IAM statements cfn-lint accepts, images from
//! public registries only, and every built-in documented.

use super::*;

/// Every built-in chart version exists in the real upstream index.
#[test]
fn chart_versions_are_real() {
    let Some(data) = common::shared_data() else { return };
    let r = resolve(CLUSTER);
    let index_for = |chart: &str| -> std::path::PathBuf {
        let name = match chart {
            "dex" => "addon-indexes/dexidp__helm-charts.index.yaml",
            "metrics-server" => "addon-indexes/kubernetes-sigs__metrics-server.index.yaml",
            "cluster-autoscaler" => "addon-indexes/kubernetes__autoscaler.index.yaml",
            "aws-ebs-csi-driver" => "addon-indexes/kubernetes-sigs__aws-ebs-csi-driver.index.yaml",
            "external-dns" => "addon-indexes/kubernetes-sigs__external-dns.index.yaml",
            "descheduler" => "addon-indexes/kubernetes-sigs__descheduler.index.yaml",
            "aws-vpc-cni" => "indexes/aws__eks-charts.index.yaml",
            "cilium" => "addon-indexes/cilium__charts.index.yaml",
            // No published index in the shared data: its packaged chart's index.
            "aws-cloud-controller-manager" => "charts/index.yaml",
            other => panic!("no index known for {other}"),
        };
        data.join(name)
    };
    assert_eq!(r.releases.len(), 8);
    for pr in &r.releases {
        let rel = &pr.release;
        let index: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(index_for(&rel.chart)).unwrap()).unwrap();
        let versions: Vec<&str> = index["entries"][rel.chart.as_str()]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|e| e["version"].as_str())
            .collect();
        let want = rel.version.as_deref().unwrap();
        assert!(versions.contains(&want), "{} {want} is not in its index", rel.chart);
    }
}

/// The manifests built-ins apply pass kubernetes-validate (strict, 1.35), and
/// the cluster-dump script passes shellcheck.
#[test]
fn manifests_and_scripts_pass_real_validators() {
    let r = resolve(CLUSTER);
    let dir = tempfile::tempdir().unwrap();
    assert!(!r.cluster.manifests.is_empty());
    for m in &r.cluster.manifests {
        let path = dir.path().join(format!("{}-{}", m.plugin, m.name));
        std::fs::write(&path, &m.content).unwrap();
        let out = std::process::Command::new(common::tool("kubernetes-validate"))
            .args(["--strict", "-k", "1.35.0"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}{}",
            m.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dump = r.cluster.manifests.iter().find(|m| m.plugin == "cluster-dump").unwrap();
    let cron = serde_yaml::Deserializer::from_str(&dump.content)
        .map(|d| <serde_yaml::Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|d| d["kind"] == "CronJob")
        .unwrap();
    let script = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
        .as_str()
        .unwrap()
        .to_string();
    let path = dir.path().join("dump.sh");
    std::fs::write(&path, format!("#!/bin/sh\nset -e\n{script}")).unwrap();
    let out = std::process::Command::new("shellcheck")
        .args(["-S", "warning"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// Each built-in has docs/plugins/<name>.md naming its chart version and every parameter.
#[test]
fn every_built_in_is_documented() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for def in kube_aws::plugin::discover::built_in().unwrap() {
        let doc = root.join("docs/plugins").join(format!("{}.md", def.name()));
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|_| panic!("{} is missing", doc.display()));
        for p in def.manifest.spec.parameters.keys() {
            assert!(
                text.contains(&format!("`{p}`")),
                "{}: parameter {p} undocumented",
                doc.display()
            );
        }
        for c in &def.manifest.spec.charts {
            let v = c.version.as_deref().unwrap();
            assert!(text.contains(v), "{}: chart version {v} not stated", doc.display());
        }
    }
}

/// No built-in names an image in a private ECR (`<account>.dkr.ecr.<region>.amazonaws.com`):
/// a scan of every file of every built-in (tests/it/real_charts.rs checks the rendered charts).
#[test]
fn no_built_in_references_a_private_ecr() {
    let ecr = regex::Regex::new(r"[0-9]{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com").unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins");
    let files = common::files_under(&root);
    for p in &files {
        let text = std::fs::read_to_string(p).unwrap();
        assert!(!ecr.is_match(&text), "{} names a private ECR image", p.display());
    }
    assert!(files.len() > 10, "{} files", files.len());
    let r = resolve(CLUSTER);
    for pr in &r.releases {
        for v in &pr.values {
            assert!(!ecr.is_match(&v.content), "{}: {}", pr.release.name, v.content);
        }
    }
}

/// Every built-in IAM statement, in a managed policy per scope, passes cfn-lint
/// (which checks policy documents: actions, ARNs, condition operators).
#[test]
fn iam_statements_pass_cfn_lint() {
    let r = resolve(CLUSTER);
    let mut resources = serde_json::Map::new();
    let scopes = std::iter::once(("Controller".to_string(), &r.controller))
        .chain(r.pools.iter().map(|(n, h)| (format!("Pool{}", n.replace('-', "")), h)))
        .map(|(n, h)| {
            (
                n,
                h.iam_statements.iter().map(|s| &s.statement).collect::<Vec<&Value>>(),
            )
        });
    let roles = r.service_accounts.iter().map(|sa| {
        (
            format!("Sa{}", sa.name.replace('-', "")),
            sa.statements.iter().collect::<Vec<&Value>>(),
        )
    });
    for (name, statements) in scopes.chain(roles) {
        resources.insert(
            format!("{name}Policy"),
            serde_json::json!({
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {"PolicyDocument": {"Version": "2012-10-17", "Statement": statements}}
            }),
        );
    }
    let template = serde_json::json!({"AWSTemplateFormatVersion": "2010-09-09", "Resources": resources});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("iam.json");
    std::fs::write(&path, serde_json::to_string_pretty(&template).unwrap()).unwrap();
    let out = std::process::Command::new(common::tool("cfn-lint"))
        .arg(&path)
        .args(["--non-zero-exit-code", "warning"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}
