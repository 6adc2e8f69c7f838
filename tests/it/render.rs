//! Render: golden files of every artifact for two fixtures, the real validators
//! (cfn-lint, cloud-init schema, shellcheck, kubernetes-validate) on each,
//! determinism, data never reaching scripts, render errors, atomic writes.
//!
//! Not covered here: running the cloud-configs on a real Amazon Linux 2023 node
//! (`cloud-init single --file`, kubeadm, the S3 join handshake) or creating the
//! stacks in AWS; moto ignores wait conditions (see tests of the aws stage).

use crate::common;
use crate::render_fixtures;

use std::path::Path;
use std::process::Command;

use base64::Engine;
use kube_aws::render::{self, write_rendered, RenderError, Rendered};
use render_fixtures::*;

fn rendered(input: &render::RenderInput) -> Rendered {
    render::render(input).unwrap_or_else(|e| panic!("render failed: {e}"))
}

fn snapshot_all(fixture: &str, r: &Rendered) {
    let listing: Vec<String> = r
        .files
        .iter()
        .map(|(p, b)| format!("{p} ({} bytes)", b.len()))
        .collect();
    insta::assert_snapshot!(format!("{fixture}__files"), listing.join("\n"));
    for (path, bytes) in &r.files {
        let text = std::str::from_utf8(bytes).unwrap_or_else(|_| panic!("{path} is not UTF-8"));
        insta::assert_snapshot!(format!("{fixture}__{}", path.replace('/', "__")), text);
    }
}

#[test]
fn golden_minimal() {
    snapshot_all("minimal", &rendered(&minimal()));
}

#[test]
fn golden_full() {
    snapshot_all("full", &rendered(&full()));
}

#[test]
fn layout_is_the_documented_one() {
    let r = rendered(&full());
    for p in [
        "stacks/root.json",
        "stacks/network.json",
        "stacks/control-plane.json",
        "stacks/node-pool-general.json",
        "stacks/node-pool-spot-arm.json",
        "userdata/controller.stub",
        "userdata/controller.cloud-config",
        "userdata/worker-general.stub",
        "userdata/worker-spot-arm.cloud-config",
        "addons/plan.json",
        "addons/values/cert-manager.yaml",
        "addons/values/dex.yaml",
        "addons/tiller.yaml",
        "manifests/dex/rbac.yaml",
    ] {
        assert!(
            r.get(p).is_some(),
            "{p} missing; have {:?}",
            r.files.keys().collect::<Vec<_>>()
        );
    }
    assert!(
        rendered(&minimal()).get("addons/tiller.yaml").is_none(),
        "Tiller only in Helm v2 mode"
    );
}

#[test]
fn same_input_same_bytes() {
    for input in [minimal(), full(), generated(20, 5)] {
        assert_eq!(rendered(&input), rendered(&input.clone()));
    }
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs every validator on every artifact of `r`; returns how many files each checked.
fn validate_all(r: &Rendered) -> [usize; 4] {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rendered");
    write_rendered(dir.path(), &out, r).unwrap();
    let files = |prefix: &str, suffix: &str| -> Vec<String> {
        r.files
            .keys()
            .filter(|p| p.starts_with(prefix) && p.ends_with(suffix))
            .map(|p| out.join(p).display().to_string())
            .collect()
    };
    let stacks = files("stacks/", ".json");
    let (ok, text) = run(Command::new(common::tool("cfn-lint"))
        .arg("--non-zero-exit-code")
        .arg("error")
        .args(&stacks));
    assert!(ok, "cfn-lint errors:\n{text}");

    let mut configs = files("userdata/", ".cloud-config");
    configs.extend(files("userdata/", ".stub"));
    for f in &configs {
        let (ok, text) = run(Command::new("cloud-init").args(["schema", "--config-file", f]));
        assert!(ok && text.contains("Valid"), "cloud-init schema {f}:\n{text}");
    }

    // The only shell left: the user-data stub's script (the node program is
    // Python, checked by tests/it/node_program.rs).
    let mut scripts = files("addons/", ".sh");
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/render/templates");
    scripts.push(templates.join("stub.sh").display().to_string());
    let (ok, text) = run(Command::new("shellcheck").args(["-S", "warning"]).args(&scripts));
    assert!(ok, "shellcheck:\n{text}");

    let mut manifests = files("manifests/", "");
    manifests.extend(files("addons/tiller", ".yaml"));
    if !manifests.is_empty() {
        let (ok, text) = run(Command::new(common::tool("kubernetes-validate"))
            .args(["--strict", "-k", "1.35.0"])
            .args(&manifests));
        assert!(ok, "kubernetes-validate:\n{text}");
    }
    [stacks.len(), configs.len(), scripts.len(), manifests.len()]
}

#[test]
fn validators_accept_minimal() {
    let counts = validate_all(&rendered(&minimal()));
    eprintln!("minimal: templates, cloud-configs+stubs, scripts, manifests = {counts:?}");
    assert_eq!(counts, [4, 4, 1, 0]);
}

#[test]
fn validators_accept_full() {
    let counts = validate_all(&rendered(&full()));
    eprintln!("full: templates, cloud-configs+stubs, scripts, manifests = {counts:?}");
    assert_eq!(counts, [5, 6, 1, 2]);
}

#[test]
fn validators_accept_an_existing_vpc() {
    let mut input = minimal();
    input.cluster.network.vpc_id = Some("vpc-0123456789abcdef0".into());
    input.cluster.network.subnet_ids = vec!["subnet-0123456789abcdef0".into(), "subnet-0123456789abcdef1".into()];
    let r = rendered(&input);
    let net = r.text("stacks/network.json").unwrap();
    assert!(!net.contains("AWS::EC2::VPC\""), "no new VPC: {net}");
    assert!(net.contains("subnet-0123456789abcdef1"));
    validate_all(&r);
}

/// The write_files entries of a cloud-config, decoded: path -> content.
fn written_files(cloud_config: &str) -> Vec<(String, String)> {
    let doc: serde_yaml::Value = serde_yaml::from_str(cloud_config).unwrap();
    doc["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| {
            let raw = f["content"].as_str().unwrap_or_default().to_string();
            let content = if f["encoding"].as_str() == Some("b64") {
                String::from_utf8(base64::engine::general_purpose::STANDARD.decode(raw).unwrap()).unwrap()
            } else {
                raw
            };
            (f["path"].as_str().unwrap().to_string(), content)
        })
        .collect()
}

