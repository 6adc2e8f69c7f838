//! Issue 36 §1: IAM's size limits with production-length names. The example
//! tree (every built-in plugin it enables) with a 40-character bucket and a
//! 20-character cluster name in ap-southeast-2 renders, and `render` prints
//! and reports each role's sizes within IAM's limits, computed with
//! CloudFormation's substitutions resolved (a longer cluster name grows the
//! controller role by more than its literal occurrences in the template: the
//! nested stack's and the group's generated names count too). A name that
//! makes a policy too long (a plugin's statement over 120 of the cluster's
//! objects) is refused by `validate` and `render` at its
//! cluster.yaml line, with the size, the limit and how much to take off, and
//! nothing is written.
//!
//! Not covered here: IAM itself (moto does not enforce the size limits); the
//! resolved sizes' arithmetic is src/render/cfn/iam_size.rs's unit tests, and
//! CloudFormation creating the managed policies on moto is
//! tests/it/key_rotation_moto.rs (the live policies after two rotations).

use std::path::Path;

use serde_json::Value;

fn kube_aws(cwd: &Path, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", cwd.join("cache"))
        .args(args)
        .output()
        .unwrap()
}

const BUCKET40: &str = "acme-platform-prod-kube-aws-state-apse2x";
const CLUSTER20: &str = "payments-prod-apse-2";
const KEY: &str = "arn:aws:kms:ap-southeast-2:111122223333:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

/// The example tree with the given cluster name and bucket in ap-southeast-2.
fn example(root: &Path, cluster: &str, bucket: &str) -> std::path::PathBuf {
    let out = kube_aws(root, &["init", "--example", "example", "--force"]);
    assert!(out.status.success(), "{}", crate::common::output_text(&out));
    let dir = root.join("example");
    let path = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text
        .replace("clusterName: example", &format!("clusterName: {cluster}"))
        .replace("region: us-west-2", "region: ap-southeast-2")
        .replace("s3://example-kube-aws/clusters", &format!("s3://{bucket}/clusters"))
        .replace(
            "arn:aws:kms:us-west-2:111122223333:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
            KEY,
        )
        .replace("us-west-2", "ap-southeast-2");
    std::fs::write(&path, text).unwrap();
    dir
}

/// `render -o json`'s IAM sizes, by (stack, role).
fn sizes(dir: &Path) -> Vec<Value> {
    let out = kube_aws(dir, &["-o", "json", "render"]);
    assert!(out.status.success(), "{}", crate::common::output_text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["summary"]["iamSizes"].as_array().unwrap().clone()
}

fn role<'a>(sizes: &'a [Value], stack: &str, role: &str) -> &'a Value {
    sizes
        .iter()
        .find(|r| r["stack"] == stack && r["role"] == role)
        .unwrap_or_else(|| panic!("no {stack} {role} in {sizes:#?}"))
}

