//! The web identity of the IRSA addons on the shared cluster of
//! tests/it/real_node/addons.rs (used by addons/irsa.rs and
//! addons/ebs_csi.rs): an addon's pod as the pod identity webhook mutated
//! it (its role, its projected token and the token's claims), the token
//! exchanged with `AssumeRoleWithWebIdentity`, calls the role must be
//! refused, and moto's sessions of a role. No test here.

use super::*;

/// An addon's pod as the pod identity webhook mutated it: its role
/// (`AWS_ROLE_ARN`) and the projected token for `sts.amazonaws.com`, read
/// from the kubelet's volume on the node, with its claims.
pub(super) struct IrsaPod {
    pub(super) role_arn: Option<String>,
    pub(super) token: String,
    pub(super) claims: serde_json::Value,
    /// The pod's IP on the bed's bridge.
    pub(super) ip: String,
}

/// The Running pod of the service account `sa` in kube-system.
pub(super) fn irsa_pod(bed: &MotoBed, ctl: &BedNode, sa: &str) -> IrsaPod {
    let pods = bed.kubectl(ctl, &["-n", "kube-system", "get", "pods", "-o", "json"]);
    let pods: serde_json::Value = serde_json::from_slice(&pods.stdout).unwrap_or_default();
    let pod = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["spec"]["serviceAccountName"] == sa && p["status"]["phase"] == "Running")
        .unwrap_or_else(|| panic!("no Running pod of the service account {sa}: {pods}"));
    let env: Vec<(String, String)> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let var = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let token_file =
        var("AWS_WEB_IDENTITY_TOKEN_FILE").unwrap_or_else(|| panic!("{sa}: no AWS_WEB_IDENTITY_TOKEN_FILE: {env:?}"));
    // The projected token, as the kubelet wrote it for the pod.
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let volume = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "sts.amazonaws.com")
        .unwrap_or_else(|| panic!("no projected token for sts.amazonaws.com: {pod}"));
    let path = volume["projected"]["sources"][0]["serviceAccountToken"]["path"]
        .as_str()
        .unwrap();
    let token = ctl
        .node
        .sh(&format!(
            "cat /var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/{}/{path}",
            volume["name"].as_str().unwrap(),
        ))
        .trim()
        .to_string();
    assert!(token_file.ends_with(path), "{token_file} is not the projected {path}");
    let claims: serde_json::Value = {
        use base64::Engine;
        let part = token.split('.').nth(1).unwrap_or_default();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part.trim_end_matches('='))
                .unwrap_or_default(),
        )
        .unwrap_or_default()
    };
    IrsaPod {
        role_arn: var("AWS_ROLE_ARN"),
        token,
        claims,
        ip: pod["status"]["podIP"].as_str().unwrap_or_default().to_string(),
    }
}

/// `sts assume-role-with-web-identity` with the aws CLI, unsigned, as STS
/// takes it.
pub(super) fn web_identity(bed: &MotoBed, role: &str, token: &str) -> Output {
    let mut c = Command::new(crate::common::tool("aws"));
    bed.env.apply(&mut c);
    c.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .args([
            "sts",
            "assume-role-with-web-identity",
            "--role-arn",
            role,
            "--role-session-name",
            "irsa-bed-cli",
            "--web-identity-token",
            token,
            "--output",
            "json",
        ])
        .stdin(Stdio::null());
    c.output().unwrap()
}

/// The credentials of a pod's token for its role, or a panic naming STS's
/// answer.
pub(super) fn role_creds(bed: &MotoBed, role: &str, token: &str) -> crate::common::iam::Creds {
    let o = web_identity(bed, role, token);
    assert!(o.status.success(), "the pod's token for {role}: {}", output_text(&o));
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    crate::common::iam::Creds {
        key: c["Credentials"]["AccessKeyId"].as_str().unwrap().to_string(),
        secret: c["Credentials"]["SecretAccessKey"].as_str().unwrap().to_string(),
        token: c["Credentials"]["SessionToken"].as_str().map(str::to_string),
    }
}

/// Asserts that `who` is refused each of `calls` (AccessDenied).
pub(super) fn refused(bed: &MotoBed, who: &crate::common::iam::Creds, what: &str, calls: &[Vec<&str>]) {
    for args in calls {
        let (ok, out) = crate::common::iam::aws_as(&bed.env, who, args);
        assert!(
            !ok && out.contains("AccessDenied"),
            "{what} was not refused {args:?}: {out}"
        );
    }
}

/// Whether moto holds an assumed-role session of `role_arn` (moto's
/// `/moto-api/data.json`): the trace of an SDK's web identity exchange.
pub(super) fn moto_sessions(bed: &MotoBed, role_arn: &str) -> usize {
    let data = Command::new("curl")
        .args(["-fsS", &format!("{}/moto-api/data.json", bed.env.moto.url())])
        .output()
        .unwrap();
    let data: serde_json::Value = serde_json::from_slice(&data.stdout).unwrap_or_default();
    data["sts"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .flat_map(|v| v.as_array().into_iter().flatten())
        .filter(|r| r["role_arn"] == role_arn)
        .count()
}
