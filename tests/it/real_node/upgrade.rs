//! Issue 26 on the real-node bed (docs/testing.md "The real-node bed"): a
//! configuration change after `up` reaches the running control plane by
//! kubeadm's own path. Each test's name contains `upgrade`.
//!
//! `upgrade_a_dex_oidc_flag_added_after_up_reaches_the_running_apiserver`:
//! a one-controller cluster is up and Ready (its boot from the rendered
//! user-data checked first by real_node/cluster.rs `check_rendered_controller`, on
//! the same controller: one boot for both, issue 37); then a plugin bringing Dex's
//! OIDC apiserver flags (those plugins/dex renders, with an issuer of the
//! test's: Dex itself is a chart from the internet, out of reach here) is
//! added to the work tree and `kube-aws update` runs against moto. The
//! ClusterConfiguration travels in the addon bundle, not the user data, so
//! the controller's launch template is unchanged and no instance is
//! launched; the running controller's `kube-aws-node reconfigure` (its
//! timer's service, started here rather than waited for: the timer's first
//! run is 5 to 8 minutes after boot) takes the join lock, uploads the
//! ClusterConfiguration into `kubeadm-config` and writes the static pod
//! manifests again (kubeadm's reconfiguration path,
//! src/node/kube_aws_node/reconfigure.py), and the same node's
//! kube-apiserver then runs with the flags and answers /readyz.
//!
//! `upgrade_a_patch_release_reaches_the_running_apiserver` (ignored by `make
//! test`; `make test-upgrade` builds its second Kubernetes patch and runs it,
//! docs/testing.md "The upgrade bed"): a one-controller cluster brought up
//! at the default minor's oldest patch (1.35.4, from the node image of
//! scripts/install-upgradebed.sh) is moved to the default patch (1.35.8) by
//! `kube-aws update`; its controller is replaced as a single controller is
//! (the old one gone first), and the replacement, booted from the new launch
//! template's user data on the default node image, restores etcd's snapshot,
//! runs `kubeadm init` at its version over it and then `kubeadm upgrade
//! apply` (src/node/kube_aws_node/upgrade.py `after_init`). Then the API
//! server, the static pods, kube-proxy and the node's kubelet run the new
//! patch, the data written before is there, the upgrade record says so, and
//! no kubelet was newer than the API server at any sample of the roll.
//!
//! `upgrade_a_minor_release_reaches_the_control_plane_kube_proxy_and_coredns`
//! (in `make test`, whose beds build the next minor's node image): the same path from the default patch (1.35.8, the
//! default node image) to the next minor's default patch (1.36.5, the image
//! `.testbed/node/upgrade-to-minor`): the static pods (etcd 3.6.6 → 3.6.8
//! with them), kube-proxy and CoreDNS (v1.13.1 → v1.14.2) run what kubeadm
//! 1.36.5 names.
//!
//! `upgrade_an_ha_control_plane_one_controller_at_a_time` (ignored
//! likewise): three controllers at 1.35.4 replaced one at a time by 1.35.8
//! ones (its own header says what the test does in the bed's place).
//!
//! Not here: the termination lifecycle hook (the bed has none: the
//! single-controller tests take the final snapshot themselves by starting
//! the backup service), the load balancer (a controller's address stands for
//! the API's name), and a minor roll of three controllers (the HA test rolls
//! a patch; the minor's path differs from it only by kubeadm's own version
//! checks, against fakes in tests/it/node_bootstrap.rs).
//!
//! Where each is: the Dex flag (a reconfiguration, no new instance) in
//! upgrade/reconfigure.rs; the patch and minor releases of one controller
//! in upgrade/single.rs; the HA roll in upgrade/ha.rs, and the HA roll
//! whose second replacement fails (run by
//! tests/it/controllers_real_node.rs on its cluster) in
//! upgrade/ha_failure.rs. Here: what they share (the stubs' cloud-config
//! digest, the version moved in cluster.yaml, the data written before and
//! read after, the replacement instance, the versions each node runs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::bed::{self, MotoBed, READY_LIMIT};
use super::{
    boot_three_controllers, check_rendered_controller, etcd_members, expect_join_lock_released, expect_members,
    member_ips, pod_net,
};
use crate::common::{nodebed, output_text};

mod ha;
mod ha_failure;
mod reconfigure;
mod single;

