//! The EBS CSI controller on the shared cluster of
//! tests/it/real_node/addons.rs: its role and values, and the check the
//! test
//! `addons_irsa_external_dns_termination_handler_autoscaler_and_ebs_csi_call_aws_under_their_roles_only`
//! runs after the IRSA one (the check's own header says what it shows and
//! what it does not cover: attaching and mounting, snapshots).

use super::web_identity::{irsa_pod, moto_sessions, refused, role_creds};
use super::*;

/// The EBS CSI controller's IRSA role, as the stack names it
/// (plugins/aws-ebs-csi-driver, `serviceAccounts`).
const EBS_ROLE: &str = "bed-us-west-2-kube-system-ebs-csi-controller-sa";

/// The test's values/aws-ebs-csi-driver.yaml: only data. The controller's
/// EC2 client at moto through the driver's own `AWS_EC2_ENDPOINT`
/// (pkg/cloud/cloud.go `NewCloud`: the EC2 client's BaseEndpoint; the chart
/// reads it from an optional ConfigMap, `controller.env` sets it here), STS
/// through aws-sdk-go-v2's `AWS_ENDPOINT_URL_STS`, as for external-dns (the
/// controller's health check is an EC2 dry run, `DescribeAvailabilityZones`
/// in pkg/driver/identity.go `Probe`: without moto the pod is never Ready).
/// The node DaemonSets are left out (the chart's `node.enableLinux` and
/// `node.enableWindows`, templates/_node.tpl): the node plugin mounts block
/// devices, which the bed's nodes have none to give, and its
/// csi-node-driver-registrar is not served by the module proxy.
pub(super) fn ebs_values(moto: &str) -> String {
    let moto = serde_json::to_string(moto).unwrap();
    format!(
        "controller:\n  env:\n    - name: AWS_EC2_ENDPOINT\n      value: {moto}\n    \
         - name: AWS_ENDPOINT_URL_STS\n      value: {moto}\n\
         node:\n  enableLinux: false\n  enableWindows: false\n"
    )
}

