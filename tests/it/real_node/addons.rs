//! The addons run for real on the real-node bed (issue 41): the built-in
//! plugins' charts installed by the controller's own reconciler, from images
//! built from source (scripts/install-addon-images.sh), and used the way a
//! user would use them.
//!
//! One cluster for all of them (`boot`): one controller booted from its
//! user-data, every addon plugin that can run here on (Dex; external-dns,
//! aws-node-termination-handler, the cluster-autoscaler and the EBS CSI
//! controller with their IRSA roles; the AWS cloud controller manager, metrics-server and the
//! descheduler; the pod identity webhook, always on), `kube-aws up --wait`
//! running from before the boot. Three tests share it (`shared`), each
//! below with its own header: Dex's login
//! (`addons_dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group`),
//! IRSA (`addons_irsa_external_dns_termination_handler_autoscaler_and_ebs_csi_call_aws_under_their_roles_only`)
//! and the plan, then a worker
//! (`addons_the_plan_ccm_metrics_server_descheduler_webhook_run_up_wait_names_every_addon_and_a_worker_joins`).
//! The first to ask boots it; the others wait for that boot; the last to
//! end stops it, and when a filter selects fewer of them, the process's
//! exit does (an `atexit` hook: libtest has no teardown, and ends with
//! `std::process::exit`). The worker joins once the Dex and IRSA tests have
//! ended, as neither expects a second node. Until stop 49 each was its own
//! test with its own cluster (three boots), then three checks of one test
//! (docs/testing.md, "One cluster for the addons").
//!
//! The plan, as the reconciler installs it (kube-aws-addons.timer, enabled
//! by the bootstrap's `installer` step, under the controller role with IAM
//! enforced: the plan pointer from SSM, the bundle from S3): the pod
//! identity webhook's manifests, then the helm releases, the AWS cloud
//! controller manager first (the plan's bootstrap release), then the other
//! seven, and the installed record. The helm client runs for real: `kube-aws
//! up` downloads it as a user's `helm.binary` names it (a tarball of the
//! test bed's helm, built from source at the pinned version, served over
//! HTTP) and publishes it with the charts (the real upstream charts of
//! `shared/data/charts`, locked for the test); the reconciler installs that
//! helm from S3 and runs `helm upgrade --install --wait --atomic`. The
//! images are built from source and imported into the node's containerd
//! under their published names (the webhook's from the test bed's binary;
//! metrics-server v0.8.0's program under the v0.8.1 tag the chart pulls,
//! the proxy serving no v0.8.1).
//!
//! The cloud controller manager (cloud-provider-aws v1.35.3) runs on the
//! controller's host network with the controller role's IMDS credentials,
//! against moto's EC2 (`AWS_ENDPOINT_URL` in the test's values: its
//! aws-sdk-go-v2 clients read it; IAM enforced). The test leaves the
//! kubelet's `node.cloudprovider.kubernetes.io/uninitialized` taint to it
//! (it removes only the control-plane taint, as a single-node cluster's
//! operator would) and checks that it initializes the node as on EC2: the
//! taint gone, the providerID `aws:///<zone>/<instance id>`, the zone label
//! and the node's addresses from the instance (moto's DescribeInstances by
//! private DNS name; tests/support/moto_server.py patch 16 answers
//! DescribeInstanceTopology empty, as AWS does for instance types without
//! topology); then CoreDNS, which cannot schedule before, answers the
//! kubernetes Service's name through kube-dns's Service. Its service (load
//! balancer) controller runs with no Service it serves (the IRSA check's
//! Service names another `loadBalancerClass`); the node lifecycle
//! controller's deletion of a terminated instance's Node is not exercised.
//!
//! The plan's checks: the descheduler's CronJob (every minute here)
//! completes a Job; the webhook's Deployment rolls out and a pod of an
//! annotated service account is mutated (a server-side dry run);
//! metrics-server's APIService serves the controller's metrics, scraped from
//! its kubelet over TLS verified with the cluster CA (no
//! `--kubelet-insecure-tls`), the kubelet's serving certificate approved by
//! kube-aws's approver (against the moto instance), and `kubectl top node`
//! answers. Readiness is real: moto holds the stack until the controllers'
//! group and each addon's wait condition are signalled
//! (tests/support/moto_signals.py), and `up --wait` returns 0 naming all
//! eight releases ready, from the reconciler's own signals and status
//! objects (the webhook, plugin manifests with no wait condition, rolled
//! out before the releases started).
//!
//! A broken addon is named on a cluster of its own
//! (`a_broken_metrics_server_is_named_by_the_reconciler_and_up_wait_exits_3`,
//! in addons/broken.rs: `up --wait` must fail there, and on the shared one
//! must not).
//!
//! The EBS CSI controller (the driver v1.64.0 from its tagged source, its
//! sidecars from the module proxy, the livenessprobe our own program:
//! upstream's is not served; `ebs_csi_controller_provisions_and_deletes_a_volume_under_its_role`)
//! runs in the IRSA test. Not run here: the EBS CSI node plugin (it needs
//! block devices: the test's values leave its DaemonSets out) and
//! the VPC CNI (it needs EC2 network interfaces) cannot run on the bed.
//! Pulls from a registry: none (the images are imported).
//!
//! Where each part is: the shared cluster (`boot`, `shared`) in
//! addons/cluster.rs; Dex in addons/dex.rs; the plan's own addons and the
//! worker in addons/plan.rs; IRSA (external-dns, the termination handler,
//! the cluster-autoscaler) in addons/irsa.rs, with the pods' web identity
//! in addons/web_identity.rs; the EBS CSI controller in addons/ebs_csi.rs;
//! the broken addon in addons/broken.rs; the addon nodes (their images,
//! the served helm, the cloud controller's part) in addons/node.rs. The
//! three tests sharing the cluster are here.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::bed::{self, BedNode, MotoBed};
use super::{pod_net, pod_to_service_to_pod};
use crate::common::nodebed;
use crate::common::output_text;

