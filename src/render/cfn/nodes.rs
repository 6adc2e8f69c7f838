//! One node kind's resources (role, instance profile, launch template, auto
//! scaling group with its rolling update), the parameters every node stack
//! takes, and the `node-pool-<name>` stacks with their sizes.

use serde_json::{json, Map, Value};

use super::super::{layout, Ctx, RenderInput};
pub(super) use super::group::Group;
use super::iam::node_policies;
use super::iam_size::{chunk, Longest};
use super::{cluster_tag, instance_name, tags, template};
use crate::config::{InstancesDistribution, NodePool};
use crate::plugin::NodeHooks;

/// The AWS managed policy for SSM Session Manager on every node role.
pub const SSM_MANAGED_POLICY: &str = "AmazonSSMManagedInstanceCore";
/// How long a node has to boot, join and signal.
pub(super) const NODE_SIGNAL_TIMEOUT: &str = "PT30M";
/// NODE_SIGNAL_TIMEOUT in seconds: how long a new controller may take to
/// boot before its group judges its health (EC2 status checks, or the
/// Unhealthy mark its own bootstrap sets when it fails).
const CONTROLLER_HEALTH_GRACE_SECONDS: u32 = 1800;

/// A node stack's AMI: a concrete image ID the root passes down. The root's
/// `ImageIdX86`/`ImageIdArm64` are resolved from their SSM public parameter
/// at `up` and kept by later `update`s (src/aws/lifecycle/deploy.rs): a new Amazon
/// Linux release never replaces nodes unless `update --refresh-ami` asks.
pub(super) fn ami_parameter() -> Value {
    json!({"Type": "AWS::EC2::Image::Id", "Description": "Amazon Linux 2023 AMI, pinned by kube-aws"})
}

/// The CloudFormation variable a zonal pool's user-data stub carries for its
/// group's logical id (`asgLogicalId`, which the node signals): each zone's
/// launch template substitutes its own group (src/render/cloudconfig.rs).
pub const ASG_LOGICAL_ID_VARIABLE: &str = "${AsgLogicalId}";

/// The suffix of zone `i`'s resources in a zonal pool (`WorkerGroup0`,
/// `WorkerLaunchTemplate0`, `WorkerDrainHook0`, ...); none for one group.
pub fn zonal_suffix(zones: Option<usize>, i: usize) -> String {
    match zones {
        Some(_) => i.to_string(),
        None => String::new(),
    }
}

/// The tag the VPC CNI puts on the network interfaces it creates (its
/// CLUSTER_NAME; aws/amazon-vpc-cni-k8s docs/iam-policy.md, "Scope-down IAM
/// policy per EKS cluster").
pub const VPC_CNI_CLUSTER_TAG: &str = "cluster.k8s.amazonaws.com/name";

/// What the stacks need of one node role's user data.
#[derive(Debug, Clone, Default)]
pub struct NodeUserData {
    pub stub: String,
    /// The secret bundle entries the role decrypts (its IAM is narrowed to them).
    pub secrets: Vec<String>,
    /// The entries whose change replaces the role's instances (its secrets
    /// version): those its boot uses (NodeSecrets `boot_names`).
    pub versioned: Vec<String>,
}

pub(super) fn sub_escape(stub: &str) -> String {
    stub.replace("${", "${!")
        .replace("${!AWS::StackName}", "${AWS::StackName}")
        .replace("${!AWS::Region}", "${AWS::Region}")
        .replace("${!ApiEndpoint}", "${ApiEndpoint}")
        .replace("${!SecretsVersion}", "${SecretsVersion}")
        .replace("${!CACertHash}", "${CACertHash}")
        .replace("${!AsgLogicalId}", ASG_LOGICAL_ID_VARIABLE)
}

