//! The pod identity webhook on the control-plane test bed (the helpers of
//! tests/it/testbed.rs): it mutates a pod of an annotated service account,
//! and rolls out two spread replicas with a disruption budget.

use super::*;

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
    let cluster = autoscaler_cluster();
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
