//! CloudFormation stacks as JSON values: `root` (nested stacks by TemplateURL),
//! `network` (VPC or an existing one, security groups, the API's NLB),
//! `control-plane` (IAM, launch template, group, one wait condition per addon)
//! and `node-pool-<name>`. Plugin resources and outputs merge into their stack.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_json::{json, Map, Value};

use super::layout::{self, ETCD_BACKUP_DIR, SECRET_BUNDLE};
use super::plan::{camel, AddonBundle, Plan};
use super::secrets::{CONTEXT_CLUSTER, CONTEXT_SECRET};
use super::{Ctx, RenderError, RenderInput};
use crate::config::{cidr_network, parse_cidr, NatGateways, NodePool, DEFAULT_VPC_CIDR};
use crate::plugin::NodeHooks;

const AMI_X86: &str = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64";
const AMI_ARM: &str = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64";
/// The control-plane stack's addon plan pointer (an SSM parameter).
pub const PLAN_POINTER: &str = "AddonPlan";
/// How many zones a new VPC without `network.availabilityZones` spans: the
/// region's first two, or its first three with 3 or 5 controllers. etcd keeps
/// quorum while a majority of members is up: 3 controllers on 2 zones split
/// 2+1, and losing the zone holding 2 loses quorum; on 3 zones (1+1+1, or
/// 2+2+1 for 5) losing any one zone keeps a majority. Regions with two zones
/// (us-west-1 for most accounts) must list them in availabilityZones: a third
/// `Fn::GetAZs` index does not exist there and the network stack fails.
pub fn default_zone_count(controllers: u32) -> usize {
    if controllers >= 3 {
        3
    } else {
        2
    }
}
/// The AWS managed policy for SSM Session Manager on every node role.
pub const SSM_MANAGED_POLICY: &str = "AmazonSSMManagedInstanceCore";
/// How long a node has to boot, join and signal.
const NODE_SIGNAL_TIMEOUT: &str = "PT30M";

pub use crate::config::is_arm64;

/// A node stack's AMI: a concrete image ID the root passes down. The root's
/// `ImageIdX86`/`ImageIdArm64` are resolved from their SSM public parameter
/// at `up` and kept by later `update`s (src/aws/deploy.rs): a new Amazon
/// Linux release never replaces nodes unless `update --refresh-ami` asks.
fn ami_parameter() -> Value {
    json!({"Type": "AWS::EC2::Image::Id", "Description": "Amazon Linux 2023 AMI, pinned by kube-aws"})
}

/// The root parameter carrying the pinned AMI of an instance type's architecture.
fn ami_root_parameter(instance_type: &str) -> &'static str {
    if is_arm64(instance_type) {
        "ImageIdArm64"
    } else {
        "ImageIdX86"
    }
}

fn ami_description(source: &str) -> String {
    if source.starts_with("ami-") {
        "the AMI set in cluster.yaml (ami)".to_string()
    } else {
        format!("the pinned AMI, resolved from {source} at up or update --refresh-ami")
    }
}

/// Root metadata naming, per AMI parameter, the SSM public parameter the
/// publisher resolves it from, or the explicit image ID (`ami-…`) cluster.yaml gives.
pub const AMI_METADATA: &str = "kube-aws:amis";

/// An ISO 8601 duration CloudFormation accepts (`PT1H30M`).
pub fn iso_duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = "PT".to_string();
    if h > 0 {
        out.push_str(&format!("{h}H"));
    }
    if m > 0 {
        out.push_str(&format!("{m}M"));
    }
    if s > 0 || (h == 0 && m == 0) {
        out.push_str(&format!("{s}S"));
    }
    out
}

fn template(description: String) -> Map<String, Value> {
    let mut t = Map::new();
    t.insert("AWSTemplateFormatVersion".into(), json!("2010-09-09"));
    t.insert("Description".into(), json!(description));
    t
}

/// `kubernetes.io/cluster/<name>`: the AWS cloud controller manager finds the
/// cluster's subnets, security groups and instances by it (`owned`: the
/// cluster's lifecycle owns them). An existing VPC's subnets must carry it
/// too; see docs/getting-started.md.
fn cluster_tag(ctx: &Ctx) -> String {
    cluster_tag_key(&ctx.cluster)
}

/// The cluster tag's key for cluster `name` (`kube-aws nodes` filters by it).
pub fn cluster_tag_key(name: &str) -> String {
    format!("kubernetes.io/cluster/{name}")
}

/// The `Name` tag of a node: `<cluster>-<role>`, role `controller` or
/// `worker-<pool>` (`kube-aws nodes` reads the role back from it).
pub fn instance_name(cluster: &str, role: &str) -> String {
    format!("{cluster}-{role}")
}

fn tags(ctx: &Ctx, name: &str) -> Value {
    json!([
        {"Key": "Name", "Value": name},
        {"Key": cluster_tag(ctx), "Value": "owned"},
    ])
}

/// Splits `cidr` into `count` subnets four bits longer (`10.0.0.0/16` -> /20s).
fn subnet_cidrs(cidr: &str, count: usize) -> Result<Vec<String>, RenderError> {
    let (addr, bits) = parse_cidr(cidr).ok_or_else(|| RenderError::Network {
        message: format!("network.vpcCIDR {cidr:?} is not an IPv4 CIDR like 10.0.0.0/16"),
    })?;
    if !(8..=24).contains(&bits) {
        return Err(RenderError::Network {
            message: format!("network.vpcCIDR {cidr:?}: use a prefix between /8 and /24"),
        });
    }
    if count > 16 {
        return Err(RenderError::Network {
            message: format!(
                "network.availabilityZones: {count} subnets are needed; at most 16 are supported \
                 (privateSubnets needs two per zone)"
            ),
        });
    }
    let sub = bits + 4;
    let base = cidr_network(addr, bits);
    Ok((0..count as u32)
        .map(|i| format!("{}/{sub}", Ipv4Addr::from(base + (i << (32 - sub)))))
        .collect())
}