/// The group's rolling update: one instance at a time, and the next only once
/// the new one has signalled (its kubeadm join is done). CloudFormation's
/// UpdatePolicy attribute: MinInstancesInService "must be less than the
/// MaxSize of the Auto Scaling group", and with WaitOnResourceSignals PauseTime
/// is how long it waits for the batch's signals
/// (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-updatepolicy.html).
/// - Controllers of three or five ([`controller_max`]: MaxSize = count + 1):
///   launch before terminate, as workers below. The new controller joins
///   (etcd has count + 1 members, kubeadm adds it as a learner and promotes
///   it once it has caught up) and signals; only then does one old one
///   leave, through its termination hook, which removes its member only
///   while the others keep a quorum (etcd_lifecycle.py `remove_when_safe`). At no
///   point of the roll does etcd have fewer than `count` members, so it
///   still survives the loss of one member mid-roll; a terminate-first roll
///   of three runs on two members, where a second loss takes the quorum.
/// - One controller (MinSize = MaxSize = 1): terminate first. Its
///   replacement restores etcd's final snapshot and `kubeadm init`s on it
///   (etcd_restore.py `restore_decision`): a second controller joining the first
///   would make a two-member etcd whose quorum needs both.
/// - Workers: launch before terminate. MinInstancesInService is the group's
///   starting size, so CloudFormation raises the desired capacity by the batch
///   (one instance, within MaxSize: [`surge_max`] leaves room), waits for the
///   new node's signal, and only then terminates an old one; the pool never
///   runs below its size. A group the autoscaler has grown above its MinSize
///   can drop to one below its current size at a time.
///
/// Every group suspends the processes that would replace or move an instance
/// behind the update's back (AWS knowledge center,
/// auto-scaling-group-rolling-updates: HealthCheck, ReplaceUnhealthy,
/// AZRebalance, AlarmNotification, ScheduledActions; never Launch or Terminate,
/// which the update itself uses). CloudFormation resumes them when the update
/// ends, rolled back or not.
pub(super) fn rolling_update(g: &Group, initial: u32) -> Value {
    let in_service = if g.controller && g.max <= initial {
        initial.saturating_sub(1)
    } else {
        initial
    };
    let policy = json!({
        "MinInstancesInService": in_service.min(g.max.saturating_sub(1)).to_string(),
        "MaxBatchSize": "1", "PauseTime": NODE_SIGNAL_TIMEOUT, "WaitOnResourceSignals": true,
        "SuspendProcesses": ["HealthCheck", "ReplaceUnhealthy", "AZRebalance", "AlarmNotification", "ScheduledActions"]});
    json!({ "AutoScalingRollingUpdate": policy })
}

/// The controller group's MaxSize: one above the count from three up, the
/// room a launch-before-terminate roll needs (`rolling_update`); the count
/// itself for one controller, which is replaced terminate-first.
pub fn controller_max(count: u32) -> u32 {
    if count >= 3 {
        count + 1
    } else {
        count
    }
}

/// A worker group's MaxSize with room for the rolling update's one surge
/// instance above its starting size (`rolling_update`).
pub fn surge_max(bounds: &PoolBounds) -> u32 {
    let initial = bounds.desired.unwrap_or(bounds.min);
    bounds.max.max(initial + 1)
}

/// A mixed pool's MixedInstancesPolicy: the launch template with one override
/// per instance type (their order is the on-demand priority), and the
/// on-demand base, the on-demand share above it and the spot strategy
/// (AWS::AutoScaling::AutoScalingGroup MixedInstancesPolicy,
/// InstancesDistribution; `price-capacity-optimized` is what the EC2 Auto
/// Scaling user guide recommends for spot). Capacity rebalancing, on the
/// group, launches a replacement when EC2 recommends a rebalance.
pub(super) fn mixed_instances_policy(template: Value, d: &InstancesDistribution) -> Value {
    let overrides: Vec<Value> = d.instance_types.iter().map(|t| json!({"InstanceType": t})).collect();
    json!({
        "LaunchTemplate": {"LaunchTemplateSpecification": template, "Overrides": overrides},
        "InstancesDistribution": {
            "OnDemandAllocationStrategy": "prioritized",
            "OnDemandBaseCapacity": d.on_demand_base_capacity,
            "OnDemandPercentageAboveBaseCapacity": d.on_demand_percentage_above_base_capacity,
            "SpotAllocationStrategy": d.spot_allocation_strategy.as_str(),
        },
    })
}