#[test]
fn hostile_values_stay_data_byte_exact() {
    let evil = "a: \"$(touch /tmp/pwned)\"\nb: '`id`'\nc: |\n  it's \"quoted\" ${HOME} \\n\n  $(rm -rf /)\n";
    let evil_no_newline = "x: '$(reboot)'\r\n`whoami`";
    let flag = "https://x.example.com/$(curl evil)`id`'\"\nnext";
    let mut input = full();
    input.addons[2].values_yaml = evil.into();
    input.addons[3].values_yaml = evil_no_newline.into();
    input
        .plugins
        .cluster
        .api_server_flags
        .insert("oidc-username-claim".into(), flag.into());
    input.plugins.controller.files[0].content = evil_no_newline.into();
    input.plugins.controller.files[0].path = "/etc/dex/$(id) `x` 'q'".into();
    let r = rendered(&input);

    assert_eq!(r.get("addons/values/metrics-server.yaml").unwrap(), evil.as_bytes());
    assert_eq!(r.get("addons/values/dex.yaml").unwrap(), evil_no_newline.as_bytes());
    let files = written_files(r.text("userdata/controller.cloud-config").unwrap());
    let get = |p: &str| files.iter().find(|(path, _)| path == p).map(|(_, c)| c.as_str());
    // Values reach the controller in the addon bundle (JSON), not its user data.
    assert_eq!(get("/etc/kube-aws/addons/values/metrics-server.yaml"), None);
    let bundle: serde_json::Value = serde_json::from_slice(r.get("addons/bundle.json").unwrap()).unwrap();
    assert_eq!(bundle["files"]["values/metrics-server.yaml"], evil);
    assert_eq!(bundle["files"]["values/dex.yaml"], evil_no_newline);
    assert_eq!(get("/etc/dex/$(id) `x` 'q'"), Some(evil_no_newline));
    // The ClusterConfiguration travels in the addon bundle (reconfigure.py), as data.
    let kubeadm: serde_json::Value =
        serde_json::from_str(bundle["files"]["kubeadm/cluster.json"].as_str().unwrap()).unwrap();
    assert_eq!(kubeadm["documents"][0]["kind"], "ClusterConfiguration");
    let args = &kubeadm["documents"][0]["apiServer"]["extraArgs"];
    assert!(
        args.as_array().unwrap().iter().any(|a| a["value"] == flag),
        "flag must reach the kubeadm data file exactly: {args}"
    );
    let own: serde_json::Value = serde_json::from_str(get("/etc/kube-aws/kubeadm.json").unwrap()).unwrap();
    let kinds: Vec<&str> = own["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["InitConfiguration", "JoinConfiguration"],
        "the user data holds no cluster-wide document"
    );
    // Scripts and commands carry none of it.
    let markers = ["pwned", "curl evil", "whoami", "reboot", "rm -rf /)"];
    for (path, content) in &files {
        if path.ends_with(".sh") || path.contains("/bin/") || path.contains("/lib/") {
            for m in markers {
                assert!(!content.contains(m), "{m:?} reached script {path}");
            }
        }
    }
    let doc: serde_yaml::Value = serde_yaml::from_str(r.text("userdata/controller.cloud-config").unwrap()).unwrap();
    assert_eq!(
        serde_yaml::to_string(&doc["runcmd"]).unwrap().trim(),
        "- - /opt/kube-aws/bin/kube-aws-node\n  - bootstrap"
    );
    for (path, bytes) in &r.files {
        let text = String::from_utf8_lossy(bytes);
        if path.ends_with(".sh") || path.ends_with(".stub") || path.starts_with("stacks/") {
            for m in markers {
                assert!(!text.contains(m), "{m:?} reached {path}");
            }
        }
    }
}

