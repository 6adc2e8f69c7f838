//! IAM roles for service accounts on a self-managed cluster (issue 16), the
//! way kops does it: the service-account issuer's discovery documents are
//! public objects of a bucket of their own ([`issuer_bucket`], which `up`
//! creates and owns: src/aws/publish/issuer.rs), an IAM OIDC provider trusts that
//! issuer, and each plugin service account gets its own role that only a token
//! for exactly that `system:serviceaccount:<namespace>:<name>` and the
//! `sts.amazonaws.com` audience can assume. Pure: no I/O, no AWS.
//!
//! Role ARNs must reach chart values at render time, which is offline. The
//! role name is deterministic ([`role_name`]) and the account is the one of
//! `kmsKeyARN` (which `up` requires; render alone uses [`NO_ACCOUNT`]), so `{{ serviceAccounts.<name>.roleArn }}`
//! is known on the first `up`: the stack creates the role under that name, in
//! the account it runs in. A KMS key from another account would give ARNs of
//! the wrong account; `validate` cannot tell, docs/deploy.md says so.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::config::{parse_s3_uri, ClusterConfig};
use crate::digest::sha256_hex;

/// The audience the pod identity webhook projects tokens for, and the only
/// client ID of the OIDC provider.
pub const AUDIENCE: &str = "sts.amazonaws.com";
/// kubeadm's default issuer (`https://kubernetes.default.svc.<dnsDomain>`): kept
/// as a second accepted `--service-account-issuer`, so tokens minted before
/// the cluster had its public issuer stay valid across an update
/// (kube-apiserver reference: "When this flag is specified multiple times, the
/// first is used to generate tokens and all are used to determine which
/// issuers are accepted").
pub const LEGACY_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
pub use crate::render::layout::{ISSUER_DISCOVERY, ISSUER_JWKS};
/// S3's limit on a bucket name.
pub const BUCKET_NAME_LIMIT: usize = 63;
/// Bucket-name endings S3 reserves (access point aliases, Object Lambda,
/// directory and table buckets): a derived name that would end so is hashed.
const RESERVED_BUCKET_SUFFIXES: [&str; 4] = ["-s3alias", "--ol-s3", "--x-s3", "--table-s3"];
/// IAM's limit on a role name.
pub const ROLE_NAME_LIMIT: usize = 64;
/// The annotation the pod identity webhook reads on a service account.
pub const ROLE_ARN_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IrsaError {
    #[error("the service-account public key is not usable: {0}")]
    Key(String),
}

/// How a cluster's service-account roles are named. IAM role names are
/// global to the account, so two clusters of one name in two regions of an
/// account need the region in the name; clusters created before the region
/// was added keep their names (renaming replaces every role, and running pods
/// keep the old ARN in their environment until they restart). `up` records
/// the scheme in the root stack (output [`ROLE_NAMES_OUTPUT`]), and `update`
/// renders with the record, as it does with the zone count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoleNames {
    /// `<cluster>-<region>-<namespace>-<name>`: what `up` creates.
    #[default]
    Regional,
    /// `<cluster>-<namespace>-<name>`: a stack created before the record.
    Cluster,
}

/// The root stack output that records [`RoleNames`].
pub const ROLE_NAMES_OUTPUT: &str = "RoleNames";

impl RoleNames {
    pub fn as_str(self) -> &'static str {
        match self {
            RoleNames::Regional => "cluster-region-namespace-name",
            RoleNames::Cluster => "cluster-namespace-name",
        }
    }

    /// The scheme a recorded output value names; None for an unknown value
    /// (a newer kube-aws wrote it).
    pub fn parse(value: &str) -> Option<RoleNames> {
        [RoleNames::Regional, RoleNames::Cluster]
            .into_iter()
            .find(|r| r.as_str() == value.trim())
    }
}