/// The name of the termination lifecycle hook of a drained worker group.
pub const DRAIN_HOOK_NAME: &str = "kube-aws-drain";
/// How long a terminating instance waits for its drain by default (a pool's
/// `drainTimeoutSeconds` sets it, at least this): aws-node-termination-
/// handler's `nodeTerminationGracePeriod` (at most 270 s, plugin.yaml) must fit
/// in it, and it equals the queue's message retention (kops uses 300 s for both:
/// kubernetes/kops pkg/model/awsmodel/nodeterminationhandler.go). A longer
/// timeout gives a drain that a PodDisruptionBudget blocks more attempts: the
/// handler gives up one drain after its grace period and leaves the message
/// on the queue, which delivers it again while the instance still waits
/// (aws-node-termination-handler pkg/interruptionevent/draincordon/handler.go:
/// the lifecycle action is completed only after a drain that succeeded).
pub const DRAIN_HEARTBEAT_SECONDS: u32 = 300;
/// The longest heartbeat timeout a lifecycle hook takes (EC2 Auto Scaling API
/// reference, PutLifecycleHook `HeartbeatTimeout`: 30 to 7200 seconds).
pub const DRAIN_HEARTBEAT_MAX_SECONDS: u32 = 7200;

/// The `EC2_INSTANCE_TERMINATING` lifecycle hook of a worker group whose nodes
/// aws-node-termination-handler drains: the instance waits in
/// Terminating:Wait until the handler completes the action after the drain, or
/// until the heartbeat runs out; either way it then terminates (`CONTINUE`,
/// so a handler that is down delays terminations, never blocks them). A
/// resource of its own, as the controllers' etcd hook (etcd.rs): a stack
/// delete removes the hook before the group, so deleting a pool never waits
/// on drains; an instance the group launches before the hook exists has no
/// pods to drain yet.
pub(super) fn drain_lifecycle_hook(group: &str, timeout: u32) -> Value {
    json!({"Type": "AWS::AutoScaling::LifecycleHook", "Properties": {
        "AutoScalingGroupName": {"Ref": group},
        "LifecycleHookName": DRAIN_HOOK_NAME,
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        "HeartbeatTimeout": timeout,
        "DefaultResult": "CONTINUE"}})
}

/// Every warning `validate` and `render` print about a tree that renders but
/// is not safe: the pools nothing drains, and controllers that one zone's
/// loss would take below quorum (src/config/zonal.rs).
pub fn render_warnings(input: &RenderInput) -> Vec<String> {
    let mut out = undrained_pool_warnings(input);
    out.extend(crate::config::controller_zone_warning(&input.cluster));
    out
}

/// The pools whose terminations nothing drains: aws-node-termination-handler
/// is off for them, so their groups get no drain hook (a hook with no
/// handler would only delay each termination by its timeout). A roll, a
/// scale-in, an AZ rebalance, an instance lifetime, a spot interruption or a
/// kube-aws upgrade then stops their pods without honouring
/// PodDisruptionBudgets. `validate` and `render` print one warning naming
/// them (the first [`NAMED_POOLS`], then how many more: a cluster of 180
/// pools got 180 copies of it before).
pub fn undrained_pool_warnings(input: &RenderInput) -> Vec<String> {
    let default_hooks = NodeHooks::default();
    let names: Vec<String> = input
        .cluster
        .worker
        .node_pools
        .iter()
        .filter(|p| {
            input
                .plugins
                .pools
                .get(&p.name)
                .unwrap_or(&default_hooks)
                .nth_managed_tag()
                .is_none()
        })
        .map(|p| format!("{:?}", p.name))
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    let mut which = names.iter().take(NAMED_POOLS).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > NAMED_POOLS {
        which.push_str(&format!(" and {} more", names.len() - NAMED_POOLS));
    }
    let (noun, its) = if names.len() == 1 {
        ("node pool", "its")
    } else {
        ("node pools", "their")
    };
    vec![format!(
        "{noun} {which}: aws-node-termination-handler is off, so terminations of {its} nodes (rolls, \
         scale-in, AZ rebalancing, spot interruptions, kube-aws upgrades) will not drain them and \
         PodDisruptionBudgets are not honoured; enable it with `plugins: {{aws-node-termination-handler: \
         {{enabled: true}}}}`, then run `kube-aws charts lock` (its chart is not in the built-in lock; \
         docs/plugins/aws-node-termination-handler.md)"
    )]
}

/// How many undrained pools the warning names before "and N more".
const NAMED_POOLS: usize = 8;