fn render_err(input: &render::RenderInput) -> String {
    match render::render(input) {
        Ok(_) => panic!("render should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn helm_v2_with_tiller_disabled_is_an_error() {
    let mut input = full();
    input.cluster.helm.tiller.enabled = false;
    let msg = render_err(&input);
    assert!(msg.contains("helm.tiller.enabled is false"), "{msg}");
    // Without charts, no Tiller is needed and none is installed.
    input.addons.clear();
    let r = rendered(&input);
    assert!(r.get("addons/tiller.yaml").is_none());
}

#[test]
fn tiller_only_with_charts_in_v2_mode() {
    let mut input = full();
    let plan: serde_json::Value = serde_json::from_slice(rendered(&input).get("addons/plan.json").unwrap()).unwrap();
    assert_eq!(plan["helm"]["tiller"]["install"], true);
    assert_eq!(plan["helm"]["binary"]["version"], "v2.17.0");
    input.addons.clear();
    let plan: serde_json::Value = serde_json::from_slice(rendered(&input).get("addons/plan.json").unwrap()).unwrap();
    assert_eq!(plan["helm"]["tiller"]["install"], false);
}

#[test]
fn bad_dependencies_and_plugins_are_errors() {
    let mut input = full();
    input.addons[3].release.depends_on = vec!["nope".into()];
    assert!(render_err(&input).contains("depends on \"nope\""));

    let mut input = full();
    input.addons[1].release.depends_on = vec!["dex".into()];
    assert!(render_err(&input).contains("cycle"));

    let mut input = full();
    input.addons[0].release.depends_on = vec!["metrics-server".into()];
    assert!(render_err(&input).contains("bootstrap addon"));

    let mut input = full();
    input.plugins.cluster.cloudformation[0].stack = "node-pool-missing".into();
    let msg = render_err(&input);
    assert!(
        msg.contains("\"node-pool-missing\"") && msg.contains("node-pool-general"),
        "{msg}"
    );

    let mut input = full();
    input.plugins.cluster.cloudformation[0]
        .resources
        .insert("ControllerGroup".into(), serde_json::json!({"Type": "AWS::SNS::Topic"}));
    assert!(render_err(&input).contains("\"ControllerGroup\" already exists"));

    let mut input = full();
    input.plugins.controller.files[0].path = "/etc/kube-aws/node.json".into();
    assert!(render_err(&input).contains("also written by"));

    let mut input = full();
    input.plugins.controller.files[0].path = "relative/file".into();
    assert!(render_err(&input).contains("must be absolute"));
}

#[test]
fn install_order_and_wait_conditions() {
    let r = rendered(&full());
    let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
    let names: Vec<&str> = plan["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["calico", "cert-manager", "metrics-server", "dex"]);
    // The wait conditions are in the root stack, after the control plane and
    // every pool (which start only once the control plane is done).
    let root: serde_json::Value = serde_json::from_slice(r.get("stacks/root.json").unwrap()).unwrap();
    let cp: serde_json::Value = serde_json::from_slice(r.get("stacks/control-plane.json").unwrap()).unwrap();
    for pool in ["NodePoolGeneral", "NodePoolSpotArm"] {
        assert_eq!(
            root["Resources"][pool]["DependsOn"],
            serde_json::json!(["ControlPlane"])
        );
    }
    for e in plan["releases"].as_array().unwrap() {
        let id = e["waitCondition"].as_str().unwrap();
        assert!(cp["Resources"].get(id).is_none(), "{id} in the control-plane stack");
        let wc = &root["Resources"][id];
        assert_eq!(wc["Type"], "AWS::CloudFormation::WaitCondition");
        assert_eq!(wc["CreationPolicy"]["ResourceSignal"]["Count"], 1);
        let deps = wc["DependsOn"].as_array().unwrap();
        assert_eq!(deps[..3], ["ControlPlane", "NodePoolGeneral", "NodePoolSpotArm"]);
        assert_eq!(deps.len(), 3 + e["dependsOn"].as_array().unwrap().len());
    }
}

#[test]
fn a_changed_addon_gets_a_new_wait_condition() {
    let wcs = |input: &render::RenderInput| -> Vec<String> {
        let plan: serde_json::Value = serde_json::from_slice(rendered(input).get("addons/plan.json").unwrap()).unwrap();
        plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["waitCondition"].as_str().unwrap().to_string())
            .collect()
    };
    let base = wcs(&full());
    let mut input = full();
    input.addons[2].values_yaml = "replicas: 3\n".into();
    let changed = wcs(&input);
    assert_eq!(base[0..2], changed[0..2]);
    assert_ne!(base[2], changed[2], "metrics-server's values changed");
    assert_eq!(base[3], changed[3]);
}

#[test]
fn a_secret_reference_in_a_stack_is_refused() {
    // CloudFormation would get the reference, never the value.
    let reference = "kube-aws-secret.dex.clientSecret";
    let mut input = full();
    input.plugins.controller.iam_statements[0].statement["Resource"] = serde_json::json!(reference);
    let msg = render_err(&input);
    assert!(
        msg.contains(&format!("{reference:?}")) && msg.contains("IAM statements") && msg.contains("secret: true"),
        "{msg}"
    );
    let mut input = full();
    input.plugins.cluster.cloudformation[0].resources.insert(
        "Topic".into(),
        serde_json::json!({"Type": "AWS::SNS::Topic", "Properties": {"TopicName": reference}}),
    );
    assert!(render_err(&input).contains("CloudFormation resources"));
    let mut input = full();
    input.plugins.pools["general"]
        .asg_tags
        .insert("k".into(), reference.into());
    assert!(render_err(&input).contains("auto scaling group tags"));
    // Nor in a systemd unit, where `$` and `%` in the value would be expanded.
    let mut input = full();
    input.plugins.controller.systemd_units[0].content = format!("[Service]\nEnvironment=PW={reference}\n");
    let msg = render_err(&input);
    assert!(msg.contains("EnvironmentFile=") && msg.contains(reference), "{msg}");
    // A longer name that merely starts like a reference is not one.
    let mut input = full();
    input.plugins.controller.iam_statements[0].statement["Sid"] =
        serde_json::json!("kube-aws-secret.dex.clientSecretX");
    rendered(&input);
}

#[test]
fn each_role_decrypts_only_its_own_secrets() {
    let r = rendered(&full());
    let statements = |stack: &str| -> Vec<serde_json::Value> {
        let t: serde_json::Value = serde_json::from_slice(r.get(stack).unwrap()).unwrap();
        let (id, _) = t["Resources"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, v)| v["Type"] == "AWS::IAM::Role")
            .unwrap();
        kube_aws::render::cfn::iam_size::role_statements(&t, id)
    };
    let decryptable = |stack: &str| -> Vec<String> {
        let Some(s) = statements(stack).into_iter().find(|s| s["Sid"] == "DecryptOwnSecrets") else {
            return vec![];
        };
        assert_eq!(
            s["Condition"]["StringEquals"]["kms:EncryptionContext:kube-aws:cluster"],
            "full"
        );
        serde_json::from_value(s["Condition"]["StringEquals"]["kms:EncryptionContext:kube-aws:secret"].clone()).unwrap()
    };
    // dex's values (on the controller) hold the client secret's reference; no worker file does.
    assert_eq!(
        decryptable("stacks/control-plane.json"),
        [
            "kube-aws-secret.dex.clientSecret",
            "kubeadm/bootstrap-token",
            "pki/ca.key",
            "pki/encryption.json",
            "pki/etcd/ca.key",
            "pki/front-proxy-ca.key",
            "pki/sa.key",
        ]
    );
    // Workers never decrypt a PKI key nor the init token: they have no bundle
    // entry here, and read the join token from its parameter, under the key
    // only for that parameter, through SSM (issue 27).
    for pool in ["stacks/node-pool-general.json", "stacks/node-pool-spot-arm.json"] {
        assert_eq!(decryptable(pool), Vec::<String>::new(), "{pool}");
        let st = statements(pool);
        let ssm = st.iter().find(|s| s["Sid"] == "JoinToken").unwrap();
        assert_eq!(ssm["Action"], serde_json::json!(["ssm:GetParameter"]), "{pool}");
        let key = st.iter().find(|s| s["Sid"] == "JoinTokenKey").unwrap();
        assert_eq!(key["Action"], serde_json::json!(["kms:Decrypt"]), "{pool}");
        let arn = &key["Condition"]["StringEquals"]["kms:EncryptionContext:PARAMETER_ARN"]["Fn::Sub"];
        assert!(
            arn.as_str()
                .unwrap()
                .ends_with(":parameter/kube-aws/full/bootstrap-token"),
            "{key}"
        );
    }
    let cp = statements("stacks/control-plane.json");
    let key = cp.iter().find(|s| s["Sid"] == "JoinTokenKey").unwrap();
    assert_eq!(key["Action"], serde_json::json!(["kms:Decrypt"]));
    // Decrypt under every key a rotation kept (the parameter), encrypt under kmsKeyARN only.
    let keys = serde_json::json!({"Fn::Split": [",", {"Ref": "DecryptKmsKeyARNs"}]});
    assert_eq!(key["Resource"], keys);
    let enc = cp.iter().find(|s| s["Sid"] == "JoinTokenKeyEncrypt").unwrap();
    assert_eq!(enc["Action"], serde_json::json!(["kms:Encrypt"]));
    assert!(enc["Resource"].as_str().unwrap().starts_with("arn:aws:kms:"), "{enc}");
    // No node reads bootstrap/join.json any more: the CA hash is a stack parameter.
    for stack in ["stacks/control-plane.json", "stacks/node-pool-general.json"] {
        let text = r.text(stack).unwrap();
        assert!(!text.contains("join.json"), "{stack}");
        let t: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            t["Parameters"]["CACertHash"]["AllowedPattern"], "^sha256:[0-9a-f]{64}$",
            "{stack}"
        );
    }
    // The node learns the same list, and which files to fill.
    let cc = r.text("userdata/controller.cloud-config").unwrap();
    let node: serde_json::Value = written_files(cc)
        .into_iter()
        .find(|(p, _)| p == "/etc/kube-aws/node.json")
        .map(|(_, c)| serde_json::from_str(&c).unwrap())
        .unwrap();
    assert_eq!(node["secrets"]["names"].as_array().unwrap().len(), 7);
    assert_eq!(node["secrets"]["pki"]["dir"], "/etc/kubernetes/pki");
    // The values file is in the addon bundle: the reconciler fills it.
    assert_eq!(node["secrets"]["files"], serde_json::json!([]));
    let bundle: serde_json::Value = serde_json::from_slice(r.get("addons/bundle.json").unwrap()).unwrap();
    assert_eq!(
        bundle["secretFiles"],
        serde_json::json!([{"path": "values/dex.yaml", "format": "yaml"}])
    );
    // No node may encrypt, except S3 on the controllers' behalf for the etcd
    // snapshots (SSE-KMS) and Parameter Store for the join token they mint
    // (only that parameter, through SSM): every other thing a node writes is not secret.
    for (path, bytes) in r.files.iter().filter(|(p, _)| p.starts_with("stacks/")) {
        let t: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        for doc in policy_documents(&t) {
            {
                for st in doc["Statement"].as_array().unwrap() {
                    if st["Action"].to_string().contains("\"kms:Encrypt\"") {
                        assert_eq!(st["Sid"], "JoinTokenKeyEncrypt", "{path}: {st}");
                        let c = &st["Condition"]["StringEquals"];
                        assert_eq!(
                            c["kms:ViaService"]["Fn::Sub"], "ssm.${AWS::Region}.amazonaws.com",
                            "{st}"
                        );
                        assert!(
                            c["kms:EncryptionContext:PARAMETER_ARN"]["Fn::Sub"]
                                .as_str()
                                .unwrap()
                                .ends_with(":parameter/kube-aws/full/bootstrap-token"),
                            "{st}"
                        );
                        assert!(path.ends_with("control-plane.json"), "{path}");
                    }
                    if st.to_string().contains("kms:GenerateDataKey") {
                        assert_eq!(st["Sid"], "EncryptEtcdSnapshots", "{path}: {st}");
                        assert!(st["Condition"]["StringEquals"]["kms:ViaService"].is_string(), "{st}");
                        assert!(path.ends_with("control-plane.json"), "{path}");
                    }
                }
            }
        }
    }
}

