//! Dex on the shared cluster of tests/it/real_node/addons.rs: its
//! consts, certificates, values and helpers, and the check the test
//! `addons_dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group`
//! runs.
//!
//! # Dex end to end
//!
//! `dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group` runs on
//! the shared controller, whose work tree has the dex plugin on:
//! `connector: local` (Dex's own password
//! database, one static user, `oauth2.passwordConnector: local`), its static
//! client `kubernetes` with a secret parameter (KMS-encrypted by `up`,
//! substituted on the node: the token requests authenticate with it, and a
//! wrong one is refused),
//! `exposure: values` and `oidcCA` set to the test's CA. The test's
//! values/dex.yaml makes Dex serve HTTPS (the chart's `https.enabled`) with a
//! certificate for `dex.bed.test` signed by that CA (a TLS Secret the test
//! creates, mounted through the chart's `volumes`) on a NodePort (30554) of
//! the controller. The reconciler installs the chart (Dex v2.44.0 built from
//! its source tarball, imported into the node's containerd); then:
//!
//! - discovery answers on https://dex.bed.test:30554, verified with the CA;
//! - the kube-apiserver runs with `--oidc-issuer-url`, `--oidc-client-id`,
//!   `--oidc-ca-file` (the plugin's file, holding the CA) and the claims' flags;
//! - an ID token from the password grant (the static user's email and
//!   password, the client's id and secret) is accepted: `kubectl auth whoami`
//!   shows the user's email;
//! - a group: Dex 2.44's password database emits **no groups** (its
//!   `storage.Password` has no groups field; `passwordDB.Login` in
//!   server/server.go returns email, username and user ID only), and no
//!   connector that emits groups has a server here (LDAP, an upstream
//!   OIDC provider). Dex's own `mockCallback` connector does: its identity
//!   (kilgore@kilgore.trout) is in the group `authors`. The test adds it in
//!   values and walks the authorization-code flow by hand (`/auth` with
//!   `connector_id`, Dex's redirects, the code at the static client's
//!   redirect URI, the code exchanged at `/token`); `whoami` shows the email
//!   and the group, and a RoleBinding of the group `authors` grants exactly
//!   `get`/`list` pods in `team-a`: `auth can-i` says yes there, no for
//!   secrets there and no for pods in `default`; the password user (no
//!   groups) gets nothing; a token with a broken signature is refused.
//!
//! What differs from production, and what is not covered: there is no
//! load balancer (exposure `loadBalancer`: the NLB, its ACM certificate and
//! external-dns's record need a cloud controller manager and ACM; moto has
//! no NLB data path; the cloud controller manager that runs here has no
//! load balancer to make), so the issuer is a NodePort on the controller and its
//! name `dex.bed.test` is in the node's /etc/hosts (where the VPC's DNS or
//! external-dns would name it), written before kubeadm init (kubelet copies
//! it into the apiserver's host-network pod); the certificate is the test's
//! CA's, not a public one; no browser login (the mock connector's redirects
//! are followed with curl; upstream providers such as GitHub are not
//! reachable here); one controller, no workers.

use super::*;

/// Dex's name, as the node's /etc/hosts has it, and its NodePort.
pub(super) const DEX_HOST: &str = "dex.bed.test";
const DEX_PORT: u16 = 30554;
/// The static client's redirect URI: nothing listens there, the test reads
/// the code from Dex's redirect to it.
pub(super) const REDIRECT: &str = "http://127.0.0.1:5555/callback";
/// The static user of Dex's own config.dev.yaml (v2.44.0): its bcrypt hash
/// is of "password".
const USER: &str = "admin@example.com";
const PASSWORD: &str = "password";
const USER_HASH: &str = "$2a$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W";
pub(super) const CLIENT_SECRET: &str = "bed-dex-client-secret";

/// The test's CA and Dex's serving certificate for `DEX_HOST`, by openssl.
pub(super) fn certificates(dir: &Path) {
    let sh = format!(
        "set -e; cd {d}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=kube-aws-bed-dex-ca \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN={DEX_HOST} -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=DNS:{DEX_HOST}\\nextendedKeyUsage=serverAuth\\nkeyUsage=critical,digitalSignature\\n' >tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile tls.ext -out tls.crt 2>/dev/null",
        d = dir.display()
    );
    let o = Command::new("bash").args(["-c", &sh]).output().unwrap();
    assert!(o.status.success(), "openssl: {}", output_text(&o));
}