/// IMDSv2 only, one hop: a packet from a pod's network namespace takes a
/// second hop, so pods cannot reach the node role's credentials. Their AWS
/// access is their service account's role (src/irsa.rs). The components that
/// use the node role run on the host network, where one hop is enough: the
/// VPC CNI's aws-node DaemonSet (`hostNetwork: true` in the chart) and the
/// cloud controller manager (`hostNetworking: true` in its values); the EBS CSI
/// node plugin reads its metadata from the Node object instead
/// (`metadataSources: kubernetes`). Controllers and workers alike.
pub(super) fn metadata_options() -> Value {
    json!({"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1})
}

/// Role, instance profile, launch template and auto scaling group of one node kind.
pub(super) fn node_group(input: &RenderInput, ctx: &Ctx, g: &Group, stub: &str, r: &mut Map<String, Value>) {
    let p = g.prefix;
    let policies = node_policies(input, ctx, g);
    let mut role = json!({"Type": "AWS::IAM::Role", "Properties": {
            "Path": "/",
            "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]},
            "Policies": [{"PolicyName": format!("kube-aws-{}", g.role), "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": policies.inline}}]}});
    if input.cluster.node_access.ssm {
        // SSM Session Manager: the AWS managed policy AWS documents for it
        // ("Configure instance permissions required for Systems Manager"); its
        // actions (ssm:UpdateInstanceInformation, ssmmessages:*Channel,
        // ec2messages:*, ssm:GetParameter(s), ...) take no resource scope. The
        // AL2023 AMI runs the SSM agent already.
        role["Properties"]["ManagedPolicyArns"] =
            json!([{"Fn::Sub": format!("arn:${{AWS::Partition}}:iam::aws:policy/{SSM_MANAGED_POLICY}")}]);
    }
    r.insert(format!("{p}Role"), role);
    r.insert(
        format!("{p}InstanceProfile"),
        json!({"Type": "AWS::IAM::InstanceProfile", "Properties": {"Path": "/", "Roles": [{"Ref": format!("{p}Role")}]}}),
    );
    // The managed policies, each sized to fit (iam_size.rs); a node boots
    // with them attached: its group depends on them.
    let stack = match g.role.strip_prefix("worker-") {
        Some(pool) => format!("node-pool-{pool}"),
        None => "control-plane".to_string(),
    };
    let longest = Longest::new(&ctx.cluster, &ctx.region, &stack, input.cluster.kms_key_arn.as_deref());
    let mut attached = Vec::new();
    for set in &policies.managed {
        let chunks = chunk(&set.statements, &longest);
        for (n, statements) in chunks.iter().enumerate() {
            let id = match n {
                0 => format!("{p}{}Policy", set.id),
                n => format!("{p}{}Policy{}", set.id, n + 1),
            };
            r.insert(
                id.clone(),
                json!({"Type": "AWS::IAM::ManagedPolicy", "Properties": {
                    "Description": format!("kube-aws cluster {}: {} nodes, {}", ctx.cluster, g.role, set.what),
                    "Roles": [{"Ref": format!("{p}Role")}],
                    "PolicyDocument": {"Version": "2012-10-17", "Statement": statements}}}),
            );
            attached.push(id);
        }
    }
    let name = instance_name(&ctx.cluster, g.role);
    for i in 0..g.zones.unwrap_or(1) {
        group_resources(input, ctx, g, stub, &name, i, r);
        let group = format!("{p}Group{}", zonal_suffix(g.zones, i));
        if let Some(asg) = r.get_mut(&group) {
            let mut after: Vec<Value> = asg["DependsOn"].as_array().cloned().unwrap_or_default();
            after.extend(attached.iter().map(|a| json!(a)));
            if !after.is_empty() {
                asg["DependsOn"] = json!(after);
            }
        }
    }
    r.insert(
        format!("{p}SecretBundlePointer"),
        json!({"Type": "AWS::SSM::Parameter", "Properties": {
            "Name": layout::secret_bundle_parameter(&ctx.cluster, g.role),
            "Type": "String",
            "Value": {"Ref": super::names::SECRET_BUNDLE_KEY},
            "Description": format!("kube-aws cluster {}: the secret bundle {} nodes boot with", ctx.cluster, g.role)}}),
    );
}

/// Launch template, auto scaling group and drain hook of one group of a node
/// kind: the only one, or zone `i`'s of a zonal pool. A zonal group launches
/// into its zone's subnet only, and its user data names it as the group to
/// signal; every zone's group carries the same tags, so the autoscaler's
/// `--balance-similar-node-groups` sees them as one pool (their node
/// templates are alike but for the zone, which the AWS provider takes from
/// the group's first zone: cluster-autoscaler aws_manager.go getAsgTemplate).
fn group_resources(
    input: &RenderInput,
    ctx: &Ctx,
    g: &Group,
    stub: &str,
    name: &str,
    i: usize,
    r: &mut Map<String, Value>,
) {
    let p = g.prefix;
    let z = zonal_suffix(g.zones, i);
    let (user_data, subnets) = match g.zones {
        None => (json!(sub_escape(stub)), json!({"Ref": "SubnetIds"})),
        Some(_) => (
            json!([sub_escape(stub), {"AsgLogicalId": format!("{p}Group{z}")}]),
            json!([{"Fn::Select": [i, {"Ref": "SubnetIds"}]}]),
        ),
    };
    let mut launch_template = json!({"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": {
        "ImageId": {"Ref": "ImageId"},
        "InstanceType": g.instance_type,
        "IamInstanceProfile": {"Arn": {"Fn::GetAtt": [format!("{p}InstanceProfile"), "Arn"]}},
        "SecurityGroupIds": [{"Ref": g.security_group}],
        "MetadataOptions": metadata_options(),
        "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {
            "VolumeSize": g.root_volume, "VolumeType": "gp3", "Encrypted": true, "DeleteOnTermination": true}}],
        "UserData": {"Fn::Base64": {"Fn::Sub": user_data}},
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags(ctx, name)}],
    }}});
    if let Some(key) = &input.cluster.node_access.key_name {
        launch_template["Properties"]["LaunchTemplateData"]["KeyName"] = json!(key);
    }
    // The VPC CNI may change only the cluster's network interfaces (issue 27,
    // plugins/aws-vpc-cni): the primary one, which EC2 creates at launch, gets
    // the cluster tag the CNI puts on those it creates.
    if input.plugins.vpc_cni() {
        if let Some(specs) = launch_template["Properties"]["LaunchTemplateData"]["TagSpecifications"].as_array_mut() {
            specs.push(json!({"ResourceType": "network-interface", "Tags": [
                {"Key": "Name", "Value": name}, {"Key": VPC_CNI_CLUSTER_TAG, "Value": ctx.cluster}]}));
        }
    }
    r.insert(format!("{p}LaunchTemplate{z}"), launch_template);
    // The cluster tag also reaches instances the group launches (the cloud
    // controller manager finds the cluster's instances by it).
    let mut group_tags = vec![
        json!({"Key": "Name", "Value": name, "PropagateAtLaunch": true}),
        json!({"Key": cluster_tag(ctx), "Value": "owned", "PropagateAtLaunch": true}),
    ];
    let nth_tag = if g.controller { None } else { g.hooks.nth_managed_tag() };
    for (k, v) in &g.hooks.asg_tags {
        // The termination handler reads its managed tag on the instance.
        let propagate = nth_tag == Some(k.as_str());
        group_tags.push(json!({"Key": k, "Value": v, "PropagateAtLaunch": propagate}));
    }
    for (k, v) in &g.template_tags {
        group_tags.push(json!({"Key": k, "Value": v, "PropagateAtLaunch": false}));
    }
    // What the group starts with: DesiredCapacity, or MinSize when it is left out.
    let initial = g.desired.unwrap_or(g.min);
    let mut props = json!({
        "VPCZoneIdentifier": subnets,
        "LaunchTemplate": {"LaunchTemplateId": {"Ref": format!("{p}LaunchTemplate{z}")},
                           "Version": {"Fn::GetAtt": [format!("{p}LaunchTemplate{z}"), "LatestVersionNumber"]}},
        "MinSize": g.min.to_string(), "MaxSize": g.max.to_string(),
        "Tags": group_tags,
    });
    if let Some(d) = g.desired {
        props["DesiredCapacity"] = json!(d.to_string());
    }
    if let Some(s) = g.max_lifetime {
        props["MaxInstanceLifetime"] = json!(s);
    }
    if let Some(d) = g.distribution {
        let template = props
            .as_object_mut()
            .and_then(|m| m.remove("LaunchTemplate"))
            .unwrap_or(Value::Null);
        props["MixedInstancesPolicy"] = mixed_instances_policy(template, d);
        props["CapacityRebalance"] = json!(d.capacity_rebalance);
    }
    let mut asg = json!({"Type": "AWS::AutoScaling::AutoScalingGroup",
        "Properties": props,
        "UpdatePolicy": rolling_update(g, initial),
    });
    if !g.extra_target_groups.is_empty() {
        asg["Properties"]["TargetGroupARNs"] = json!(g.extra_target_groups);
    }
    if g.role == "controller" {
        // The EC2 health check only: the group replaces a controller whose
        // instance fails its EC2 status checks (or that marks itself
        // Unhealthy, src/node/kube_aws_node/health.py), never one that fails
        // the API target group's HTTPS /readyz. With "ELB" the group would
        // replace any instance the load balancer reports unhealthy ("About
        // the health checks for your Auto Scaling group",
        // https://docs.aws.amazon.com/autoscaling/ec2/userguide/health-checks-overview.html),
        // and /readyz fails whenever the local etcd or API server restarts:
        // a renewal, a reconfiguration, a defragmentation, or a cluster-wide
        // loss of quorum would cost controllers, with the etcd data on their
        // root volumes. The target group keeps /readyz to route requests only
        // (src/render/cfn/network.rs). The grace period is the bootstrap's own
        // allowance (the signal timeout): EC2 checks start after it too.
        asg["Properties"]["HealthCheckType"] = json!("EC2");
        asg["Properties"]["HealthCheckGracePeriod"] = json!(CONTROLLER_HEALTH_GRACE_SECONDS);
        // A controller's boot reads the cluster-wide kubeadm documents from
        // the addon bundle the plan pointer names (reconfigure.py): the
        // pointer is updated before any controller is launched or replaced.
        asg["DependsOn"] = json!([super::names::PLAN_POINTER]);
    }
    if initial > 0 {
        asg["CreationPolicy"] = json!({"ResourceSignal": {"Count": initial, "Timeout": NODE_SIGNAL_TIMEOUT}});
    }
    r.insert(format!("{p}Group{z}"), asg);
    if nth_tag.is_some() {
        r.insert(
            format!("{p}DrainHook{z}"),
            drain_lifecycle_hook(&format!("{p}Group{z}"), g.drain_timeout),
        );
    }
}