/// Every IAM policy document of a template: roles' inline `Policies`, and
/// AWS::IAM::Policy and AWS::IAM::ManagedPolicy resources.
fn policy_documents(t: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for res in t["Resources"].as_object().unwrap().values() {
        for p in res["Properties"]["Policies"].as_array().into_iter().flatten() {
            out.push(p["PolicyDocument"].clone());
        }
        if matches!(
            res["Type"].as_str(),
            Some("AWS::IAM::Policy" | "AWS::IAM::ManagedPolicy")
        ) {
            out.push(res["Properties"]["PolicyDocument"].clone());
        }
    }
    out
}

#[test]
fn least_privilege_in_our_statements() {
    let r = rendered(&minimal());
    for (path, bytes) in r.files.iter().filter(|(p, _)| p.starts_with("stacks/")) {
        let t: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        for doc in policy_documents(&t) {
            {
                for s in doc["Statement"].as_array().unwrap() {
                    let actions = s["Action"].as_array().unwrap();
                    assert!(
                        actions.iter().all(|a| !a.as_str().unwrap().contains('*')),
                        "{path}: {s}"
                    );
                }
            }
        }
    }
}

#[test]
fn stubs_fit_and_sizes_are_reported() {
    let r = rendered(&full());
    let stubs = render::stub_sizes(&r);
    assert_eq!(stubs.len(), 3);
    for s in &stubs {
        assert!(s.size + render::STUB_SUBSTITUTION_ROOM <= 4096, "{s:?}");
    }
    let t = render::template_sizes(&r);
    assert_eq!(t.len(), 5);
    assert!(t.iter().all(|s| s.size > 0 && s.size < s.limit));
}

#[test]
fn write_rendered_replaces_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rendered");
    let r = rendered(&minimal());
    // An earlier render's output (it carries the marker) with a stale file in it.
    write_rendered(dir.path(), &out, &r).unwrap();
    std::fs::create_dir_all(out.join("stale")).unwrap();
    std::fs::write(out.join("stale/old.txt"), "old").unwrap();
    // `out` holds r's files, and nothing else (no temporary sibling) is left beside it.
    let holds_r_alone = || {
        assert_eq!(
            std::fs::read(out.join("addons/plan.json")).unwrap(),
            r.get("addons/plan.json").unwrap()
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    };
    write_rendered(dir.path(), &out, &r).unwrap();
    assert!(!out.join("stale").exists(), "old output is replaced as a whole");
    holds_r_alone();

    // A write that fails half-way (a file where a directory must go) leaves the previous output.
    let mut bad = r.clone();
    bad.files.insert("stacks/root.json/x".into(), b"x".to_vec());
    assert!(write_rendered(dir.path(), &out, &bad).is_err());
    holds_r_alone();
}

#[test]
fn a_failed_render_is_a_typed_error() {
    let mut input = minimal();
    input.cluster.s3_uri = "http://not-s3".into();
    assert!(matches!(render::render(&input), Err(RenderError::S3Uri { .. })));
}

#[test]
fn cli_render_writes_the_layout_and_is_repeatable() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("demo");
    let bin = || {
        let mut c = assert_cmd::Command::cargo_bin("kube-aws").unwrap();
        c.env("NO_COLOR", "1");
        c
    };
    bin().arg("init").arg(&tree).assert().success();
    let out = bin().arg("--dir").arg(&tree).arg("render").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("control-plane.json"), "{stdout}");
    let plan = std::fs::read(tree.join("rendered/addons/plan.json")).unwrap();
    assert!(tree.join("rendered/userdata/worker-general.stub").is_file());

    let other = dir.path().join("elsewhere");
    let out = bin()
        .arg("--dir")
        .arg(&tree)
        .args(["-o", "json", "render", "--output-dir"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "stacks/root.json"));
    assert_eq!(
        std::fs::read(other.join("addons/plan.json")).unwrap(),
        plan,
        "same tree, same bytes"
    );
}

fn stack(r: &Rendered, name: &str) -> serde_json::Value {
    serde_json::from_slice(r.get(&format!("stacks/{name}.json")).unwrap()).unwrap()
}