pub(crate) use ha_failure::a_failed_ha_upgrade_keeps_the_api_and_a_second_update_finishes_it;
pub(crate) use reconfigure::{ISSUER_FLAG, OIDC_PLUGIN};

/// The digest of the cloud-config a stub names (moto recreates a modified
/// nested stack whole, so the stub's stack name moves; its data does not).
fn cloud_config(stub: &str) -> String {
    stub.split("\"cloudConfigSha256\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no cloudConfigSha256 in the stub:\n{stub}"))
        .to_string()
}

/// `v1.35.8` as numbers, for ordering.
fn triple(v: &str) -> Option<(u32, u32, u32)> {
    let core = v.trim().trim_start_matches('v').split(['-', '+']).next()?;
    let mut it = core.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// A ConfigMap written at the old version, which the upgrade must keep.
fn write_marker(bed: &MotoBed, via: &bed::BedNode, version: &str) {
    let made = bed.kubectl(
        via,
        &[
            "-n",
            "default",
            "create",
            "configmap",
            "written-at-old-patch",
            &format!("--from-literal=version={version}"),
        ],
    );
    assert!(made.status.success(), "{}", output_text(&made));
}

/// The ConfigMap `write_marker` wrote is there, with its version.
fn expect_marker(bed: &MotoBed, via: &bed::BedNode, version: &str) {
    let kept = bed.kubectl(
        via,
        &[
            "-n",
            "default",
            "get",
            "configmap",
            "written-at-old-patch",
            "-o",
            "jsonpath={.data.version}",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&kept.stdout), version, "{}", output_text(&kept));
}

/// `kubernetesVersion` moves from `from` to `to` in the work tree and
/// `kube-aws update --yes` runs: its output (the preview), after it succeeded.
fn move_version(bed: &MotoBed, from: &str, to: &str) -> String {
    let yaml = bed.dir().join("cluster.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    let was = format!("kubernetesVersion: \"{from}\"");
    assert!(text.contains(&was), "no {was} in {}", yaml.display());
    std::fs::write(&yaml, text.replace(&was, &format!("kubernetesVersion: \"{to}\""))).unwrap();
    let upd = bed.kube_aws(&["update", "--yes"]);
    let said = output_text(&upd);
    assert!(upd.status.success(), "kube-aws update: {said}");
    said
}

/// The reference of the image `name` (kube-apiserver, etcd, coredns...) in
/// a node image's list (scripts/install-nodebed.sh writes it from `kubeadm
/// config images list`).
fn image_named(image: &std::path::Path, name: &str) -> String {
    let images = std::fs::read_to_string(image.join("images")).unwrap();
    images
        .lines()
        .find(|l| l.rsplit('/').next().is_some_and(|t| t.starts_with(&format!("{name}:"))))
        .unwrap_or_else(|| panic!("no {name} in {images}"))
        .to_string()
}

/// kube-proxy and CoreDNS run the images of `image`'s version (the node
/// image's list), as `kubeadm upgrade` leaves them once every controller runs it.
fn expect_addon_images(bed: &MotoBed, via: &bed::BedNode, image: &std::path::Path) {
    for (kind, name) in [("daemonset", "kube-proxy"), ("deployment", "coredns")] {
        let o = bed.kubectl(
            via,
            &[
                "-n",
                "kube-system",
                "get",
                kind,
                name,
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ],
        );
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            image_named(image, name),
            "{name}: {}",
            output_text(&o)
        );
    }
}

/// The Kubernetes version a node image holds (scripts/install-nodebed.sh writes it).
fn image_version(image: &std::path::Path) -> String {
    std::fs::read_to_string(image.join("kubernetes-version"))
        .unwrap_or_else(|e| panic!("{}: {e}", image.join("kubernetes-version").display()))
        .trim()
        .to_string()
}

/// The instance moto's group `group` launches for `old` (terminated here
/// unless an update launched one already): one none of `known` is.
fn replacement(bed: &MotoBed, group: &str, old: &bed::Instance, known: &mut Vec<String>) -> bed::Instance {
    let fresh = |bed: &MotoBed, known: &[String]| bed.instances(group).into_iter().find(|i| !known.contains(&i.id));
    let new = match fresh(bed, known) {
        Some(i) => i,
        None => {
            bed.aws(&[
                "autoscaling",
                "terminate-instance-in-auto-scaling-group",
                "--instance-id",
                &old.id,
                "--no-should-decrement-desired-capacity",
            ]);
            fresh(bed, known)
                .unwrap_or_else(|| panic!("moto's group did not replace {}: {:?}", old.id, bed.instances(group)))
        }
    };
    known.push(new.id.clone());
    new
}