/// The size of one pool's auto scaling group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolBounds {
    pub min: u32,
    pub max: u32,
    /// DesiredCapacity, or None for a group the cluster-autoscaler sizes.
    /// CloudFormation passes the property to CreateAutoScalingGroup, which
    /// starts a group without it at MinSize, and to UpdateAutoScalingGroup,
    /// which leaves properties it is not given unchanged: so a stack update
    /// never resets the size the autoscaler chose (AWS Auto Scaling API
    /// reference, CreateAutoScalingGroup DesiredCapacity and
    /// UpdateAutoScalingGroup; aws-cdk#5507 for the reset it avoids).
    pub desired: Option<u32>,
}

/// A pool's bounds: the plugins' (cluster-autoscaler's per-pool `minSize` and
/// `maxSize`) over the pool's own `count` or `minSize`/`maxSize`.
pub fn pool_bounds(p: &NodePool, hooks: &NodeHooks) -> PoolBounds {
    let own_min = p.count.or(p.min_size).unwrap_or(1);
    let own_max = p.count.or(p.max_size).unwrap_or(own_min);
    let min = hooks.asg_min_size.unwrap_or(own_min);
    let max = hooks.asg_max_size.unwrap_or(own_max).max(min).max(1);
    PoolBounds {
        min,
        max,
        desired: (!hooks.autoscaled()).then_some(min),
    }
}

