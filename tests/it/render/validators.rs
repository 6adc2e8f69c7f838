//! The real validators on every rendered artifact (cfn-lint, cloud-init's
//! schema, shellcheck, kubernetes-validate; the fixtures of
//! tests/it/render.rs and an existing VPC), and hostile values staying
//! data, byte for byte, in the files a cloud-config writes. Not covered
//! here: running the cloud-configs on a node, or the stacks in AWS.

use super::*;

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