fn inline_chars(r: &Value) -> u64 {
    r["inline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["chars"].as_u64().unwrap())
        .sum()
}

#[test]
fn production_length_names_fit_iams_limits_sized_with_substitutions_resolved() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example(tmp.path(), CLUSTER20, BUCKET40);
    let all = sizes(&dir);
    assert!(all.len() >= 3, "{all:#?}");
    for r in &all {
        let inline = inline_chars(r);
        assert!(inline <= 10_240, "{r}");
        for p in r["managed"].as_array().unwrap() {
            assert!(p["chars"].as_u64().unwrap() <= 6_144, "{r}");
        }
        assert!(r["attached"].as_u64().unwrap() <= 10, "{r}");
    }
    let cp = role(&all, "control-plane", "ControllerRole");
    let managed: Vec<&str> = cp["managed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for m in [
        "ControllerEtcdPolicy",
        "ControllerKeysPolicy",
        "ControllerLifecycleHookPolicy",
    ] {
        assert!(managed.contains(&m), "{managed:?}");
    }
    assert!(
        managed
            .iter()
            .any(|m| m.starts_with("ControllerPluginAwsCloudControllerManagerPolicy")),
        "{managed:?}"
    );
    eprintln!(
        "controller role, {CLUSTER20:?} and {BUCKET40:?} in ap-southeast-2: inline {} characters, managed {:?}",
        inline_chars(cp),
        cp["managed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].clone(), p["chars"].clone()))
            .collect::<Vec<_>>()
    );

    // The text summary prints the same figures.
    let out = kube_aws(&dir, &["render"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let printed = text
        .lines()
        .find(|l| l.contains("control-plane ControllerRole: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        printed.contains(&format!("inline {}/10240 characters", inline_chars(cp))),
        "{printed}"
    );

    // Substitutions resolved, not the template text: ten more characters of
    // cluster name grow the inline policies by more than ten per literal
    // occurrence in the template (the nested stack's generated name,
    // `${AWS::StackName}`, holds it too).
    let tmp2 = tempfile::tempdir().unwrap();
    let short = "payments-p";
    let dir2 = example(tmp2.path(), short, BUCKET40);
    let cp2 = role(&sizes(&dir2), "control-plane", "ControllerRole").clone();
    let template: Value =
        serde_json::from_slice(&std::fs::read(dir2.join("rendered/stacks/control-plane.json")).unwrap()).unwrap();
    let literal = template["Resources"]["ControllerRole"]["Properties"]["Policies"]
        .to_string()
        .matches(short)
        .count() as u64;
    let grown = inline_chars(cp) - inline_chars(&cp2);
    assert!(
        grown > 10 * literal,
        "grew {grown} characters for 10 more of cluster name, {literal} literal occurrences"
    );
}

#[test]
fn a_name_that_makes_a_policy_too_long_is_refused_at_its_line_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = example(tmp.path(), CLUSTER20, BUCKET40);
    // A work-tree plugin whose one controller statement names 120 objects
    // under the cluster's name: one statement cannot be split over managed
    // policies, and the cluster name is what makes it long.
    let plugin = dir.join("plugins/wide");
    std::fs::create_dir_all(&plugin).unwrap();
    let objects: String = (0..120)
        .map(|i| format!("              - \"arn:aws:s3:::shared-bucket/{{{{ cluster.clusterName }}}}/o{i}\"\n"))
        .collect();
    std::fs::write(
        plugin.join("plugin.yaml"),
        format!(
            "apiVersion: kube-aws/v1\nkind: Plugin\nmetadata:\n  name: wide\n  version: 0.1.0\n  description: many objects\n\
             spec:\n  nodes:\n    controller:\n      iam:\n        statements:\n          - Sid: ManyObjects\n\
             \x20           Effect: Allow\n            Action: [s3:GetObject]\n            Resource:\n{objects}"
        ),
    )
    .unwrap();
    let path = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("plugins:\n", "plugins:\n  wide: {enabled: true}\n");
    std::fs::write(&path, text).unwrap();
    let line = 1 + std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("clusterName:"))
        .unwrap();
    for cmd in ["validate", "render"] {
        let out = kube_aws(&dir, &[cmd]);
        let text = crate::common::output_text(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {text}");
        assert!(
            text.contains(&format!("cluster.yaml:{line}:14: clusterName: stack \"control-plane\"")),
            "{cmd}: {text}"
        );
        assert!(
            text.contains("role ControllerRole's managed policy ControllerPluginWidePolicy"),
            "{text}"
        );
        assert!(
            text.contains(&format!("\"{CLUSTER20}\" (20 characters) appears 120 times")),
            "{text}"
        );
        // 6606 characters, 462 over, the name 120 times: 4 characters off.
        assert!(text.contains("would be 6606 characters"), "{text}");
        assert!(text.contains("shorten it by at least 4 characters"), "{text}");
        assert!(text.contains("(IAM's limit: 6144)"), "{text}");
    }
    assert!(!dir.join("rendered").exists(), "a refused render wrote rendered/");
}