pub(super) fn pool_stack(input: &RenderInput, ctx: &Ctx, pool: &NodePool, node: &NodeUserData) -> Map<String, Value> {
    let mut t = template(format!("kube-aws cluster {}: node pool {}", ctx.cluster, pool.name));
    let default_hooks = NodeHooks::default();
    let hooks = input.plugins.pools.get(&pool.name).unwrap_or(&default_hooks);
    let bounds = pool_bounds(pool, hooks);
    let role = format!("worker-{}", pool.name);
    let g = Group {
        prefix: "Worker",
        role: &role,
        controller: false,
        instance_type: &pool.instance_type,
        root_volume: pool.root_volume_size,
        min: bounds.min,
        max: surge_max(&bounds),
        desired: bounds.desired,
        template_tags: hooks.node_template_tags(pool),
        security_group: "WorkerSecurityGroupId",
        hooks,
        secrets: &node.secrets,
        extra_target_groups: vec![],
        distribution: pool.instances_distribution.as_ref(),
        max_lifetime: pool
            .max_instance_lifetime_days
            .and_then(|d| crate::config::max_instance_lifetime_seconds(d).ok()),
        drain_timeout: pool.drain_timeout_seconds.unwrap_or(DRAIN_HEARTBEAT_SECONDS),
        zones: pool.zonal.then(|| input.cluster.pool_group_count(pool)),
    };
    t.insert("Parameters".into(), node_stack_parameters(input, &g));
    let mut r = Map::new();
    node_group(input, ctx, &g, &node.stub, &mut r);
    t.insert("Resources".into(), Value::Object(r));
    // The group's name; a zonal pool's, comma-separated in zone order.
    let groups: Vec<Value> = (0..g.zones.unwrap_or(1))
        .map(|i| json!({"Ref": format!("WorkerGroup{}", zonal_suffix(g.zones, i))}))
        .collect();
    let group_names = match g.zones {
        None => groups[0].clone(),
        Some(_) => json!({"Fn::Join": [",", groups]}),
    };
    t.insert(
        "Outputs".into(),
        json!({"WorkerRoleArn": {"Value": {"Fn::GetAtt": ["WorkerRole", "Arn"]}},
               "AutoScalingGroupName": {"Value": group_names}}),
    );
    t
}

