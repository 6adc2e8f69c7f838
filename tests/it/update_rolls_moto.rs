//! What `update` says rolls, for each kind of change (docs/deploy.md "What
//! each kind of change replaces"), against moto server: one cluster goes
//! `up`, then each change is previewed through a real change set (declined:
//! standard input is not a terminal, so the change set is deleted and the
//! stack stays as it was) and the change undone. The preview's `rolls:`
//! line is computed from the live templates (GetTemplate of the root and
//! of each nested stack) against the published ones (src/aws/lifecycle/rolls.rs).
//!
//! The addon-only change (with a controller-manager flag) is then applied:
//! the preview says nothing rolls,
//! and moto agrees: every node stack's launch template boots the same data
//! as before (as moto's CloudFormation resolved it from the new templates and
//! parameters). A kubelet flag on one pool, applied: that pool's launch
//! template alone boots other data, as predicted.
//!
//! Not covered here: moto's change sets name only the nested stacks, so the
//! groups are never checked against CloudFormation's own nested change set;
//! moto recreates a modified nested stack whole (its launch templates and
//! groups with it), so launch template versions and instance IDs say nothing
//! there, and nothing is replaced one at a time under the rolling update policy; the sizes said
//! are the templates', not the live groups' (a pool the cluster-autoscaler
//! resized has the range MinSize–MaxSize said).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::output_text as text;
use common::MotoEnv as Env;
use serde_json::Value;

const BUCKET: &str = "kube-aws-rolls";
const CLUSTER: &str = "demo";

/// cluster.yaml with `extra` top-level keys, `controller` and `pools` as given.
fn cluster_yaml(kms: &str, controller: &str, pools: &str, plugin: &str, extra: &str) -> String {
    // aws-vpc-cni's chart is on the internet, out of reach here.
    format!(
        "clusterName: {CLUSTER}\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
         controller:\n{controller}\
         worker:\n  nodePools:\n{pools}\
         plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n  \
         tune:\n    enabled: true\n{plugin}{extra}"
    )
}