mod broken;
mod cluster;
mod dex;
mod ebs_csi;
mod irsa;
mod node;
mod plan;
mod web_identity;

use cluster::{shared, Cluster, Running, ADDONS, CHECKS_RUNNING};
use dex::dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group;
use ebs_csi::ebs_csi_controller_provisions_and_deletes_a_volume_under_its_role;
use irsa::irsa_external_dns_termination_handler_and_autoscaler_call_aws_under_their_roles_only;
use node::*;
use plan::{
    a_worker_joins_and_metrics_server_answers_for_every_node,
    the_plan_ccm_metrics_server_descheduler_and_webhook_run_and_up_wait_names_every_addon,
};

/// Dex on the shared cluster: discovery on HTTPS, the OIDC flags, a token
/// from the password grant and one from the mock connector's group
/// accepted by the API server, RBAC bound to that group (the module
/// header, "Dex end to end").
#[test]
fn addons_dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group() {
    let running = Running::start();
    let Some(c) = shared("real_node::addons::addons_dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group")
    else {
        return;
    };
    dex_login_is_accepted_by_the_apiserver_and_rbac_binds_its_group(&c);
    drop(running);
}

/// IRSA on the shared cluster: external-dns, aws-node-termination-handler,
/// the cluster-autoscaler and the EBS CSI controller call moto under their
/// own roles through `AssumeRoleWithWebIdentity`, and what their roles must
/// not do is refused (the headers of addons/irsa.rs and addons/ebs_csi.rs);
/// the EBS CSI controller provisions and deletes a volume for a claim.
#[test]
fn addons_irsa_external_dns_termination_handler_autoscaler_and_ebs_csi_call_aws_under_their_roles_only() {
    let running = Running::start();
    let Some(c) = shared(
        "real_node::addons::addons_irsa_external_dns_termination_handler_autoscaler_and_ebs_csi_call_aws_under_their_roles_only",
    ) else {
        return;
    };
    irsa_external_dns_termination_handler_and_autoscaler_call_aws_under_their_roles_only(&c);
    let ebs = ebs_csi_controller_provisions_and_deletes_a_volume_under_its_role(&c);
    eprintln!("ebs csi: {ebs}");
    drop(running);
}

/// The plan on the shared cluster: the cloud controller manager,
/// metrics-server, the descheduler and the pod identity webhook run and
/// `up --wait` named every addon ready; then, once the Dex and IRSA tests
/// are done (neither expects a second node), a worker joins, metrics-server
/// answers for both nodes and pods reach each other across them. Its name
/// sorts after the other two, so libtest starts it last.
#[test]
fn addons_the_plan_ccm_metrics_server_descheduler_webhook_run_up_wait_names_every_addon_and_a_worker_joins() {
    let test = "real_node::addons::addons_the_plan_ccm_metrics_server_descheduler_webhook_run_up_wait_names_every_addon_and_a_worker_joins";
    let t0 = Instant::now();
    let Some(c) = shared(test) else {
        return;
    };
    let t_ready = t0.elapsed();
    the_plan_ccm_metrics_server_descheduler_and_webhook_run_and_up_wait_names_every_addon(&c);
    // The other two started before this one (name order), so they are
    // counted by now; wait for them to end.
    let waited = Instant::now();
    while CHECKS_RUNNING.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(1200),
            "the Dex and IRSA tests still run after 20 minutes"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let waited = waited.elapsed();
    let worker = a_worker_joins_and_metrics_server_answers_for_every_node(&c);
    // The boot and the addons' bring-up (scripts/bench-node.sh prints them).
    eprintln!(
        "--- boot timeline ---\n{}{}--- end ---",
        bed::timeline(&c.ctl, &c.followed),
        bed::addon_timeline(&c.bed, &c.ctl, &ADDONS)
    );
    eprintln!(
        "{test}: the shared cluster ready after {:.1}s of this test ({}); waited {:.1}s for the other checks; \
         the worker {worker}; test {:.1}s",
        t_ready.as_secs_f64(),
        c.followed.times(),
        waited.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