/// The test's values/dex.yaml: HTTPS with the mounted certificate on a
/// NodePort, the static user, and Dex's mockCallback connector (groups).
pub(super) fn dex_values() -> String {
    format!(
        r#"https:
  enabled: true
service:
  type: NodePort
  ports:
    https:
      nodePort: {DEX_PORT}
config:
  web:
    tlsCert: /etc/dex/tls/tls.crt
    tlsKey: /etc/dex/tls/tls.key
  staticPasswords:
    - email: {USER}
      hash: "{USER_HASH}"
      username: admin
      userID: 08a8684b-db88-4b73-90a9-3cd1661f5466
  connectors:
    - type: mockCallback
      id: mock
      name: Mock (groups)
volumes:
  - name: tls
    secret:
      secretName: dex-tls
volumeMounts:
  - name: tls
    mountPath: /etc/dex/tls
    readOnly: true
"#
    )
}

/// curl from the host to Dex by its name at the controller's address,
/// verifying with the test's CA.
fn curl(dir: &Path, ip: &str, args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(dir.join("ca.crt"))
        .args(["--resolve", &format!("{DEX_HOST}:{DEX_PORT}:{ip}")])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

pub(super) fn issuer() -> String {
    format!("https://{DEX_HOST}:{DEX_PORT}")
}

/// The ID token of a `/token` answer, or a panic naming the answer.
fn id_token(o: &Output, what: &str) -> String {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{what}: no JSON from /token ({e}): {}", output_text(o)));
    v["id_token"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no id_token: {v}"))
        .to_string()
}

/// kubectl as a bearer of `token` only (no client certificate, which the
/// apiserver would take first), verifying the API with the cluster CA.
fn kubectl_as(bed: &MotoBed, ctl: &BedNode, token: &str, args: &[&str]) -> Output {
    let empty = bed.dir().join("empty.kubeconfig");
    std::fs::write(&empty, "apiVersion: v1\nkind: Config\n").unwrap();
    Command::new(&bed.kubectl)
        .arg("--kubeconfig")
        .arg(&empty)
        .args(["--server", &format!("https://{}:6443", ctl.node.ip)])
        .arg("--certificate-authority")
        .arg(ctl.node.rootfs().join("etc/kubernetes/pki/ca.crt"))
        .args(["--token", token])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `kubectl auth can-i` as `token`: its answer ("yes"/"no").
fn can_i(bed: &MotoBed, ctl: &BedNode, token: &str, verb: &str, what: &str, ns: &str) -> String {
    let o = kubectl_as(bed, ctl, token, &["auth", "can-i", verb, what, "-n", ns]);
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The authorization-code flow through Dex's mockCallback connector, by
/// hand: every redirect is Dex's own until the one to the client's redirect
/// URI, which carries the code.
fn mock_login_code(dir: &Path, ip: &str) -> String {
    let mut url = format!(
        "{}/auth?client_id=kubernetes&response_type=code&scope=openid+email+groups+profile&state=bed&connector_id=mock&redirect_uri={}",
        issuer(),
        REDIRECT.replace(':', "%3A").replace('/', "%2F")
    );
    let mut hops = Vec::new();
    for _ in 0..8 {
        let o = curl(
            dir,
            ip,
            &["-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", &url],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        hops.push(format!("{url} -> {text} {}", String::from_utf8_lossy(&o.stderr)));
        let next = text.split_once(' ').map(|(_, u)| u.to_string()).unwrap_or_default();
        if let Some(q) = next.strip_prefix(&format!("{REDIRECT}?")) {
            if let Some(code) = q.split('&').find_map(|kv| kv.strip_prefix("code=")) {
                return code.to_string();
            }
            panic!("no code in the redirect to the client: {next}\n{}", hops.join("\n"));
        }
        assert!(
            next.starts_with(&issuer()),
            "Dex's login did not redirect within Dex or to the client:\n{}",
            hops.join("\n")
        );
        url = next;
    }
    panic!("too many redirects:\n{}", hops.join("\n"));
}

/// Dex on the shared cluster (the module header says what it shows).
pub(super) fn dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group(c: &Cluster) {
    let (bed, ctl, inst, certs) = (&c.bed, &c.ctl, &c.inst, &c.certs);
    let t0 = Instant::now();
    let dex_logs = || pod_logs(ctl, "dex_dex-");

    // Discovery over HTTPS at the issuer, verified with the CA.
    let disco = curl(
        certs.path(),
        &inst.ip,
        &[&format!("{}/.well-known/openid-configuration", issuer())],
    );
    let disco_json: serde_json::Value = serde_json::from_slice(&disco.stdout).unwrap_or_default();
    assert_eq!(
        disco_json["issuer"],
        issuer().as_str(),
        "discovery: {}\n{}",
        output_text(&disco),
        dex_logs()
    );
    assert!(
        disco_json["grant_types_supported"].to_string().contains("password"),
        "the password grant is not offered: {disco_json}"
    );

    // The password grant: the static user, the static client's secret (the
    // plugin's secret parameter, decrypted on the node).
    let token_url = format!("{}/token", issuer());
    let password_token = |client_secret: &str, password: &str| {
        curl(
            certs.path(),
            &inst.ip,
            &[
                "-u",
                &format!("kubernetes:{client_secret}"),
                "-d",
                "grant_type=password",
                "--data-urlencode",
                "scope=openid email groups profile",
                "--data-urlencode",
                &format!("username={USER}"),
                "--data-urlencode",
                &format!("password={password}"),
                &token_url,
            ],
        )
    };
    let wrong = password_token(CLIENT_SECRET, "not-the-password");
    assert!(
        String::from_utf8_lossy(&wrong.stdout).contains("access_denied"),
        "a wrong password was not refused: {}",
        output_text(&wrong)
    );
    let wrong = password_token("not-the-client-secret", PASSWORD);
    assert!(
        String::from_utf8_lossy(&wrong.stdout).contains("invalid_client"),
        "a wrong client secret was not refused: {}",
        output_text(&wrong)
    );
    let user_token = id_token(&password_token(CLIENT_SECRET, PASSWORD), "the password grant");

    // The apiserver accepts it (it retries Dex's discovery until Dex
    // answers, so the first calls may come before it has the keys).
    let start = Instant::now();
    let whoami = loop {
        let o = kubectl_as(bed, ctl, &user_token, &["auth", "whoami", "-o", "json"]);
        if o.status.success() || start.elapsed() > Duration::from_secs(120) {
            break o;
        }
        std::thread::sleep(Duration::from_secs(3));
    };
    let who: serde_json::Value = serde_json::from_slice(&whoami.stdout).unwrap_or_default();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        USER,
        "whoami with the password grant's token: {}\n--- kube-apiserver ---\n{}",
        output_text(&whoami),
        pod_logs(ctl, "kube-system_kube-apiserver-")
    );
    let t_login = t0.elapsed();
    let groups = who["status"]["userInfo"]["groups"].to_string();
    assert_eq!(
        groups, r#"["system:authenticated"]"#,
        "the password database has no groups: {who}"
    );
    assert_eq!(can_i(bed, ctl, &user_token, "get", "pods", "team-a"), "no");

    // A group: the mockCallback connector's identity, through the code flow.
    let code = mock_login_code(certs.path(), &inst.ip);
    let exchanged = curl(
        certs.path(),
        &inst.ip,
        &[
            "-u",
            &format!("kubernetes:{CLIENT_SECRET}"),
            "-d",
            "grant_type=authorization_code",
            "--data-urlencode",
            &format!("code={code}"),
            "--data-urlencode",
            &format!("redirect_uri={REDIRECT}"),
            &token_url,
        ],
    );
    let author = id_token(&exchanged, "the code exchange");
    let whoami = kubectl_as(bed, ctl, &author, &["auth", "whoami", "-o", "json"]);
    let who: serde_json::Value = serde_json::from_slice(&whoami.stdout).unwrap_or_default();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "kilgore@kilgore.trout",
        "{}",
        output_text(&whoami)
    );
    let groups: Vec<&str> = who["status"]["userInfo"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str())
        .collect();
    assert!(groups.contains(&"authors"), "whoami shows no Dex group: {who}");
    // The RoleBinding of `authors` grants what it should, and nothing more.
    assert_eq!(can_i(bed, ctl, &author, "get", "pods", "team-a"), "yes");
    assert_eq!(can_i(bed, ctl, &author, "list", "pods", "team-a"), "yes");
    assert_eq!(can_i(bed, ctl, &author, "get", "secrets", "team-a"), "no");
    assert_eq!(can_i(bed, ctl, &author, "get", "pods", "default"), "no");
    assert_eq!(can_i(bed, ctl, &author, "delete", "pods", "team-a"), "no");
    let pods = kubectl_as(bed, ctl, &author, &["-n", "team-a", "get", "pods"]);
    assert!(pods.status.success(), "{}", output_text(&pods));
    let secrets = kubectl_as(bed, ctl, &author, &["-n", "team-a", "get", "secrets"]);
    assert!(
        !secrets.status.success() && output_text(&secrets).contains("Forbidden"),
        "{}",
        output_text(&secrets)
    );
    // A token whose signature is not Dex's is refused.
    // (A character in the middle of the signature: the last one's low bits
    // may be padding.)
    let sig = author.rfind('.').unwrap() + 10;
    let mut forged = author.clone();
    let flip = if &author[sig..sig + 1] == "A" { "B" } else { "A" };
    forged.replace_range(sig..sig + 1, flip);
    let refused = kubectl_as(bed, ctl, &forged, &["auth", "whoami"]);
    assert!(
        !refused.status.success() && output_text(&refused).contains("Unauthorized"),
        "a forged token: {}",
        output_text(&refused)
    );
    eprintln!(
        "dex: the password login accepted {:.1}s, the checks {:.1}s after the addons were ready",
        t_login.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