/// The subnets of a new VPC, the node subnets first: `Subnet<i>`, public
/// (internet gateway route, public IPs) or, with privateSubnets, private
/// (a route through zone i's NAT gateway only); then with privateSubnets the
/// public `PublicSubnet<i>` that hold the NAT gateways and an internet-facing
/// load balancer.
fn new_vpc_subnets(
    input: &RenderInput,
    ctx: &Ctx,
    cidr: &str,
    r: &mut Map<String, Value>,
) -> Result<NewSubnets, RenderError> {
    let net = &input.cluster.network;
    let zones = if net.availability_zones.is_empty() {
        default_zone_count(input.cluster.controller.count)
    } else {
        net.availability_zones.len()
    };
    let private = net.private_subnets;
    let cidrs = subnet_cidrs(cidr, if private { zones * 2 } else { zones })?;
    let az = |i: usize| match net.availability_zones.get(i) {
        Some(z) => json!(z),
        None => json!({"Fn::Select": [i, {"Fn::GetAZs": ""}]}),
    };
    // Subnet role tags: where the cloud controller manager puts internet-facing
    // (`elb`) and internal (`internal-elb`) load balancers.
    let subnet = |name: String, cidr: &str, i: usize, public: bool| {
        let mut t = tags(ctx, &name);
        let role = if public {
            "kubernetes.io/role/elb"
        } else {
            "kubernetes.io/role/internal-elb"
        };
        if let Some(list) = t.as_array_mut() {
            list.push(json!({"Key": role, "Value": "1"}));
        }
        json!({"Type": "AWS::EC2::Subnet", "Properties": {
            "VpcId": {"Ref": "Vpc"}, "CidrBlock": cidr, "AvailabilityZone": az(i),
            "MapPublicIpOnLaunch": public, "Tags": t}})
    };
    let associate = |subnet: &str, table: &str| {
        json!({"Type": "AWS::EC2::SubnetRouteTableAssociation", "Properties": {
            "SubnetId": {"Ref": subnet}, "RouteTableId": {"Ref": table}}})
    };
    let (mut nodes, mut public, mut nat_addresses) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..zones {
        let name = format!("Subnet{i}");
        r.insert(
            name.clone(),
            subnet(format!("{}-{i}", ctx.cluster), &cidrs[i], i, !private),
        );
        nodes.push(json!({"Ref": name}));
        if !private {
            r.insert(
                format!("{name}RouteTableAssociation"),
                associate(&name, "PublicRouteTable"),
            );
            public.push(json!({"Ref": name}));
            continue;
        }
        let pub_name = format!("PublicSubnet{i}");
        r.insert(
            pub_name.clone(),
            subnet(format!("{}-public-{i}", ctx.cluster), &cidrs[zones + i], i, true),
        );
        r.insert(
            format!("{pub_name}RouteTableAssociation"),
            associate(&pub_name, "PublicRouteTable"),
        );
        public.push(json!({"Ref": pub_name}));
        // A private subnet's only way out is a NAT gateway: no route to the
        // internet gateway, no public IPs.
        let nat = match net.nat_gateways.unwrap_or_default() {
            NatGateways::PerZone => i,
            NatGateways::Single => 0,
        };
        if nat == i {
            nat_addresses.push(format!("NatAddress{i}"));
            r.insert(
                format!("NatAddress{i}"),
                json!({"Type": "AWS::EC2::EIP", "DependsOn": "GatewayAttachment",
                    "Properties": {"Domain": "vpc", "Tags": tags(ctx, &format!("{}-nat-{i}", ctx.cluster))}}),
            );
            r.insert(
                format!("NatGateway{i}"),
                json!({"Type": "AWS::EC2::NatGateway", "Properties": {
                    "SubnetId": {"Ref": pub_name},
                    "AllocationId": {"Fn::GetAtt": [format!("NatAddress{i}"), "AllocationId"]},
                    "Tags": tags(ctx, &format!("{}-nat-{i}", ctx.cluster))}}),
            );
        }
        let table = format!("PrivateRouteTable{i}");
        r.insert(
            table.clone(),
            json!({"Type": "AWS::EC2::RouteTable", "Properties": {
                "VpcId": {"Ref": "Vpc"}, "Tags": tags(ctx, &format!("{}-private-{i}", ctx.cluster))}}),
        );
        r.insert(
            format!("PrivateRoute{i}"),
            json!({"Type": "AWS::EC2::Route", "Properties": {
                "RouteTableId": {"Ref": table}, "DestinationCidrBlock": "0.0.0.0/0",
                "NatGatewayId": {"Ref": format!("NatGateway{nat}")}}}),
        );
        r.insert(format!("{name}RouteTableAssociation"), associate(&name, &table));
    }
    if private {
        // Node boot reads its cloud-config, the secret bundle and the charts
        // from S3: a gateway endpoint keeps that off the NAT gateways (and
        // their data charges) and working while they start.
        let tables: Vec<Value> = (0..zones)
            .map(|i| json!({"Ref": format!("PrivateRouteTable{i}")}))
            .collect();
        r.insert(
            "S3Endpoint".into(),
            json!({"Type": "AWS::EC2::VPCEndpoint", "Properties": {
                "VpcId": {"Ref": "Vpc"}, "VpcEndpointType": "Gateway",
                "ServiceName": {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"},
                "RouteTableIds": tables}}),
        );
    }
    Ok(NewSubnets {
        nodes,
        public,
        nat_addresses,
    })
}

/// What [`new_vpc_subnets`] made.
struct NewSubnets {
    /// The node subnets (`Ref`s).
    nodes: Vec<Value>,
    /// The public subnets (`Ref`s): the node subnets themselves without privateSubnets.
    public: Vec<Value>,
    /// The NAT gateways' address (EIP) logical ids.
    nat_addresses: Vec<String>,
}

fn network_stack(input: &RenderInput, ctx: &Ctx) -> Result<Map<String, Value>, RenderError> {
    let (net, api, access) = (
        &input.cluster.network,
        &input.cluster.api_endpoint,
        &input.cluster.node_access,
    );
    let mut t = template(format!("kube-aws cluster {}: network", ctx.cluster));
    let mut r = Map::new();
    // (VPC, node subnets, the API load balancer's subnets, what the load
    // balancer waits for, the NAT gateways' addresses)
    type Layout<'a> = (Value, Vec<Value>, Vec<Value>, Option<&'a str>, Vec<String>);
    let (vpc, subnets, lb_subnets, gateway, nat_addresses): Layout = match &net.vpc_id {
        Some(id) => {
            let ids: Vec<Value> = net.subnet_ids.iter().map(|s| json!(s)).collect();
            (json!(id), ids.clone(), ids, None, Vec::new())
        }
        None => {
            let cidr = net.vpc_cidr.as_deref().unwrap_or(DEFAULT_VPC_CIDR);
            r.insert(
                "Vpc".into(),
                json!({"Type": "AWS::EC2::VPC", "Properties": {
                    "CidrBlock": cidr, "EnableDnsSupport": true, "EnableDnsHostnames": true,
                    "Tags": tags(ctx, &ctx.cluster)}}),
            );
            r.insert(
                "InternetGateway".into(),
                json!({"Type": "AWS::EC2::InternetGateway", "Properties": {"Tags": tags(ctx, &ctx.cluster)}}),
            );
            r.insert(
                "GatewayAttachment".into(),
                json!({"Type": "AWS::EC2::VPCGatewayAttachment", "Properties": {
                    "VpcId": {"Ref": "Vpc"}, "InternetGatewayId": {"Ref": "InternetGateway"}}}),
            );
            r.insert(
                "PublicRouteTable".into(),
                json!({"Type": "AWS::EC2::RouteTable", "Properties": {
                    "VpcId": {"Ref": "Vpc"}, "Tags": tags(ctx, &ctx.cluster)}}),
            );
            r.insert(
                "PublicRoute".into(),
                json!({"Type": "AWS::EC2::Route", "DependsOn": "GatewayAttachment", "Properties": {
                    "RouteTableId": {"Ref": "PublicRouteTable"}, "DestinationCidrBlock": "0.0.0.0/0",
                    "GatewayId": {"Ref": "InternetGateway"}}}),
            );
            let made = new_vpc_subnets(input, ctx, cidr, &mut r)?;
            // An internal load balancer sits with the nodes; an internet-facing one in public subnets.
            let lb = if api.internal { made.nodes.clone() } else { made.public };
            (
                json!({"Ref": "Vpc"}),
                made.nodes,
                lb,
                Some("GatewayAttachment"),
                made.nat_addresses,
            )
        }
    };
    // The API's load balancer has a security group of its own: the target
    // group turns client IP preservation off (below), so the controllers see
    // the load balancer's private addresses, never the client's, and only the
    // load balancer's group can filter clients. The controllers admit 6443
    // from that group alone, which also covers the health checks ("Update the
    // security groups for your Network Load Balancer" and "Edit target group
    // attributes: client IP preservation", Elastic Load Balancing docs). A
    // load balancer gets security groups only when it is created.
    let mut api_rules: Vec<Value> = api
        .allowed_cidrs
        .iter()
        .map(|c| {
            json!({"IpProtocol": "tcp", "FromPort": 6443, "ToPort": 6443, "CidrIp": c,
                   "Description": "Kubernetes API from apiEndpoint.allowedCIDRs"})
        })
        .collect();
    // Nodes resolve an internet-facing load balancer's name to its public
    // addresses and reach it through the internet gateway, so it sees their
    // public source address, which no security group reference matches:
    // from private subnets, that is a NAT gateway's address (admitted here);
    // nodes in public subnets have addresses nobody knows in advance, which
    // is why validation wants 0.0.0.0/0, privateSubnets or internal there.
    if !api.internal {
        for a in &nat_addresses {
            api_rules.push(json!({"IpProtocol": "tcp", "FromPort": 6443, "ToPort": 6443,
                "CidrIp": {"Fn::Sub": format!("${{{a}}}/32")},
                "Description": "Kubernetes API from the nodes through a NAT gateway"}));
        }
    }
    let mut api_group = json!({"Type": "AWS::EC2::SecurityGroup", "Properties": {
        "GroupDescription": format!("kube-aws {} API load balancer", ctx.cluster),
        "VpcId": vpc,
        "Tags": tags(ctx, &format!("{}-api", ctx.cluster))}});
    if !api_rules.is_empty() {
        api_group["Properties"]["SecurityGroupIngress"] = json!(api_rules);
    }
    r.insert("ApiSecurityGroup".into(), api_group);
    // The nodes reach the API through the load balancer too (kubelets, the
    // SSM port forwarding of an internal endpoint). Separate rules: the node
    // groups refer to this group in turn.
    for (name, group, who) in [
        ("ApiFromControllers", "ControllerSecurityGroup", "controllers"),
        ("ApiFromWorkers", "WorkerSecurityGroup", "workers"),
    ] {
        r.insert(
            name.into(),
            json!({"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
                "GroupId": {"Fn::GetAtt": ["ApiSecurityGroup", "GroupId"]},
                "IpProtocol": "tcp", "FromPort": 6443, "ToPort": 6443,
                "SourceSecurityGroupId": {"Fn::GetAtt": [group, "GroupId"]},
                "Description": format!("Kubernetes API from the {who}")}}),
        );
    }
    // SSH only to the CIDRs listed, never by default (nodeAccess.sshAllowedCIDRs).
    let ssh = |who: &str| -> Vec<Value> {
        access
            .ssh_allowed_cidrs
            .iter()
            .map(|c| {
                json!({"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "CidrIp": c,
                       "Description": format!("SSH to the {who} from nodeAccess.sshAllowedCIDRs")})
            })
            .collect()
    };
    let mut controller_rules = vec![json!({"IpProtocol": "tcp", "FromPort": 6443, "ToPort": 6443,
        "SourceSecurityGroupId": {"Fn::GetAtt": ["ApiSecurityGroup", "GroupId"]},
        "Description": "Kubernetes API through the load balancer (and its health checks)"})];
    controller_rules.extend(ssh("controllers"));
    r.insert(
        "ControllerSecurityGroup".into(),
        json!({"Type": "AWS::EC2::SecurityGroup", "Properties": {
            "GroupDescription": format!("kube-aws {} controllers", ctx.cluster),
            "VpcId": vpc,
            "SecurityGroupIngress": controller_rules,
            "Tags": tags(ctx, &format!("{}-controller", ctx.cluster))}}),
    );
    let mut worker = json!({"Type": "AWS::EC2::SecurityGroup", "Properties": {
        "GroupDescription": format!("kube-aws {} workers", ctx.cluster),
        "VpcId": vpc,
        "Tags": tags(ctx, &format!("{}-worker", ctx.cluster))}});
    let worker_ssh = ssh("workers");
    if !worker_ssh.is_empty() {
        worker["Properties"]["SecurityGroupIngress"] = json!(worker_ssh);
    }
    r.insert("WorkerSecurityGroup".into(), worker);
    for (name, group, source) in [
        (
            "ControllerFromControllers",
            "ControllerSecurityGroup",
            "ControllerSecurityGroup",
        ),
        (
            "ControllerFromWorkers",
            "ControllerSecurityGroup",
            "WorkerSecurityGroup",
        ),
        (
            "WorkerFromControllers",
            "WorkerSecurityGroup",
            "ControllerSecurityGroup",
        ),
        ("WorkerFromWorkers", "WorkerSecurityGroup", "WorkerSecurityGroup"),
    ] {
        r.insert(
            name.into(),
            json!({"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
                "GroupId": {"Fn::GetAtt": [group, "GroupId"]}, "IpProtocol": "-1",
                "SourceSecurityGroupId": {"Fn::GetAtt": [source, "GroupId"]},
                "Description": "cluster traffic"}}),
        );
    }
    let scheme = if api.internal { "internal" } else { "internet-facing" };
    let mut nlb = json!({"Type": "AWS::ElasticLoadBalancingV2::LoadBalancer", "Properties": {
        "Type": "network", "Scheme": scheme, "Subnets": lb_subnets,
        "SecurityGroups": [{"Fn::GetAtt": ["ApiSecurityGroup", "GroupId"]}],
        "Tags": tags(ctx, &format!("{}-api", ctx.cluster))}});
    if let Some(g) = gateway {
        nlb["DependsOn"] = json!(g);
    }
    r.insert("ApiLoadBalancer".into(), nlb);
    r.insert(
        "ApiTargetGroup".into(),
        // Without client IP preservation a controller reaching the API through
        // the NLB may land on itself (hairpin) and still get an answer.
        json!({"Type": "AWS::ElasticLoadBalancingV2::TargetGroup", "Properties": {
            "Protocol": "TCP", "Port": 6443, "VpcId": vpc, "TargetType": "instance",
            "HealthCheckProtocol": "TCP",
            "TargetGroupAttributes": [{"Key": "preserve_client_ip.enabled", "Value": "false"}]}}),
    );
    r.insert(
        "ApiListener".into(),
        json!({"Type": "AWS::ElasticLoadBalancingV2::Listener", "Properties": {
            "LoadBalancerArn": {"Ref": "ApiLoadBalancer"}, "Port": 6443, "Protocol": "TCP",
            "DefaultActions": [{"Type": "forward", "TargetGroupArn": {"Ref": "ApiTargetGroup"}}]}}),
    );
    t.insert("Resources".into(), Value::Object(r));
    t.insert(
        "Outputs".into(),
        json!({
            "VpcId": {"Value": vpc},
            "SubnetIds": {"Value": {"Fn::Join": [",", subnets]}},
            "ControllerSecurityGroupId": {"Value": {"Fn::GetAtt": ["ControllerSecurityGroup", "GroupId"]}},
            "WorkerSecurityGroupId": {"Value": {"Fn::GetAtt": ["WorkerSecurityGroup", "GroupId"]}},
            "ApiEndpoint": {"Value": {"Fn::GetAtt": ["ApiLoadBalancer", "DNSName"]}},
            "ApiTargetGroupArn": {"Value": {"Ref": "ApiTargetGroup"}},
        }),
    );
    Ok(t)
}

