//! The sweep's decisions: ownership by tag, the order, retries, and the
//! external-dns registry.

use super::*;

fn found(kind: Kind, id: &str, tags: &[(&str, &str)]) -> Found {
    Found {
        kind,
        id: id.into(),
        name: String::new(),
        tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    }
}

#[test]
fn only_the_clusters_owned_tag_is_ownership() {
    let t = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    assert!(owned(
        "demo",
        Kind::Volume,
        &t(&[("kubernetes.io/cluster/demo", "owned")])
    ));
    // Another cluster's, shared, a prefix of the name, untagged: not ours.
    assert!(!owned(
        "demo",
        Kind::Volume,
        &t(&[("kubernetes.io/cluster/other", "owned")])
    ));
    assert!(!owned(
        "demo",
        Kind::Volume,
        &t(&[("kubernetes.io/cluster/demo", "shared")])
    ));
    assert!(!owned(
        "demo",
        Kind::Volume,
        &t(&[("kubernetes.io/cluster/demo2", "owned")])
    ));
    assert!(!owned("demo", Kind::Volume, &t(&[])));
    // The VPC CNI's tag counts for ENIs only.
    assert!(owned("demo", Kind::NetworkInterface, &t(&[(CNI_CLUSTER_TAG, "demo")])));
    assert!(!owned(
        "demo",
        Kind::NetworkInterface,
        &t(&[(CNI_CLUSTER_TAG, "other")])
    ));
    assert!(!owned("demo", Kind::Volume, &t(&[(CNI_CLUSTER_TAG, "demo")])));
}

#[test]
fn the_plan_keeps_what_is_owned_load_balancers_first_security_groups_last() {
    let mine = [("kubernetes.io/cluster/demo", "owned")];
    let plan = plan(
        "demo",
        vec![
            found(Kind::SecurityGroup, "sg-1", &mine),
            found(Kind::Volume, "vol-2", &mine),
            found(Kind::Volume, "vol-other", &[("kubernetes.io/cluster/other", "owned")]),
            found(Kind::TargetGroup, "tg", &mine),
            found(Kind::NetworkInterface, "eni-1", &mine),
            found(Kind::NetworkInterface, "eni-1", &mine),
            found(Kind::LoadBalancer, "lb", &mine),
            found(Kind::DnsRecord, "Z|a.example.com.|A|", &[]),
        ],
    );
    let ids: Vec<&str> = plan.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["lb", "tg", "Z|a.example.com.|A|", "eni-1", "vol-2", "sg-1"]);
}

#[test]
fn another_pass_only_for_what_a_retry_can_clear() {
    let left = vec![(
        found(Kind::SecurityGroup, "sg", &[]),
        "DependencyViolation: x".to_string(),
    )];
    let dep = vec!["DependencyViolation".to_string()];
    let denied = vec!["UnauthorizedOperation".to_string()];
    assert!(another_pass(&left, &dep, false, true));
    assert!(another_pass(&left, &dep, true, false), "progress earns one more pass");
    assert!(
        !another_pass(&left, &dep, false, false),
        "no progress, past the deadline"
    );
    assert!(!another_pass(&left, &denied, true, true), "a refusal is not retried");
    assert!(!another_pass(&[], &dep, true, true));
    assert!(already_gone("InvalidVolume.NotFound") && already_gone("LoadBalancerNotFound"));
    assert!(!already_gone("VolumeInUse"));
}

fn rec(name: &str, rtype: &str, values: &[&str]) -> Record {
    Record {
        name: name.into(),
        rtype: rtype.into(),
        set_identifier: None,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

#[test]
fn txt_registry_owner_is_parsed_strictly() {
    assert_eq!(
        txt_owner("\"heritage=external-dns,external-dns/owner=demo,external-dns/resource=service/default/web\""),
        Some("demo")
    );
    assert_eq!(
        txt_owner("\"heritage=external-dns,external-dns/owner=demo2\""),
        Some("demo2")
    );
    assert_eq!(txt_owner("\"v=spf1 include:external-dns/owner=demo\""), None);
    assert_eq!(txt_owner("\"heritage=someone-else,external-dns/owner=demo\""), None);
}

#[test]
fn records_owned_through_the_txt_registry_old_and_new_names() {
    let mine = "\"heritage=external-dns,external-dns/owner=demo,external-dns/resource=service/default/web\"";
    let theirs = "\"heritage=external-dns,external-dns/owner=other\"";
    let records = vec![
        rec("example.com.", "SOA", &["ns. admin. 1 2 3 4 5"]),
        rec("example.com.", "NS", &["ns."]),
        rec("web.example.com.", "A", &["10.0.0.1"]),
        rec("web.example.com.", "TXT", &[mine]),
        rec("a-web.example.com.", "TXT", &[mine]),
        rec("api.example.com.", "CNAME", &["lb.example.net"]),
        rec("cname-api.example.com.", "TXT", &[mine]),
        // Same name with a type the prefix does not register: kept.
        rec("api.example.com.", "MX", &["10 mail"]),
        // Another cluster's, and a hand-made one: kept.
        rec("db.example.com.", "A", &["10.0.0.2"]),
        rec("a-db.example.com.", "TXT", &[theirs]),
        rec("manual.example.com.", "A", &["10.0.0.3"]),
    ];
    let owned: Vec<String> = owned_records("demo", &records)
        .into_iter()
        .map(|i| format!("{} {}", records[i].rtype, records[i].name))
        .collect();
    assert_eq!(
        owned,
        [
            "A web.example.com.",
            "TXT web.example.com.",
            "TXT a-web.example.com.",
            "CNAME api.example.com.",
            "TXT cname-api.example.com."
        ]
    );
}

#[test]
fn the_zone_is_the_external_dns_plugins_and_only_while_enabled() {
    let yaml = |plugins: &str| -> crate::config::ClusterConfig {
        serde_yaml::from_str(&format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://b/p\n{plugins}"
        ))
        .unwrap()
    };
    assert_eq!(
        external_dns_zone(&yaml("plugins:\n  external-dns: {hostedZoneId: Z123}\n")).as_deref(),
        Some("Z123")
    );
    assert_eq!(
        external_dns_zone(&yaml(
            "plugins:\n  external-dns: {enabled: false, hostedZoneId: Z123}\n"
        )),
        None
    );
    assert_eq!(external_dns_zone(&yaml("")), None);
}