/// Resources of a stack whose definition differs between two renders (added,
/// removed or changed), by logical ID.
fn changed_resources(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let (ra, rb) = (a["Resources"].as_object().unwrap(), b["Resources"].as_object().unwrap());
    let mut ids: Vec<String> = ra
        .keys()
        .chain(rb.keys())
        .filter(|k| ra.get(*k) != rb.get(*k))
        .cloned()
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The day-2 invariant at template level: an addon-only change (values, a
/// chart version, a plugin manifest) leaves every launch template, auto
/// scaling group, role and user data as it is; only the plan pointer and the
/// changed releases' wait conditions differ. (tests/it/deploy_moto.rs shows the
/// same through a change set.)
#[test]
fn an_addon_only_change_touches_the_plan_pointer_and_wait_conditions_only() {
    let before = full();
    let a = rendered(&before);
    let mut after = before.clone();
    after.addons[2].values_yaml.push_str("replicas: 3\n");
    after.addons[1].chart_version = "9.9.9".into();
    after.plugins.cluster.manifests[0].content.push_str("# changed\n");
    let b = rendered(&after);
    let wc = |r: &Rendered, i: usize| -> String {
        let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
        plan["releases"][i]["waitCondition"].as_str().unwrap().to_string()
    };
    let (cp_a, cp_b) = (stack(&a, "control-plane"), stack(&b, "control-plane"));
    // Only the pointer (control plane) and wait conditions (root) differ (a
    // kept wait condition may list a dependency's new ID, which
    // CloudFormation does not update it for).
    assert_eq!(changed_resources(&cp_a, &cp_b), ["AddonPlan"]);
    let (cp_a, cp_b) = (stack(&a, "root"), stack(&b, "root"));
    for id in changed_resources(&cp_a, &cp_b) {
        let t = cp_b["Resources"].get(&id).unwrap_or(&cp_a["Resources"][&id])["Type"].clone();
        assert!(t == "AWS::CloudFormation::WaitCondition", "{id} ({t}) changed");
    }
    // The new wait conditions are exactly the changed releases'.
    let ids = |cp: &serde_json::Value| -> std::collections::BTreeSet<String> {
        cp["Resources"].as_object().unwrap().keys().cloned().collect()
    };
    let added: Vec<String> = ids(&cp_b).difference(&ids(&cp_a)).cloned().collect();
    let mut want = Vec::new();
    for name in [&before.addons[1].release.name, &before.addons[2].release.name] {
        let plan: serde_json::Value = serde_json::from_slice(a.get("addons/plan.json").unwrap()).unwrap();
        let i = plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .position(|e| e["name"] == name.as_str())
            .unwrap();
        assert_ne!(wc(&a, i), wc(&b, i));
        want.push(wc(&b, i));
    }
    want.sort();
    assert_eq!(added, want);
    for (path, bytes) in &a.files {
        if path.starts_with("userdata/")
            || (path.starts_with("stacks/")
                && !["stacks/control-plane.json", "stacks/root.json"].contains(&path.as_str()))
        {
            assert_eq!(b.get(path), Some(bytes.as_slice()), "{path} changed");
        }
    }
    // The releases that did not change keep their wait condition: nothing waits for them.
    let unchanged = |r: &Rendered| -> Vec<String> {
        let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
        plan["releases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["name"] != before.addons[1].release.name.as_str()
                    && e["name"] != before.addons[2].release.name.as_str()
            })
            .map(|e| e["waitCondition"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(unchanged(&a), unchanged(&b));
    // Each wait condition depends on the control-plane stack, whose pointer
    // makes its plan live: it exists only once the controllers can see its plan.
    let any_wc = wc(&b, 0);
    let deps = &cp_b["Resources"][any_wc.as_str()]["DependsOn"];
    assert!(deps.as_array().unwrap().iter().any(|d| d == "ControlPlane"), "{deps}");
}

/// The controllers keep etcd's quorum through an update: one at a time,
/// launch before terminate (the count in service, MaxSize one above it),
/// each new one signalled (joined) before an old one goes, over every
/// subnet's zone; one controller rolls terminate first.
#[test]
fn three_controllers_roll_one_at_a_time_launching_first_over_every_zone() {
    let mut input = full();
    input.cluster.controller.count = 3;
    let cp = stack(&rendered(&input), "control-plane");
    let g = &cp["Resources"]["ControllerGroup"];
    let policy = &g["UpdatePolicy"]["AutoScalingRollingUpdate"];
    assert_eq!(policy["MaxBatchSize"], "1");
    assert_eq!(policy["MinInstancesInService"], "3");
    assert_eq!(policy["WaitOnResourceSignals"], true);
    assert!(policy["PauseTime"].as_str().unwrap().starts_with("PT"));
    assert!(policy["SuspendProcesses"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == "AZRebalance"));
    assert_eq!(g["CreationPolicy"]["ResourceSignal"]["Count"], 3);
    let p = &g["Properties"];
    assert_eq!(
        (
            p["MinSize"].as_str(),
            p["MaxSize"].as_str(),
            p["DesiredCapacity"].as_str()
        ),
        (Some("3"), Some("4"), Some("3"))
    );
    // MinInstancesInService must stay below MaxSize (CloudFormation's rule).
    assert!(policy["MinInstancesInService"].as_str().unwrap() < p["MaxSize"].as_str().unwrap());
    // One controller: terminate first (its replacement restores the snapshot).
    let mut one = input.clone();
    one.cluster.controller.count = 1;
    let cp1 = stack(&rendered(&one), "control-plane");
    let g1 = &cp1["Resources"]["ControllerGroup"];
    assert_eq!(
        g1["UpdatePolicy"]["AutoScalingRollingUpdate"]["MinInstancesInService"],
        "0"
    );
    assert_eq!(g1["Properties"]["MaxSize"], "1");
    // Every subnet (one per zone) is the group's: the group balances over the zones.
    assert_eq!(p["VPCZoneIdentifier"], serde_json::json!({"Ref": "SubnetIds"}));
    // Three zones by default with 3 controllers (1+1+1: losing one zone keeps
    // quorum), each node subnet in its own zone, all of them in SubnetIds.
    let mut default_zones = input.clone();
    default_zones.cluster.network.availability_zones.clear();
    let r = rendered(&default_zones);
    let net = stack(&r, "network");
    let zones: Vec<&serde_json::Value> = (0..3)
        .map(|i| &net["Resources"][format!("Subnet{i}")]["Properties"]["AvailabilityZone"])
        .collect();
    for (i, z) in zones.iter().enumerate() {
        assert_eq!(z["Fn::Select"][0], i, "{z}");
    }
    assert!(net["Resources"].get("Subnet3").is_none());
    assert_eq!(
        net["Outputs"]["SubnetIds"]["Value"]["Fn::Join"][1]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // One controller keeps the two default zones.
    let mut one = default_zones.clone();
    one.cluster.controller.count = 1;
    assert!(stack(&rendered(&one), "network")["Resources"].get("Subnet2").is_none());
    assert_eq!(stack(&rendered(&one), "root")["Outputs"]["ZoneCount"]["Value"], "2");
    // After `up`, the stack's record wins (issue 29): 3 controllers scaled to
    // one keep the three subnets, and the record stays 3.
    let mut recorded = one.clone();
    recorded.cluster.network.recorded_zone_count = Some(3);
    let r = rendered(&recorded);
    assert!(stack(&r, "network")["Resources"].get("Subnet2").is_some());
    assert_eq!(stack(&r, "root")["Outputs"]["ZoneCount"]["Value"], "3");
    // Explicit zones win: 3 controllers on 2 listed zones split 2+1 (documented).
    let mut two = input.clone();
    two.cluster.network.availability_zones = vec!["us-west-2a".into(), "us-west-2b".into()];
    assert!(stack(&rendered(&two), "network")["Resources"].get("Subnet2").is_none());

    // The termination hook: the leaving controller removes its etcd member
    // once the others keep a quorum (holding the hook with heartbeats until
    // then); the group goes on after 300 s without a heartbeat.
    let hook = &cp["Resources"]["ControllerTerminationHook"];
    assert_eq!(hook["Type"], "AWS::AutoScaling::LifecycleHook");
    let h = &hook["Properties"];
    assert_eq!(h["AutoScalingGroupName"], serde_json::json!({"Ref": "ControllerGroup"}));
    assert_eq!(h["LifecycleTransition"], "autoscaling:EC2_INSTANCE_TERMINATING");
    assert_eq!(h["DefaultResult"], "CONTINUE");
    assert_eq!(h["HeartbeatTimeout"], 300);
    assert_eq!(h["LifecycleHookName"], "kube-aws-etcd-member");
    // Completing it is allowed on its own group only.
    let policy = &cp["Resources"]["ControllerLifecycleHookPolicy"]["Properties"];
    assert_eq!(policy["Roles"], serde_json::json!([{"Ref": "ControllerRole"}]));
    let complete = policy["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Sid"] == "CompleteOwnLifecycleAction")
        .unwrap();
    // The heartbeat holds the hook while the member's removal would lose quorum.
    assert_eq!(
        complete["Action"],
        serde_json::json!([
            "autoscaling:CompleteLifecycleAction",
            "autoscaling:RecordLifecycleActionHeartbeat"
        ])
    );
    assert!(complete["Resource"]["Fn::Sub"]
        .as_str()
        .unwrap()
        .ends_with(":autoScalingGroup:*:autoScalingGroupName/${ControllerGroup}"));
}

/// Backups: the controllers may write and list objects under `etcd/` of the
/// cluster's prefix and nothing else there, never delete one (the bucket's
/// lifecycle rules expire them), encrypt them with the cluster's key through
/// S3 only, and read their settings parameter, which holds the interval and
/// count (not the user data; retention is the bucket's, not the nodes').
#[test]
fn etcd_backups_are_scoped_to_their_prefix_and_key() {
    let mut input = full();
    input.cluster.etcd.backup.interval = "2h".into();
    let r = rendered(&input);
    let cp = stack(&r, "control-plane");
    let statements = kube_aws::render::cfn::iam_size::role_statements(&cp, "ControllerRole");
    let sid = |id: &str| {
        statements
            .iter()
            .find(|s| s["Sid"] == id)
            .unwrap_or_else(|| panic!("no {id}"))
    };
    let settings: serde_json::Value =
        serde_json::from_str(cp["Resources"]["EtcdSettings"]["Properties"]["Value"].as_str().unwrap()).unwrap();
    let prefix = settings["backupPrefix"].as_str().unwrap();
    assert!(prefix.ends_with("/etcd/"), "{prefix}");
    assert_eq!(settings["intervalSeconds"], 7200);
    assert!(settings.get("retention").is_none(), "{settings}");
    assert_eq!(settings["controllerCount"], input.cluster.controller.count);
    let bucket = settings["bucket"].as_str().unwrap();
    assert_eq!(
        sid("WriteEtcdSnapshots")["Action"],
        serde_json::json!(["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"])
    );
    assert_eq!(
        sid("WriteEtcdSnapshots")["Resource"],
        serde_json::json!([format!("arn:aws:s3:::{bucket}/{prefix}*")])
    );
    assert_eq!(
        sid("ListEtcdSnapshots")["Condition"]["StringLike"]["s3:prefix"],
        serde_json::json!([format!("{prefix}*")])
    );
    let kms = sid("EncryptEtcdSnapshots");
    assert_eq!(kms["Resource"], input.cluster.kms_key_arn.clone().unwrap().as_str());
    assert_eq!(kms["Action"], serde_json::json!(["kms:GenerateDataKey"]));
    // Restores decrypt under the retired keys too (key rotation), with the same conditions.
    let dec = sid("DecryptEtcdSnapshots");
    assert_eq!(dec["Action"], serde_json::json!(["kms:Decrypt"]));
    assert_eq!(
        dec["Resource"],
        serde_json::json!({"Fn::Split": [",", {"Ref": "DecryptKmsKeyARNs"}]})
    );
    assert_eq!(dec["Condition"], kms["Condition"]);
    assert!(kms["Condition"]["StringEquals"]["kms:ViaService"]
        .as_str()
        .unwrap()
        .starts_with("s3."));
    assert!(sid("ReadEtcdSettings")["Resource"]["Fn::Sub"]
        .as_str()
        .unwrap()
        .ends_with(&format!("parameter/kube-aws/{}/etcd", input.cluster.cluster_name)));
    // The controllers carry the units (enabled at boot) and only the parameter's name.
    let cc = std::str::from_utf8(r.get("userdata/controller.cloud-config").unwrap()).unwrap();
    for unit in [
        "kube-aws-etcd-backup.timer",
        "kube-aws-etcd-backup.service",
        "kube-aws-lifecycle.service",
    ] {
        assert!(cc.contains(&format!("/etc/systemd/system/{unit}")), "{unit}");
    }
    assert!(cc.contains("/etc/kube-aws/etcd.json"));
    assert!(!cc.contains("7200"), "the interval is in the user data");
    // Workers get none of it.
    for (path, bytes) in &r.files {
        if path.starts_with("userdata/worker-") && path.ends_with(".cloud-config") {
            let w = std::str::from_utf8(bytes).unwrap();
            // (The node program every node carries names them; the files are not there.)
            assert!(
                !w.contains("path: \"/etc/systemd/system/kube-aws-lifecycle")
                    && !w.contains("path: \"/etc/kube-aws/etcd.json\""),
                "{path}"
            );
        }
    }
}

/// What each kind of change rolls, at template level: the groups
/// src/aws/lifecycle/rolls.rs finds between two renders (the rule `update`'s preview
/// uses), with the root parameters a publish sets (an AMI, a secrets
/// version). Printed (for docs/deploy.md's "What each kind of change
/// replaces") and checked: only the changes that reach a node's user data, its
/// launch template or its subnets replace instances.
#[test]
fn what_each_kind_of_change_replaces() {
    use kube_aws::aws::lifecycle::rolls::{group_rolls, Deployment, Replacement};
    use kube_aws::aws::lifecycle::update_order::rolls_in_words;
    let base = full();
    let a = rendered(&base);
    let params = |extra: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut p: std::collections::BTreeMap<String, String> =
            [("ImageIdX86", "ami-x86-1"), ("ImageIdArm64", "ami-arm-1")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        for (k, v) in extra {
            p.insert(k.to_string(), v.to_string());
        }
        p.into_iter().collect()
    };
    let deployment = |r: &Rendered, p: &[(String, String)]| {
        Deployment::from_files(r.text("stacks/root.json").unwrap(), p, |path| {
            r.text(path).map(str::to_string)
        })
        .unwrap()
    };
    let old = deployment(&a, &params(&[]));
    assert_eq!(
        old.nested.len(),
        4,
        "every nested template is found: {:?}",
        old.nested.keys()
    );
    type Change = Box<dyn Fn(&mut render::RenderInput)>;
    let none: Change = Box::new(|_| {});
    // (kind, the change, root parameters it sets, the groups that roll and how)
    type Kind<'a> = (&'a str, Change, Vec<(&'a str, &'a str)>, Vec<&'a str>);
    let kinds: Vec<Kind> = vec![
        (
            "addon values (one release)",
            Box::new(|i| i.addons[2].values_yaml.push_str("replicas: 3\n")),
            vec![],
            vec![],
        ),
        (
            "chart version (one release)",
            Box::new(|i| i.addons[1].chart_version = "9.9.9".into()),
            vec![],
            vec![],
        ),
        (
            "plugin manifest",
            Box::new(|i| i.plugins.cluster.manifests[0].content.push_str("# x\n")),
            vec![],
            vec![],
        ),
        (
            "etcd.backup.interval",
            Box::new(|i| i.cluster.etcd.backup.interval = "30m".into()),
            vec![],
            vec![],
        ),
        (
            "plugin node file (controller)",
            Box::new(|i| i.plugins.controller.files[0].content.push_str("x\n")),
            vec![],
            vec!["ControlPlane/ControllerGroup rolling"],
        ),
        (
            "kubelet flag (pool general)",
            Box::new(|i| {
                let hooks = i.plugins.pools.get_mut("general").unwrap();
                hooks.kubelet_flags.insert("max-pods".into(), "40".into());
            }),
            vec![],
            vec!["NodePoolGeneral/WorkerGroup rolling"],
        ),
        // The ClusterConfiguration is in the addon bundle, not the user data:
        // the controllers apply it in place (reconfigure.py), no group rolls.
        (
            "apiserver flag (plugin)",
            Box::new(|i| {
                i.plugins
                    .cluster
                    .api_server_flags
                    .insert("oidc-username-claim".into(), "email".into());
            }),
            vec![],
            vec![],
        ),
        (
            "controller-manager flag (plugin)",
            Box::new(|i| {
                i.plugins
                    .cluster
                    .controller_manager_flags
                    .insert("node-monitor-grace-period".into(), "50s".into());
            }),
            vec![],
            vec![],
        ),
        (
            "scheduler flag (plugin)",
            Box::new(|i| {
                i.plugins.cluster.scheduler_flags.insert("v".into(), "3".into());
            }),
            vec![],
            vec![],
        ),
        (
            "secret rotation (a controller secret)",
            Box::new(|_| {}),
            vec![("ControlPlaneSecretsVersion", "0123456789abcdef")],
            vec!["ControlPlane/ControllerGroup rolling"],
        ),
        (
            "AMI refresh (x86_64)",
            Box::new(|_| {}),
            vec![("ImageIdX86", "ami-x86-2")],
            vec![
                "ControlPlane/ControllerGroup rolling",
                "NodePoolGeneral/WorkerGroup rolling",
            ],
        ),
        (
            "pool instance type (general)",
            Box::new(|i| i.cluster.worker.node_pools[0].instance_type = "m6i.xlarge".into()),
            vec![],
            vec!["NodePoolGeneral/WorkerGroup rolling"],
        ),
        (
            "controller.count 3 → 5",
            Box::new(|i| i.cluster.controller.count += 2),
            vec![],
            vec!["ControlPlane/ControllerGroup resized"],
        ),
        (
            "kubernetesVersion 1.35 → 1.36",
            Box::new(|i| i.cluster.kubernetes_version = "1.36".into()),
            vec![],
            vec![
                "ControlPlane/ControllerGroup rolling",
                "NodePoolGeneral/WorkerGroup rolling",
                "NodePoolSpotArm/WorkerGroup rolling",
            ],
        ),
        ("nothing", none, vec![], vec![]),
    ];
    let mut table = String::new();
    for (kind, change, set, want) in &kinds {
        let mut input = base.clone();
        change(&mut input);
        let b = rendered(&input);
        let rolls = group_rolls(&old, &deployment(&b, &params(set)));
        let got: Vec<String> = rolls
            .iter()
            .map(|r| {
                let how = match (&r.replacement, r.before != r.after) {
                    (Replacement::Rolling { batch: 1 }, _) => "rolling",
                    (Replacement::None, true) => "resized",
                    (other, _) => panic!("{kind}: {other:?}"),
                };
                format!("{}/{} {how}", r.stack, r.group)
            })
            .collect();
        table.push_str(&format!("| {kind} | {} |\n", rolls_in_words(&rolls)));
        assert_eq!(got, *want, "{kind}: {rolls:#?}");
    }
    println!("{table}");
}

#[test]
fn the_plan_reads_back_typed_as_it_was_rendered() {
    use kube_aws::render::{layout, plan::Plan};
    for input in [minimal(), full()] {
        let r = rendered(&input);
        let bytes = r.get(layout::ADDON_PLAN).unwrap();
        let typed = Plan::from_json(bytes).unwrap();
        let built = render::plan::build_plan(&input, &render::Ctx::new(&input).unwrap()).unwrap();
        assert_eq!(typed, built);
        let mut again = serde_json::to_string_pretty(&typed).unwrap();
        again.push('\n');
        assert_eq!(again.as_bytes(), bytes, "the plan does not survive a round trip");
        assert_eq!(typed.releases.len(), input.addons.len());
        assert!(
            typed.releases.iter().all(|rel| rel.sha256.is_some() == rel.locked),
            "{typed:?}"
        );
    }
    // What `aws` reads of a plan it did not render: every other key defaults.
    let partial = Plan::from_json(br#"{"releases": [{"name": "dex", "waitCondition": "AddonDexReady"}]}"#).unwrap();
    assert_eq!(partial.releases[0].wait_condition, "AddonDexReady");
    assert!(Plan::from_json(br#"{"releases": [{"name": 3}]}"#).is_err());
}

/// The example's render input (`init --example`, charts not fetched).
fn example_input() -> (tempfile::TempDir, render::RenderInput) {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("example");
    let o = Command::new(env!("CARGO_BIN_EXE_kube-aws"))
        .args(["init", "--example"])
        .arg(&tree)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::output_text(&o));
    let p = kube_aws::pipeline::prepare(&kube_aws::pipeline::PrepareOptions {
        dir: tree,
        cache_dir: tmp.path().join("cache"),
        require_charts: false,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    (tmp, p.input)
}

/// The pod identity webhook (issue 24, finding 9): two replicas that a
/// drain cannot both take, spread over zones and hosts, and Ready before any
/// release whose pods need it starts: its Deployment is in the plan's
/// `manifestRollouts`, the releases of plugins with IAM roles are not
/// bootstrap ones (so they start after that wait), and their wait-condition
/// timeouts include it.
#[test]
fn pod_identity_webhook_is_ready_before_the_releases_that_need_it() {
    let (_tmp, input) = example_input();
    let r = rendered(&input);
    let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
    let manifest = "manifests/pod-identity-webhook/webhook.yaml";
    assert!(
        plan["manifests"].as_array().unwrap().iter().any(|m| m == manifest),
        "{}",
        plan["manifests"]
    );
    assert_eq!(
        plan["manifestRollouts"],
        serde_json::json!([{
            "manifest": manifest,
            "kind": "Deployment",
            "namespace": "kube-system",
            "name": "pod-identity-webhook",
            "timeoutSeconds": kube_aws::render::plan::MANIFEST_ROLLOUT_TIMEOUT_SECONDS,
        }])
    );

    // The workload: 2 replicas, a PDB keeping one, a soft spread by zone and host.
    let docs: Vec<serde_yaml::Value> =
        serde_yaml::Deserializer::from_str(std::str::from_utf8(r.get(manifest).unwrap()).unwrap())
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let deploy = of("Deployment");
    let spec = &deploy["spec"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let labels = &spec["template"]["metadata"]["labels"];
    let spread: Vec<(&str, &str)> = pod["topologySpreadConstraints"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["maxSkew"], 1);
            assert_eq!(c["labelSelector"]["matchLabels"]["app"], labels["app"]);
            (
                c["topologyKey"].as_str().unwrap(),
                c["whenUnsatisfiable"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        spread,
        [
            ("topology.kubernetes.io/zone", "ScheduleAnyway"),
            ("kubernetes.io/hostname", "ScheduleAnyway")
        ]
    );
    let pdb = of("PodDisruptionBudget");
    assert_eq!(pdb["metadata"]["namespace"], "kube-system");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], spec["selector"]["matchLabels"]);
    assert_eq!(labels["app"], spec["selector"]["matchLabels"]["app"]);

    // The releases that need it come after it.
    let with_roles: std::collections::BTreeSet<&str> = input
        .plugins
        .service_accounts
        .iter()
        .map(|s| s.plugin.as_str())
        .collect();
    let releases = plan["releases"].as_array().unwrap();
    let needing: Vec<&str> = releases
        .iter()
        .filter(|rel| {
            let origin = rel["origin"].as_str().unwrap();
            with_roles.iter().any(|p| origin == format!("plugin {p}"))
        })
        .map(|rel| rel["name"].as_str().unwrap())
        .collect();
    assert!(
        needing.len() >= 2,
        "the example has releases with IAM roles: {needing:?}"
    );
    for rel in releases {
        if needing.contains(&rel["name"].as_str().unwrap()) {
            assert_eq!(rel["bootstrap"], false, "{rel}");
        }
    }
    // Each non-bootstrap release's timeout includes the rollout wait; a
    // bootstrap one's does not (the rollout is after the bootstrap phase).
    let deps: Vec<Vec<String>> = releases
        .iter()
        .map(|rel| serde_json::from_value(rel["dependsOn"].clone()).unwrap())
        .collect();
    let steps: Vec<render::timeouts::Step> = releases
        .iter()
        .zip(&deps)
        .map(|(rel, d)| render::timeouts::Step {
            name: rel["name"].as_str().unwrap(),
            depends_on: d,
            bootstrap: rel["bootstrap"] == true,
            budget: render::timeouts::release_budget(rel["timeoutSeconds"].as_u64().unwrap()),
        })
        .collect();
    let without = render::timeouts::wait_timeouts(
        &steps,
        &render::timeouts::Schedule::reconciler(render::plan::CONCURRENCY),
    );
    for ((rel, plain), step) in releases.iter().zip(without).zip(&steps) {
        let extra = if step.bootstrap {
            0
        } else {
            render::plan::MANIFEST_ROLLOUT_TIMEOUT_SECONDS
        };
        assert_eq!(rel["waitTimeoutSeconds"].as_u64().unwrap(), plain + extra, "{rel}");
    }

    // A release with an IAM role cannot be a bootstrap one: its pods would
    // wait for a webhook that is only applied after the bootstrap phase.
    let mut bad = input.clone();
    let a = bad.addons.iter_mut().find(|a| a.release.name == needing[0]).unwrap();
    a.release.bootstrap = true;
    a.release.depends_on.clear();
    let text = match render::render(&bad) {
        Ok(_) => panic!("a bootstrap release with an IAM role renders"),
        Err(e) => e.to_string(),
    };
    assert!(
        text.contains(needing[0]) && text.contains("bootstrap") && text.contains("pod identity webhook"),
        "{text}"
    );

    // Without the webhook nothing waits.
    let mut off = input.clone();
    off.plugins.plugins.retain(|p| p.name != "pod-identity-webhook");
    off.plugins
        .cluster
        .manifests
        .retain(|m| m.plugin != "pod-identity-webhook");
    let r = rendered(&off);
    let plan: serde_json::Value = serde_json::from_slice(r.get("addons/plan.json").unwrap()).unwrap();
    assert!(plan.get("manifestRollouts").is_none(), "{plan}");
}

/// Issue 24, finding 10: the API load balancer asks each controller's
/// apiserver whether it is ready (HTTPS GET /readyz, 200 only), not whether
/// its port is open: a TCP check keeps an apiserver that lost etcd, or one
/// draining on shutdown, in service.
#[test]
fn the_api_health_check_is_https_readyz() {
    for input in [minimal(), full()] {
        let net = stack(&rendered(&input), "network");
        let tg = &net["Resources"]["ApiTargetGroup"]["Properties"];
        assert_eq!(tg["Protocol"], "TCP", "{tg}");
        assert_eq!(tg["HealthCheckProtocol"], "HTTPS", "{tg}");
        assert_eq!(tg["HealthCheckPath"], "/readyz", "{tg}");
        assert_eq!(tg["HealthCheckPort"], "6443", "{tg}");
        assert_eq!(tg["Matcher"], serde_json::json!({"HttpCode": "200"}), "{tg}");
        // What an NLB accepts for an HTTPS check: an interval of 10 or 30 s,
        // a timeout of 2 to 120 s below it, thresholds of 2 to 10.
        let interval = tg["HealthCheckIntervalSeconds"].as_u64().unwrap();
        let timeout = tg["HealthCheckTimeoutSeconds"].as_u64().unwrap();
        assert!([10, 30].contains(&interval) && (2..interval).contains(&timeout), "{tg}");
        for k in ["HealthyThresholdCount", "UnhealthyThresholdCount"] {
            assert!((2..=10).contains(&tg[k].as_u64().unwrap()), "{k}: {tg}");
        }
    }
}

/// Health: the controller group judges its instances by EC2's status checks
/// only, after the bootstrap's allowance, never by the API target group's
/// /readyz (which routes requests, and fails while etcd or the API server
/// restarts: no controller is replaced for it); the controllers may mark an
/// instance of their own group (only) Unhealthy; worker groups keep the
/// default (EC2) health checks.
#[test]
fn controllers_are_not_replaced_on_readiness_and_may_mark_themselves_unhealthy() {
    for input in [minimal(), full()] {
        let cp = stack(&rendered(&input), "control-plane");
        let g = &cp["Resources"]["ControllerGroup"]["Properties"];
        assert_eq!(
            (&g["HealthCheckType"], &g["HealthCheckGracePeriod"]),
            (&serde_json::json!("EC2"), &serde_json::json!(1800))
        );
    }
    let r = rendered(&full());
    let cp = stack(&r, "control-plane");
    let statements = cp["Resources"]["ControllerLifecycleHookPolicy"]["Properties"]["PolicyDocument"]["Statement"]
        .as_array()
        .unwrap()
        .clone();
    let mark = statements.iter().find(|s| s["Sid"] == "MarkOwnGroupUnhealthy").unwrap();
    assert_eq!(mark["Action"], serde_json::json!(["autoscaling:SetInstanceHealth"]));
    assert!(mark["Resource"]["Fn::Sub"]
        .as_str()
        .unwrap()
        .ends_with("autoScalingGroupName/${ControllerGroup}"));
    let net = stack(&r, "network");
    let tg = &net["Resources"]["ApiTargetGroup"]["Properties"];
    assert_eq!(
        (&tg["HealthCheckProtocol"], &tg["HealthCheckPath"]),
        (&serde_json::json!("HTTPS"), &serde_json::json!("/readyz"))
    );
    for (path, _) in r.files.iter().filter(|(p, _)| p.starts_with("stacks/node-pool-")) {
        let pool: serde_json::Value = serde_json::from_slice(r.get(path).unwrap()).unwrap();
        for (id, res) in pool["Resources"].as_object().unwrap() {
            if res["Type"] == "AWS::AutoScaling::AutoScalingGroup" {
                assert!(res["Properties"].get("HealthCheckType").is_none(), "{path} {id}");
            }
        }
    }
}

/// etcd's alarms: the database at 70 % of etcd.quotaBackendBytes, the newest
/// snapshot older than twice etcd.backup.interval (missing data breaching);
/// the controllers may put metrics in the alarms' namespace only.
#[test]
fn etcd_alarms_watch_the_quota_and_the_backup_age() {
    let mut input = full();
    input.cluster.etcd.backup.interval = "2h".into();
    input.cluster.etcd.quota_backend_bytes = 10 * 1024 * 1024 * 1024;
    let r = rendered(&input);
    let cp = stack(&r, "control-plane");
    let size = &cp["Resources"]["EtcdDbSizeAlarm"]["Properties"];
    assert_eq!(size["Threshold"], 7 * 1024 * 1024 * 1024u64);
    assert_eq!(
        (&size["Namespace"], &size["MetricName"]),
        (&serde_json::json!("kube-aws/etcd"), &serde_json::json!("DbSizeBytes"))
    );
    let age = &cp["Resources"]["EtcdBackupAgeAlarm"]["Properties"];
    assert_eq!(age["Threshold"], 4 * 3600);
    assert_eq!(age["TreatMissingData"], "breaching");
    assert_eq!(age["Dimensions"][0]["Value"], input.cluster.cluster_name.as_str());
    let statements = kube_aws::render::cfn::iam_size::role_statements(&cp, "ControllerRole");
    let put = statements.iter().find(|s| s["Sid"] == "PublishEtcdMetrics").unwrap();
    assert_eq!(
        put["Condition"]["StringEquals"]["cloudwatch:namespace"],
        "kube-aws/etcd"
    );
}

/// The most node pools config admits (`MAX_NODE_POOLS`) render within
/// CloudFormation's per-template quotas (500 resources, 200 parameters, 200
/// outputs: render::TEMPLATE_QUOTAS), x86 and arm64 pools mixed (each
/// architecture adds a root parameter); past them the render refuses the
/// stack, naming the section, the count and the quota. (A render input is
/// built here without config's check, as a plugin could add parameters.)
#[test]
fn the_most_node_pools_render_within_cloudformations_quotas_and_more_are_refused() {
    let max = kube_aws::config::MAX_NODE_POOLS;
    let mut input = generated(0, max);
    input.cluster.worker.node_pools[0].instance_type = "m7g.large".into();
    let r = rendered(&input);
    let root = stack(&r, "root");
    for (section, limit) in render::TEMPLATE_QUOTAS {
        let n = root[section].as_object().map_or(0, |m| m.len());
        assert!(n <= limit, "root: {n} {section}, quota {limit}");
    }
    let params = root["Parameters"].as_object().unwrap().len();
    assert!(params >= max, "one parameter per pool: {params}");
    // Ten pools more than config admits, added past its check.
    let mut over = input.clone();
    for i in 0..10 {
        let mut pool = over.cluster.worker.node_pools[1].clone();
        let hooks = over.plugins.pools.get(&pool.name).cloned();
        pool.name = format!("extra-{i}");
        if let Some(h) = hooks {
            over.plugins.pools.insert(pool.name.clone(), h);
        }
        over.cluster.worker.node_pools.push(pool);
    }
    let err = render::render(&over).unwrap_err();
    assert!(
        matches!(
            err,
            RenderError::OverQuota {
                section: "Parameters",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "stacks/root.json declares {} Parameters, over CloudFormation's quota of 200 per template: \
             split node pools or charts across clusters",
            params + 10
        )
    );
}