/// The role of `namespace/name` in this cluster, by the scheme the stack
/// records (`cfg.recorded_role_names`; a new cluster's is [`RoleNames::Regional`]).
pub fn role_name(cfg: &ClusterConfig, namespace: &str, name: &str) -> String {
    match cfg.recorded_role_names.unwrap_or_default() {
        RoleNames::Regional => fit_role_name(&format!("{}-{}-{namespace}-{name}", cfg.cluster_name, cfg.region)),
        RoleNames::Cluster => fit_role_name(&format!("{}-{namespace}-{name}", cfg.cluster_name)),
    }
}

/// `full`, or when it is over IAM's 64 characters, its first 55 characters,
/// `-` and 8 hex digits of its sha256 (so two long names stay apart).
/// Cluster, region, namespace and name are DNS names, all within IAM's
/// role-name characters.
fn fit_role_name(full: &str) -> String {
    if full.len() <= ROLE_NAME_LIMIT {
        return full.to_string();
    }
    let hash = sha256_hex(full.as_bytes());
    let keep = ROLE_NAME_LIMIT - 9;
    format!("{}-{}", full[..keep].trim_end_matches(['-', '.']), &hash[..8])
}

/// The ARN partition of a region.
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// The account of a KMS key ARN (`arn:PARTITION:kms:REGION:ACCOUNT:…`).
pub fn account_of(arn: &str) -> Option<&str> {
    let account = arn.split(':').nth(4)?;
    (account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())).then_some(account)
}

/// The account role ARNs carry while `kmsKeyARN` is unset: render works
/// offline without it, and `up` refuses to publish without it, so no ARN in
/// this account ever reaches AWS.
pub const NO_ACCOUNT: &str = "000000000000";

/// The ARN of a role named `role`, in the account of `kmsKeyARN` (or
/// [`NO_ACCOUNT`] before it is set).
pub fn role_arn(cfg: &ClusterConfig, role: &str) -> String {
    let account = cfg.kms_key_arn.as_deref().and_then(account_of).unwrap_or(NO_ACCOUNT);
    format!("arn:{}:iam::{account}:role/{role}", partition(&cfg.region))
}

/// The bucket that serves the default issuer: `<bucket>-oidc-<cluster>`,
/// from the cluster's bucket and name alone, so the issuer URL is known at
/// render time (offline) and stays the same across updates. A '.' of the
/// cluster's bucket becomes '-' (S3's wildcard certificate covers one label:
/// IAM reads the issuer over virtual-hosted HTTPS). Over S3's 63 characters,
/// or ending as S3 reserves, it is the first 54 characters, '-' and 8 hex
/// digits of the sha256 of `<bucket>/<cluster>`, so two long names stay apart.
pub fn issuer_bucket_name(bucket: &str, cluster: &str) -> String {
    let full = format!("{bucket}-oidc-{cluster}").replace('.', "-");
    let reserved = RESERVED_BUCKET_SUFFIXES.iter().any(|s| full.ends_with(s));
    if full.len() <= BUCKET_NAME_LIMIT && !reserved {
        return full;
    }
    let hash = sha256_hex(format!("{bucket}/{cluster}").as_bytes());
    let keep = BUCKET_NAME_LIMIT - 9;
    format!("{}-{}", full[..full.len().min(keep)].trim_end_matches('-'), &hash[..8])
}

/// The issuer bucket of this cluster; None when `issuerURL` hosts the issuer elsewhere.
pub fn issuer_bucket(cfg: &ClusterConfig) -> Option<String> {
    if cfg.issuer_url.is_some() {
        return None;
    }
    let (bucket, _) = parse_s3_uri(&cfg.s3_uri).unwrap_or_default();
    Some(issuer_bucket_name(&bucket, &cfg.cluster_name))
}

/// The issuer: `issuerURL` when set, else the HTTPS root of the issuer
/// bucket (`https://<issuer bucket>.s3.<region>.amazonaws.com`).
pub fn issuer_url(cfg: &ClusterConfig) -> String {
    if let Some(u) = &cfg.issuer_url {
        return u.trim_end_matches('/').to_string();
    }
    let bucket = issuer_bucket(cfg).unwrap_or_default();
    crate::aws::config::object_url(None, &cfg.region, &bucket, "")
        .trim_end_matches('/')
        .to_string()
}

