//! The cluster PKI, owned by kube-aws. Pure: no I/O, no AWS.
//!
//! Invariant: the cluster CA, the front-proxy CA, the etcd CA and the
//! service-account key pair are generated once, at the first `up`, and their
//! private keys only ever leave this process KMS-encrypted (as entries of the
//! secret bundle, see `aws::secrets`); later publishes reuse them and nothing
//! here regenerates them. Certificates and the service-account public key are
//! public and travel in plaintext. Controllers place the files where kubeadm
//! looks for them (`/etc/kubernetes/pki`: `ca.crt`/`ca.key`,
//! `front-proxy-ca.*`, `etcd/ca.*`, `sa.key`/`sa.pub`); kubeadm uses an
//! existing CA pair instead of generating one and signs every leaf certificate
//! itself ("If both files already exist, kubeadm skips the generation step and
//! existing files will be used": kubeadm reference, `kubeadm init phase certs
//! ca`, and "PKI certificates and requirements", kubernetes.io/docs/setup/
//! best-practices/certificates/).
//!
//! Keys are ECDSA P-256 (PKCS#8 PEM): rcgen's ring backend cannot generate RSA
//! keys, and kubeadm, kube-apiserver and client-go load ECDSA keys for CAs and
//! for the service-account signer alike (kubeadm's own `encryptionAlgorithm:
//! ECDSA-P256`).
//!
//! Client certificates for people (`kube-aws kubeconfig`) are minted here too:
//! the caller's key is generated locally; the certificate lives at most
//! [`MAX_CLIENT_TTL`].

use std::collections::BTreeMap;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use time::OffsetDateTime;

use crate::digest::Sha256Digest;

/// Bundle entry names: the path under `/etc/kubernetes/pki`, prefixed `pki/`.
pub const CA_CERT: &str = "pki/ca.crt";
pub const CA_KEY: &str = "pki/ca.key";
pub const FRONT_PROXY_CA_CERT: &str = "pki/front-proxy-ca.crt";
pub const FRONT_PROXY_CA_KEY: &str = "pki/front-proxy-ca.key";
pub const ETCD_CA_CERT: &str = "pki/etcd/ca.crt";
pub const ETCD_CA_KEY: &str = "pki/etcd/ca.key";
pub const SA_PUB: &str = "pki/sa.pub";
pub const SA_KEY: &str = "pki/sa.key";

/// The private keys (KMS-encrypted bundle entries; controllers only).
pub const KEY_ENTRIES: [&str; 4] = [CA_KEY, FRONT_PROXY_CA_KEY, ETCD_CA_KEY, SA_KEY];
/// The public halves (plaintext in the bundle's `certificates`).
pub const PUBLIC_ENTRIES: [&str; 4] = [CA_CERT, FRONT_PROXY_CA_CERT, ETCD_CA_CERT, SA_PUB];
/// Where the entries land on a controller (entry name minus `pki/`).
pub const NODE_PKI_DIR: &str = "/etc/kubernetes/pki";

/// The pod identity webhook's serving certificate (plugins/pod-identity-webhook),
/// signed by the cluster CA at publish: bundle entries that are also secret
/// references, so its manifests name them and the controller fills them in
/// after KMS decryption (src/render/secrets.rs). The key never exists in
/// plaintext outside this process and the controller; the certificate and
/// the CA bundle travel the same way only because they are generated here.
pub const WEBHOOK_CERT: &str = "kube-aws-secret.pod-identity-webhook.tls-crt";
pub const WEBHOOK_KEY: &str = "kube-aws-secret.pod-identity-webhook.tls-key";
/// base64 of the cluster CA certificate, the webhook configuration's `caBundle`.
pub const WEBHOOK_CA_BUNDLE: &str = "kube-aws-secret.pod-identity-webhook.ca-bundle";
/// The three, in the order [`webhook_entries`] returns them.
pub const WEBHOOK_ENTRIES: [&str; 3] = [WEBHOOK_CERT, WEBHOOK_KEY, WEBHOOK_CA_BUNDLE];
/// The webhook's Service.
pub const WEBHOOK_SERVICE: &str = "pod-identity-webhook";
pub const WEBHOOK_NAMESPACE: &str = "kube-system";
/// How long a serving certificate lives, and how much of it must be left for
/// a publish to keep it rather than sign a new one.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
pub const SERVING_RENEW_BEFORE: Duration = Duration::from_secs(90 * 24 * 3600);

