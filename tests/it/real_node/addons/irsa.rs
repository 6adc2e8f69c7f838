//! IRSA on the shared cluster of tests/it/real_node/addons.rs: the values
//! and roles of external-dns, aws-node-termination-handler and the
//! cluster-autoscaler, and the check the test
//! `addons_irsa_external_dns_termination_handler_autoscaler_and_ebs_csi_call_aws_under_their_roles_only`
//! runs first (the check's own header says what it shows and what it does
//! not cover). The EBS CSI controller, the same test's second check, is
//! addons/ebs_csi.rs; the pods' tokens and STS, addons/web_identity.rs.

use super::web_identity::{irsa_pod, moto_sessions, refused, role_creds, web_identity};
use super::*;

/// The Route 53 zone external-dns may change, created in moto before `up`
/// (the plugin takes its ID), and the name the test's Service asks for.
pub(super) const ZONE: &str = "irsa.bed.test";
const RECORD: &str = "web.irsa.bed.test";
/// The address the test writes into the Service's load-balancer status, as
/// a cloud controller manager would (TEST-NET-3).
const LB_IP: &str = "203.0.113.10";
/// The addons' roles, as src/aws/state/role_names.rs names them
/// (`<cluster>-<region>-<namespace>-<service account>`).
const EXTERNAL_DNS_ROLE: &str = "bed-us-west-2-kube-system-external-dns";
const NTH_ROLE: &str = "bed-us-west-2-kube-system-aws-node-termination-handler";
const AUTOSCALER_ROLE: &str = "bed-us-west-2-kube-system-cluster-autoscaler";
/// The worker pool the cluster-autoscaler is to discover: no instances
/// (the bed boots no workers), room for two.
pub(super) const POOL: &str = "worker:\n  nodePools:\n    - name: general\n      minSize: 0\n      maxSize: 2\n";

/// The test's values/external-dns.yaml: only data. Helm replaces lists, so
/// `env` repeats the plugin's AWS_DEFAULT_REGION and adds moto's endpoints
/// for Route 53 and STS (aws-sdk-go-v2's AWS_ENDPOINT_URL_<SERVICE>: see
/// the test's header for why not AWS_ENDPOINT_URL alone); a short interval
/// and the event trigger, so the record follows the Service in seconds.
pub(super) fn external_dns_values(moto: &str) -> String {
    format!(
        r#"env:
  - name: AWS_DEFAULT_REGION
    value: "{region}"
  - name: AWS_ENDPOINT_URL_ROUTE_53
    value: "{moto}"
  - name: AWS_ENDPOINT_URL_STS
    value: "{moto}"
interval: 10s
triggerLoopOnEvent: true
logLevel: debug
"#,
        region = bed::BED_REGION
    )
}

/// The test's values/aws-node-termination-handler.yaml: moto through the
/// chart's `awsEndpoint` (the handler's AWS_ENDPOINT, one endpoint for SQS,
/// EC2, Auto Scaling and the web identity's STS: see the test's header),
/// and debug logs (the credentials' provider, the dropped event).
pub(super) fn nth_values(moto: &str) -> String {
    format!("awsEndpoint: \"{moto}\"\nlogLevel: debug\n")
}

/// The test's values/cluster-autoscaler.yaml: the AWS provider's cloud
/// config with `[ServiceOverride]` sections sending Auto Scaling and EC2 to
/// moto (upstream's cloudprovider/aws/README.md "Using cloud config with
/// helm": a ConfigMap, here the chart's own `extraObjects`, mounted at
/// `cloudConfigPath`), and STS through aws-sdk-go-v2's
/// AWS_ENDPOINT_URL_STS (the chart's `extraEnv`), as for external-dns.
pub(super) fn autoscaler_values(moto: &str) -> String {
    let region = bed::BED_REGION;
    let overrides: String = ["ec2", "autoscaling"]
        .iter()
        .map(|s| {
            format!(
                "        [ServiceOverride \"{s}\"]\n          Service={s}\n          Region={region}\n          \
                 URL={moto}\n          SigningRegion={region}\n"
            )
        })
        .collect();
    format!(
        r#"extraEnv:
  AWS_ENDPOINT_URL_STS: "{moto}"
cloudConfigPath: /config/cloud.conf
extraVolumes:
  - name: cloud-config
    configMap:
      name: cluster-autoscaler-cloud-config
extraVolumeMounts:
  - name: cloud-config
    mountPath: /config
    readOnly: true
extraObjects:
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: cluster-autoscaler-cloud-config
    data:
      cloud.conf: |
{overrides}"#
    )
}