/// The EBS CSI controller on the shared cluster (issue 41): the chart's
/// controller Deployment (aws-ebs-csi-driver 2.64.0: two replicas of the
/// driver v1.64.0, built from its tagged source, with the
/// csi-provisioner v6.3.0, csi-attacher v4.12.0, csi-resizer and
/// livenessprobe sidecars; scripts/install-addon-images.sh says which
/// version of each is built and why) runs Ready, every container of each
/// pod ready, its readiness the liveness-probe sidecar's `/healthz`. Its
/// pods carry the IRSA role the webhook gives them. Then a volume's life,
/// as a user's PersistentVolumeClaim drives it: the external-provisioner
/// asks the driver, the driver calls moto's EC2 `CreateVolume` under the
/// role (an `AssumeRoleWithWebIdentity` session in moto, IAM enforced), the
/// claim binds to a PersistentVolume of that volume, tagged as the plugin's
/// policy conditions expect (`ebs.csi.aws.com/cluster`, `CSIVolumeName`,
/// the claim's name, the cluster's `kubernetes.io/cluster/<name>: owned`);
/// deleting the claim deletes the volume in moto (reclaim policy Delete).
/// The role can describe volumes, and is refused what the policy does not
/// grant (terminating an instance, describing security groups, listing
/// roles).
///
/// Not covered, and why: attaching and mounting (the node plugin needs
/// block devices, so it runs on no node here). Without the node plugin no
/// CSINode names the driver or its zone, so a claim of the plugin's `ebs-sc`
/// class (WaitForFirstConsumer) is not provisioned, and with Immediate
/// binding alone external-provisioner v6 refuses ("no available topology
/// found": it aggregates the zones from the CSINodes): the check's class
/// binds at once and names the controller's zone in `allowedTopologies`, as
/// a user pins a class to zones, so the requirement comes from the class;
/// the policy's tag conditions (moto's IAM does
/// not evaluate conditions, as for the other roles); snapshots (no snapshot
/// CRDs: the chart leaves out the snapshotter); the livenessprobe sidecar is
/// our own program (scripts/nodebed/csi-livenessprobe, upstream's source is
/// not served here), so its `/healthz` is what upstream documents, not
/// upstream's binary.
pub(super) fn ebs_csi_controller_provisions_and_deletes_a_volume_under_its_role(c: &Cluster) -> String {
    let (bed, ctl, inst) = (&c.bed, &c.ctl, &c.inst);
    let t0 = Instant::now();
    let account = bed.admin_arn.split(':').nth(4).unwrap().to_string();
    let role_arn = format!("arn:aws:iam::{account}:role/{EBS_ROLE}");
    let ebs_logs = || {
        output_text(&bed.kubectl(
            ctl,
            &[
                "-n",
                "kube-system",
                "logs",
                "-l",
                "app=ebs-csi-controller",
                "--all-containers",
                "--tail=20",
            ],
        ))
    };
    // The controller's pods: Running, every container ready.
    let pods = bed.kubectl(
        ctl,
        &[
            "-n",
            "kube-system",
            "get",
            "pods",
            "-l",
            "app=ebs-csi-controller",
            "-o",
            "json",
        ],
    );
    let pods: serde_json::Value = serde_json::from_slice(&pods.stdout).unwrap_or_default();
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 2, "the chart's two controller replicas: {pods}");
    for p in &items {
        let mut ready: Vec<(String, bool)> = p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| (s["name"].as_str().unwrap_or("?").to_string(), s["ready"] == true))
            .collect();
        ready.sort();
        let names: Vec<&str> = ready.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "csi-attacher",
                "csi-provisioner",
                "csi-resizer",
                "ebs-plugin",
                "liveness-probe"
            ],
            "the controller pod's containers: {p}"
        );
        assert!(
            ready.iter().all(|(_, r)| *r),
            "a container of {} is not ready: {ready:?}\n{}",
            p["metadata"]["name"],
            ebs_logs()
        );
    }
    let pod = irsa_pod(bed, ctl, "ebs-csi-controller-sa");
    assert_eq!(
        pod.role_arn.as_deref(),
        Some(role_arn.as_str()),
        "the webhook did not give the EBS CSI controller its role"
    );
    // A claim of a class with Immediate binding and the controller's zone
    // as its allowed topology (the header says why).
    let zone = bed.kubectl(
        ctl,
        &[
            "get",
            "node",
            &inst.dns,
            "-o",
            "jsonpath={.metadata.labels.topology\\.kubernetes\\.io/zone}",
        ],
    );
    let zone = String::from_utf8_lossy(&zone.stdout).trim().to_string();
    assert!(!zone.is_empty(), "the controller's Node has no zone label");
    let claim = bed.dir().join("ebs-claim.yaml");
    std::fs::write(
        &claim,
        format!(
            r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: ebs-bed-immediate
provisioner: ebs.csi.aws.com
volumeBindingMode: Immediate
reclaimPolicy: Delete
parameters:
  type: gp3
allowedTopologies:
  - matchLabelExpressions:
      - key: topology.kubernetes.io/zone
        values: [{zone}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bed-data
  namespace: default
spec:
  storageClassName: ebs-bed-immediate
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
"#
        ),
    )
    .unwrap();
    let o = bed.kubectl(ctl, &["apply", "-f", claim.to_str().unwrap()]);
    assert!(o.status.success(), "{}", output_text(&o));
    let start = Instant::now();
    let pv = loop {
        let o = bed.kubectl(
            ctl,
            &[
                "-n",
                "default",
                "get",
                "pvc",
                "bed-data",
                "-o",
                "jsonpath={.status.phase} {.spec.volumeName}",
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if let Some(pv) = text.strip_prefix("Bound ") {
            break pv.trim().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the claim did not bind: {text}\n{}\n{}",
            output_text(&bed.kubectl(ctl, &["-n", "default", "describe", "pvc", "bed-data"])),
            ebs_logs()
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    let t_bound = t0.elapsed();
    let handle = bed.kubectl(
        ctl,
        &[
            "get",
            "pv",
            &pv,
            "-o",
            "jsonpath={.spec.csi.driver} {.spec.csi.volumeHandle}",
        ],
    );
    let handle = String::from_utf8_lossy(&handle.stdout).into_owned();
    let volume = handle
        .strip_prefix("ebs.csi.aws.com ")
        .unwrap_or_else(|| panic!("the PersistentVolume {pv} is not the driver's: {handle}"))
        .trim()
        .to_string();
    // The volume in moto, as the driver made it.
    let v = bed.aws(&["ec2", "describe-volumes", "--volume-ids", &volume]);
    let v = &v["Volumes"][0];
    let tag = |k: &str| {
        v["Tags"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["Key"] == k)
            .and_then(|t| t["Value"].as_str())
            .map(str::to_string)
    };
    assert_eq!(v["Size"], 1, "{v}");
    assert_eq!(v["AvailabilityZone"], zone.as_str(), "{v}");
    assert_eq!(v["VolumeType"], "gp3", "{v}");
    assert_eq!(tag("CSIVolumeName").as_deref(), Some(pv.as_str()), "{v}");
    assert_eq!(tag("ebs.csi.aws.com/cluster").as_deref(), Some("true"), "{v}");
    assert_eq!(
        tag("kubernetes.io/created-for/pvc/name").as_deref(),
        Some("bed-data"),
        "{v}"
    );
    assert_eq!(
        tag(&format!("kubernetes.io/cluster/{}", bed::BED_CLUSTER)).as_deref(),
        Some("owned"),
        "{v}"
    );
    assert!(
        moto_sessions(bed, &role_arn) > 0,
        "moto assumed no session of {role_arn}"
    );
    // The role's own call, and what it must not do.
    let creds = role_creds(bed, &role_arn, &pod.token);
    let (ok, out) = crate::common::iam::aws_as(&bed.env, &creds, &["ec2", "describe-volumes", "--volume-ids", &volume]);
    assert!(ok && out.contains(&volume), "the EBS CSI role's own call: {out}");
    refused(
        bed,
        &creds,
        "the EBS CSI controller's role",
        &[
            vec!["ec2", "terminate-instances", "--instance-ids", &inst.id],
            vec!["ec2", "describe-security-groups"],
            vec!["iam", "list-roles"],
        ],
    );
    // The claim deleted: the driver deletes the volume.
    let o = bed.kubectl(ctl, &["-n", "default", "delete", "pvc", "bed-data", "--wait=false"]);
    assert!(o.status.success(), "{}", output_text(&o));
    let start = Instant::now();
    loop {
        let (ok, out) = crate::common::iam::aws_as(
            &bed.env,
            &bed.admin,
            &["ec2", "describe-volumes", "--volume-ids", &volume],
        );
        if !ok && out.contains("InvalidVolume.NotFound") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the volume {volume} is still there after its claim was deleted: {out}\n{}",
            ebs_logs()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    format!(
        "the claim bound {:.1}s (volume {volume}), the volume deleted {:.1}s",
        t_bound.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    )
}