/// moto recreates a modified nested stack whole (MotoBed::recredential), so
/// after `update` the controller group is a new one whose instances are none
/// of the running controllers, and EC2's view of the controllers (the
/// joining controller's etcd prune asks the other controllers' etcd members
/// from it: etcd.py `controller_ips`) lacks them: the first replacement's
/// prune reached none of them and its join then failed to add its member
/// ("etcdserver: unhealthy cluster", the replaced member still counted). On
/// AWS the group is updated in place and its old instances stay until the
/// roll terminates them: each running old controller is put back into
/// EC2's view, an instance with its address and the group's `Name` tag
/// (ids returned, for `replacement` to skip and for the roll to terminate).
/// In a VPC of their own: moto keeps a terminated instance's address taken
/// in its subnet ("IP already in use", moto/ec2/models/subnets.py
/// request_ip), and `controller_ips` filters by tag and state only.
fn keep_in_view(bed: &MotoBed, group: &str, survivors: &[&bed::BedNode]) -> Vec<(String, String)> {
    let listed = bed.instances(group);
    let like = bed.aws(&["ec2", "describe-instances", "--instance-ids", &listed[0].id]);
    let ami = like["Reservations"][0]["Instances"][0]["ImageId"]
        .as_str()
        .unwrap()
        .to_string();
    let vpc = bed.aws(&["ec2", "create-vpc", "--cidr-block", "10.250.0.0/16"]);
    let vpc = vpc["Vpc"]["VpcId"].as_str().unwrap();
    let subnet = bed.aws(&["ec2", "create-subnet", "--vpc-id", vpc, "--cidr-block", "10.250.0.0/16"]);
    let subnet = subnet["Subnet"]["SubnetId"].as_str().unwrap();
    let mut out = Vec::new();
    for s in survivors {
        if listed.iter().any(|i| i.ip == s.node.ip) {
            continue;
        }
        let r = bed.aws(&[
            "ec2",
            "run-instances",
            "--image-id",
            &ami,
            "--instance-type",
            "t3.medium",
            "--subnet-id",
            subnet,
            "--private-ip-address",
            &s.node.ip,
            "--tag-specifications",
            &format!("ResourceType=instance,Tags=[{{Key=Name,Value={group}}}]"),
        ]);
        let id = r["Instances"][0]["InstanceId"].as_str().unwrap().to_string();
        out.push((s.node.ip.clone(), id));
    }
    out
}

/// (Node name, version) pairs.
type ByNode = Vec<(String, String)>;

/// The tag of each running kube-apiserver mirror pod, by Node name.
fn apiserver_versions(bed: &MotoBed, via: &bed::BedNode) -> ByNode {
    let o = bed.kubectl(
        via,
        &[
            "-n",
            "kube-system",
            "get",
            "pods",
            "-l",
            "component=kube-apiserver",
            "-o",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let image = p["spec"]["containers"][0]["image"].as_str().unwrap_or("");
            (
                p["spec"]["nodeName"].as_str().unwrap_or("?").to_string(),
                image.rsplit(':').next().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// Each Node's kubelet version, by Node name.
fn kubelet_versions(bed: &MotoBed, via: &bed::BedNode) -> ByNode {
    let o = bed.kubectl(via, &["get", "nodes", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["metadata"]["name"].as_str().unwrap_or("?").to_string(),
                n["status"]["nodeInfo"]["kubeletVersion"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string(),
            )
        })
        .collect()
}

/// Removes the taint kubelet's `--cloud-provider=external` sets until the
/// cloud controller manager initialises the Node (the bed runs none: the
/// test does its part, as it deletes a replaced controller's Node).
fn untaint(bed: &MotoBed, via: &bed::BedNode, node: &str) -> bool {
    bed.kubectl(
        via,
        &["taint", "node", node, "node.cloudprovider.kubernetes.io/uninitialized-"],
    )
    .status
    .success()
}
