//! IAM and secrets in the rendered stacks (the fixtures of
//! tests/it/render.rs): a secret reference never reaches a stack, each
//! role decrypts only its own secrets, our statements are least privilege,
//! and the etcd backups are scoped to their prefix and key. Not covered
//! here: IAM enforced on calls (the moto IAM tests), real AWS.

use super::*;

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