/// IRSA end to end with external-dns on moto's Route 53,
/// aws-node-termination-handler on moto's SQS and EC2, and the
/// cluster-autoscaler on moto's Auto Scaling and EC2, on the shared cluster.
///
/// `irsa_external_dns_termination_handler_and_autoscaler_call_aws_under_their_roles_only`
/// runs on the shared controller (`boot`), with the external-dns plugin
/// on for a hosted zone created in moto before `up` (`hostedZoneId`,
/// `domainFilter`), the aws-node-termination-handler and cluster-autoscaler
/// plugins on, and one worker pool `general` (minSize 0, maxSize 2: no
/// instance, no worker boots) that carries the autoscaler's discovery tags
/// and the handler's managed tag. `up` renders the plugin's service-account role
/// (`bed-us-west-2-kube-system-external-dns`: ChangeResourceRecordSets on
/// the zone, the List calls), trusted only for the token of
/// `system:serviceaccount:kube-system:external-dns` with audience
/// `sts.amazonaws.com` from the cluster's issuer (the issuer bucket in
/// moto's S3, discovery and keys published by `up`). On the node, the
/// reconciler installs the pod identity webhook (its image from the test
/// bed's binary) and the external-dns chart 1.21.1 (external-dns v0.21.0
/// built from the Go module proxy's source by
/// scripts/install-addon-images.sh, under the tag the chart pulls). Then:
///
/// - the webhook has mutated the pod: `AWS_ROLE_ARN` is the role and
///   `AWS_WEB_IDENTITY_TOKEN_FILE` the projected token (audience
///   `sts.amazonaws.com`, issued by the cluster's issuer, `sub` the service
///   account);
/// - a Service `web` (type LoadBalancer, annotated with the hostname
///   `web.irsa.bed.test`; its load-balancer status written by the test,
///   as a cloud controller manager would; its `loadBalancerClass` one that
///   no controller here serves, so the cloud controller manager that runs
///   on the cluster leaves it alone: k8s.io/cloud-provider v0.35
///   controllers/service `wantsLoadBalancer`; external-dns's service
///   source does not look at the class) gets its A record in moto's zone:
///   external-dns's aws-sdk-go-v2 reads the token, calls moto's
///   `AssumeRoleWithWebIdentity` (unsigned) and changes the record set with
///   the role's credentials, moto's IAM enforced;
/// - moto holds an assumed-role session of exactly that role (moto's
///   `/moto-api/data.json`), and the node's own role (the controller's: the
///   other credentials on the node) is refused
///   `route53:ChangeResourceRecordSets` on the zone: the record could only be
///   made under the IRSA role. (Checked that this can fail: with the role's
///   `ChangeResourceRecordSets` taken out of plugins/external-dns, moto
///   refuses external-dns's change batch, 403, and the test fails at the
///   record);
/// - the pod's own token, read from the kubelet's projected volume on the
///   node, assumes the role with the aws CLI, and those credentials are
///   refused what the role's policy does not grant (`CreateHostedZone`,
///   `iam:ListRoles`: AccessDenied); the same token is refused for another
///   role (the controller's: AccessDenied by its trust policy), and a token
///   with a flipped signature byte is refused (InvalidIdentityToken).
///
/// What moto does with the token: moto 5.2.5 alone does not read it at all
/// (its AssumeRoleWithWebIdentity is AssumeRole: any string, any role, no
/// trust policy), and with IAM enforced it fails the call (an unsigned
/// request: HTTP 500). tests/support/moto_server.py patch 12 lets the
/// unsigned call in and checks what STS checks that moto can hold: the
/// JWT's signature against the JWKS the issuer's discovery document names
/// (read from moto's S3, where `up` published them), `exp`, and the role's
/// trust policy (`sub`, `aud`). So the token's signature is verified here,
/// against the keys kube-aws published.
///
/// The endpoint: external-dns 0.21 builds its AWS config with
/// `config.LoadDefaultConfig` (provider/aws/config.go) and has no endpoint
/// flag; aws-sdk-go-v2 honours `AWS_ENDPOINT_URL_<SERVICE>`. The global
/// `AWS_ENDPOINT_URL` alone would not reach moto's STS: the web-identity
/// credential provider's STS client is made before the config's base
/// endpoint is resolved (config v1.32 `resolveCredentials` comes before
/// `resolveBaseEndpoint`), and sts's `resolveBaseEndpoint` skips its own
/// lookup when only the global variable is set, so the exchange would go to
/// the real sts.us-west-2.amazonaws.com. The endpoints are data in the
/// test's values (`env`), not a plugin setting: a user on AWS has no use for
/// them.
///
/// aws-node-termination-handler (chart 0.27.6, v1.25.6 built from the Go
/// module proxy by scripts/install-addon-images.sh, under the tag the chart
/// pulls) runs in Queue Processor mode on the queue the plugin's
/// CloudFormation creates in moto (`bed-nth`), under its role
/// (`bed-us-west-2-kube-system-aws-node-termination-handler`: the README's
/// "IAM Policy for aws-node-termination-handler Deployment", v1.25.6, the
/// queue and lifecycle action scoped to the cluster). Its pod Running and
/// Ready; the webhook gave it the role and the token; the test sends a
/// spot interruption warning (EventBridge's event, as README.md documents
/// it) for the controller's instance to the queue, and the handler
/// consumes it: it receives it, describes the instance (EC2), finds it
/// without the managed tag (controllers do not carry it: only pools that
/// enable the plugin) and deletes the message ("dropping interruption event
/// for unmanaged node", the queue empty). Its credentials are the web
/// identity's ("AWS Credentials retrieved from provider:
/// WebIdentityCredentials" in its log; moto holds a session of its role),
/// and the node's role is refused `sqs:ReceiveMessage` on the queue. With
/// the pod's token the role describes instances and is refused
/// `sqs:SendMessage`, `autoscaling:SetDesiredCapacity` and IAM. (Checked
/// that this can fail: with `sqs:DeleteMessage` taken out of the plugin's
/// statement, moto refuses the handler's delete and the test fails at the
/// queue, the message still in flight.)
/// Its endpoint: the handler uses aws-sdk-go v1 (go.mod v1.55.4), which
/// reads no AWS_ENDPOINT_URL; its `aws-endpoint` setting (pkg/config
/// config.go, env AWS_ENDPOINT, "[testing] If specified, use the AWS
/// endpoint to make API calls"; the chart's `awsEndpoint`) goes into the
/// one `aws.Config` of cmd/node-termination-handler.go's SQS session, and
/// v1's session builds the web identity provider's STS client from that
/// same config (aws/session/credentials.go `assumeWebIdentity`), so one
/// value reaches moto's SQS, EC2, Auto Scaling and STS. The queue URL is
/// the one the plugin renders (sqs.us-west-2.amazonaws.com); moto resolves
/// the queue by its path. Not covered: a drain (the one node is the
/// controller, which the handler must not drain; tests/it/nth_testbed.rs
/// drains kwok nodes with the real program on the host), the lifecycle
/// action's completion (moto has no lifecycle actions outside
/// tests/support/moto_lifecycle.py), EventBridge's delivery (the test sends
/// the event itself: moto's EventBridge does not emit EC2's events), and
/// the `aws:ResourceTag` condition on CompleteLifecycleAction (moto's IAM
/// does not evaluate conditions).
///
/// cluster-autoscaler (chart 9.59.0, 1.35.0 built from the tagged source
/// tarball with the AWS provider only, `-tags aws`) runs under its role
/// (`bed-us-west-2-kube-system-cluster-autoscaler`: the actions of
/// upstream's cloudprovider/aws/README.md "IAM Policy", full and
/// minimal, 1.35.0; the writes scoped by the discovery tag). Its pod Running
/// and Ready, its `/health-check` answering, and its status ConfigMap
/// (`cluster-autoscaler-status`) names the worker pool's group, found by the
/// tags kube-aws renders (`--node-group-auto-discovery=asg:tag=…`, the
/// chart's from the plugin's `autoDiscovery.clusterName`); moto holds a
/// session of its role; with the pod's token the role describes the groups
/// and is refused EC2's DescribeVpcs, DeleteAutoScalingGroup and IAM.
/// Its endpoint: the AWS provider builds its Auto Scaling and EC2 clients
/// with a legacy endpoint resolver of its own
/// (cloudprovider/aws/aws_manager.go, `WithEndpointResolver(
/// newAutoscalingOverrideResolver(cloudConfig))`), which answers from the
/// cloud config's `[ServiceOverride]` sections and otherwise from the
/// SDK's default table, so AWS_ENDPOINT_URL_AUTOSCALING would not reach
/// these clients; the cloud config is the documented way
/// (cloudprovider/aws/README.md "Using cloud config with helm"), here a
/// ConfigMap from the chart's `extraObjects`. STS is the web identity
/// provider's, from `config.LoadDefaultConfig` (aws_sdk_provider.go), as
/// for external-dns: AWS_ENDPOINT_URL_STS. Its start-up EC2
/// DescribeInstanceTypes uses a client without that resolver and goes to
/// the real EC2 endpoint (no DNS for it here): the autoscaler logs the
/// failure and falls back to its static instance-type list, as upstream
/// intends. moto returned an empty `MixedInstancesPolicy` for every group
/// made by CloudFormation, on which the autoscaler panicked:
/// tests/support/moto_server.py patch 15. Not covered: a scale-up or
/// scale-down (no worker boots here: a launched moto instance would never
/// join), the `aws:ResourceTag` condition on the writes (moto's IAM does not
/// evaluate conditions), EKS managed node groups (moto has no EKS here).
///
/// Not covered, and why: real Route 53 and real STS (no AWS account here);
/// the IAM OIDC provider object and its thumbprint (moto's CloudFormation
/// has no AWS::IAM::OIDCProvider, so nothing resolves the trust policy's
/// Federated principal, and IAM would fetch the discovery document over
/// public HTTPS, which moto's S3 cannot serve); a Service's name from a
/// real load balancer (moto has no load balancer data path: the test
/// writes the status); an Ingress (no ingress controller writes its
/// status); which STS endpoint the SDK picks on AWS (moot with an explicit
/// endpoint). One controller, no workers.
pub(super) fn irsa_external_dns_termination_handler_and_autoscaler_call_aws_under_their_roles_only(c: &Cluster) {
    let (bed, ctl, inst, zone_id) = (&c.bed, &c.ctl, &c.inst, &c.zone_id);
    let t0 = Instant::now();
    let account = bed.admin_arn.split(':').nth(4).unwrap().to_string();
    let arn = |role: &str| format!("arn:aws:iam::{account}:role/{role}");
    let role_arn = arn(EXTERNAL_DNS_ROLE);
    for role in [EXTERNAL_DNS_ROLE, NTH_ROLE, AUTOSCALER_ROLE] {
        let r = bed.aws(&["iam", "get-role", "--role-name", role]);
        assert_eq!(r["Role"]["Arn"], arn(role).as_str(), "{r}");
    }
    let edns_logs = || pod_logs(ctl, "kube-system_external-dns-");

    // Each addon's pod as the webhook mutated it: its role and its token
    // (audience sts.amazonaws.com, issued by the cluster's issuer, `sub` its
    // service account).
    let issuer = format!(
        "https://{}.s3.{}.amazonaws.com",
        kube_aws::irsa::issuer_bucket_name(bed::BED_BUCKET, bed::BED_CLUSTER),
        bed::BED_REGION
    );
    let [edns, nth, autoscaler] = [
        ("external-dns", EXTERNAL_DNS_ROLE),
        ("aws-node-termination-handler", NTH_ROLE),
        ("cluster-autoscaler", AUTOSCALER_ROLE),
    ]
    .map(|(sa, role)| {
        let pod = irsa_pod(bed, ctl, sa);
        assert_eq!(
            pod.role_arn.as_deref(),
            Some(arn(role).as_str()),
            "the webhook did not give {sa} its role"
        );
        let c = &pod.claims;
        assert_eq!(
            c["sub"],
            format!("system:serviceaccount:kube-system:{sa}").as_str(),
            "{c}"
        );
        assert_eq!(c["aud"][0], "sts.amazonaws.com", "{c}");
        assert_eq!(c["iss"], issuer.as_str(), "{c}");
        pod
    });
    let token = edns.token.clone();

    // aws-node-termination-handler: a spot interruption warning for the
    // controller's instance, as EventBridge delivers it to the queue. The
    // aws CLI does not take AWS_ENDPOINT_URL for SQS: moto named here (as
    // tests/it/workers_moto.rs does).
    let moto = bed.env.moto.url();
    let queue = bed.aws(&[
        "sqs",
        "--endpoint-url",
        &moto,
        "get-queue-url",
        "--queue-name",
        &format!("{}-nth", bed::BED_CLUSTER),
    ])["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    let event = serde_json::json!({
        "version": "0",
        "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": account,
        "time": "2026-01-01T00:00:00Z",
        "region": bed::BED_REGION,
        "resources": [format!("arn:aws:ec2:{}:{account}:instance/{}", bed::BED_REGION, inst.id)],
        "detail": {"instance-id": inst.id, "instance-action": "terminate"}
    });
    bed.aws(&[
        "sqs",
        "--endpoint-url",
        &moto,
        "send-message",
        "--queue-url",
        &queue,
        "--message-body",
        &event.to_string(),
    ]);

    // external-dns: a Service asking for the name; its load balancer's
    // address as a cloud controller manager would write it.
    let svc = bed.dir().join("web.yaml");
    std::fs::write(
        &svc,
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: default\n  annotations:\n    \
             external-dns.alpha.kubernetes.io/hostname: {RECORD}\nspec:\n  type: LoadBalancer\n  \
             loadBalancerClass: bed.test/status-written-by-the-test\n  selector: {{app: web}}\n  ports: [{{port: 80}}]\n"
        ),
    )
    .unwrap();
    let o = bed.kubectl(ctl, &["apply", "-f", svc.to_str().unwrap()]);
    assert!(o.status.success(), "{}", output_text(&o));
    let o = bed.kubectl(
        ctl,
        &[
            "-n",
            "default",
            "patch",
            "service",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"loadBalancer":{{"ingress":[{{"ip":"{LB_IP}"}}]}}}}}}"#),
        ],
    );
    assert!(o.status.success(), "{}", output_text(&o));

    // The record in moto's zone.
    let start = Instant::now();
    let record = loop {
        let sets = bed.aws(&["route53", "list-resource-record-sets", "--hosted-zone-id", zone_id]);
        let a = sets["ResourceRecordSets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["Name"] == format!("{RECORD}.") && r["Type"] == "A")
            .cloned();
        if let Some(a) = a {
            break a;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "no A record {RECORD} in moto's zone: {sets}\n--- external-dns ---\n{}",
            edns_logs()
        );
        std::thread::sleep(Duration::from_secs(3));
    };
    assert_eq!(record["ResourceRecords"][0]["Value"], LB_IP, "{record}");
    let t_record = t0.elapsed();

    // moto holds a session of exactly that role (the SDK's exchange).
    assert!(
        moto_sessions(bed, &role_arn) > 0,
        "moto assumed no session of {role_arn}"
    );
    // The node's own role (reachable from the pod through IMDS) may not
    // change the zone: the record could only come from the IRSA role.
    let node_creds = crate::node_iam_moto::assume(&bed.env, &bed.admin, &bed.admin_arn, "ControllerRole");
    let batch = format!(
        r#"{{"Changes":[{{"Action":"UPSERT","ResourceRecordSet":{{"Name":"node.{ZONE}","Type":"A","TTL":60,"ResourceRecords":[{{"Value":"192.0.2.1"}}]}}}}]}}"#
    );
    // moto's Route 53 errors are in the query protocol's XML, which the CLI
    // does not parse for a REST-XML service ("An error occurred ()"): the
    // response body, as --debug logs it, names the error.
    refused(
        bed,
        &node_creds,
        "the node role",
        &[vec![
            "route53",
            "change-resource-record-sets",
            "--hosted-zone-id",
            &zone_id,
            "--change-batch",
            &batch,
            "--debug",
        ]],
    );

    // The pod's token with the aws CLI: it assumes the role (unsigned, as
    // STS takes it)...
    let creds = role_creds(bed, &role_arn, &token);
    // ...which may list the zone's records (its policy)...
    let (ok, out) = crate::common::iam::aws_as(
        &bed.env,
        &creds,
        &["route53", "list-resource-record-sets", "--hosted-zone-id", zone_id],
    );
    assert!(ok && out.contains(RECORD), "the role's own call: {out}");
    // ...and nothing outside it.
    refused(
        bed,
        &creds,
        "the external-dns role",
        &[
            vec![
                "route53",
                "create-hosted-zone",
                "--name",
                "other.bed.test",
                "--caller-reference",
                "x",
                "--debug",
            ],
            vec!["route53", "delete-hosted-zone", "--id", &zone_id, "--debug"],
            vec!["iam", "list-roles"],
            vec!["s3api", "list-buckets"],
        ],
    );
    // The token is good for its role only, and only as signed.
    let controller_role = bed.aws(&["iam", "list-roles"])["Roles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["RoleName"].as_str().unwrap_or_default().contains("-ControllerRole-"))
        .map(|r| r["Arn"].as_str().unwrap().to_string())
        .unwrap();
    let o = web_identity(bed, &controller_role, &token);
    assert!(
        !o.status.success() && output_text(&o).contains("AccessDenied"),
        "the pod's token assumed the controller's role: {}",
        output_text(&o)
    );
    let sig = token.rfind('.').unwrap() + 10;
    let mut forged = token.clone();
    let flip = if &token[sig..sig + 1] == "A" { "B" } else { "A" };
    forged.replace_range(sig..sig + 1, flip);
    let o = web_identity(bed, &role_arn, &forged);
    assert!(
        !o.status.success() && output_text(&o).contains("InvalidIdentityToken"),
        "a forged token: {}",
        output_text(&o)
    );

    // aws-node-termination-handler consumed the warning under its role:
    // received, the instance described, found unmanaged, the message
    // deleted (the queue empty), with the web identity's credentials. The
    // handler logs "SQS Deleted Message" after its DeleteMessage call
    // whatever its outcome (sqs-monitor.go deleteMessages): the queue's
    // counts are what show the delete.
    let nth_arn = arn(NTH_ROLE);
    let nth_log = "/var/log/pods/kube-system_aws-node-termination-handler-*/*/*.log";
    let consumed = ctl.node.wait_for(
        "the handler's consumption of the spot warning",
        &format!(
            "grep -h 'dropping interruption event for unmanaged node' {nth_log} | grep -q {id} && \
             grep -q 'SQS Deleted Message' {nth_log}",
            id = inst.id
        ),
        Duration::from_secs(120),
    );
    if let Err(e) = consumed {
        panic!(
            "{e}\n--- aws-node-termination-handler ---\n{}",
            pod_logs(ctl, "kube-system_aws-node-termination-handler-")
        );
    }
    let attrs = bed.aws(&[
        "sqs",
        "--endpoint-url",
        &moto,
        "get-queue-attributes",
        "--queue-url",
        &queue,
        "--attribute-names",
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
    ]);
    assert_eq!(attrs["Attributes"]["ApproximateNumberOfMessages"], "0", "{attrs}");
    assert_eq!(
        attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"], "0",
        "{attrs}"
    );
    assert!(
        ctl.node
            .sh(&format!(
                "grep -c 'retrieved from provider: WebIdentityCredentials' {nth_log} || true"
            ))
            .trim()
            != "0",
        "the handler's credentials were not the web identity's:\n{}",
        pod_logs(ctl, "kube-system_aws-node-termination-handler-")
    );
    assert!(moto_sessions(bed, &nth_arn) > 0, "moto assumed no session of {nth_arn}");
    // The node's role cannot read the queue: the handler's receive was the
    // IRSA role's.
    refused(
        bed,
        &node_creds,
        "the node role",
        &[vec![
            "sqs",
            "--endpoint-url",
            &moto,
            "receive-message",
            "--queue-url",
            &queue,
        ]],
    );
    let nth_creds = role_creds(bed, &nth_arn, &nth.token);
    let (ok, out) = crate::common::iam::aws_as(
        &bed.env,
        &nth_creds,
        &["ec2", "describe-instances", "--instance-ids", &inst.id],
    );
    assert!(ok && out.contains(&inst.id), "the handler's role's own call: {out}");
    let groups = bed.aws(&[
        "autoscaling",
        "describe-auto-scaling-groups",
        "--filters",
        &format!("Name=tag-key,Values=k8s.io/cluster-autoscaler/{}", bed::BED_CLUSTER),
    ]);
    let groups: Vec<String> = groups["AutoScalingGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["AutoScalingGroupName"].as_str().map(str::to_string))
        .collect();
    assert!(!groups.is_empty(), "no group carries the autoscaler's discovery tag");
    refused(
        bed,
        &nth_creds,
        "the handler's role",
        &[
            vec![
                "sqs",
                "--endpoint-url",
                &moto,
                "send-message",
                "--queue-url",
                &queue,
                "--message-body",
                "{}",
            ],
            vec![
                "autoscaling",
                "set-desired-capacity",
                "--auto-scaling-group-name",
                &groups[0],
                "--desired-capacity",
                "0",
            ],
            vec!["iam", "list-roles"],
        ],
    );
    let t_nth = t0.elapsed();

    // cluster-autoscaler: healthy, and its status names each group that
    // carries the discovery tags.
    let autoscaler_arn = arn(AUTOSCALER_ROLE);
    let autoscaler_logs = || pod_logs(ctl, "kube-system_cluster-autoscaler-");
    if let Err(e) = ctl.node.wait_for(
        "the autoscaler's /health-check",
        &format!("curl -fsS http://{}:8085/health-check", autoscaler.ip),
        Duration::from_secs(60),
    ) {
        panic!("{e}\n--- cluster-autoscaler ---\n{}", autoscaler_logs());
    }
    let start = Instant::now();
    loop {
        let o = bed.kubectl(
            ctl,
            &[
                "-n",
                "kube-system",
                "get",
                "configmap",
                "cluster-autoscaler-status",
                "-o",
                "jsonpath={.data.status}",
            ],
        );
        let status = String::from_utf8_lossy(&o.stdout).into_owned();
        if groups.iter().all(|g| status.contains(&format!("name: {g}"))) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the autoscaler's status does not name the groups {groups:?}: {status}\n--- cluster-autoscaler ---\n{}",
            autoscaler_logs()
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    assert!(
        moto_sessions(bed, &autoscaler_arn) > 0,
        "moto assumed no session of {autoscaler_arn}"
    );
    let autoscaler_creds = role_creds(bed, &autoscaler_arn, &autoscaler.token);
    let (ok, out) = crate::common::iam::aws_as(
        &bed.env,
        &autoscaler_creds,
        &["autoscaling", "describe-auto-scaling-groups"],
    );
    assert!(
        ok && out.contains(&groups[0]),
        "the autoscaler's role's own call: {out}"
    );
    refused(
        bed,
        &autoscaler_creds,
        "the autoscaler's role",
        &[
            vec!["ec2", "describe-vpcs"],
            vec![
                "autoscaling",
                "delete-auto-scaling-group",
                "--auto-scaling-group-name",
                "not-this-cluster",
            ],
            vec!["iam", "list-roles"],
        ],
    );
    eprintln!(
        "irsa: the record in moto {:.1}s; the handler's message consumed {:.1}s; the checks {:.1}s after the addons were ready",
        t_record.as_secs_f64(),
        t_nth.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