/// Where the discovery document points for the keys: `<issuer>/keys.json`
/// (the object [`ISSUER_JWKS`] of the issuer bucket under the default issuer).
pub fn jwks_url(cfg: &ClusterConfig) -> String {
    format!("{}/{ISSUER_JWKS}", issuer_url(cfg))
}

/// kube-apiserver flags kube-aws sets for the issuer, in order (the issuer
/// flag repeats: kubeadm v1beta4 `extraArgs` keep duplicates). The new issuer
/// signs; the legacy one is still accepted. `api-audiences` names both,
/// because it defaults to the first issuer alone and tokens minted before the
/// update carry the legacy audience.
pub fn apiserver_flags(cfg: &ClusterConfig) -> Vec<(String, String)> {
    let issuer = issuer_url(cfg);
    let mut out = vec![("service-account-issuer".to_string(), issuer.clone())];
    let mut audiences = issuer.clone();
    if issuer != LEGACY_ISSUER {
        out.push(("service-account-issuer".into(), LEGACY_ISSUER.into()));
        audiences = format!("{issuer},{LEGACY_ISSUER}");
    }
    out.push(("service-account-jwks-uri".into(), jwks_url(cfg)));
    out.push(("api-audiences".into(), audiences));
    out
}

/// The flags of [`apiserver_flags`], which plugins may not set.
pub const OWNED_APISERVER_FLAGS: [&str; 3] = ["service-account-issuer", "service-account-jwks-uri", "api-audiences"];

/// The issuer without its scheme: IAM's name for the provider and the prefix
/// of its condition keys (`<host-path>:sub`, `<host-path>:aud`).
pub fn host_path(issuer: &str) -> &str {
    issuer.strip_prefix("https://").unwrap_or(issuer)
}

/// The `sub` of a service account's tokens.
pub fn subject(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The trust policy of a service account's role: `sts:AssumeRoleWithWebIdentity`
/// from the cluster's OIDC provider (`provider`, its ARN), only for tokens whose
/// `sub` is exactly this service account and whose `aud` is `sts.amazonaws.com`.
pub fn trust_policy(provider: Value, issuer: &str, namespace: &str, name: &str) -> Value {
    let hp = host_path(issuer);
    json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Principal": {"Federated": provider},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {
            format!("{hp}:sub"): subject(namespace, name),
            format!("{hp}:aud"): AUDIENCE,
        }},
    }]})
}

/// The OpenID discovery document IAM reads: what kube-apiserver serves at
/// `/.well-known/openid-configuration` (k8s.io/kubernetes
/// pkg/serviceaccount/openidmetadata.go), with `alg` the key's.
pub fn discovery_document(issuer: &str, jwks_uri: &str, alg: &str) -> Value {
    json!({
        "issuer": issuer,
        "jwks_uri": jwks_uri,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": [alg],
    })
}

fn b64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The `kid` kube-apiserver puts in the tokens it signs: base64url (no padding)
/// of the sha256 of the public key's DER SubjectPublicKeyInfo (k8s.io/kubernetes
/// pkg/serviceaccount/jwt.go, keyIDFromPublicKey).
pub fn key_id(spki_der: &[u8]) -> String {
    b64url(&Sha256::digest(spki_der))
}

