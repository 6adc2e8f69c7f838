//! `destroy`'s sweep, the calls: list the candidates with their tags (EC2 by
//! a tag filter, the load balancers and target groups by DescribeTags, the
//! external-dns zone's record sets), then delete what `sweep::plan` keeps,
//! pass after pass, until nothing is left or `sweep::another_pass` says no
//! pass can help. Every decision is in `sweep.rs`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecordSet};

use super::CNI_CLUSTER_TAG;
use super::{already_gone, another_pass, cluster_tag, owned_records, plan, Attempt, Found, Kind, Record, Report};
use crate::aws::{error_code, error_message, sdk_error, AwsError, Clients};

/// How long to keep retrying what another deletion may clear, and the pause
/// between passes.
#[derive(Debug, Clone, Copy)]
pub struct SweepOptions {
    pub deadline: Duration,
    pub pause: Duration,
    /// `--keep-volumes`: volumes are reported as kept, not deleted.
    pub keep_volumes: bool,
}

/// What the listing found, with the record sets kept for their deletion.
struct Listing {
    found: Vec<Found>,
    records: HashMap<String, (String, ResourceRecordSet)>,
}

fn tag_map<'a>(pairs: impl Iterator<Item = (Option<&'a str>, Option<&'a str>)>) -> BTreeMap<String, String> {
    pairs
        .filter_map(|(k, v)| Some((k?.to_string(), v.unwrap_or_default().to_string())))
        .collect()
}

fn ec2_filter(key: &str, value: &str) -> aws_sdk_ec2::types::Filter {
    aws_sdk_ec2::types::Filter::builder()
        .name(format!("tag:{key}"))
        .values(value)
        .build()
}

async fn list_ec2(clients: &Clients, cluster: &str, out: &mut Vec<Found>) -> Result<(), AwsError> {
    let owned = ec2_filter(&cluster_tag(cluster), "owned");
    let vols = clients
        .ec2
        .describe_volumes()
        .filters(owned.clone())
        .into_paginator()
        .items()
        .send()
        .collect::<Vec<_>>()
        .await;
    for v in vols {
        let v = v.map_err(|e| sdk_error("ec2:DescribeVolumes", e))?;
        let tags = tag_map(v.tags().iter().map(|t| (t.key(), t.value())));
        out.push(Found {
            kind: Kind::Volume,
            id: v.volume_id().unwrap_or_default().into(),
            name: tags.get("Name").cloned().unwrap_or_default(),
            tags,
        });
    }
    let sgs = clients
        .ec2
        .describe_security_groups()
        .filters(owned.clone())
        .into_paginator()
        .items()
        .send()
        .collect::<Vec<_>>()
        .await;
    for g in sgs {
        let g = g.map_err(|e| sdk_error("ec2:DescribeSecurityGroups", e))?;
        let tags = tag_map(g.tags().iter().map(|t| (t.key(), t.value())));
        out.push(Found {
            kind: Kind::SecurityGroup,
            id: g.group_id().unwrap_or_default().into(),
            name: g.group_name().unwrap_or_default().into(),
            tags,
        });
    }
    for filter in [owned, ec2_filter(CNI_CLUSTER_TAG, cluster)] {
        let enis = clients
            .ec2
            .describe_network_interfaces()
            .filters(filter)
            .into_paginator()
            .items()
            .send()
            .collect::<Vec<_>>()
            .await;
        for n in enis {
            let n = n.map_err(|e| sdk_error("ec2:DescribeNetworkInterfaces", e))?;
            let tags = tag_map(n.tag_set().iter().map(|t| (t.key(), t.value())));
            out.push(Found {
                kind: Kind::NetworkInterface,
                id: n.network_interface_id().unwrap_or_default().into(),
                name: n.description().unwrap_or_default().into(),
                tags,
            });
        }
    }
    Ok(())
}

