//! The controllers' etcd in CloudFormation: the termination lifecycle hook
//! that lets a leaving controller remove its member, the settings parameter
//! (backups, controller count), and the IAM statements of the etcd tools.

use serde_json::{json, Map, Value};

use super::super::layout::ETCD_BACKUP_DIR;
use super::super::{Ctx, RenderError, RenderInput};

/// The name of the controller group's termination lifecycle hook; the
/// controllers' `kube-aws-node lifecycle` completes it by this name.
pub const ETCD_LIFECYCLE_HOOK: &str = "kube-aws-etcd-member";
/// How long a leaving controller may take to remove its etcd member before
/// the group goes on without it (the hook's heartbeat timeout, seconds).
pub const ETCD_LIFECYCLE_TIMEOUT: u32 = 300;
/// The controllers' lifecycle-hook policy: a managed policy (IAM's inline
/// limit, iam_size.rs). A new logical ID, not the inline policy's
/// (`ControllerLifecyclePolicy`): CloudFormation refuses to change a
/// resource's type in place, so an update creates this one and deletes that.
pub const CONTROLLER_LIFECYCLE_POLICY: &str = "ControllerLifecycleHookPolicy";
/// The control-plane stack's etcd settings parameter (backups, controller count).
pub const ETCD_SETTINGS: &str = "EtcdSettings";

/// The CloudWatch namespace of etcd's metrics (src/node/kube_aws_node/metrics.py).
pub const ETCD_METRICS_NAMESPACE: &str = "kube-aws/etcd";

/// The names of the stack's etcd alarms start with this (`status` lists them
/// by it: src/aws/state/etcd_status.rs).
pub fn etcd_alarm_prefix(cluster: &str) -> String {
    format!("kube-aws-{cluster}-etcd-")
}