/// The JWKS of the service-account public key (`sa.pub`, PEM
/// SubjectPublicKeyInfo; kube-aws generates ECDSA P-256, src/pki.rs, and RSA
/// is read too) and the key's JWS algorithm. STS accepts RS256/384/512 and
/// ES256/384/512 (AssumeRoleWithWebIdentity, WebIdentityToken).
pub fn jwks(sa_pub_pem: &str) -> Result<(Value, &'static str), IrsaError> {
    use x509_parser::prelude::FromDer;
    use x509_parser::public_key::PublicKey;
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(sa_pub_pem.as_bytes()).map_err(|e| IrsaError::Key(format!("not PEM: {e}")))?;
    if pem.label != "PUBLIC KEY" {
        return Err(IrsaError::Key(format!("PEM block {:?}, not PUBLIC KEY", pem.label)));
    }
    let (_, spki) =
        x509_parser::x509::SubjectPublicKeyInfo::from_der(&pem.contents).map_err(|e| IrsaError::Key(e.to_string()))?;
    let kid = key_id(&pem.contents);
    let parsed = spki.parsed().map_err(|e| IrsaError::Key(e.to_string()))?;
    let (jwk, alg) = match parsed {
        PublicKey::RSA(rsa) => {
            let trim = |b: &[u8]| b.iter().skip_while(|x| **x == 0).copied().collect::<Vec<u8>>();
            (
                json!({"kty": "RSA", "n": b64url(&trim(rsa.modulus)), "e": b64url(&trim(rsa.exponent))}),
                "RS256",
            )
        }
        PublicKey::EC(point) => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .map(|o| o.to_id_string())
                .unwrap_or_default();
            let (crv, alg, len) = match curve.as_str() {
                "1.2.840.10045.3.1.7" => ("P-256", "ES256", 32),
                "1.3.132.0.34" => ("P-384", "ES384", 48),
                "1.3.132.0.35" => ("P-521", "ES512", 66),
                other => return Err(IrsaError::Key(format!("unsupported EC curve {other:?}"))),
            };
            let data = point.data();
            if data.len() != 1 + 2 * len || data[0] != 4 {
                return Err(IrsaError::Key("the EC point is not uncompressed".into()));
            }
            (
                json!({"kty": "EC", "crv": crv, "x": b64url(&data[1..1 + len]), "y": b64url(&data[1 + len..])}),
                alg,
            )
        }
        _ => return Err(IrsaError::Key("neither an RSA nor an EC key".into())),
    };
    let mut jwk = jwk;
    jwk["use"] = json!("sig");
    jwk["alg"] = json!(alg);
    jwk["kid"] = json!(kid);
    Ok((json!({"keys": [jwk]}), alg))
}

/// Both discovery objects for the cluster, as (key relative to the issuer's
/// root, body): what `up` publishes.
pub fn discovery_objects(cfg: &ClusterConfig, sa_pub_pem: &str) -> Result<Vec<(&'static str, Vec<u8>)>, IrsaError> {
    discovery_objects_with(cfg, sa_pub_pem, &[])
}