async fn list_elbv2(clients: &Clients, out: &mut Vec<Found>) -> Result<(), AwsError> {
    let mut arns: Vec<(Kind, String, String)> = Vec::new();
    let lbs = clients
        .elbv2
        .describe_load_balancers()
        .into_paginator()
        .items()
        .send()
        .collect::<Vec<_>>()
        .await;
    for lb in lbs {
        let lb = lb.map_err(|e| sdk_error("elasticloadbalancing:DescribeLoadBalancers", e))?;
        arns.push((
            Kind::LoadBalancer,
            lb.load_balancer_arn().unwrap_or_default().into(),
            lb.load_balancer_name().unwrap_or_default().into(),
        ));
    }
    let tgs = clients
        .elbv2
        .describe_target_groups()
        .into_paginator()
        .items()
        .send()
        .collect::<Vec<_>>()
        .await;
    for tg in tgs {
        let tg = tg.map_err(|e| sdk_error("elasticloadbalancing:DescribeTargetGroups", e))?;
        arns.push((
            Kind::TargetGroup,
            tg.target_group_arn().unwrap_or_default().into(),
            tg.target_group_name().unwrap_or_default().into(),
        ));
    }
    // DescribeTags takes at most 20 ARNs.
    for chunk in arns.chunks(20) {
        let resp = clients
            .elbv2
            .describe_tags()
            .set_resource_arns(Some(chunk.iter().map(|(_, a, _)| a.clone()).collect()))
            .send()
            .await
            .map_err(|e| sdk_error("elasticloadbalancing:DescribeTags", e))?;
        for d in resp.tag_descriptions() {
            let arn = d.resource_arn().unwrap_or_default();
            if let Some((kind, id, name)) = chunk.iter().find(|(_, a, _)| a == arn) {
                out.push(Found {
                    kind: *kind,
                    id: id.clone(),
                    name: name.clone(),
                    tags: tag_map(d.tags().iter().map(|t| (t.key(), t.value()))),
                });
            }
        }
    }
    Ok(())
}

async fn list_classic(clients: &Clients, out: &mut Vec<Found>) -> Result<(), AwsError> {
    let lbs = clients
        .elb
        .describe_load_balancers()
        .into_paginator()
        .items()
        .send()
        .collect::<Vec<_>>()
        .await;
    let mut names = Vec::new();
    for lb in lbs {
        let lb = lb.map_err(|e| sdk_error("elasticloadbalancing:DescribeLoadBalancers", e))?;
        names.push(lb.load_balancer_name().unwrap_or_default().to_string());
    }
    for chunk in names.chunks(20) {
        let resp = clients
            .elb
            .describe_tags()
            .set_load_balancer_names(Some(chunk.to_vec()))
            .send()
            .await
            .map_err(|e| sdk_error("elasticloadbalancing:DescribeTags", e))?;
        for d in resp.tag_descriptions() {
            let name = d.load_balancer_name().unwrap_or_default().to_string();
            out.push(Found {
                kind: Kind::ClassicLoadBalancer,
                id: name.clone(),
                name,
                tags: tag_map(d.tags().iter().map(|t| (Some(t.key()), t.value()))),
            });
        }
    }
    Ok(())
}

async fn list_records(clients: &Clients, zone: &str, owner: &str, listing: &mut Listing) -> Result<(), AwsError> {
    let mut sets: Vec<ResourceRecordSet> = Vec::new();
    let mut next: Option<(String, String, Option<String>)> = None;
    loop {
        let mut req = clients.route53.list_resource_record_sets().hosted_zone_id(zone);
        if let Some((name, rtype, ident)) = next.take() {
            req = req
                .start_record_name(name)
                .start_record_type(rtype.as_str().into())
                .set_start_record_identifier(ident);
        }
        let page = req
            .send()
            .await
            .map_err(|e| sdk_error("route53:ListResourceRecordSets", e))?;
        sets.extend(page.resource_record_sets().iter().cloned());
        match (page.is_truncated(), page.next_record_name(), page.next_record_type()) {
            (true, Some(n), Some(t)) => {
                next = Some((
                    n.to_string(),
                    t.as_str().to_string(),
                    page.next_record_identifier().map(str::to_string),
                ))
            }
            _ => break,
        }
    }
    let records: Vec<Record> = sets
        .iter()
        .map(|s| Record {
            name: s.name().to_string(),
            rtype: s.r#type().as_str().to_string(),
            set_identifier: s.set_identifier().map(str::to_string),
            values: s.resource_records().iter().map(|r| r.value().to_string()).collect(),
        })
        .collect();
    for i in owned_records(owner, &records) {
        let r = &records[i];
        let id = format!(
            "{zone}|{}|{}|{}",
            r.name,
            r.rtype,
            r.set_identifier.as_deref().unwrap_or_default()
        );
        listing.found.push(Found {
            kind: Kind::DnsRecord,
            id: id.clone(),
            name: format!("{} {}", r.rtype, r.name),
            tags: BTreeMap::new(),
        });
        listing.records.insert(id, (zone.to_string(), sets[i].clone()));
    }
    Ok(())
}