/// kubeadm's CA lifetime (10 years, `kubeadmconstants.CACertificateValidityPeriod`).
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// kubeadm backdates certificates by 5 minutes for clock skew (`CertificateBackdate`).
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// The longest a minted client certificate may live.
pub const MAX_CLIENT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The default client certificate lifetime.
pub const DEFAULT_CLIENT_TTL: Duration = Duration::from_secs(12 * 3600);
/// The default user and group of `kube-aws kubeconfig`. Since v1.29 `kubeadm
/// init` binds the group `kubeadm:cluster-admins` to the `cluster-admin`
/// ClusterRole (ClusterRoleBinding `kubeadm:cluster-admins`) and gives admin.conf
/// `O = kubeadm:cluster-admins` instead of `system:masters` (kubernetes.io
/// "Creating a cluster with kubeadm"; kubernetes/kubernetes#121305, KEP-4214).
pub const DEFAULT_USER: &str = "kube-aws-admin";
pub const DEFAULT_GROUP: &str = "kubeadm:cluster-admins";

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot generate the {what}: {detail}")]
    Generate { what: String, detail: String },
    #[error("the {what} is not usable: {detail}")]
    Parse { what: String, detail: String },
    #[error("--ttl {value:?} is not a duration: {detail}; use e.g. 12h, 90m or 2d")]
    BadTtl { value: String, detail: String },
    #[error("--ttl {value:?} is longer than 7 days; mint a new kubeconfig when it expires instead")]
    TtlTooLong { value: String },
    #[error("--ttl {value:?} is zero; use e.g. 12h")]
    TtlZero { value: String },
}

fn gen_err(what: &str) -> impl Fn(rcgen::Error) -> PkiError + '_ {
    move |e| PkiError::Generate {
        what: what.to_string(),
        detail: e.to_string(),
    }
}

/// A private key in PEM. Its Debug never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivatePem(String);

impl PrivatePem {
    pub fn new(pem: impl Into<String>) -> PrivatePem {
        PrivatePem(pem.into())
    }
    /// The PEM text; only to hand to KMS, to kubeadm's directory or to a kubeconfig.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for PrivatePem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrivatePem(<redacted>)")
    }
}

/// The cluster PKI: entry name → PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPki {
    /// [`KEY_ENTRIES`] → private key PEM.
    pub keys: BTreeMap<String, PrivatePem>,
    /// [`PUBLIC_ENTRIES`] → certificate (or public key) PEM.
    pub public: BTreeMap<String, String>,
}

fn random_serial() -> Result<SerialNumber, PkiError> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(|e| PkiError::Generate {
        what: "serial number".into(),
        detail: e.to_string(),
    })?;
    b[0] &= 0x7f; // positive
    Ok(SerialNumber::from_slice(&b))
}

fn ca(common_name: &str, cluster: &str, now: OffsetDateTime) -> Result<(String, String), PkiError> {
    let key = KeyPair::generate().map_err(gen_err(common_name))?;
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationalUnitName, format!("kube-aws cluster {cluster}"));
    p.distinguished_name = dn;
    // Signs leaf certificates only: no intermediate CA below it.
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    p.not_before = now - BACKDATE;
    p.not_after = now + CA_VALIDITY;
    p.serial_number = Some(random_serial()?);
    let cert = p.self_signed(&key).map_err(gen_err(common_name))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Generates a new cluster PKI. Called only when the bundle has none.
pub fn generate(cluster: &str, now: OffsetDateTime) -> Result<ClusterPki, PkiError> {
    let mut keys = BTreeMap::new();
    let mut public = BTreeMap::new();
    // The common names kubeadm gives its own CAs.
    for (cn, cert_entry, key_entry) in [
        ("kubernetes", CA_CERT, CA_KEY),
        ("front-proxy-ca", FRONT_PROXY_CA_CERT, FRONT_PROXY_CA_KEY),
        ("etcd-ca", ETCD_CA_CERT, ETCD_CA_KEY),
    ] {
        let (cert, key) = ca(cn, cluster, now)?;
        public.insert(cert_entry.to_string(), cert);
        keys.insert(key_entry.to_string(), PrivatePem(key));
    }
    let sa = KeyPair::generate().map_err(gen_err("service-account key"))?;
    public.insert(SA_PUB.to_string(), sa.public_key_pem());
    keys.insert(SA_KEY.to_string(), PrivatePem(sa.serialize_pem()));
    Ok(ClusterPki { keys, public })
}

impl ClusterPki {
    /// Whether the entries are all there (a bundle published before the PKI has none).
    pub fn is_complete(&self) -> bool {
        KEY_ENTRIES.iter().all(|k| self.keys.contains_key(*k))
            && PUBLIC_ENTRIES.iter().all(|k| self.public.contains_key(*k))
    }

    /// kubeadm's `caCertHashes` value for the cluster CA.
    pub fn ca_cert_hash(&self) -> Result<String, PkiError> {
        let pem = self.public.get(CA_CERT).ok_or_else(|| PkiError::Parse {
            what: "cluster CA".into(),
            detail: format!("the bundle has no {CA_CERT}"),
        })?;
        ca_cert_hash(pem)
    }
}