/// [`discovery_objects`] whose JWKS also serves `retired`: service-account
/// public keys a CA rotation replaced, whose tokens can still be valid
/// (src/aws/publish/secrets.rs `retired_service_account_keys`). The current key comes
/// first; a retired key that is the current one is not listed twice.
pub fn discovery_objects_with(
    cfg: &ClusterConfig,
    sa_pub_pem: &str,
    retired: &[&str],
) -> Result<Vec<(&'static str, Vec<u8>)>, IrsaError> {
    let (mut keys, alg) = jwks(sa_pub_pem)?;
    let mut algs = vec![alg];
    for pem in retired {
        let (set, alg) = jwks(pem)?;
        if !algs.contains(&alg) {
            algs.push(alg);
        }
        let Some(list) = keys["keys"].as_array_mut() else {
            continue;
        };
        for k in set["keys"].as_array().into_iter().flatten() {
            if !list.iter().any(|have| have["kid"] == k["kid"]) {
                list.push(k.clone());
            }
        }
    }
    let mut doc = discovery_document(&issuer_url(cfg), &jwks_url(cfg), alg);
    doc["id_token_signing_alg_values_supported"] = json!(algs);
    let body = |v: &Value| {
        let mut s = serde_json::to_vec_pretty(v).unwrap_or_default();
        s.push(b'\n');
        s
    };
    Ok(vec![(ISSUER_DISCOVERY, body(&doc)), (ISSUER_JWKS, body(&keys))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuer_bucket_names_fit_s3_and_stay_apart() {
        assert_eq!(issuer_bucket_name("my-bucket", "demo"), "my-bucket-oidc-demo");
        // A '.' would break virtual-hosted HTTPS.
        assert_eq!(issuer_bucket_name("my.bucket", "demo"), "my-bucket-oidc-demo");
        let long = "b".repeat(50);
        let a = issuer_bucket_name(&long, "cluster-a");
        let b = issuer_bucket_name(&long, "cluster-b");
        assert_eq!(a.len(), BUCKET_NAME_LIMIT, "{a}");
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{long}-oid")), "{a}");
        assert_eq!(issuer_bucket_name(&long, "cluster-a"), a, "deterministic");
        // Exactly 63 is kept as it is.
        let exact = issuer_bucket_name(&"c".repeat(63 - "-oidc-demo".len()), "demo");
        assert!(exact.ends_with("-oidc-demo") && exact.len() == 63, "{exact}");
        // An ending S3 reserves is hashed away.
        let reserved = issuer_bucket_name("b", "x-s3alias");
        assert!(!reserved.ends_with("-s3alias") && reserved.len() <= 63, "{reserved}");
        for n in [&a, &b, &reserved] {
            assert!(
                n.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
                "{n}"
            );
            assert!(!n.ends_with('-') && !n.starts_with('-'), "{n}");
        }
    }

    #[test]
    fn role_names_fit_iam_and_stay_apart() {
        let mut cfg = crate::config::cluster_for_tests("");
        cfg.cluster_name = "demo".into();
        cfg.region = "ap-southeast-2".into();
        assert_eq!(
            role_name(&cfg, "kube-system", "dns"),
            "demo-ap-southeast-2-kube-system-dns"
        );
        let long_ns = "n".repeat(50);
        let a = role_name(&cfg, &long_ns, "external-dns-a");
        let b = role_name(&cfg, &long_ns, "external-dns-b");
        assert_eq!(a.len(), ROLE_NAME_LIMIT, "{a}");
        assert!(b.len() <= ROLE_NAME_LIMIT);
        assert_ne!(a, b);
        assert!(a.starts_with("demo-ap-southeast-2-nnnn"), "{a}");
        // A 20-character cluster in a long region: hashed, still apart.
        cfg.cluster_name = "production-eu-west-1".into();
        let x = role_name(&cfg, "kube-system", "cluster-autoscaler");
        let y = role_name(&cfg, "kube-system", "cluster-autoscaler-2");
        assert!(x.len() <= ROLE_NAME_LIMIT && y.len() <= ROLE_NAME_LIMIT, "{x} {y}");
        assert_ne!(x, y);
    }

    #[test]
    fn the_same_cluster_name_in_two_regions_has_two_roles_unless_recorded_before_regions() {
        let mut a = crate::config::cluster_for_tests("");
        a.cluster_name = "demo".into();
        a.region = "us-west-2".into();
        let mut b = a.clone();
        b.region = "eu-west-1".into();
        assert_ne!(
            role_name(&a, "kube-system", "cluster-autoscaler"),
            role_name(&b, "kube-system", "cluster-autoscaler")
        );
        // A stack created before the region was in the name keeps its roles.
        a.recorded_role_names = Some(RoleNames::Cluster);
        assert_eq!(
            role_name(&a, "kube-system", "cluster-autoscaler"),
            "demo-kube-system-cluster-autoscaler"
        );
        for r in [RoleNames::Regional, RoleNames::Cluster] {
            assert_eq!(RoleNames::parse(r.as_str()), Some(r));
        }
        assert_eq!(RoleNames::parse("something-newer"), None);
    }

    #[test]
    fn trust_policy_binds_exactly_one_service_account_and_the_sts_audience() {
        let issuer = "https://b-oidc-demo.s3.us-west-2.amazonaws.com";
        let p = trust_policy(json!({"Ref": "P"}), issuer, "kube-system", "external-dns");
        let st = &p["Statement"][0];
        assert_eq!(st["Action"], "sts:AssumeRoleWithWebIdentity");
        assert_eq!(st["Principal"]["Federated"], json!({"Ref": "P"}));
        let cond = st["Condition"].as_object().unwrap();
        assert_eq!(
            cond.keys().collect::<Vec<_>>(),
            ["StringEquals"],
            "no StringLike: no wildcard"
        );
        let eq = cond["StringEquals"].as_object().unwrap();
        assert_eq!(eq.len(), 2);
        assert_eq!(
            eq["b-oidc-demo.s3.us-west-2.amazonaws.com:sub"],
            "system:serviceaccount:kube-system:external-dns"
        );
        assert_eq!(eq["b-oidc-demo.s3.us-west-2.amazonaws.com:aud"], "sts.amazonaws.com");
        assert_eq!(p["Statement"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn account_and_partition_come_from_the_kms_key_and_region() {
        assert_eq!(
            account_of("arn:aws:kms:us-west-2:111122223333:key/k"),
            Some("111122223333")
        );
        assert_eq!(account_of("arn:aws:kms:us-west-2:alias/x"), None);
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
        assert_eq!(partition("eu-west-1"), "aws");
    }

    /// Known keys and the JWK members joserfc 1.8 (a JOSE library) exports for
    /// them, with the kid computed as k8s keyIDFromPublicKey does (sha256 of the
    /// DER SPKI, base64url without padding), by Python's `cryptography`.
    const EC_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAExhe1219k/r3IErVINhopilQnXgR6
rlcIZtV0JHpiCVQ21saj023w089Ja/ydwHYaVRwzN1TKctrQPX7AE+waSA==
-----END PUBLIC KEY-----
";
    const RSA_PEM: &str = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC6xzFgFQJbkYmycoZ7sOZfiQ/0
TXodoSRe/PHXk9/mfXcCl9k25hrioM9MWYPT1BMMqo9cLAgoS9s+JLhIOhc88K1+
OzNTJ7VQbd5mWAf/AXd3kgU+AK6UqpPRN3VxeYdiRMwm0ZeQsGU1iAK7Yq0In2TF
dTNULI9QFB38zebILwIDAQAB
-----END PUBLIC KEY-----
";

    #[test]
    fn jwks_of_known_keys_match_a_jose_library() {
        let (set, alg) = jwks(EC_PEM).unwrap();
        assert_eq!(alg, "ES256");
        assert_eq!(
            set,
            json!({"keys": [{"kty": "EC", "crv": "P-256",
                "x": "xhe1219k_r3IErVINhopilQnXgR6rlcIZtV0JHpiCVQ",
                "y": "NtbGo9Nt8NPPSWv8ncB2GlUcMzdUynLa0D1-wBPsGkg",
                "use": "sig", "alg": "ES256", "kid": "-AUTuhYEZa-fiWkqhe_DBbmcQU0663xZEaH4ViBthkU"}]})
        );
        let (set, alg) = jwks(RSA_PEM).unwrap();
        assert_eq!(alg, "RS256");
        assert_eq!(set["keys"][0]["n"], "uscxYBUCW5GJsnKGe7DmX4kP9E16HaEkXvzx15Pf5n13ApfZNuYa4qDPTFmD09QTDKqPXCwIKEvbPiS4SDoXPPCtfjszUye1UG3eZlgH_wF3d5IFPgCulKqT0Td1cXmHYkTMJtGXkLBlNYgCu2KtCJ9kxXUzVCyPUBQd_M3myC8");
        assert_eq!(set["keys"][0]["e"], "AQAB");
        assert_eq!(set["keys"][0]["kid"], "r0H8zhewtFnkf2vuvgJkqVYpyHkuCRPxoAv4Zslvu1o");
        assert!(jwks("not a key").is_err());
    }

    #[test]
    fn the_jwks_keeps_a_retired_key_after_the_current_one() {
        let cfg: ClusterConfig = serde_yaml::from_str(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket/team\nkmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n",
        )
        .unwrap();
        let parse = |objs: &[(&str, Vec<u8>)], name: &str| -> Value {
            serde_json::from_slice(&objs.iter().find(|(k, _)| *k == name).unwrap().1).unwrap()
        };
        let objs = discovery_objects_with(&cfg, EC_PEM, &[RSA_PEM, EC_PEM]).unwrap();
        let keys = parse(&objs, ISSUER_JWKS);
        let kids: Vec<&str> = keys["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap())
            .collect();
        assert_eq!(
            kids,
            [
                "-AUTuhYEZa-fiWkqhe_DBbmcQU0663xZEaH4ViBthkU",
                "r0H8zhewtFnkf2vuvgJkqVYpyHkuCRPxoAv4Zslvu1o"
            ]
        );
        let doc = parse(&objs, ISSUER_DISCOVERY);
        assert_eq!(doc["id_token_signing_alg_values_supported"], json!(["ES256", "RS256"]));
        // Nothing retired: the documents as before.
        assert_eq!(
            discovery_objects_with(&cfg, EC_PEM, &[]).unwrap(),
            discovery_objects(&cfg, EC_PEM).unwrap()
        );
        assert!(discovery_objects_with(&cfg, EC_PEM, &["not a key"]).is_err());
    }

    #[test]
    fn jwks_of_a_generated_cluster_key_carries_its_point() {
        use rcgen::PublicKeyData;
        let kp = rcgen::KeyPair::generate().unwrap();
        let (set, _) = jwks(&kp.public_key_pem()).unwrap();
        let k = &set["keys"][0];
        use base64::Engine;
        let d = |s: &Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s.as_str().unwrap())
                .unwrap()
        };
        let mut point = vec![4u8];
        point.extend(d(&k["x"]));
        point.extend(d(&k["y"]));
        assert_eq!(point, kp.public_key_raw());
        assert_eq!(d(&k["kid"]), Sha256::digest(kp.subject_public_key_info()).to_vec());
    }

    #[test]
    fn the_issuer_is_its_own_bucket_unless_overridden() {
        let mut cfg: ClusterConfig = serde_yaml::from_str(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket/team\nkmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n",
        )
        .unwrap();
        let issuer = "https://bucket-oidc-demo.s3.us-west-2.amazonaws.com";
        assert_eq!(issuer_bucket(&cfg).as_deref(), Some("bucket-oidc-demo"));
        assert_eq!(issuer_url(&cfg), issuer);
        assert_eq!(jwks_url(&cfg), format!("{issuer}/keys.json"));
        assert_eq!(role_arn(&cfg, "demo-a-b"), "arn:aws:iam::111122223333:role/demo-a-b");
        assert_eq!(
            apiserver_flags(&cfg),
            [
                ("service-account-issuer", issuer.to_string()),
                ("service-account-issuer", LEGACY_ISSUER.to_string()),
                ("service-account-jwks-uri", format!("{issuer}/keys.json")),
                (
                    "api-audiences",
                    format!("{issuer},https://kubernetes.default.svc.cluster.local")
                ),
            ]
            .map(|(k, v)| (k.to_string(), v))
        );
        cfg.issuer_url = Some("https://oidc.example.com/demo/".into());
        assert_eq!(issuer_bucket(&cfg), None);
        assert_eq!(issuer_url(&cfg), "https://oidc.example.com/demo");
        cfg.kms_key_arn = None;
        assert_eq!(role_arn(&cfg, "x"), "arn:aws:iam::000000000000:role/x");
        let doc = discovery_document(&issuer_url(&cfg), &jwks_url(&cfg), "ES256");
        assert_eq!(doc["issuer"], "https://oidc.example.com/demo");
        assert_eq!(doc["jwks_uri"], "https://oidc.example.com/demo/keys.json");
        assert_eq!(doc["id_token_signing_alg_values_supported"], json!(["ES256"]));
    }
}