/// Everything the cluster owns that is still there: EC2 volumes, security
/// groups and ENIs, both kinds of load balancer, target groups, and the DNS
/// records its external-dns owns in `dns_zone`.
async fn list(clients: &Clients, cluster: &str, dns_zone: Option<&str>) -> Result<Listing, AwsError> {
    let mut listing = Listing {
        found: Vec::new(),
        records: HashMap::new(),
    };
    list_elbv2(clients, &mut listing.found).await?;
    list_classic(clients, &mut listing.found).await?;
    list_ec2(clients, cluster, &mut listing.found).await?;
    if let Some(zone) = dns_zone {
        // external-dns's txtOwnerId is the cluster's name (plugins/external-dns).
        list_records(clients, zone, cluster, &mut listing).await?;
    }
    listing.found = plan(cluster, std::mem::take(&mut listing.found));
    Ok(listing)
}

/// The outcome of an SDK call, as an [`Attempt`].
fn attempt<
    T,
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
>(
    r: Result<T, aws_sdk_s3::error::SdkError<E, R>>,
) -> Attempt {
    match r {
        Ok(_) => Attempt::Removed,
        Err(e) => match error_code(&e) {
            Some(code) if already_gone(code) => Attempt::Removed,
            Some(code) => Attempt::Failed {
                code: code.to_string(),
                message: error_message(&e).unwrap_or_default().to_string(),
            },
            None => Attempt::Failed {
                code: "Unreachable".into(),
                message: aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
            },
        },
    }
}

async fn delete(clients: &Clients, f: &Found, records: &HashMap<String, (String, ResourceRecordSet)>) -> Attempt {
    match f.kind {
        Kind::LoadBalancer => attempt(
            clients
                .elbv2
                .delete_load_balancer()
                .load_balancer_arn(&f.id)
                .send()
                .await,
        ),
        Kind::TargetGroup => attempt(clients.elbv2.delete_target_group().target_group_arn(&f.id).send().await),
        Kind::ClassicLoadBalancer => attempt(
            clients
                .elb
                .delete_load_balancer()
                .load_balancer_name(&f.id)
                .send()
                .await,
        ),
        Kind::NetworkInterface => attempt(
            clients
                .ec2
                .delete_network_interface()
                .network_interface_id(&f.id)
                .send()
                .await,
        ),
        Kind::Volume => attempt(clients.ec2.delete_volume().volume_id(&f.id).send().await),
        Kind::SecurityGroup => attempt(clients.ec2.delete_security_group().group_id(&f.id).send().await),
        Kind::DnsRecord => {
            let Some((zone, set)) = records.get(&f.id) else {
                return Attempt::Removed;
            };
            let change = Change::builder()
                .action(ChangeAction::Delete)
                .resource_record_set(set.clone())
                .build()
                .expect("action and record set are set");
            let batch = ChangeBatch::builder().changes(change).build().expect("changes are set");
            attempt(
                clients
                    .route53
                    .change_resource_record_sets()
                    .hosted_zone_id(zone)
                    .change_batch(batch)
                    .send()
                    .await,
            )
        }
    }
}

/// Deletes what the cluster still owns and reports what was removed and
/// what is left (with the last error). Listing failures are errors; a
/// deletion's failure is part of the report.
pub async fn sweep(
    clients: &Clients,
    cluster: &str,
    dns_zone: Option<&str>,
    opts: SweepOptions,
) -> Result<Report, AwsError> {
    let Listing { found, records } = list(clients, cluster, dns_zone).await?;
    let start = Instant::now();
    let mut report = Report::default();
    let (kept, todo): (Vec<Found>, Vec<Found>) = found
        .into_iter()
        .partition(|f| opts.keep_volumes && f.kind == Kind::Volume);
    report.kept = kept;
    let mut todo = todo;
    loop {
        let mut left = Vec::new();
        let mut codes = Vec::new();
        let before = todo.len();
        for f in todo {
            match delete(clients, &f, &records).await {
                Attempt::Removed => report.removed.push(f),
                Attempt::Failed { code, message } => {
                    left.push((f, format!("{code}: {message}")));
                    codes.push(code);
                }
            }
        }
        let progressed = left.len() < before;
        if !another_pass(&left, &codes, progressed, start.elapsed() < opts.deadline) {
            report.left = left;
            return Ok(report);
        }
        tokio::time::sleep(opts.pause).await;
        todo = left.into_iter().map(|(f, _)| f).collect();
    }
}