fn parse_cert_pem(what: &str, pem_text: &str) -> Result<Vec<u8>, PkiError> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem_text.as_bytes()).map_err(|e| PkiError::Parse {
        what: what.into(),
        detail: format!("not PEM: {e}"),
    })?;
    if p.label != "CERTIFICATE" {
        return Err(PkiError::Parse {
            what: what.into(),
            detail: format!("PEM block {:?}, not CERTIFICATE", p.label),
        });
    }
    Ok(p.contents)
}

/// `sha256:<hex>` of the certificate's DER SubjectPublicKeyInfo: the format of
/// kubeadm's `discovery.bootstrapToken.caCertHashes` (kubeadm join reference,
/// "--discovery-token-ca-cert-hash").
pub fn ca_cert_hash(cert_pem: &str) -> Result<String, PkiError> {
    let der = parse_cert_pem("CA certificate", cert_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| PkiError::Parse {
        what: "CA certificate".into(),
        detail: e.to_string(),
    })?;
    Ok(Sha256Digest::of(cert.tbs_certificate.subject_pki.raw).prefixed())
}

/// The expiry of a certificate.
pub fn not_after(cert_pem: &str) -> Result<OffsetDateTime, PkiError> {
    let der = parse_cert_pem("certificate", cert_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| PkiError::Parse {
        what: "certificate".into(),
        detail: e.to_string(),
    })?;
    Ok(cert.validity().not_after.to_datetime())
}

/// `--ttl`: a humantime duration, above zero, at most [`MAX_CLIENT_TTL`].
pub fn parse_ttl(value: &str) -> Result<Duration, PkiError> {
    let d = humantime::parse_duration(value.trim()).map_err(|e| PkiError::BadTtl {
        value: value.to_string(),
        detail: e.to_string(),
    })?;
    if d.is_zero() {
        return Err(PkiError::TtlZero { value: value.into() });
    }
    if d > MAX_CLIENT_TTL {
        return Err(PkiError::TtlTooLong { value: value.into() });
    }
    Ok(d)
}

/// A minted client credential.
#[derive(Debug, Clone)]
pub struct ClientCredential {
    pub cert_pem: String,
    pub key_pem: PrivatePem,
    pub not_after: OffsetDateTime,
}

/// Signs a client certificate for `user` (in `group`, if any) with the CA, valid from
/// now (backdated like kubeadm's) for `ttl`. The key pair is generated here.
pub fn mint_client(
    ca_cert_pem: &str,
    ca_key: &PrivatePem,
    user: &str,
    group: Option<&str>,
    ttl: Duration,
    now: OffsetDateTime,
) -> Result<ClientCredential, PkiError> {
    if ttl.is_zero() || ttl > MAX_CLIENT_TTL {
        return Err(PkiError::TtlTooLong {
            value: humantime::format_duration(ttl).to_string(),
        });
    }
    let issuer = cluster_ca(ca_cert_pem, ca_key)?;
    let key = KeyPair::generate().map_err(gen_err("client key"))?;
    // Certificates hold whole seconds: report the expiry they hold.
    let now = now.replace_nanosecond(0).unwrap_or(now);
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    // The API server reads the user from CN and the groups from O.
    dn.push(DnType::CommonName, user);
    if let Some(g) = group {
        dn.push(DnType::OrganizationName, g);
    }
    p.distinguished_name = dn;
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    p.not_before = now - BACKDATE;
    p.not_after = now + ttl;
    p.serial_number = Some(random_serial()?);
    let cert = p.signed_by(&key, &issuer).map_err(gen_err("client certificate"))?;
    Ok(ClientCredential {
        cert_pem: cert.pem(),
        key_pem: PrivatePem(key.serialize_pem()),
        not_after: p.not_after,
    })
}

/// The DNS names a Service's serving certificate carries.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// Signs a serving certificate for the pod identity webhook's Service with
/// the cluster CA, for [`SERVING_VALIDITY`]. Returns the bundle entries
/// ([`WEBHOOK_ENTRIES`] order): certificate PEM, key PEM, base64 CA bundle.
pub fn webhook_entries(
    ca_cert_pem: &str,
    ca_key: &PrivatePem,
    now: OffsetDateTime,
) -> Result<[(&'static str, PrivatePem); 3], PkiError> {
    use base64::Engine;
    let issuer = cluster_ca(ca_cert_pem, ca_key)?;
    let key = KeyPair::generate().map_err(gen_err("webhook serving key"))?;
    let names = service_dns_names(WEBHOOK_SERVICE, WEBHOOK_NAMESPACE);
    let mut p = CertificateParams::new(names.clone()).map_err(gen_err("webhook serving certificate"))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, names[2].as_str());
    p.distinguished_name = dn;
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    let now = now.replace_nanosecond(0).unwrap_or(now);
    p.not_before = now - BACKDATE;
    p.not_after = now + SERVING_VALIDITY;
    p.serial_number = Some(random_serial()?);
    let cert = p
        .signed_by(&key, &issuer)
        .map_err(gen_err("webhook serving certificate"))?;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_cert_pem.as_bytes());
    Ok([
        (WEBHOOK_CERT, PrivatePem(cert.pem())),
        (WEBHOOK_KEY, PrivatePem(key.serialize_pem())),
        (WEBHOOK_CA_BUNDLE, PrivatePem(ca_bundle)),
    ])
}

