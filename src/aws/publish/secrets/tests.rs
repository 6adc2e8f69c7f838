use super::*;

#[test]
fn bootstrap_tokens_have_kubeadm_shape_and_differ() {
    let re = regex::Regex::new(r"^[a-z0-9]{6}\.[a-z0-9]{16}$").unwrap();
    let a = generate_bootstrap_token().unwrap();
    let b = generate_bootstrap_token().unwrap();
    assert!(re.is_match(a.expose()), "{}", a.expose());
    assert_ne!(a, b);
}

fn at(s: &str) -> std::time::SystemTime {
    humantime::parse_rfc3339(s).unwrap()
}

fn under(key: &str, retired: &[(&str, &str)]) -> SecretBundle {
    SecretBundle {
        kms_key_arn: key.into(),
        retired_keys: retired
            .iter()
            .map(|(arn, t)| RetiredKey {
                arn: arn.to_string(),
                retired_at: t.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn a_new_key_retires_the_old_one_until_its_snapshots_age_out() {
    let keep = retired_key_lifetime(&crate::config::EtcdRetention {
        hourly_days: 7,
        daily_days: 30,
    });
    assert_eq!(keep.as_secs(), 31 * 86_400);
    let now = at("2026-12-02T00:00:00Z");
    // Same key, nothing retired: nothing to keep.
    assert!(retired_keys(Some(&under("k1", &[])), "k1", now, keep).is_empty());
    assert!(retired_keys(None, "k1", now, keep).is_empty());
    // k1 → k2: k1 retired now.
    let r = retired_keys(Some(&under("k1", &[])), "k2", now, keep);
    assert_eq!(
        r,
        vec![RetiredKey {
            arn: "k1".into(),
            retired_at: "2026-12-02T00:00:00Z".into()
        }]
    );
    // Kept inside the window, dropped past it.
    let prev = under("k2", &[("k1", "2026-12-02T00:00:00Z")]);
    assert_eq!(
        retired_keys(Some(&prev), "k2", at("2027-01-02T00:00:00Z"), keep).len(),
        1,
        "31 days: still kept"
    );
    assert!(retired_keys(Some(&prev), "k2", at("2027-01-02T00:00:01Z"), keep).is_empty());
    // k2 → k3 keeps k1 too; back to k1 drops it from the retired ones.
    let r = retired_keys(Some(&prev), "k3", now, keep);
    assert_eq!(r.iter().map(|k| k.arn.as_str()).collect::<Vec<_>>(), ["k1", "k2"]);
    let back = retired_keys(Some(&prev), "k1", now, keep);
    assert_eq!(back.iter().map(|k| k.arn.as_str()).collect::<Vec<_>>(), ["k2"]);
    // An unreadable time keeps its key.
    let odd = under("k2", &[("k1", "yesterday")]);
    assert_eq!(retired_keys(Some(&odd), "k2", now, keep).len(), 1);
    assert_eq!(
        under("k2", &[("k1", "2026-12-02T00:00:00Z"), ("k2", "x")]).decrypt_keys(),
        ["k2", "k1"]
    );
}

fn with_sa(sa_pub: &str, retired: &[(&str, &str)]) -> SecretBundle {
    SecretBundle {
        certificates: BTreeMap::from([(pki::SA_PUB.to_string(), sa_pub.to_string())]),
        retired_service_account_keys: retired
            .iter()
            .map(|(k, t)| RetiredPublicKey {
                public_key: k.to_string(),
                retired_at: t.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn a_replaced_service_account_key_stays_in_the_jwks_for_the_retention_window() {
    let keep = SERVICE_ACCOUNT_KEY_RETENTION;
    let now = at("2026-12-02T00:00:00Z");
    // No rotation: nothing retired.
    assert!(retired_service_account_keys(Some(&with_sa("A", &[])), "A", now, keep).is_empty());
    assert!(retired_service_account_keys(None, "A", now, keep).is_empty());
    // A → B: A retired now.
    let r = retired_service_account_keys(Some(&with_sa("A", &[])), "B", now, keep);
    assert_eq!(
        r,
        vec![RetiredPublicKey {
            public_key: "A".into(),
            retired_at: "2026-12-02T00:00:00Z".into()
        }]
    );
    // Kept for 7 days, then dropped at the next publish.
    let prev = with_sa("B", &[("A", "2026-12-02T00:00:00Z")]);
    assert_eq!(
        retired_service_account_keys(Some(&prev), "B", at("2026-12-09T00:00:00Z"), keep).len(),
        1
    );
    assert!(retired_service_account_keys(Some(&prev), "B", at("2026-12-09T00:00:01Z"), keep).is_empty());
    // B → C keeps A too; a key rotated back to is not "retired".
    let r = retired_service_account_keys(Some(&prev), "C", now, keep);
    assert_eq!(r.iter().map(|k| k.public_key.as_str()).collect::<Vec<_>>(), ["A", "B"]);
    assert_eq!(
        retired_service_account_keys(Some(&prev), "A", now, keep)
            .iter()
            .map(|k| k.public_key.as_str())
            .collect::<Vec<_>>(),
        ["B"]
    );
}

#[test]
fn a_ca_rotation_drops_exactly_the_pki_and_keeps_the_other_secrets() {
    let mut b = SecretBundle::default();
    for n in pki::KEY_ENTRIES.iter().chain(&pki::WEBHOOK_ENTRIES) {
        b.secrets.insert(n.to_string(), "ct".into());
        b.origins.insert(n.to_string(), "o".into());
    }
    for n in pki::PUBLIC_ENTRIES {
        b.certificates.insert(n.to_string(), "pem".into());
    }
    b.secrets.insert(BOOTSTRAP_TOKEN.into(), "tok".into());
    b.secrets.insert("dex/clientSecret".into(), "s".into());
    b.origins.insert("dex/clientSecret".into(), "o".into());
    let s = without_pki(&b);
    assert_eq!(
        s.secrets.keys().collect::<Vec<_>>(),
        ["dex/clientSecret", BOOTSTRAP_TOKEN]
    );
    assert!(s.certificates.is_empty());
    assert_eq!(s.origins.keys().collect::<Vec<_>>(), ["dex/clientSecret"]);
}

#[test]
fn debug_never_shows_the_value() {
    let s = Secret::new("hunter2-plaintext");
    let v = NamedSecret {
        name: "dex/clientSecret".into(),
        value: s.clone(),
    };
    assert!(!format!("{s:?} {v:?}").contains("hunter2"));
}