/// The statements every node role gets, plus its scope's plugin statements.
/// Nodes write nothing secret (locks and status reports), so they only ever
/// decrypt, and only their own bundle entries: workers the bootstrap token and
/// their plugin secrets, never a PKI key (the KMS encryption-context condition
/// names each entry).
fn policy_statements(input: &RenderInput, ctx: &Ctx, g: &Group) -> Vec<Value> {
    let obj = |key: &str| format!("arn:aws:s3:::{}/{}/{key}", ctx.bucket, ctx.key_prefix);
    let mut read = vec![obj(&layout::userdata_objects(g.role)), obj(SECRET_BUNDLE)];
    let mut write = vec![];
    if g.controller {
        read.push(obj(&format!("{}*", layout::CHARTS_DIR)));
        read.push(obj(&format!("{}/*", layout::ADDONS_DIR)));
        write.push(obj(&format!("{}*", layout::BOOTSTRAP_DIR)));
        write.push(obj(&format!("{}*", layout::STATUS_DIR)));
    }
    let mut s =
        vec![json!({"Sid": "ReadClusterObjects", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": read})];
    if g.controller {
        s.push(
            json!({"Sid": "WriteBootstrapAndStatus", "Effect": "Allow", "Action": ["s3:PutObject"], "Resource": write}),
        );
        // The kubelet serving-certificate approver checks each request against
        // the cluster's instances; DescribeInstances has no resource-level scope.
        s.push(json!({"Sid": "DescribeInstancesForCsrApproval", "Effect": "Allow",
            "Action": ["ec2:DescribeInstances"], "Resource": "*"}));
        s.extend(reconciler_statements(ctx));
        s.extend(etcd_statements(input, ctx));
    } else {
        // A failed boot publishes its report (blanked of secrets) for `kube-aws status`.
        s.push(
            json!({"Sid": "WriteFailureReport", "Effect": "Allow", "Action": ["s3:PutObject"],
            "Resource": [obj(&format!("{}*", layout::NODE_REPORTS_DIR))]}),
        );
    }
    s.push(json!({
        "Sid": "SignalOwnStack", "Effect": "Allow", "Action": ["cloudformation:SignalResource"],
        "Resource": {"Fn::Sub": "arn:${AWS::Partition}:cloudformation:${AWS::Region}:${AWS::AccountId}:stack/${AWS::StackName}/*"},
    }));
    if let Some(k) = &input.cluster.kms_key_arn {
        s.push(json!({
            "Sid": "DecryptOwnSecrets", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": k,
            "Condition": {"StringEquals": {
                format!("kms:EncryptionContext:{CONTEXT_CLUSTER}"): ctx.cluster,
                format!("kms:EncryptionContext:{CONTEXT_SECRET}"): g.secrets,
            }},
        }));
    }
    s.extend(g.hooks.iam_statements.iter().map(|st| st.statement.clone()));
    s
}

/// The addon reconciler reads exactly the plan pointer, and asks its own
/// stack whether a wait condition still waits before signalling it.
fn reconciler_statements(ctx: &Ctx) -> Vec<Value> {
    let name = super::cloudconfig::plan_parameter_name(ctx);
    vec![
        json!({"Sid": "ReadAddonPlanPointer", "Effect": "Allow", "Action": ["ssm:GetParameter"],
            "Resource": {"Fn::Sub": format!("arn:${{AWS::Partition}}:ssm:${{AWS::Region}}:${{AWS::AccountId}}:parameter{name}")}}),
        json!({"Sid": "DescribeOwnWaitConditions", "Effect": "Allow",
            "Action": ["cloudformation:DescribeStackResource"],
            "Resource": {"Fn::Sub": "arn:${AWS::Partition}:cloudformation:${AWS::Region}:${AWS::AccountId}:stack/${AWS::StackName}/*"}}),
    ]
}

/// The name of the controller group's termination lifecycle hook; the
/// controllers' `kube-aws-node lifecycle` completes it by this name.
pub const ETCD_LIFECYCLE_HOOK: &str = "kube-aws-etcd-member";
/// How long a leaving controller may take to remove its etcd member before
/// the group goes on without it (the hook's heartbeat timeout, seconds).
pub const ETCD_LIFECYCLE_TIMEOUT: u32 = 300;
/// The control-plane stack's etcd settings parameter (backups, controller count).
pub const ETCD_SETTINGS: &str = "EtcdSettings";

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
fn etcd_membership(ctx: &Ctx, r: &mut Map<String, Value>) {
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
        "ControllerLifecyclePolicy".into(),
        json!({"Type": "AWS::IAM::Policy", "Properties": {
            "PolicyName": format!("kube-aws-{}-controller-lifecycle", ctx.cluster),
            "Roles": [{"Ref": "ControllerRole"}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [
                {"Sid": "CompleteOwnLifecycleAction", "Effect": "Allow",
                 "Action": ["autoscaling:CompleteLifecycleAction"],
                 "Resource": {"Fn::Sub": "arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*:autoScalingGroupName/${ControllerGroup}"}},
                {"Sid": "FindOwnGroup", "Effect": "Allow",
                 "Action": ["autoscaling:DescribeAutoScalingInstances"], "Resource": "*"}]}}}),
    );
}

/// The controllers' etcd settings, as an SSM parameter the stack manages
/// rather than user data: a changed backup interval, retention or controller
/// count updates the parameter and replaces no controller.
fn etcd_settings(input: &RenderInput, ctx: &Ctx) -> Result<Value, RenderError> {
    let b = &input.cluster.etcd.backup;
    let interval = humantime::parse_duration(b.interval.trim()).map_err(|e| RenderError::Network {
        message: format!("etcd.backup.interval {:?}: {e}", b.interval),
    })?;
    let value = json!({
        "bucket": ctx.bucket,
        "backupPrefix": format!("{}/{ETCD_BACKUP_DIR}/", ctx.key_prefix),
        "intervalSeconds": interval.as_secs(),
        "retention": b.retention,
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

/// What the controllers' etcd tools may do: read their settings; write, list
/// and delete snapshots under `etcd/` only; encrypt them with the cluster's
/// key (SSE-KMS: S3 asks KMS for a data key in the caller's name, and for
/// Decrypt on multipart uploads and on the download of a restore; the
/// encryption context S3 passes is the object's ARN, or the bucket's with S3
/// Bucket Keys, "Using server-side encryption with AWS KMS keys", Amazon S3
/// user guide).
fn etcd_statements(input: &RenderInput, ctx: &Ctx) -> Vec<Value> {
    let dir = format!("{}/{ETCD_BACKUP_DIR}/", ctx.key_prefix);
    let objects = format!("arn:aws:s3:::{}/{dir}*", ctx.bucket);
    let mut s = vec![
        json!({"Sid": "ReadEtcdSettings", "Effect": "Allow", "Action": ["ssm:GetParameter"],
            "Resource": {"Fn::Sub": format!("arn:${{AWS::Partition}}:ssm:${{AWS::Region}}:${{AWS::AccountId}}:parameter{}", etcd_parameter_name(ctx))}}),
        json!({"Sid": "WriteEtcdSnapshots", "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            "Resource": [objects]}),
        json!({"Sid": "ListEtcdSnapshots", "Effect": "Allow", "Action": ["s3:ListBucket"],
            "Resource": [format!("arn:aws:s3:::{}", ctx.bucket)],
            "Condition": {"StringLike": {"s3:prefix": [format!("{dir}*")]}}}),
    ];
    if let Some(k) = &input.cluster.kms_key_arn {
        s.push(json!({"Sid": "EncryptEtcdSnapshots", "Effect": "Allow",
            "Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Resource": k,
            "Condition": {
                "StringEquals": {"kms:ViaService": format!("s3.{}.amazonaws.com", ctx.region)},
                "StringLike": {"kms:EncryptionContext:aws:s3:arn": [objects, format!("arn:aws:s3:::{}", ctx.bucket)]}}}));
    }
    s
}

/// The control-plane stack's pointer to the current addon bundle: its S3 URI
/// and sha256, which the controllers' reconciler polls. Wait conditions
/// depend on it, so a new plan's wait conditions exist only once it is live.
fn plan_pointer(ctx: &Ctx, bundle: &AddonBundle) -> Value {
    let value = json!({"uri": format!("{}/{}", ctx.s3_base, bundle.key), "sha256": bundle.sha256});
    json!({"Type": "AWS::SSM::Parameter", "Properties": {
        "Name": super::cloudconfig::plan_parameter_name(ctx),
        "Type": "String",
        "Value": value.to_string(),
        "Description": format!("kube-aws cluster {}: the addon plan the controllers install", ctx.cluster)}})
}

struct Group<'a> {
    prefix: &'a str,
    role: &'a str,
    controller: bool,
    instance_type: &'a str,
    root_volume: u32,
    min: u32,
    max: u32,
    /// None for groups the cluster-autoscaler sizes: see `PoolBounds`.
    desired: Option<u32>,
    /// Extra group tags (the autoscaler's node templates), not propagated.
    template_tags: Vec<(String, String)>,
    security_group: &'a str,
    hooks: &'a NodeHooks,
    /// Bundle entries this role may decrypt.
    secrets: &'a [String],
    extra_target_groups: Vec<Value>,
}

/// What the stacks need of one node role's user data.
#[derive(Debug, Clone, Default)]
pub struct NodeUserData {
    pub stub: String,
    /// The secret bundle entries the role decrypts (its IAM is narrowed to them).
    pub secrets: Vec<String>,
}

fn sub_escape(stub: &str) -> String {
    stub.replace("${", "${!")
        .replace("${!AWS::StackName}", "${AWS::StackName}")
        .replace("${!AWS::Region}", "${AWS::Region}")
        .replace("${!ApiEndpoint}", "${ApiEndpoint}")
        .replace("${!SecretsVersion}", "${SecretsVersion}")
        .replace("${!CACertHash}", "${CACertHash}")
}

/// The group's rolling update: one instance at a time, every other one in
/// service, and the next only once the new one has signalled (its kubeadm
/// join is done). CloudFormation's UpdatePolicy attribute: MinInstancesInService
/// "must be less than the MaxSize of the Auto Scaling group", and with
/// WaitOnResourceSignals PauseTime is how long it waits for the batch's
/// signals (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-updatepolicy.html).
/// For controllers (count 1, 3 or 5, MinSize = MaxSize = count) that is
/// count - 1 in service: etcd keeps its quorum while one member is replaced.
/// Controllers also suspend the processes that would replace or move an
/// instance behind the update's back (AWS knowledge center,
/// auto-scaling-group-rolling-updates: HealthCheck, ReplaceUnhealthy,
/// AZRebalance, AlarmNotification, ScheduledActions; never Launch or Terminate).
fn rolling_update(g: &Group, initial: u32) -> Value {
    let mut policy = json!({
        "MinInstancesInService": initial.saturating_sub(1).min(g.max.saturating_sub(1)).to_string(),
        "MaxBatchSize": "1", "PauseTime": NODE_SIGNAL_TIMEOUT, "WaitOnResourceSignals": true});
    if g.controller {
        policy["SuspendProcesses"] = json!([
            "HealthCheck",
            "ReplaceUnhealthy",
            "AZRebalance",
            "AlarmNotification",
            "ScheduledActions"
        ]);
    }
    json!({ "AutoScalingRollingUpdate": policy })
}

/// IMDSv2 only, one hop: a packet from a pod's network namespace takes a
/// second hop, so pods cannot reach the node role's credentials. Their AWS
/// access is their service account's role (src/irsa.rs). The components that
/// use the node role run on the host network, where one hop is enough: the
/// VPC CNI's aws-node DaemonSet (`hostNetwork: true` in the chart) and the
/// cloud controller manager (`hostNetworking: true` in its values); the EBS CSI
/// node plugin reads its metadata from the Node object instead
/// (`metadataSources: kubernetes`). Controllers and workers alike.
fn metadata_options() -> Value {
    json!({"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1})
}

/// Role, instance profile, launch template and auto scaling group of one node kind.
fn node_group(input: &RenderInput, ctx: &Ctx, g: &Group, stub: &str, r: &mut Map<String, Value>) {
    let p = g.prefix;
    let mut role = json!({"Type": "AWS::IAM::Role", "Properties": {
            "Path": "/",
            "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]},
            "Policies": [{"PolicyName": format!("kube-aws-{}", g.role), "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": policy_statements(input, ctx, g)}}]}});
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
    let name = instance_name(&ctx.cluster, g.role);
    let mut launch_template = json!({"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": {
        "ImageId": {"Ref": "ImageId"},
        "InstanceType": g.instance_type,
        "IamInstanceProfile": {"Arn": {"Fn::GetAtt": [format!("{p}InstanceProfile"), "Arn"]}},
        "SecurityGroupIds": [{"Ref": g.security_group}],
        "MetadataOptions": metadata_options(),
        "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {
            "VolumeSize": g.root_volume, "VolumeType": "gp3", "Encrypted": true, "DeleteOnTermination": true}}],
        "UserData": {"Fn::Base64": {"Fn::Sub": sub_escape(stub)}},
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags(ctx, &name)}],
    }}});
    if let Some(key) = &input.cluster.node_access.key_name {
        launch_template["Properties"]["LaunchTemplateData"]["KeyName"] = json!(key);
    }
    r.insert(format!("{p}LaunchTemplate"), launch_template);
    // The cluster tag also reaches instances the group launches (the cloud
    // controller manager finds the cluster's instances by it).
    let mut group_tags = vec![
        json!({"Key": "Name", "Value": name, "PropagateAtLaunch": true}),
        json!({"Key": cluster_tag(ctx), "Value": "owned", "PropagateAtLaunch": true}),
    ];
    for (k, v) in &g.hooks.asg_tags {
        group_tags.push(json!({"Key": k, "Value": v, "PropagateAtLaunch": false}));
    }
    for (k, v) in &g.template_tags {
        group_tags.push(json!({"Key": k, "Value": v, "PropagateAtLaunch": false}));
    }
    // What the group starts with: DesiredCapacity, or MinSize when it is left out.
    let initial = g.desired.unwrap_or(g.min);
    let mut props = json!({
        "VPCZoneIdentifier": {"Ref": "SubnetIds"},
        "LaunchTemplate": {"LaunchTemplateId": {"Ref": format!("{p}LaunchTemplate")},
                           "Version": {"Fn::GetAtt": [format!("{p}LaunchTemplate"), "LatestVersionNumber"]}},
        "MinSize": g.min.to_string(), "MaxSize": g.max.to_string(),
        "Tags": group_tags,
    });
    if let Some(d) = g.desired {
        props["DesiredCapacity"] = json!(d.to_string());
    }
    let mut asg = json!({"Type": "AWS::AutoScaling::AutoScalingGroup",
        "Properties": props,
        "UpdatePolicy": rolling_update(g, initial),
    });
    if !g.extra_target_groups.is_empty() {
        asg["Properties"]["TargetGroupARNs"] = json!(g.extra_target_groups);
    }
    if initial > 0 {
        asg["CreationPolicy"] = json!({"ResourceSignal": {"Count": initial, "Timeout": NODE_SIGNAL_TIMEOUT}});
    }
    r.insert(format!("{p}Group"), asg);
}

fn control_plane_stack(
    input: &RenderInput,
    ctx: &Ctx,
    plan: &Plan,
    bundle: &AddonBundle,
    node: &NodeUserData,
) -> Result<Map<String, Value>, RenderError> {
    let c = &input.cluster.controller;
    if is_arm64(&c.instance_type) && input.helm_binary.url.contains("amd64") {
        return Err(RenderError::Network {
            message: format!(
                "controller.instanceType {:?} is arm64 but the helm client is linux-amd64; pick an x86_64 type",
                c.instance_type
            ),
        });
    }
    let mut t = template(format!(
        "kube-aws cluster {}: control plane and addon wait conditions",
        ctx.cluster
    ));
    t.insert(
        "Parameters".into(),
        json!({
            "SubnetIds": {"Type": "List<AWS::EC2::Subnet::Id>"},
            "SecretsVersion": secrets_version_parameter(),
            "CACertHash": ca_cert_hash_parameter(),
            "ControllerSecurityGroupId": {"Type": "AWS::EC2::SecurityGroup::Id"},
            "ApiEndpoint": {"Type": "String", "Description": "DNS name of the API load balancer"},
            "ApiTargetGroupArn": {"Type": "String"},
            "ImageId": ami_parameter(),
        }),
    );
    let mut r = Map::new();
    let g = Group {
        prefix: "Controller",
        role: "controller",
        controller: true,
        instance_type: &c.instance_type,
        root_volume: c.root_volume_size,
        min: c.count,
        max: c.count,
        desired: Some(c.count),
        template_tags: vec![],
        security_group: "ControllerSecurityGroupId",
        hooks: &input.plugins.controller,
        secrets: &node.secrets,
        extra_target_groups: vec![json!({"Ref": "ApiTargetGroupArn"})],
    };
    node_group(input, ctx, &g, &node.stub, &mut r);
    etcd_membership(ctx, &mut r);
    r.insert(ETCD_SETTINGS.into(), etcd_settings(input, ctx)?);
    r.insert(PLAN_POINTER.into(), plan_pointer(ctx, bundle));
    let ids: BTreeMap<&str, &str> = plan
        .releases
        .iter()
        .map(|e| (e.name.as_str(), e.wait_condition.as_str()))
        .collect();
    for e in &plan.releases {
        let mut deps = vec![json!("ControllerGroup"), json!(PLAN_POINTER)];
        deps.extend(
            e.depends_on
                .iter()
                .filter_map(|d| ids.get(d.as_str()))
                .map(|w| json!(w)),
        );
        r.insert(
            e.wait_condition.clone(),
            json!({"Type": "AWS::CloudFormation::WaitCondition", "DependsOn": deps,
                "CreationPolicy": {"ResourceSignal": {"Count": 1, "Timeout": iso_duration(e.wait_timeout_seconds)}},
                "Metadata": {"Release": e.name, "Namespace": e.namespace, "Chart": e.chart,
                             "ChartVersion": e.chart_version}}),
        );
    }
    t.insert("Resources".into(), Value::Object(r));
    t.insert(
        "Outputs".into(),
        json!({"ControllerRoleArn": {"Value": {"Fn::GetAtt": ["ControllerRole", "Arn"]}}}),
    );
    Ok(t)
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

fn pool_stack(input: &RenderInput, ctx: &Ctx, pool: &NodePool, node: &NodeUserData) -> Map<String, Value> {
    let mut t = template(format!("kube-aws cluster {}: node pool {}", ctx.cluster, pool.name));
    t.insert(
        "Parameters".into(),
        json!({
            "SubnetIds": {"Type": "List<AWS::EC2::Subnet::Id>"},
            "SecretsVersion": secrets_version_parameter(),
            "CACertHash": ca_cert_hash_parameter(),
            "WorkerSecurityGroupId": {"Type": "AWS::EC2::SecurityGroup::Id"},
            "ApiEndpoint": {"Type": "String", "Description": "DNS name of the API load balancer"},
            "ImageId": ami_parameter(),
        }),
    );
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
        max: bounds.max,
        desired: bounds.desired,
        template_tags: hooks.node_template_tags(pool),
        security_group: "WorkerSecurityGroupId",
        hooks,
        secrets: &node.secrets,
        extra_target_groups: vec![],
    };
    let mut r = Map::new();
    node_group(input, ctx, &g, &node.stub, &mut r);
    t.insert("Resources".into(), Value::Object(r));
    t.insert(
        "Outputs".into(),
        json!({"WorkerRoleArn": {"Value": {"Fn::GetAtt": ["WorkerRole", "Arn"]}},
               "AutoScalingGroupName": {"Value": {"Ref": "WorkerGroup"}}}),
    );
    t
}

/// The root parameter that carries a nested stack's secrets version.
fn secrets_version_key(stack_logical_id: &str) -> String {
    format!("{stack_logical_id}SecretsVersion")
}

fn secrets_version_parameter() -> Value {
    json!({"Type": "String", "Default": "",
        "Description": "hash of this role's secret bundle entries: a changed secret replaces its nodes"})
}

/// The parameter carrying kubeadm's `caCertHashes` value for the cluster CA,
/// which kube-aws generates at the first publish (src/pki.rs); the publisher
/// passes it to the root stack, which hands it to every node stack.
pub const CA_CERT_HASH: &str = "CACertHash";

fn ca_cert_hash_parameter() -> Value {
    json!({"Type": "String", "AllowedPattern": "^sha256:[0-9a-f]{64}$",
        "Description": "sha256 of the cluster CA's SubjectPublicKeyInfo (kubeadm caCertHashes), set by kube-aws"})
}

/// Root metadata naming, per secrets version parameter, the bundle entries it
/// covers; the publisher hashes their ciphertexts (see src/aws/publish.rs).
pub const SECRETS_METADATA: &str = "kube-aws:secretsVersions";

fn root_stack(input: &RenderInput, ctx: &Ctx, nodes: &BTreeMap<String, NodeUserData>) -> Map<String, Value> {
    let mut t = template(format!("kube-aws cluster {}: root stack", ctx.cluster));
    // The publisher passes ArtifactBaseURL and rewrites `stacks/<stack>.json` to the
    // stack's content-addressed key (see src/aws/publish.rs).
    let base = format!(
        "https://{}.s3.{}.amazonaws.com/{}",
        ctx.bucket, ctx.region, ctx.key_prefix
    );
    let mut params = Map::new();
    params.insert(
        "ArtifactBaseURL".into(),
        json!({"Type": "String", "Default": base,
            "Description": "HTTPS URL of s3URI/<cluster>, where the nested stack templates are published"}),
    );
    params.insert(CA_CERT_HASH.into(), ca_cert_hash_parameter());
    let mut amis = Map::new();
    // Each AMI parameter's source: the SSM public parameter, or the image
    // cluster.yaml's `ami` names for that architecture (the publisher passes
    // an explicit image as it is, see src/aws/deploy.rs pin_amis).
    let mut ami = |instance_type: &str| -> Value {
        let p = ami_root_parameter(instance_type);
        let path = if p == "ImageIdArm64" { AMI_ARM } else { AMI_X86 };
        let source = input.cluster.explicit_ami(instance_type).unwrap_or(path);
        amis.insert(p.to_string(), json!(source));
        json!({"Ref": p})
    };
    let controller_ami = ami(&input.cluster.controller.instance_type);
    let pool_amis: Vec<Value> = input
        .cluster
        .worker
        .node_pools
        .iter()
        .map(|p| ami(&p.instance_type))
        .collect();
    for (p, path) in &amis {
        params.insert(
            p.clone(),
            json!({"Type": "String", "Description": ami_description(path.as_str().unwrap_or_default())}),
        );
    }
    let mut covered = Map::new();
    let mut node_stack = |logical_id: &str, role: &str| -> Value {
        let key = secrets_version_key(logical_id);
        params.insert(key.clone(), secrets_version_parameter());
        let names = nodes.get(role).map(|n| n.secrets.clone()).unwrap_or_default();
        covered.insert(key.clone(), json!(names));
        json!({"Ref": key})
    };
    let out = |o: &str| json!({"Fn::GetAtt": ["Network", format!("Outputs.{o}")]});
    let url = |s: &str| json!({"Fn::Sub": format!("${{ArtifactBaseURL}}/stacks/{s}.json")});
    let mut r = Map::new();
    r.insert(
        "Network".into(),
        json!({"Type": "AWS::CloudFormation::Stack", "Properties": {"TemplateURL": url("network")}}),
    );
    let version = node_stack("ControlPlane", "controller");
    r.insert(
        "ControlPlane".into(),
        json!({"Type": "AWS::CloudFormation::Stack", "Properties": {"TemplateURL": url("control-plane"),
            "Parameters": {"SubnetIds": out("SubnetIds"), "ControllerSecurityGroupId": out("ControllerSecurityGroupId"),
                           "ApiEndpoint": out("ApiEndpoint"), "ApiTargetGroupArn": out("ApiTargetGroupArn"),
                           "SecretsVersion": version, "CACertHash": {"Ref": CA_CERT_HASH}, "ImageId": controller_ami}}}),
    );
    for (pool, pool_ami) in input.cluster.worker.node_pools.iter().zip(pool_amis) {
        let id = format!("NodePool{}", camel(&pool.name));
        let version = node_stack(&id, &format!("worker-{}", pool.name));
        r.insert(
            id,
            json!({"Type": "AWS::CloudFormation::Stack", "Properties": {
                "TemplateURL": url(&format!("node-pool-{}", pool.name)),
                "Parameters": {"SubnetIds": out("SubnetIds"), "WorkerSecurityGroupId": out("WorkerSecurityGroupId"),
                               "ApiEndpoint": out("ApiEndpoint"), "SecretsVersion": version,
                               "CACertHash": {"Ref": CA_CERT_HASH}, "ImageId": pool_ami}}}),
        );
    }
    t.insert(
        "Metadata".into(),
        json!({ SECRETS_METADATA: covered, AMI_METADATA: amis }),
    );
    t.insert("Parameters".into(), Value::Object(params));
    t.insert("Resources".into(), Value::Object(r));
    t.insert(
        "Outputs".into(),
        json!({"ApiEndpoint": {"Value": out("ApiEndpoint")},
               "ControlPlaneStack": {"Value": {"Ref": "ControlPlane"}}}),
    );
    t
}

/// Merges plugin contributions into their stacks; a logical ID clash is an error.
fn merge_plugins(input: &RenderInput, stacks: &mut [(String, Map<String, Value>)]) -> Result<(), RenderError> {
    for c in &input.plugins.cluster.cloudformation {
        let names: Vec<String> = stacks.iter().map(|(n, _)| n.clone()).collect();
        let Some((_, t)) = stacks.iter_mut().find(|(n, _)| *n == c.stack) else {
            return Err(RenderError::Plugin {
                plugin: c.plugin.clone(),
                message: format!(
                    "targets stack {:?}, which does not exist; stacks: {}",
                    c.stack,
                    names.join(", ")
                ),
            });
        };
        for (section, items) in [("Resources", &c.resources), ("Outputs", &c.outputs)] {
            let target = t
                .entry(section)
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .ok_or_else(|| RenderError::Template {
                    name: c.stack.clone(),
                    message: format!("{section} is not an object"),
                })?;
            for (k, v) in items {
                if target.contains_key(k) {
                    return Err(RenderError::Plugin {
                        plugin: c.plugin.clone(),
                        message: format!("{section} {k:?} already exists in stack {:?}; rename it", c.stack),
                    });
                }
                target.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

/// The logical ID of the cluster's IAM OIDC provider (root stack).
pub const OIDC_PROVIDER: &str = "ServiceAccountIssuer";

/// The logical ID of a service account's role: `SaRole<Namespace><Name>`.
pub fn service_account_role_id(namespace: &str, name: &str) -> String {
    format!("SaRole{}{}", camel(namespace), camel(name))
}

/// IAM roles for service accounts, in the root stack: the IAM OIDC provider
/// for the cluster's service-account issuer (audience `sts.amazonaws.com`),
/// and per plugin service account a role with its statements, assumable only
/// with a token for exactly that service account (src/irsa.rs
/// `trust_policy`). No ThumbprintList: the issuer is served by S3 (or by
/// `issuerURL`), and IAM verifies the JWKS endpoint's certificate against its
/// own library of trusted root CAs, using thumbprints only for an IdP whose
/// certificate no trusted CA signs (IAM API reference,
/// UpdateOpenIDConnectProviderThumbprint; the property is optional in
/// AWS::IAM::OIDCProvider).
fn service_account_resources(input: &RenderInput, root: &mut Map<String, Value>) -> Result<(), RenderError> {
    let issuer = crate::irsa::issuer_url(&input.cluster);
    let mut r = Map::new();
    r.insert(
        OIDC_PROVIDER.into(),
        json!({"Type": "AWS::IAM::OIDCProvider", "Properties": {
            "Url": issuer,
            "ClientIdList": [crate::irsa::AUDIENCE],
        }}),
    );
    for sa in &input.plugins.service_accounts {
        let id = service_account_role_id(&sa.namespace, &sa.name);
        if r.contains_key(&id) {
            return Err(RenderError::Plugin {
                plugin: sa.plugin.clone(),
                message: format!(
                    "service account {}/{}: its role's logical ID {id:?} is another service account's too (rename one)",
                    sa.namespace, sa.name
                ),
            });
        }
        r.insert(
            id,
            json!({"Type": "AWS::IAM::Role", "Properties": {
                "RoleName": sa.role_name,
                "Path": "/",
                "Description": format!("kube-aws cluster {}: service account {}/{} (plugin {})",
                    input.cluster.cluster_name, sa.namespace, sa.name, sa.plugin),
                "AssumeRolePolicyDocument": crate::irsa::trust_policy(
                    json!({"Ref": OIDC_PROVIDER}), &issuer, &sa.namespace, &sa.name),
                "Policies": [{"PolicyName": format!("kube-aws-{}", sa.plugin), "PolicyDocument": {
                    "Version": "2012-10-17", "Statement": sa.statements}}]}}),
        );
    }
    let resources = root
        .entry("Resources")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| RenderError::Template {
            name: "root".into(),
            message: "Resources is not an object".into(),
        })?;
    resources.extend(r);
    if let Some(o) = root.get_mut("Outputs").and_then(Value::as_object_mut) {
        o.insert(
            "ServiceAccountIssuerArn".into(),
            json!({"Value": {"Ref": OIDC_PROVIDER}}),
        );
    }
    Ok(())
}

/// Renders every stack, in a fixed order, as (name, template).
pub fn render_stacks(
    input: &RenderInput,
    ctx: &Ctx,
    plan: &Plan,
    bundle: &AddonBundle,
    nodes: &BTreeMap<String, NodeUserData>,
) -> Result<Vec<(String, Value)>, RenderError> {
    let empty = NodeUserData::default();
    let stub = |role: &str| nodes.get(role).unwrap_or(&empty);
    let mut root = root_stack(input, ctx, nodes);
    service_account_resources(input, &mut root)?;
    let mut stacks = vec![
        ("root".to_string(), root),
        ("network".to_string(), network_stack(input, ctx)?),
        (
            "control-plane".to_string(),
            control_plane_stack(input, ctx, plan, bundle, stub("controller"))?,
        ),
    ];
    for pool in &input.cluster.worker.node_pools {
        let role = format!("worker-{}", pool.name);
        stacks.push((
            format!("node-pool-{}", pool.name),
            pool_stack(input, ctx, pool, stub(&role)),
        ));
    }
    merge_plugins(input, &mut stacks)?;
    Ok(stacks.into_iter().map(|(n, t)| (n, Value::Object(t))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::AUTOSCALER_ENABLED_TAG;

    #[test]
    fn arm64_families() {
        for t in ["m7g.large", "c6gn.xlarge", "t4g.small", "g5g.xlarge", "r7gd.large"] {
            assert!(is_arm64(t), "{t}");
        }
        for t in ["m6i.large", "g5.xlarge", "c5n.large", "t3.micro", "inf1.xlarge"] {
            assert!(!is_arm64(t), "{t}");
        }
    }

    fn pool(yaml: &str) -> NodePool {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn autoscaled(min: Option<u32>, max: Option<u32>) -> NodeHooks {
        NodeHooks {
            asg_min_size: min,
            asg_max_size: max,
            asg_tags: [(AUTOSCALER_ENABLED_TAG.to_string(), "true".to_string())].into(),
            ..NodeHooks::default()
        }
    }

    #[test]
    fn plugin_bounds_reach_the_group_and_leave_its_size_alone() {
        // The example's `general` pool: minSize 2, maxSize 4, the autoscaler 2..10.
        let general = pool("{name: general, minSize: 2, maxSize: 4}");
        let b = pool_bounds(&general, &autoscaled(Some(2), Some(10)));
        assert_eq!((b.min, b.max, b.desired), (2, 10, None));
        // A bound the plugin leaves unset keeps the pool's own.
        let b = pool_bounds(&general, &autoscaled(None, Some(6)));
        assert_eq!((b.min, b.max, b.desired), (2, 6, None));
        let b = pool_bounds(
            &pool("{name: b, minSize: 0, maxSize: 2}"),
            &autoscaled(Some(0), Some(20)),
        );
        assert_eq!((b.min, b.max, b.desired), (0, 20, None));
    }

    #[test]
    fn fixed_pools_keep_their_desired_capacity() {
        let none = NodeHooks::default();
        let b = pool_bounds(&pool("{name: a, count: 3}"), &none);
        assert_eq!((b.min, b.max, b.desired), (3, 3, Some(3)));
        let b = pool_bounds(&pool("{name: a, minSize: 1, maxSize: 5}"), &none);
        assert_eq!((b.min, b.max, b.desired), (1, 5, Some(1)));
        let b = pool_bounds(&pool("{name: a}"), &none);
        assert_eq!((b.min, b.max, b.desired), (1, 1, Some(1)));
        // A max below the min is raised to it rather than rejected by AWS.
        let h = NodeHooks {
            asg_max_size: Some(1),
            asg_min_size: Some(3),
            ..NodeHooks::default()
        };
        let b = pool_bounds(&pool("{name: a, count: 2}"), &h);
        assert_eq!((b.min, b.max), (3, 3));
    }

    #[test]
    fn node_template_tags_describe_labels_and_taints() {
        let p = pool(
            "{name: batch, labels: {kube-aws.io/pool: batch}, \
             taints: [{key: dedicated, value: batch, effect: NoSchedule}, {key: gpu, effect: NoExecute}]}",
        );
        let mut hooks = autoscaled(Some(0), Some(20));
        hooks
            .node_labels
            .insert("kube-aws.io/pool".into(), "from-plugin".into());
        hooks.node_labels.insert("plugin.example.com/x".into(), "y".into());
        let tags = hooks.node_template_tags(&p);
        let want = [
            (
                "k8s.io/cluster-autoscaler/node-template/label/kube-aws.io/pool",
                "batch",
            ),
            (
                "k8s.io/cluster-autoscaler/node-template/label/plugin.example.com/x",
                "y",
            ),
            (
                "k8s.io/cluster-autoscaler/node-template/taint/dedicated",
                "batch:NoSchedule",
            ),
            ("k8s.io/cluster-autoscaler/node-template/taint/gpu", ":NoExecute"),
        ];
        let got: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
        assert!(NodeHooks::default().node_template_tags(&p).is_empty());
    }

    #[test]
    fn subnets_and_durations() {
        assert_eq!(
            subnet_cidrs("10.0.0.0/16", 3).unwrap(),
            ["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"]
        );
        assert!(subnet_cidrs("10.0.0.0/28", 2).is_err());
        assert_eq!(iso_duration(5400), "PT1H30M");
        assert_eq!(iso_duration(45), "PT45S");
        assert_eq!(iso_duration(0), "PT0S");
    }
}
