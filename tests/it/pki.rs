//! The cluster PKI (src/pki.rs), checked with x509-parser and the real
//! `openssl` CLI: CA basic constraints and path lengths, key usages, validity,
//! the service-account pair, minted client certificates verified by
//! `openssl verify`, and the CA hash against openssl's own computation.
//!
//! Not covered here: the serving certificates' SANs (the NLB name, the service
//! IP, `kubernetes.default…`): kubeadm signs those itself from these CAs on the
//! controller; tests/it/testbed.rs runs the built kubeadm over this PKI and a real
//! kube-apiserver with it. Publishing and KMS: tests/it/deploy_moto.rs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ::time::OffsetDateTime;
use kube_aws::pki::{self, ClusterPki};
use x509_parser::prelude::parse_x509_certificate;

fn der(pem_text: &str) -> Vec<u8> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem_text.as_bytes()).unwrap();
    p.contents
}

fn openssl(args: &[&str], stdin: Option<&[u8]>) -> (bool, Vec<u8>, String) {
    use std::io::Write;
    let mut c = Command::new("openssl");
    c.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("openssl is installed (Debian package openssl)");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn pki() -> (ClusterPki, OffsetDateTime) {
    let now = OffsetDateTime::now_utc();
    (pki::generate("demo", now).unwrap(), now)
}

#[test]
fn the_three_cas_sign_leaves_only() {
    let (p, now) = pki();
    assert!(p.is_complete());
    for (entry, cn) in [
        (pki::CA_CERT, "kubernetes"),
        (pki::FRONT_PROXY_CA_CERT, "front-proxy-ca"),
        (pki::ETCD_CA_CERT, "etcd-ca"),
    ] {
        let d = der(&p.public[entry]);
        let (_, c) = parse_x509_certificate(&d).unwrap();
        assert_eq!(c.subject().iter_common_name().next().unwrap().as_str().unwrap(), cn);
        assert_eq!(c.subject(), c.issuer(), "{entry} is self-signed");
        let bc = c.basic_constraints().unwrap().expect("basic constraints").value;
        assert!(bc.ca, "{entry} is a CA");
        assert_eq!(bc.path_len_constraint, Some(0), "{entry}: no intermediate CAs");
        let ku = c.key_usage().unwrap().expect("key usage").value;
        assert!(
            ku.key_cert_sign() && ku.digital_signature() && ku.crl_sign(),
            "{entry}: {ku:?}"
        );
        assert!(!ku.key_encipherment() && !ku.non_repudiation(), "{entry}: {ku:?}");
        assert!(c.extended_key_usage().unwrap().is_none(), "{entry} has no EKU");
        let v = c.validity();
        let nb = v.not_before.to_datetime();
        let na = v.not_after.to_datetime();
        assert!(
            nb <= now && now - nb <= ::time::Duration::minutes(6),
            "{entry}: not before {nb}"
        );
        // kubeadm's 10-year CA lifetime (certificate times are whole seconds).
        let ten_years = ::time::Duration::days(3650);
        let life = na - now;
        assert!(
            life <= ten_years && life > ten_years - ::time::Duration::seconds(2),
            "{entry}: not after {na}"
        );
        // Signed by its own key.
        assert!(c.verify_signature(None).is_ok(), "{entry} self-signature");
        // Its key matches (openssl derives the public key from the private one).
        let key_entry = entry.replace(".crt", ".key");
        let dir = tempfile::tempdir().unwrap();
        let k = write(dir.path(), "k.pem", p.keys[&key_entry].expose());
        let (ok, from_key, err) = openssl(&["pkey", "-in", &k, "-pubout", "-outform", "der"], None);
        assert!(ok, "{err}");
        assert_eq!(
            from_key, c.tbs_certificate.subject_pki.raw,
            "{key_entry} matches {entry}"
        );
    }
    // The three CAs are distinct keys.
    let hashes: std::collections::BTreeSet<String> = [pki::CA_CERT, pki::FRONT_PROXY_CA_CERT, pki::ETCD_CA_CERT]
        .iter()
        .map(|e| pki::ca_cert_hash(&p.public[*e]).unwrap())
        .collect();
    assert_eq!(hashes.len(), 3);
}

#[test]
fn the_service_account_pair_matches() {
    let (p, _) = pki();
    let dir = tempfile::tempdir().unwrap();
    let k = write(dir.path(), "sa.key", p.keys[pki::SA_KEY].expose());
    let (ok, out, err) = openssl(&["pkey", "-in", &k, "-pubout"], None);
    assert!(ok, "{err}");
    assert_eq!(String::from_utf8(out).unwrap().trim(), p.public[pki::SA_PUB].trim());
    assert!(p.public[pki::SA_PUB].starts_with("-----BEGIN PUBLIC KEY-----"));
}

#[test]
fn the_ca_hash_is_openssls() {
    let (p, _) = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.crt", &p.public[pki::CA_CERT]);
    // openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum
    let (ok, pubkey, err) = openssl(&["x509", "-in", &ca, "-noout", "-pubkey"], None);
    assert!(ok, "{err}");
    let (ok, der, err) = openssl(&["pkey", "-pubin", "-outform", "der"], Some(&pubkey));
    assert!(ok, "{err}");
    let (ok, digest, err) = openssl(&["dgst", "-sha256", "-r"], Some(&der));
    assert!(ok, "{err}");
    let hex = String::from_utf8(digest)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(hex.len(), 64);
    assert_eq!(p.ca_cert_hash().unwrap(), format!("sha256:{hex}"));
}

#[test]
fn a_minted_client_certificate_verifies_against_the_ca_only() {
    let (p, now) = pki();
    let ttl = Duration::from_secs(12 * 3600);
    let c = pki::mint_client(
        &p.public[pki::CA_CERT],
        &p.keys[pki::CA_KEY],
        pki::DEFAULT_USER,
        Some(pki::DEFAULT_GROUP),
        ttl,
        now,
    )
    .unwrap();
    let d = der(&c.cert_pem);
    let (_, x) = parse_x509_certificate(&d).unwrap();
    assert_eq!(
        x.subject().iter_common_name().next().unwrap().as_str().unwrap(),
        "kube-aws-admin"
    );
    let orgs: Vec<&str> = x.subject().iter_organization().map(|o| o.as_str().unwrap()).collect();
    assert_eq!(orgs, vec!["kubeadm:cluster-admins"]);
    let bc = x.basic_constraints().unwrap().map(|b| b.value.ca);
    assert_eq!(bc, Some(false), "a client certificate is no CA");
    let ku = x.key_usage().unwrap().expect("key usage").value;
    assert!(ku.digital_signature() && !ku.key_cert_sign(), "{ku:?}");
    let eku = x.extended_key_usage().unwrap().expect("extended key usage").value;
    assert!(eku.client_auth && !eku.server_auth && !eku.any, "{eku:?}");
    let lifetime = x.validity().not_after.to_datetime() - now;
    let twelve = ::time::Duration::hours(12);
    assert!(
        lifetime <= twelve && lifetime > twelve - ::time::Duration::seconds(2),
        "{lifetime}"
    );
    assert_eq!(c.not_after, x.validity().not_after.to_datetime());
    assert_eq!(pki::not_after(&c.cert_pem).unwrap(), c.not_after);
    // The key was made here and matches.
    let dir = tempfile::tempdir().unwrap();
    let k = write(dir.path(), "client.key", c.key_pem.expose());
    let (ok, from_key, err) = openssl(&["pkey", "-in", &k, "-pubout", "-outform", "der"], None);
    assert!(ok, "{err}");
    assert_eq!(from_key, x.tbs_certificate.subject_pki.raw);

    let ca = write(dir.path(), "ca.crt", &p.public[pki::CA_CERT]);
    let other = write(dir.path(), "front-proxy-ca.crt", &p.public[pki::FRONT_PROXY_CA_CERT]);
    let cert = write(dir.path(), "client.crt", &c.cert_pem);
    let (ok, out, err) = openssl(&["verify", "-purpose", "sslclient", "-CAfile", &ca, &cert], None);
    assert!(ok, "openssl verify: {} {err}", String::from_utf8_lossy(&out));
    assert!(String::from_utf8_lossy(&out).contains(": OK"));
    // Negative control: another CA does not accept it, nor does it serve TLS.
    let (ok, _, _) = openssl(&["verify", "-CAfile", &other, &cert], None);
    assert!(!ok, "the front-proxy CA must not verify a cluster client certificate");
    let (ok, _, _) = openssl(&["verify", "-purpose", "sslserver", "-CAfile", &ca, &cert], None);
    assert!(!ok, "a client certificate must not pass as a server certificate");
}

#[test]
fn client_certificates_never_outlive_seven_days() {
    let (p, now) = pki();
    for ttl in [pki::MAX_CLIENT_TTL + Duration::from_secs(1), Duration::ZERO] {
        let e = pki::mint_client(&p.public[pki::CA_CERT], &p.keys[pki::CA_KEY], "u", None, ttl, now);
        assert!(e.is_err(), "{ttl:?}");
    }
    assert!(pki::mint_client(
        &p.public[pki::CA_CERT],
        &p.keys[pki::CA_KEY],
        "u",
        None,
        pki::MAX_CLIENT_TTL,
        now
    )
    .is_ok());
}

#[test]
fn a_foreign_key_cannot_mint() {
    let (p, now) = pki();
    let (q, _) = pki();
    // The CA certificate of one PKI with the key of another: the signature
    // would not verify, and openssl says so.
    let c = pki::mint_client(
        &p.public[pki::CA_CERT],
        &q.keys[pki::CA_KEY],
        "u",
        None,
        Duration::from_secs(60),
        now,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.crt", &p.public[pki::CA_CERT]);
    let cert = write(dir.path(), "c.crt", &c.cert_pem);
    let (ok, _, _) = openssl(&["verify", "-CAfile", &ca, &cert], None);
    assert!(!ok);
    assert!(pki::ca_cert_hash("not pem").is_err());
}