/// The parameters of a node stack (control plane or pool), which the root
/// passes: subnets, the role's secrets version, the CA hash, the group's
/// security group, the API endpoint (and its target group for controllers),
/// the AMI.
pub(super) fn node_stack_parameters(input: &RenderInput, g: &Group) -> Value {
    let mut p = Map::new();
    if input.cluster.kms_key_arn.is_some() {
        p.insert(super::names::DECRYPT_KMS_KEYS.into(), decrypt_keys_parameter());
    }
    p.insert("SubnetIds".into(), json!({"Type": "List<AWS::EC2::Subnet::Id>"}));
    p.insert("SecretsVersion".into(), secrets_version_parameter());
    p.insert("CACertHash".into(), ca_cert_hash_parameter());
    p.insert(super::names::SECRET_BUNDLE_KEY.into(), secret_bundle_key_parameter());
    p.insert(g.security_group.into(), json!({"Type": "AWS::EC2::SecurityGroup::Id"}));
    p.insert(
        "ApiEndpoint".into(),
        json!({"Type": "String", "Description": "DNS name of the API load balancer"}),
    );
    if g.controller {
        p.insert("ApiTargetGroupArn".into(), json!({"Type": "String"}));
    }
    p.insert("ImageId".into(), ami_parameter());
    Value::Object(p)
}

pub(super) fn secrets_version_parameter() -> Value {
    json!({"Type": "String", "Default": "",
        "Description": "hash of this role's secret bundle entries: a changed secret replaces its nodes"})
}

pub(super) fn secret_bundle_key_parameter() -> Value {
    json!({"Type": "String", "AllowedPattern": "^secrets/[0-9a-f]{64}/bundle\\.json$",
        "Description": "the published secret bundle's content-addressed key, set by kube-aws"})
}

pub(super) fn decrypt_keys_parameter() -> Value {
    json!({"Type": "String", "AllowedPattern": "^arn:[^,]+(,arn:[^,]+)*$",
        "Description": "the KMS keys this stack's roles may decrypt with (kmsKeyARN, then the keys a rotation retired while etcd snapshots under them are kept), set by kube-aws"})
}

pub(super) fn ca_cert_hash_parameter() -> Value {
    json!({"Type": "String", "AllowedPattern": "^sha256:[0-9a-f]{64}$",
        "Description": "sha256 of the cluster CA's SubjectPublicKeyInfo (kubeadm caCertHashes), set by kube-aws"})
}