/// Whether a webhook serving certificate can be kept at `now`: signed for
/// the webhook's names by the CA `ca_cert_pem`, and valid for more than
/// [`SERVING_RENEW_BEFORE`].
pub fn webhook_cert_current(cert_pem: &str, ca_cert_pem: &str, now: OffsetDateTime) -> bool {
    let (Ok(der), Ok(ca_der)) = (
        parse_cert_pem("certificate", cert_pem),
        parse_cert_pem("CA", ca_cert_pem),
    ) else {
        return false;
    };
    let (Ok((_, cert)), Ok((_, ca))) = (
        x509_parser::parse_x509_certificate(&der),
        x509_parser::parse_x509_certificate(&ca_der),
    ) else {
        return false;
    };
    let signed = cert.verify_signature(Some(ca.public_key())).is_ok();
    let names: Vec<String> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(n) => Some(n.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    signed
        && names == service_dns_names(WEBHOOK_SERVICE, WEBHOOK_NAMESPACE)
        && cert.validity().not_after.to_datetime() > now + SERVING_RENEW_BEFORE
}

/// The cluster CA as the issuer of the leaf certificates kube-aws signs
/// (minted client certificates, the webhook's serving certificate).
fn cluster_ca(ca_cert_pem: &str, ca_key: &PrivatePem) -> Result<Issuer<'static, KeyPair>, PkiError> {
    let ca_key = KeyPair::from_pem(ca_key.expose()).map_err(|e| PkiError::Parse {
        what: "cluster CA key".into(),
        detail: e.to_string(),
    })?;
    Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(|e| PkiError::Parse {
        what: "cluster CA certificate".into(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_bounded_and_parsed() {
        assert_eq!(parse_ttl("12h").unwrap(), Duration::from_secs(12 * 3600));
        assert_eq!(parse_ttl("7d").unwrap(), MAX_CLIENT_TTL);
        assert!(matches!(parse_ttl("7d 1s"), Err(PkiError::TtlTooLong { .. })));
        assert!(matches!(parse_ttl("0s"), Err(PkiError::TtlZero { .. })));
        let e = parse_ttl("twelve hours").unwrap_err().to_string();
        assert!(e.contains("\"twelve hours\"") && e.contains("12h"), "{e}");
    }

    #[test]
    fn debug_never_shows_a_key() {
        let pki = generate("demo", OffsetDateTime::now_utc()).unwrap();
        let dbg = format!("{pki:?}");
        assert!(!dbg.contains("PRIVATE KEY"), "{dbg}");
        assert!(pki.is_complete());
        assert!(pki.keys.values().all(|k| k.expose().contains("PRIVATE KEY")));
    }

    #[test]
    fn the_webhook_certificate_is_signed_by_the_cluster_ca_for_its_service() {
        let now = OffsetDateTime::now_utc();
        let pki = generate("demo", now).unwrap();
        let [(c, cert), (k, key), (b, bundle)] = webhook_entries(&pki.public[CA_CERT], &pki.keys[CA_KEY], now).unwrap();
        assert_eq!([c, k, b], WEBHOOK_ENTRIES);
        assert!(key.expose().contains("PRIVATE KEY"));
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(bundle.expose())
            .unwrap();
        assert_eq!(decoded, pki.public[CA_CERT].as_bytes());
        assert!(webhook_cert_current(cert.expose(), &pki.public[CA_CERT], now));
        // Near its end it is renewed; another CA's certificate is not kept.
        assert!(!webhook_cert_current(
            cert.expose(),
            &pki.public[CA_CERT],
            now + SERVING_VALIDITY - SERVING_RENEW_BEFORE
        ));
        let other = generate("other", now).unwrap();
        assert!(!webhook_cert_current(cert.expose(), &other.public[CA_CERT], now));
        let der = parse_cert_pem("c", cert.expose()).unwrap();
        let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
        let eku = x.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && !eku.client_auth);
        assert!(!x.is_ca());
    }
}