/// The stack's etcd alarms: the database at 70 % of the quota (NOSPACE comes
/// at 100 %, and the cluster goes read-only), and the newest snapshot older
/// than twice the backup interval. A missing backup age (no leader
/// publishing, no snapshot yet) counts as breaching after half an hour, so a
/// dead backup service is not silent. Alarm actions are left to the operator
/// (an SNS topic of their own: `aws cloudwatch put-metric-alarm` or a plugin).
pub(super) fn etcd_alarms(input: &RenderInput, ctx: &Ctx, r: &mut Map<String, Value>) -> Result<(), RenderError> {
    let b = &input.cluster.etcd.backup;
    let interval = humantime::parse_duration(b.interval.trim()).map_err(|e| RenderError::Network {
        message: format!("etcd.backup.interval {:?}: {e}", b.interval),
    })?;
    let dims = json!([{"Name": "ClusterName", "Value": ctx.cluster}]);
    let quota = input.cluster.etcd.quota_backend_bytes;
    r.insert(
        "EtcdDbSizeAlarm".into(),
        json!({"Type": "AWS::CloudWatch::Alarm", "Properties": {
            "AlarmName": format!("{}db-size", etcd_alarm_prefix(&ctx.cluster)),
            "AlarmDescription": format!("etcd's database of cluster {} is at 70 % of its quota ({quota} bytes): defragment, compact, or raise etcd.quotaBackendBytes before NOSPACE makes it read-only", ctx.cluster),
            "Namespace": ETCD_METRICS_NAMESPACE, "MetricName": "DbSizeBytes", "Dimensions": dims,
            "Statistic": "Maximum", "Period": 300, "EvaluationPeriods": 1,
            "Threshold": quota * 7 / 10, "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "missing"}}),
    );
    r.insert(
        "EtcdBackupAgeAlarm".into(),
        json!({"Type": "AWS::CloudWatch::Alarm", "Properties": {
            "AlarmName": format!("{}backup-age", etcd_alarm_prefix(&ctx.cluster)),
            "AlarmDescription": format!("cluster {}: the newest etcd snapshot is older than twice etcd.backup.interval ({}); see `kube-aws backups`", ctx.cluster, b.interval),
            "Namespace": ETCD_METRICS_NAMESPACE, "MetricName": "BackupAgeSeconds", "Dimensions": dims,
            "Statistic": "Maximum", "Period": 300, "EvaluationPeriods": 6,
            "Threshold": interval.as_secs() * 2, "ComparisonOperator": "GreaterThanThreshold",
            "TreatMissingData": "breaching"}}),
    );
    Ok(())
}

/// Where `kube-aws restore` puts its request, relative to the cluster's prefix
/// (src/node/kube_aws_node/etcd_restore.py RESTORE_REQUEST), and the lock the first
/// replacement controller takes to restore it.
pub const ETCD_RESTORE_REQUEST: &str = "bootstrap/etcd-restore.json";
pub const ETCD_RESTORE_LOCK: &str = "bootstrap/etcd-restore-lock";

/// The SSM parameter holding the controllers' etcd settings.
pub fn etcd_parameter_name(ctx: &Ctx) -> String {
    format!("/kube-aws/{}/etcd", ctx.cluster)
}

/// A leaving controller removes its own etcd member first: the group's
/// termination lifecycle hook holds the instance in Terminating:Wait until the
/// node (watching IMDS `autoscaling/target-lifecycle-state`, "Retrieve the
/// target lifecycle state through instance metadata", EC2 Auto Scaling user
/// guide) completes the action, or HeartbeatTimeout passes; DefaultResult
/// CONTINUE, so a node that cannot answer never holds the group. A separate
/// resource rather than the group's LifecycleHookSpecificationList, so that a
/// stack delete removes the hook before the group and does not wait on it.
/// CompleteLifecycleAction takes the autoScalingGroup resource type
/// (`arn:${Partition}:autoscaling:${Region}:${Account}:autoScalingGroup:${GroupId}:autoScalingGroupName/${Name}`,
/// Service Authorization Reference, Amazon EC2 Auto Scaling): the grant is
/// its own group's only, in a policy of its own since the role cannot name
/// the group it is an input of. DescribeAutoScalingInstances (the node finds
/// its group's name) has no resource-level scope.
pub(super) fn etcd_membership(ctx: &Ctx, r: &mut Map<String, Value>) {
    r.insert(
        "ControllerTerminationHook".into(),
        json!({"Type": "AWS::AutoScaling::LifecycleHook", "Properties": {
            "AutoScalingGroupName": {"Ref": "ControllerGroup"},
            "LifecycleHookName": ETCD_LIFECYCLE_HOOK,
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
            "HeartbeatTimeout": ETCD_LIFECYCLE_TIMEOUT,
            "DefaultResult": "CONTINUE"}}),
    );
    r.insert(
        CONTROLLER_LIFECYCLE_POLICY.into(),
        json!({"Type": "AWS::IAM::ManagedPolicy", "Properties": {
            "Description": format!("kube-aws cluster {}: controllers' termination hook", ctx.cluster),
            "Roles": [{"Ref": "ControllerRole"}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [
                // The heartbeat holds the hook while removing the member
                // would cost etcd its quorum (etcd_lifecycle.py `remove_when_safe`).
                {"Sid": "CompleteOwnLifecycleAction", "Effect": "Allow",
                 "Action": ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"],
                 "Resource": {"Fn::Sub": "arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*:autoScalingGroupName/${ControllerGroup}"}},
                {"Sid": "FindOwnGroup", "Effect": "Allow",
                 "Action": ["autoscaling:DescribeAutoScalingInstances"], "Resource": "*"},
                // A controller whose bootstrap failed takes itself out of
                // service (src/node/kube_aws_node/health.py); only in its own group.
                {"Sid": "MarkOwnGroupUnhealthy", "Effect": "Allow",
                 "Action": ["autoscaling:SetInstanceHealth"],
                 "Resource": {"Fn::Sub": "arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*:autoScalingGroupName/${ControllerGroup}"}}]}}}),
    );
}

/// The controllers' etcd settings, as an SSM parameter the stack manages
/// rather than user data: a changed backup interval or controller
/// count updates the parameter and replaces no controller.
pub(super) fn etcd_settings(input: &RenderInput, ctx: &Ctx) -> Result<Value, RenderError> {
    let b = &input.cluster.etcd.backup;
    let interval = humantime::parse_duration(b.interval.trim()).map_err(|e| RenderError::Network {
        message: format!("etcd.backup.interval {:?}: {e}", b.interval),
    })?;
    let value = json!({
        "bucket": ctx.bucket,
        "backupPrefix": format!("{}/{ETCD_BACKUP_DIR}/", ctx.key_prefix),
        "intervalSeconds": interval.as_secs(),
        // For `etcd-maintenance` (src/node/kube_aws_node/defrag.py): the quota
        // it reports against; etcd itself gets it through kubeadm's extraArgs.
        "quotaBackendBytes": input.cluster.etcd.quota_backend_bytes,
        "kmsKeyARN": input.cluster.kms_key_arn.clone().unwrap_or_default(),
        "controllerCount": input.cluster.controller.count,
        "lifecycleHook": ETCD_LIFECYCLE_HOOK,
        "lifecycleTimeoutSeconds": ETCD_LIFECYCLE_TIMEOUT,
    });
    Ok(json!({"Type": "AWS::SSM::Parameter", "Properties": {
        "Name": etcd_parameter_name(ctx),
        "Type": "String",
        "Value": value.to_string(),
        "Description": format!("kube-aws cluster {}: etcd backups and membership", ctx.cluster)}}))
}

/// What the controllers' etcd tools may do: read their settings; write and
/// list snapshots under `etcd/` only, never delete one (the bucket's
/// lifecycle rules expire them, src/aws/services/retention.rs); encrypt them with the cluster's
/// key (SSE-KMS: S3 asks KMS for a data key in the caller's name, and for
/// Decrypt on multipart uploads and on the download of a restore; the
/// encryption context S3 passes is the object's ARN, or the bucket's with S3
/// Bucket Keys, "Using server-side encryption with AWS KMS keys", Amazon S3
/// user guide).
pub(super) fn etcd_statements(input: &RenderInput, ctx: &Ctx) -> Vec<Value> {
    let dir = format!("{}/{ETCD_BACKUP_DIR}/", ctx.key_prefix);
    let objects = format!("arn:aws:s3:::{}/{dir}*", ctx.bucket);
    let mut s = vec![
        json!({"Sid": "ReadEtcdSettings", "Effect": "Allow", "Action": ["ssm:GetParameter"],
            "Resource": {"Fn::Sub": format!("arn:${{AWS::Partition}}:ssm:${{AWS::Region}}:${{AWS::AccountId}}:parameter{}", etcd_parameter_name(ctx))}}),
        json!({"Sid": "WriteEtcdSnapshots", "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
            "Resource": [objects]}),
        json!({"Sid": "ListEtcdSnapshots", "Effect": "Allow", "Action": ["s3:ListBucket"],
            "Resource": [format!("arn:aws:s3:::{}", ctx.bucket)],
            "Condition": {"StringLike": {"s3:prefix": [format!("{dir}*")]}}}),
    ];
    // A pending `kube-aws restore` request and the status that says it was
    // served (`status/etcd/restore.json`, src/node/kube_aws_node/etcd.py) are read under the controllers'
    // bootstrap/ and status/ grants (iam.rs node_policies); listing the
    // request and taking its lock are the lock statements'.
    // The backup tick's metrics (src/node/kube_aws_node/metrics.py): PutMetricData
    // has no resource-level scope; the namespace is its condition key.
    s.push(
        json!({"Sid": "PublishEtcdMetrics", "Effect": "Allow", "Action": ["cloudwatch:PutMetricData"],
        "Resource": "*", "Condition": {"StringEquals": {"cloudwatch:namespace": ETCD_METRICS_NAMESPACE}}}),
    );
    if let Some(k) = &input.cluster.kms_key_arn {
        let condition = json!({
            "StringEquals": {"kms:ViaService": format!("s3.{}.amazonaws.com", ctx.region)},
            "StringLike": {"kms:EncryptionContext:aws:s3:arn": [objects, format!("arn:aws:s3:::{}", ctx.bucket)]}});
        s.push(json!({"Sid": "EncryptEtcdSnapshots", "Effect": "Allow",
            "Action": ["kms:GenerateDataKey"], "Resource": k, "Condition": condition}));
        // Decrypt (a restore's download, a multipart upload) also under the
        // keys a rotation retired: a snapshot taken under one stays
        // restorable until the bucket's lifecycle rules expire it.
        s.push(json!({"Sid": "DecryptEtcdSnapshots", "Effect": "Allow",
            "Action": ["kms:Decrypt"], "Resource": super::names::decrypt_keys(), "Condition": condition}));
    }
    s
}