/// A plugin with one parameter per place a change can land: a manifest (the
/// addon plan), a controller file (the controllers' user data), a secret in a
/// controller file (the controllers' secrets version), a controller-manager
/// flag (the ClusterConfiguration, in the addon bundle: reconfigure.py).
fn write_plugin(dir: &Path) {
    let p = dir.join("plugins/tune");
    std::fs::create_dir_all(p.join("manifests")).unwrap();
    std::fs::write(
        p.join("plugin.yaml"),
        r#"apiVersion: kube-aws/v1
kind: Plugin
metadata: {name: tune, version: 0.1.0, description: one parameter per kind of change}
spec:
  parameters:
    note: {type: string, default: one}
    controllerNote: {type: string, default: one}
    token: {type: string, secret: true, default: first-token}
    grace: {type: string, default: 40s}
  kubernetes:
    manifests: [manifests/note.yaml.tera]
    controllerManager:
      flags:
        node-monitor-grace-period: "{{ params.grace }}"
  nodes:
    controller:
      files:
        - path: /etc/tune/note
          content: "{{ params.controllerNote }}\n"
        - path: /etc/tune/token
          content: "{{ params.token }}\n"
          permissions: "0600"
"#,
    )
    .unwrap();
    std::fs::write(
        p.join("manifests/note.yaml.tera"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tune\n  namespace: default\ndata:\n  note: \"{{ params.note }}\"\n",
    )
    .unwrap();
}

const CONTROLLER: &str = "  count: 1\n";
const POOLS: &str = "    - name: general\n      count: 1\n    - name: spot\n      count: 2\n";

/// The `rolls:` line of an `update`'s output.
fn rolls_line(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find(|l| l.starts_with("rolls: "))
        .unwrap_or_else(|| panic!("no rolls line:\n{}", text(out)))
        .to_string()
}

/// The physical ID of `logical` in `stack`.
fn physical(env: &Env, stack: &str, logical: &str) -> String {
    let r = env.aws_json(&[
        "cloudformation",
        "describe-stack-resource",
        "--stack-name",
        stack,
        "--logical-resource-id",
        logical,
    ]);
    r["StackResourceDetail"]["PhysicalResourceId"]
        .as_str()
        .unwrap_or_else(|| panic!("no {logical} in {stack}: {r}"))
        .to_string()
}

/// What each node stack's launch template boots now (its latest version's
/// data, as moto's CloudFormation resolved it), by the root's logical ID.
fn launch_template_data(env: &Env) -> BTreeMap<String, Value> {
    [
        ("ControlPlane", "ControllerLaunchTemplate"),
        ("NodePoolGeneral", "WorkerLaunchTemplate"),
        ("NodePoolSpot", "WorkerLaunchTemplate"),
    ]
    .iter()
    .map(|(stack, lt)| {
        let nested = physical(env, CLUSTER, stack);
        let id = physical(env, &nested, lt);
        let v = env.aws_json(&[
            "ec2",
            "describe-launch-template-versions",
            "--launch-template-id",
            &id,
            "--versions",
            "$Latest",
        ]);
        (
            stack.to_string(),
            without_stack_name(&v["LaunchTemplateVersions"][0]["LaunchTemplateData"], &nested),
        )
    })
    .collect()
}

/// Launch template data with the nested stack's own name masked: moto
/// recreates a modified nested stack under a new name (CloudFormation updates
/// it in place, under the same one), which reaches the user data (the
/// stack name the stub signals) and the instance profile's ARN.
fn without_stack_name(data: &Value, stack_arn: &str) -> Value {
    use base64::Engine;
    let name = stack_arn.split('/').nth(1).unwrap_or(stack_arn);
    let mut d = data.clone();
    if let Some(u) = d["UserData"].as_str() {
        let plain = base64::engine::general_purpose::STANDARD.decode(u).unwrap();
        d["UserData"] = Value::String(String::from_utf8(plain).unwrap());
    }
    let arn = d["IamInstanceProfile"]["Arn"].as_str().unwrap_or_default().to_string();
    if arn.contains(name) {
        d["IamInstanceProfile"]["Arn"] = Value::String("<the stack's own instance profile>".into());
    }
    serde_json::from_str(&d.to_string().replace(name, "<stack>")).unwrap()
}

#[test]
fn the_preview_says_what_rolls_for_each_kind_of_change() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    write_plugin(dir);
    let write = |controller: &str, pools: &str, plugin: &str, extra: &str| {
        std::fs::write(
            dir.join("cluster.yaml"),
            cluster_yaml(&kms, controller, pools, plugin, extra),
        )
        .unwrap();
    };
    write(CONTROLLER, POOLS, "", "");
    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "3m"]);
    assert!(up.status.success(), "{}", text(&up));
    let before = env.aws_json(&["cloudformation", "describe-stacks", "--stack-name", CLUSTER]);
    let ami = before["Stacks"][0]["Parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ParameterKey"] == "ImageIdX86")
        .and_then(|p| p["ParameterValue"].as_str())
        .unwrap()
        .to_string();

    // Each kind: (name, controller, pools, plugin settings, extra), and the rolls line wanted.
    let one = "1 instance replaced, one at a time";
    let with_gpu = format!("{POOLS}    - name: gpu\n      count: 1\n");
    let kinds: Vec<(&str, [&str; 4], String)> = vec![
        (
            "plugin manifest (addon plan)",
            [CONTROLLER, POOLS, "    note: two\n", ""],
            "rolls: nothing: no instance is replaced, launched or terminated".into(),
        ),
        (
            "etcd.backup.interval",
            [CONTROLLER, POOLS, "", "etcd:\n  backup:\n    interval: 30m\n"],
            "rolls: nothing: no instance is replaced, launched or terminated".into(),
        ),
        (
            "controller-manager flag (plugin)",
            [CONTROLLER, POOLS, "    grace: 50s\n", ""],
            "rolls: nothing: no instance is replaced, launched or terminated".into(),
        ),
        (
            "plugin node file (controller)",
            [CONTROLLER, POOLS, "    controllerNote: two\n", ""],
            format!("rolls: ControlPlane/ControllerGroup: {one} (launch template (UserData))"),
        ),
        (
            "kubelet flag (pool general: maxPods)",
            [
                CONTROLLER,
                "    - name: general\n      count: 1\n      maxPods: 30\n    - name: spot\n      count: 2\n",
                "",
                "",
            ],
            format!("rolls: NodePoolGeneral/WorkerGroup: {one} (launch template (UserData))"),
        ),
        (
            "pool instance type (spot)",
            [
                CONTROLLER,
                "    - name: general\n      count: 1\n    - name: spot\n      count: 2\n      instanceType: m6i.xlarge\n",
                "",
                "",
            ],
            "rolls: NodePoolSpot/WorkerGroup: 2 instances replaced, one at a time (launch template (InstanceType))"
                .into(),
        ),
        (
            "pool count (spot 2 → 3)",
            [
                CONTROLLER,
                "    - name: general\n      count: 1\n    - name: spot\n      count: 3\n",
                "",
                "",
            ],
            "rolls: NodePoolSpot/WorkerGroup: 2 → 3 instances, none replaced".into(),
        ),
        (
            "new pool",
            [
                CONTROLLER,
                with_gpu.as_str(),
                "",
                "",
            ],
            "rolls: NodePoolGpu/WorkerGroup: new group, 1 instance launched".into(),
        ),
        (
            "explicit ami",
            [CONTROLLER, POOLS, "", "ami: ami-0123456789abcdef0\n"],
            format!(
                "rolls: ControlPlane/ControllerGroup: {one} (launch template (ImageId)); \
                 then NodePoolGeneral/WorkerGroup: {one} (launch template (ImageId)); \
                 and NodePoolSpot/WorkerGroup: 2 instances replaced, one at a time (launch template (ImageId))"
            ),
        ),
        (
            // Growing to three controllers on the two zones `up` recorded
            // (root output ZoneCount) re-spreads them over three: a third
            // subnet, every group's subnets change, each rolled one at a time
            // (src/config/zonal.rs zone_count_with_record). Shrinking keeps
            // the record (3 → 1 in an outage deletes no subnet).
            "controller.count 1 → 3 (re-spread over a third zone)",
            ["  count: 3\n", POOLS, "", ""],
            "rolls: ControlPlane/ControllerGroup: 1 → 3 instances, the 1 running replaced, one at a time (subnets); \
             then NodePoolGeneral/WorkerGroup: 1 instance replaced, one at a time (subnets); \
             and NodePoolSpot/WorkerGroup: 2 instances replaced, one at a time (subnets)"
                .into(),
        ),
    ];
    let mut table = String::from("| change | preview on moto |\n|---|---|\n");
    for (kind, [controller, pools, plugin, extra], want) in &kinds {
        write(controller, pools, plugin, extra);
        let out = env.kube_aws(dir, &["update"]);
        // Declined: no terminal to ask on; the change set is deleted.
        assert_ne!(out.status.code(), Some(0), "{kind}: {}", text(&out));
        assert!(
            text(&out).contains("standard input is not a terminal"),
            "{kind}: {}",
            text(&out)
        );
        let got = rolls_line(&out);
        table.push_str(&format!("| {kind} | `{got}` |\n"));
        assert_eq!(&got, want, "{kind}: {}", text(&out));
        if *kind == "explicit ami" {
            // The AMI line says what moves; the rolls line, which groups.
            assert!(
                text(&out).contains(&format!(
                    "AMI ImageIdX86: {ami} → ami-0123456789abcdef0 (set in cluster.yaml ami)"
                )),
                "{}",
                text(&out)
            );
        }
    }

    // The addon-only change, applied: nothing rolls, and moto agrees: every
    // node stack's launch template boots the same data as before (moto
    // recreates a modified nested stack whole, ControlPlane here, so its
    // launch template's name and version are no evidence; its data is).
    // A controller-manager flag goes with it: the ClusterConfiguration is in
    // the addon bundle, which the controllers apply in place (reconfigure.py).
    let data = launch_template_data(&env);
    write(CONTROLLER, POOLS, "    note: two\n    grace: 50s\n", "");
    let upd = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "3m"]);
    assert!(upd.status.success(), "{}", text(&upd));
    assert_eq!(
        rolls_line(&upd),
        "rolls: nothing: no instance is replaced, launched or terminated"
    );
    assert!(
        text(&upd).contains("  ~ ControlPlane (AWS::CloudFormation::Stack)"),
        "{}",
        text(&upd)
    );
    let after = launch_template_data(&env);
    assert_eq!(after, data);
    assert!(
        data["ControlPlane"]["UserData"]
            .as_str()
            .unwrap()
            .contains("\"role\":\"controller\""),
        "{data:#?}"
    );

    // A kubelet flag on one pool, applied: that pool's launch template alone
    // boots other data.
    write(
        CONTROLLER,
        "    - name: general\n      count: 1\n      maxPods: 30\n    - name: spot\n      count: 2\n",
        "    note: two\n    grace: 50s\n",
        "",
    );
    let upd = env.kube_aws(dir, &["update", "--yes", "--wait", "--timeout", "3m"]);
    assert!(upd.status.success(), "{}", text(&upd));
    assert_eq!(
        rolls_line(&upd),
        format!("rolls: NodePoolGeneral/WorkerGroup: {one} (launch template (UserData))")
    );
    let flagged = launch_template_data(&env);
    let moved: Vec<&String> = flagged.keys().filter(|k| flagged[*k] != after[*k]).collect();
    assert_eq!(moved, ["NodePoolGeneral"]);

    // A rotated secret, last: the controllers' secrets version moves. (A
    // declined update leaves the published bundles as they were: issue 36 §3.)
    write(
        CONTROLLER,
        "    - name: general\n      count: 1\n      maxPods: 30\n    - name: spot\n      count: 2\n",
        "    note: two\n    grace: 50s\n    token: second-token\n",
        "",
    );
    let out = env.kube_aws(dir, &["update"]);
    let got = rolls_line(&out);
    table.push_str(&format!("| secret rotation (controller file) | `{got}` |\n"));
    assert_eq!(
        got,
        format!("rolls: ControlPlane/ControllerGroup: {one} (launch template (UserData))"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("parameters changed: SecretBundleKey, ControlPlaneSecretsVersion\n"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("second-token"), "{}", text(&out));
    println!("{table}");
}
